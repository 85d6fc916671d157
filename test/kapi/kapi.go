// Package kapi gives the NetworkPolicy tests and benchmark a real Kubernetes API with the
// daemons' identity: test/k8s's control plane (etcd and kube-apiserver, RBAC on) in a
// network namespace of the test's own, plus a client certificate for the user
// "ofsdn-node" bound to the ClusterRole of deploy/ofsdn.yaml, so the daemons run with
// exactly the permissions the manifest grants. No controller manager, scheduler or
// kubelet: the tests create Nodes with their podCIDRs, Pods with spec.nodeName, and write
// the pods' status.podIPs after the CNI ADD themselves, as the kubelet would.
package kapi

import (
	"context"
	"fmt"
	"os"
	"regexp"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/yaml"

	"github.com/ofsdn/ofsdn/test/k8s"
)

// NodeUser is the user the daemons authenticate as.
const NodeUser = "ofsdn-node"

// API is a running etcd + kube-apiserver.
type API struct {
	CP *k8s.ControlPlane
	// Server is the API server's URL on the address given to Start, for the daemons.
	Server string
	// Admin is a system:masters client that dials inside the API's namespace, with a high
	// request rate (the tests and the benchmark create thousands of objects).
	Admin kubernetes.Interface
}

// Start runs etcd and kube-apiserver in the network namespace at netnsPath, the API
// server on addr:6443 (addr must be an address of that namespace), stopped when the test
// ends. rbacFile is a manifest (deploy/ofsdn.yaml) whose ClusterRole is bound to NodeUser.
func Start(t testing.TB, netnsPath, addr, rbacFile string) *API {
	t.Helper()
	return StartServiceCIDR(t, netnsPath, addr, rbacFile, "")
}

// StartServiceCIDR is Start with the API server's service range serviceCIDR (one CIDR,
// or an IPv4 and an IPv6 one comma-separated for dual-stack Services; "" = the control
// plane's default).
func StartServiceCIDR(t testing.TB, netnsPath, addr, rbacFile, serviceCIDR string) *API {
	t.Helper()
	cp := k8s.StartControlPlane(t, k8s.ControlPlaneConfig{Netns: netnsPath, Address: addr, ServiceCIDR: serviceCIDR})
	rc := rest.CopyConfig(cp.Rest)
	rc.QPS, rc.Burst = 500, 1000
	admin, err := kubernetes.NewForConfig(rc)
	if err != nil {
		t.Fatal(err)
	}
	a := &API{CP: cp, Server: fmt.Sprintf("https://%s:6443", addr), Admin: admin}
	if err := cp.PKI.Cert(NodeUser, NodeUser, nil, nil, nil); err != nil {
		t.Fatal(err)
	}
	a.applyRBAC(t, rbacFile)
	return a
}

// applyRBAC creates the manifest's ClusterRole and binds it to NodeUser.
func (a *API) applyRBAC(t testing.TB, rbacFile string) {
	t.Helper()
	b, err := os.ReadFile(rbacFile)
	if err != nil {
		t.Fatal(err)
	}
	var role rbacv1.ClusterRole
	for _, doc := range strings.Split(string(b), "\n---") {
		if regexp.MustCompile(`(?m)^kind: ClusterRole$`).MatchString(doc) {
			if err := yaml.UnmarshalStrict([]byte(doc), &role); err != nil {
				t.Fatal(err)
			}
		}
	}
	if len(role.Rules) == 0 {
		t.Fatalf("%s has no ClusterRole rules", rbacFile)
	}
	ctx := context.Background()
	role.Name = "ofsdn-e2e"
	if _, err := a.Admin.RbacV1().ClusterRoles().Create(ctx, &role, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := a.Admin.RbacV1().ClusterRoleBindings().Create(ctx, &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "ofsdn-e2e"},
		RoleRef:    rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "ClusterRole", Name: role.Name},
		Subjects:   []rbacv1.Subject{{Kind: "User", APIGroup: "rbac.authorization.k8s.io", Name: NodeUser}},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
}

// CreateNamespace creates ns and its "default" ServiceAccount, which the ServiceAccount
// admission plugin needs before it admits a Pod there (kube-controller-manager, not run
// here, would make it).
func (a *API) CreateNamespace(ctx context.Context, ns *corev1.Namespace) error {
	if _, err := a.Admin.CoreV1().Namespaces().Create(ctx, ns, metav1.CreateOptions{}); err != nil {
		return err
	}
	_, err := a.Admin.CoreV1().ServiceAccounts(ns.Name).Create(ctx,
		&corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "default"}}, metav1.CreateOptions{})
	return err
}

// Kubeconfig writes a kubeconfig for NodeUser against Server and returns its path.
func (a *API) Kubeconfig(t testing.TB) string {
	t.Helper()
	p, err := a.CP.PKI.Kubeconfig(NodeUser, a.Server)
	if err != nil {
		t.Fatal(err)
	}
	return p
}
