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
	if len(spec.Containers) != 2 || spec.Containers[0].Name != "ofsdn-node" || spec.Containers[1].Name != "ovs" {
		t.Fatalf("%d containers, want 2: ofsdn-node and ovs", len(spec.Containers))
	}
	c, ovs := spec.Containers[0], spec.Containers[1]
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

	checkOVSContainer(t, c, ovs, spec.Volumes, conf)
}

// checkOVSContainer checks the Open vSwitch container (issue 25): ovsdb-server and
// ovs-vswitchd run by cmd/ofsdn-ovs from the same image, reading the same config (ovs:
// bundled, datapathType: auto by default), the database on a hostPath, the run directory
// the one ofsdn-node dials, probes that ask OVS itself.
func checkOVSContainer(t *testing.T, node, ovs corev1.Container, volumes []corev1.Volume, conf string) {
	t.Helper()
	var m map[string]any
	if err := yaml.Unmarshal([]byte(conf), &m); err != nil {
		t.Fatal(err)
	}
	if m["ovs"] != "bundled" || m["datapathType"] != "auto" {
		t.Errorf("config.yaml: ovs %v, datapathType %v; want bundled and auto (the manifest runs Open vSwitch itself and picks the datapath at start)", m["ovs"], m["datapathType"])
	}
	runDir, _ := m["ovsRunDir"].(string)
	if runDir == "" || m["ovsdb"] != "unix:"+runDir+"/db.sock" {
		t.Errorf("config.yaml: ovsdb %v, ovsRunDir %v; want ovsdb unix:OVSRUNDIR/db.sock, the bundled ovsdb-server's socket", m["ovsdb"], m["ovsRunDir"])
	}
	if ovs.Image != node.Image {
		t.Errorf("ovs container image %q, ofsdn-node's %q: want the one image", ovs.Image, node.Image)
	}
	if ovs.SecurityContext == nil || ovs.SecurityContext.Privileged == nil || !*ovs.SecurityContext.Privileged {
		t.Error("ovs container is not privileged (ovs-vswitchd makes tap devices and netlink changes)")
	}
	cmd := strings.Join(ovs.Command, " ")
	if !strings.HasPrefix(cmd, "/usr/local/bin/ofsdn-ovs ") || !strings.Contains(cmd, "-config /etc/ofsdn/config.yaml") {
		t.Errorf("ovs container command %q: want /usr/local/bin/ofsdn-ovs -config /etc/ofsdn/config.yaml", cmd)
	}
	for _, p := range []struct {
		name  string
		probe *corev1.Probe
		want  string
	}{{"liveness", ovs.LivenessProbe, "-probe live"}, {"readiness", ovs.ReadinessProbe, "-probe ready"}} {
		if p.probe == nil || p.probe.Exec == nil || !strings.HasPrefix(strings.Join(p.probe.Exec.Command, " "), "/usr/local/bin/ofsdn-ovs ") ||
			!strings.Contains(strings.Join(p.probe.Exec.Command, " "), p.want) {
			t.Errorf("ovs container %s probe %+v: want exec of ofsdn-ovs %s", p.name, p.probe, p.want)
		}
	}
	hostPath := map[string]*corev1.HostPathVolumeSource{}
	for _, v := range volumes {
		hostPath[v.Name] = v.HostPath
	}
	mountOf := func(c corev1.Container, path string) string {
		for _, vm := range c.VolumeMounts {
			if vm.MountPath == path {
				return vm.Name
			}
		}
		return ""
	}
	// The run directory: one host directory, at ovsRunDir in both containers, made if the
	// node has none (no Open vSwitch installed).
	nv, ov := mountOf(node, runDir), mountOf(ovs, runDir)
	if nv == "" || nv != ov || hostPath[nv] == nil || hostPath[nv].Path != "/var/run/openvswitch" ||
		hostPath[nv].Type == nil || *hostPath[nv].Type != corev1.HostPathDirectoryOrCreate {
		t.Errorf("run directory %s: ofsdn-node mounts volume %q, ovs %q; want one hostPath /var/run/openvswitch (DirectoryOrCreate) in both", runDir, nv, ov)
	}
	// The database: a host directory, at -db-dir, so it outlives the pod.
	dbDir := ""
	for i, a := range ovs.Command {
		if a == "-db-dir" && i+1 < len(ovs.Command) {
			dbDir = ovs.Command[i+1]
		}
	}
	if dv := mountOf(ovs, dbDir); dbDir == "" || hostPath[dv] == nil || hostPath[dv].Path != "/var/lib/ofsdn/ovs" {
		t.Errorf("ovs container: -db-dir %q is not a hostPath volume of /var/lib/ofsdn/ovs (the database must survive the pod)", dbDir)
	}
	if mountOf(ovs, "/etc/ofsdn") != mountOf(node, "/etc/ofsdn") || mountOf(ovs, "/etc/ofsdn") == "" {
		t.Error("ovs container does not mount the ConfigMap at /etc/ofsdn as ofsdn-node does")
	}
}
