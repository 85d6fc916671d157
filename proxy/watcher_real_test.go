package proxy

// The watcher against a real etcd and kube-apiserver (v1.37.2 from the cache
// test/k8s/build.sh fills; the test fails naming build.sh when it is missing), reading as
// the daemon's identity: test/kapi's client certificate for "ofsdn-node", bound to
// deploy/ofsdn.yaml's ClusterRole. The informers sync only if the ClusterRole grants
// get/list/watch on services and discovery.k8s.io endpointslices; the same scenario as
// on the fake clientset, plus what only a real server does: RBAC, ClusterIP allocation,
// the list selector.

import (
	"context"
	"path/filepath"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/ofsdn/ofsdn/test/k8s"
	"github.com/ofsdn/ofsdn/test/kapi"
	"github.com/ofsdn/ofsdn/test/testenv"
)

func TestWatcherRealAPIServer(t *testing.T) {
	testenv.Privileged(t)
	api := kapi.Start(t, "", "127.0.0.1", filepath.Join(k8s.RepoRoot(), "deploy", "ofsdn.yaml"))
	t.Logf("etcd + kube-apiserver ready in %v", api.CP.Ready)
	ctx := context.Background()
	if err := api.CreateNamespace(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "svc"}}); err != nil {
		t.Fatal(err)
	}
	// The node's identity on the API server's own URL (kapi's Server is for a private
	// network namespace; this control plane runs in the test's).
	kc, err := api.CP.PKI.Kubeconfig(kapi.NodeUser, api.CP.Server)
	if err != nil {
		t.Fatal(err)
	}
	rc, err := clientcmd.BuildConfigFromFlags("", kc)
	if err != nil {
		t.Fatal(err)
	}
	asNode, err := kubernetes.NewForConfig(rc)
	if err != nil {
		t.Fatal(err)
	}

	tr, sink := runProxy(t, asNode)
	serviceScenario(t, api.Admin, "", sink, tr)

	t.Run("a Service that another proxy takes over leaves the watch", func(t *testing.T) {
		late, err := api.Admin.CoreV1().Services("svc").Create(ctx, apiService("svc", "late", "", corev1.ServicePort{Name: "p", Port: 7}), metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		n := ServicePortName{ServiceName{"svc", "late"}, "p", ProtocolTCP}
		sink.waitState(t, "late held", func(st map[ServicePortName]*ServicePortState) bool { return st[n] != nil })
		late.Labels = map[string]string{LabelServiceProxyName: "someone-else"}
		if _, err := api.Admin.CoreV1().Services("svc").Update(ctx, late, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
		sink.waitState(t, "late no longer held", func(st map[ServicePortName]*ServicePortState) bool { return st[n] == nil })
		if err := api.Admin.CoreV1().Services("svc").Delete(ctx, "late", metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
	})
	t.Run("the list selector leaves another proxy's Services out on the server", func(t *testing.T) {
		l, err := asNode.CoreV1().Services("svc").List(ctx, metav1.ListOptions{LabelSelector: ListSelector})
		if err != nil {
			t.Fatal(err)
		}
		for _, s := range l.Items {
			if s.Name == "other" {
				t.Errorf("Service %s/%s (label %s) listed with %q", s.Namespace, s.Name, LabelServiceProxyName, ListSelector)
			}
		}
		if len(l.Items) != 1 || l.Items[0].Name != "headless" {
			t.Errorf("listed %d Services, want only the headless one", len(l.Items))
		}
	})
	t.Run("the node may only read Services and EndpointSlices", func(t *testing.T) {
		if _, err := asNode.CoreV1().Services("svc").Create(ctx, apiService("svc", "x", ""), metav1.CreateOptions{}); !apierrors.IsForbidden(err) {
			t.Errorf("create Service as %s: %v, want Forbidden", kapi.NodeUser, err)
		}
		if err := asNode.DiscoveryV1().EndpointSlices("svc").Delete(ctx, "x", metav1.DeleteOptions{}); !apierrors.IsForbidden(err) {
			t.Errorf("delete EndpointSlice as %s: %v, want Forbidden", kapi.NodeUser, err)
		}
		if _, err := asNode.CoreV1().Secrets("").List(ctx, metav1.ListOptions{}); !apierrors.IsForbidden(err) {
			t.Errorf("list secrets as %s: %v, want Forbidden", kapi.NodeUser, err)
		}
	})
}
