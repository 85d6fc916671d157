// Package kapi runs a real Kubernetes API for tests and benchmarks: etcd and kube-apiserver (the
// binaries test/k8s/build.sh builds into /var/cache/ofsdn/k8s-v1.37.2/bin), run inside a
// network namespace of the test's own on an address of it, with RBAC on and token
// authentication: an admin token for the test, and a token for the user "ofsdn-node"
// bound to the ClusterRole of deploy/ofsdn.yaml, so the daemons run with exactly the
// permissions the manifest grants. No controller manager, scheduler or kubelet: the test
// creates Nodes with their podCIDRs, Pods with spec.nodeName, and writes the pods'
// status.podIPs itself after the CNI ADD, as the kubelet would.
//
// A minimal stand-in until the repository's own test/k8s helper (issue 12) is on main;
// it follows the shared recipe ("How a Go test can start and stop them").
package kapi

import (
	"context"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"encoding/pem"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/containernetworking/plugins/pkg/ns"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/yaml"
)

// k8sBinDir is where test/k8s/build.sh puts the binaries ($K8S_CACHE/bin when set).
func BinDir() string {
	if d := os.Getenv("K8S_CACHE"); d != "" {
		return filepath.Join(d, "bin")
	}
	return "/var/cache/ofsdn/k8s-v1.37.2/bin"
}

// API is a running etcd + kube-apiserver.
type API struct {
	// Server is the API server's URL, reachable from the namespace it runs in and from
	// namespaces routed to it.
	Server string
	// CAFile is the API server's self-signed serving certificate, which is also its CA.
	CAFile string
	// Admin is a system:masters client that dials inside the API's namespace.
	Admin kubernetes.Interface
	// NodeToken authenticates as user "ofsdn-node", bound to deploy/ofsdn.yaml's ClusterRole.
	NodeToken string
	// AdminKubeconfig is a kubeconfig for the system:masters admin (token auth).
	AdminKubeconfig string
	dir             string
}

