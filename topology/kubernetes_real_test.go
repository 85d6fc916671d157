package topology

// The Kubernetes source against a real etcd and kube-apiserver (v1.37.2, started by
// test/k8s from the cache test/k8s/build.sh fills; the test fails naming build.sh when it
// is missing). The same scenario as the fake clientset's, plus what only a real server
// does: RBAC. The source runs under a ServiceAccount bound to deploy/ofsdn.yaml's
// ClusterRole (get, list, watch on nodes) with a token the API server issued.

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	authnv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/yaml"

	"github.com/ofsdn/ofsdn/test/k8s"
)

func TestKubernetesSourceRealAPIServer(t *testing.T) {
	cp := k8s.StartControlPlane(t, k8s.ControlPlaneConfig{})
	t.Logf("etcd + kube-apiserver ready in %v", cp.Ready)
	ctx := context.Background()
	admin := cp.Client

	// The manifest's ServiceAccount, ClusterRole and binding.
	var role rbacv1.ClusterRole
	var binding rbacv1.ClusterRoleBinding
	var sa corev1.ServiceAccount
	b, err := os.ReadFile(filepath.Join(k8s.RepoRoot(), "deploy", "ofsdn.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	for _, doc := range strings.Split(string(b), "\n---\n") {
		var meta metav1.TypeMeta
		if err := yaml.Unmarshal([]byte(doc), &meta); err != nil {
			t.Fatal(err)
		}
		switch meta.Kind {
		case "ClusterRole":
			err = yaml.Unmarshal([]byte(doc), &role)
		case "ClusterRoleBinding":
			err = yaml.Unmarshal([]byte(doc), &binding)
		case "ServiceAccount":
			err = yaml.Unmarshal([]byte(doc), &sa)
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	if _, err := admin.RbacV1().ClusterRoles().Create(ctx, &role, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := admin.RbacV1().ClusterRoleBindings().Create(ctx, &binding, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := admin.CoreV1().ServiceAccounts(sa.Namespace).Create(ctx, &sa, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	tr, err := admin.CoreV1().ServiceAccounts(sa.Namespace).CreateToken(ctx, sa.Name, &authnv1.TokenRequest{}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	saConf := rest.AnonymousClientConfig(cp.Rest)
	saConf.BearerToken = tr.Status.Token
	asSA, err := kubernetes.NewForConfig(saConf)
	if err != nil {
		t.Fatal(err)
	}

	// Nodes as the scenario starts: a without a podCIDR, b complete (made by the admin).
	for _, n := range []*corev1.Node{node("a", "", "172.16.0.1"), node("b", "10.244.2.0/24", "172.16.0.2")} {
		if _, err := admin.CoreV1().Nodes().Create(ctx, n, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	// The source reads as the ServiceAccount; the scenario's changes are the admin's (the
	// controller manager's and the kubelets' in a cluster).
	runSourceScenario(t, asSA, admin)

	t.Run("the ServiceAccount may not change nodes or read secrets", func(t *testing.T) {
		if _, err := asSA.CoreV1().Nodes().Create(ctx, node("x", "", ""), metav1.CreateOptions{}); !apierrors.IsForbidden(err) {
			t.Errorf("create node as %s: %v, want Forbidden", sa.Name, err)
		}
		if _, err := asSA.CoreV1().Secrets("").List(ctx, metav1.ListOptions{}); !apierrors.IsForbidden(err) {
			t.Errorf("list secrets as %s: %v, want Forbidden", sa.Name, err)
		}
	})
}
