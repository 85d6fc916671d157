// Package deploy holds the Kubernetes manifests (ofsdn.yaml); this test decodes them
// strictly into k8s.io/api types and checks what the daemon relies on.
package deploy

import (
	"bytes"
	"os"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/serializer/json"
	"k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/yaml"
)

// decodeAll decodes every document of a multi-document YAML file strictly (unknown or
// duplicate fields are errors) into the client-go scheme's typed objects.
func decodeAll(t *testing.T, path string) []runtime.Object {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	strict := json.NewSerializerWithOptions(json.DefaultMetaFactory, scheme.Scheme, scheme.Scheme,
		json.SerializerOptions{Yaml: true, Strict: true})
	var objs []runtime.Object
	for i, doc := range bytes.Split(b, []byte("\n---\n")) {
		if len(bytes.TrimSpace(doc)) == 0 {
			continue
		}
		obj, gvk, err := strict.Decode(doc, nil, nil)
		if err != nil {
			t.Fatalf("%s document %d: %v", path, i, err)
		}
		if gvk.Kind == "" {
			t.Fatalf("%s document %d has no kind", path, i)
		}
		objs = append(objs, obj)
	}
	return objs
}

func TestManifestsDecodeStrictly(t *testing.T) {
	objs := decodeAll(t, "ofsdn.yaml")
	var (
		sa   *corev1.ServiceAccount
		role *rbacv1.ClusterRole
		bind *rbacv1.ClusterRoleBinding
		cm   *corev1.ConfigMap
		ds   *appsv1.DaemonSet
	)
	for _, o := range objs {
		switch o := o.(type) {
		case *corev1.ServiceAccount:
			sa = o
		case *rbacv1.ClusterRole:
			role = o
		case *rbacv1.ClusterRoleBinding:
			bind = o
		case *corev1.ConfigMap:
			cm = o
		case *appsv1.DaemonSet:
			ds = o
		default:
			t.Errorf("unexpected object %T", o)
		}
	}
	if sa == nil || role == nil || bind == nil || cm == nil || ds == nil {
		t.Fatalf("want ServiceAccount, ClusterRole, ClusterRoleBinding, ConfigMap and DaemonSet; got %d objects", len(objs))
	}

	// RBAC: get/list/watch on nodes (topology), pods and namespaces (core) and
	// networkpolicies (networking.k8s.io), services (core) and endpointslices
	// (discovery.k8s.io), nothing else, bound to the DaemonSet's account.
	var grants []string
	for _, r := range role.Rules {
		if strings.Join(r.Verbs, ",") != "get,list,watch" || len(r.ResourceNames) > 0 || len(r.NonResourceURLs) > 0 {
			t.Errorf("ClusterRole rule %+v: want exactly get, list, watch", r)
		}
		for _, g := range r.APIGroups {
			for _, res := range r.Resources {
				grants = append(grants, g+"/"+res)
			}
		}
	}
	if strings.Join(grants, " ") != "/nodes /pods /namespaces networking.k8s.io/networkpolicies /services discovery.k8s.io/endpointslices" {
		t.Errorf("ClusterRole grants %v, want get/list/watch on core nodes, pods, namespaces, services, networking.k8s.io networkpolicies and discovery.k8s.io endpointslices only", grants)
	}
	if bind.RoleRef.Name != role.Name || bind.RoleRef.Kind != "ClusterRole" || len(bind.Subjects) != 1 ||
		bind.Subjects[0].Name != sa.Name || bind.Subjects[0].Namespace != sa.Namespace {
		t.Errorf("ClusterRoleBinding %+v does not bind %s to %s/%s", bind, role.Name, sa.Namespace, sa.Name)
	}

	spec := ds.Spec.Template.Spec
	if !spec.HostNetwork || spec.ServiceAccountName != sa.Name || ds.Namespace != sa.Namespace {
		t.Errorf("DaemonSet: hostNetwork %v, serviceAccount %q in %q", spec.HostNetwork, spec.ServiceAccountName, ds.Namespace)
	}
	if ds.Spec.Selector == nil || ds.Spec.Selector.MatchLabels["app"] != ds.Spec.Template.Labels["app"] {
		t.Error("DaemonSet selector does not match its template")
	}
	if len(spec.Containers) != 1 {
		t.Fatalf("%d containers, want 1", len(spec.Containers))
	}
	c := spec.Containers[0]
	if c.SecurityContext == nil || c.SecurityContext.Privileged == nil || !*c.SecurityContext.Privileged {
		t.Error("container is not privileged")
	}
	var nodeName bool
	for _, e := range c.Env {
		if e.Name == "NODE_NAME" && e.ValueFrom != nil && e.ValueFrom.FieldRef != nil && e.ValueFrom.FieldRef.FieldPath == "spec.nodeName" {
			nodeName = true
		}
	}
	if !nodeName {
		t.Error("NODE_NAME is not set from spec.nodeName")
	}
	// Every mount has a volume, and the host paths the daemon needs are there.
	hostPaths := map[string]string{} // volume name → host path
	for _, v := range spec.Volumes {
		if v.HostPath != nil {
			hostPaths[v.Name] = v.HostPath.Path
		}
	}
	mounted := map[string]bool{}
	for _, m := range c.VolumeMounts {
		found := false
		for _, v := range spec.Volumes {
			found = found || v.Name == m.Name
		}
		if !found {
			t.Errorf("mount %s has no volume", m.Name)
		}
		if p, ok := hostPaths[m.Name]; ok {
			mounted[p] = true
		}
	}
	for _, p := range []string{"/var/run/openvswitch", "/opt/cni/bin", "/etc/cni/net.d", "/var/run/netns", "/var/lib/ofsdn"} {
		if !mounted[p] {
			t.Errorf("host path %s is not mounted", p)
		}
	}

	// The ConfigMap carries the daemon's config file, the one the container is started with.
	conf, ok := cm.Data["config.yaml"]
	if !ok {
		t.Fatal("ConfigMap has no config.yaml")
	}
	var m map[string]any
	if err := yaml.UnmarshalStrict([]byte(conf), &m); err != nil {
		t.Fatalf("config.yaml: %v", err)
	}
	if m["topology"] != "kubernetes" || m["clusterCIDR"] == nil {
		t.Errorf("config.yaml: want topology kubernetes and a clusterCIDR, got %v", m)
	}
	if !strings.Contains(strings.Join(c.Command, " "), "-config /etc/ofsdn/config.yaml") {
		t.Errorf("container command %v does not read the ConfigMap's config.yaml", c.Command)
	}
}