// Start runs etcd and kube-apiserver in the network namespace at netnsPath, the API
// server on addr:6443 (addr must be an address of that namespace), and stops them when the
// test ends (logging their log tails if it failed). rbacFile is a manifest (deploy/ofsdn.yaml)
// whose ClusterRole is bound to the user "ofsdn-node".
func Start(t testing.TB, netnsPath, addr, rbacFile string) *API {
	t.Helper()
	bin := BinDir()
	for _, b := range []string{"etcd", "kube-apiserver"} {
		if _, err := os.Stat(filepath.Join(bin, b)); err != nil {
			t.Fatalf("%s is not built: run test/k8s/build.sh (it builds Kubernetes v1.37.2 into %s): %v", b, filepath.Dir(bin), err)
		}
	}
	dir := t.TempDir()
	k := &API{Server: fmt.Sprintf("https://%s:6443", addr), dir: dir, NodeToken: "ofsdn-node-token-1"}
	// Service account signing key (required by kube-apiserver, unused by the tests).
	key, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	keyFile := filepath.Join(dir, "sa.key")
	if err := os.WriteFile(keyFile, pem.EncodeToMemory(&pem.Block{Type: "RSA PRIVATE KEY", Bytes: x509.MarshalPKCS1PrivateKey(key)}), 0o600); err != nil {
		t.Fatal(err)
	}
	tokens := filepath.Join(dir, "tokens.csv")
	if err := os.WriteFile(tokens, []byte("admin-token-1,admin,uid-admin,\"system:masters\"\n"+k.NodeToken+",ofsdn-node,uid-ofsdn-node\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	netns := filepath.Base(netnsPath)
	start := func(name string, args ...string) {
		logf, err := os.Create(filepath.Join(dir, name+".log"))
		if err != nil {
			t.Fatal(err)
		}
		cmd := exec.Command("ip", append([]string{"netns", "exec", netns, filepath.Join(bin, name)}, args...)...)
		cmd.Stdout, cmd.Stderr = logf, logf
		cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGTERM)
			done := make(chan struct{})
			go func() { _ = cmd.Wait(); close(done) }()
			select {
			case <-done:
			case <-time.After(15 * time.Second):
				_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
				<-done
			}
			if t.Failed() {
				b, _ := os.ReadFile(filepath.Join(dir, name+".log"))
				lines := strings.Split(string(b), "\n")
				if len(lines) > 40 {
					lines = lines[len(lines)-40:]
				}
				t.Logf("---- %s log (last lines) ----\n%s", name, strings.Join(lines, "\n"))
			}
		})
	}
	start("etcd", "--data-dir", filepath.Join(dir, "etcd"), "--unsafe-no-fsync",
		"--listen-client-urls", "http://127.0.0.1:2379", "--advertise-client-urls", "http://127.0.0.1:2379",
		"--listen-peer-urls", "http://127.0.0.1:2380", "--log-level", "warn")
	start("kube-apiserver", "--etcd-servers", "http://127.0.0.1:2379",
		"--bind-address", addr, "--advertise-address", addr, "--secure-port", "6443",
		"--cert-dir", filepath.Join(dir, "certs"), "--token-auth-file", tokens,
		"--authorization-mode", "Node,RBAC", "--disable-admission-plugins", "ServiceAccount",
		"--service-account-key-file", keyFile, "--service-account-signing-key-file", keyFile,
		"--service-account-issuer", "https://kubernetes.default.svc", "--service-cluster-ip-range", "10.96.0.0/16")
	k.CAFile = filepath.Join(dir, "certs", "apiserver.crt")

	dial := func(ctx context.Context, network, address string) (net.Conn, error) {
		var c net.Conn
		netns, err := ns.GetNS(netnsPath)
		if err != nil {
			return nil, err
		}
		defer netns.Close()
		err = netns.Do(func(ns.NetNS) (err error) {
			var d net.Dialer
			c, err = d.DialContext(ctx, network, address)
			return err
		})
		return c, err
	}
	cfg := &rest.Config{Host: k.Server, BearerToken: "admin-token-1", Dial: dial, QPS: 200, Burst: 400,
		TLSClientConfig: rest.TLSClientConfig{Insecure: true}} // the test's own view; daemons verify with CAFile
	k.Admin, err = kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(90 * time.Second)
	for {
		body, err := k.Admin.Discovery().RESTClient().Get().AbsPath("/readyz").DoRaw(context.Background())
		if err == nil && string(body) == "ok" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("kube-apiserver at %s not ready: %v %s", k.Server, err, body)
		}
		time.Sleep(200 * time.Millisecond)
	}
	if _, err := os.Stat(k.CAFile); err != nil {
		t.Fatal(err)
	}
	k.AdminKubeconfig = k.kubeconfigFor(t, "admin", "admin-token-1")
	k.applyRBAC(t, rbacFile)
	return k
}

// applyRBAC creates the manifest's ClusterRole and binds it to the user ofsdn-node.
func (k *API) applyRBAC(t testing.TB, rbacFile string) {
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
	if _, err := k.Admin.RbacV1().ClusterRoles().Create(ctx, &role, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := k.Admin.RbacV1().ClusterRoleBindings().Create(ctx, &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "ofsdn-e2e"},
		RoleRef:    rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "ClusterRole", Name: role.Name},
		Subjects:   []rbacv1.Subject{{Kind: "User", APIGroup: "rbac.authorization.k8s.io", Name: "ofsdn-node"}},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
}

// Kubeconfig writes a kubeconfig for the user ofsdn-node (verifying the server with
// CAFile) and returns its path.
func (k *API) Kubeconfig(t testing.TB) string {
	t.Helper()
	return k.kubeconfigFor(t, "ofsdn-node", k.NodeToken)
}

func (k *API) kubeconfigFor(t testing.TB, user, token string) string {
	p := filepath.Join(k.dir, user+".kubeconfig")
	content := fmt.Sprintf(`apiVersion: v1
kind: Config
clusters:
- name: e2e
  cluster: {server: %q, certificate-authority: %q}
users:
- name: u
  user: {token: %q}
contexts:
- name: e2e
  context: {cluster: e2e, user: u}
current-context: e2e
`, k.Server, k.CAFile, token)
	if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}
