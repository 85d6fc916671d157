package k8s_test

// ofsdn on a real Kubernetes: a two-node cluster (test/k8s), deploy/ofsdn.yaml applied
// through the test overlay with the image `make image` builds, test server pods across the
// nodes, Services through each node's kube-proxy, and restarts of ofsdn-node and the
// kubelet. Everything a user would check: nodes Ready only once ofsdn is installed, pods
// on different nodes talk TCP and UDP, probes pass, Services spread and refuse without
// endpoints, nothing is left of deleted pods, no ping is lost across a daemon restart, and
// the daemon's RBAC is exactly the manifest's. The cluster is dual-stack, IPv4 primary
// (dualstack_test.go holds its IPv6 steps); TestIPv6OnlyCluster (ipv6only_test.go) runs an
// IPv6-only one.

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	authzv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/yaml"

	"github.com/ofsdn/ofsdn/ctl"
	"github.com/ofsdn/ofsdn/flows"
	"github.com/ofsdn/ofsdn/test/harness"
	"github.com/ofsdn/ofsdn/test/k8s"

	"github.com/ofsdn/ofsdn/test/testenv"
)

const (
	ns        = "default"
	sysNS     = "kube-system"
	dsName    = "ofsdn-node"
	saUser    = "system:serviceaccount:kube-system:ofsdn"
	gatewayIf = "ofsdn-gw0"
)

type env struct {
	c   *k8s.Cluster
	ctx context.Context
}

func TestCluster(t *testing.T) {
	testenv.Privileged(t)
	images, imgTime := clusterImages(t)
	// The nodes run no Open vSwitch until the DaemonSet's ovs container does (the
	// manifest's own way); OFSDN_K8S_OVS=host gives each node a sandbox OVS before its
	// kubelet instead (ovs: host, test/k8s/overlay).
	// Dual-stack, IPv4 primary (issue 23): every IPv4 check as on a single-stack cluster,
	// and the IPv6 steps. OFSDN_K8S_OVS=host runs single-stack IPv4 (its overlay is).
	cfg := k8s.ClusterConfig{Nodes: 2, ImagesDir: images, OVS: k8s.OVSBundled, DualStack: true}
	if os.Getenv("OFSDN_K8S_OVS") == "host" {
		cfg.OVS, cfg.DualStack = k8s.OVSHost, false
	}
	c := k8s.StartCluster(t, cfg)
	e := &env{c: c, ctx: context.Background()}
	c.Timings = append([]k8s.Timing{{Step: imagesStep(imgTime), Duration: imgTime}}, c.Timings...)
	defer e.reportTimings(t)

	steps := []struct {
		name string
		f    func(*testing.T)
	}{
		{"before ofsdn nodes are NotReady and the CNI directories empty", e.testNotReadyBeforeOfsdn},
		{dualStackStep("every node has a pod CIDR and an InternalIP per family, IPv4 first"), e.testDualStackNodes},
		{"DaemonSet from the image makes every node Ready", e.testDaemonSet},
		{dualStackStep("the gateway holds the first address of each pod CIDR; IPv6 masquerade table"), e.testDualStackGateway},
		{"RBAC is the manifest's ClusterRole, no more", e.testRBAC},
		{"pods across nodes", e.testPods},
		{dualStackStep("pods across nodes over both families"), e.testDualStackPods},
		{dualStackStep("a RequireDualStack NodePort Service over each family's ClusterIP and node addresses; both ClusterIPs from each node's host"), e.testDualStackService},
		{"services (serviceProxy: ofsdn, the default)", e.testServices},
		{"serviceProxy: ofsdn: NetworkPolicy judges Service traffic by the client's own address", e.testPolicyThroughServices},
		{"serviceProxy: kube-proxy: Services through the host, no Service group left, and back", e.testKubeProxyMode},
		{"rolling update behind a Service: no connection fails, none reaches a removed endpoint", e.testRollingUpdate},
		{"ofsdn-node pod deleted: no ping lost", e.testDaemonRestart},
		{ovsKilledStep, e.testOVSContainerKilled},
		{"kubelet restarted: pods keep their IPs", e.testKubeletRestart},
		{"deleted pods leave no IP, port or flow", e.testDeletion},
	}
	for _, s := range steps {
		if s.name == ovsKilledStep && !c.Nodes[0].Bundled {
			continue // the nodes' Open vSwitch is the harness's sandbox (OFSDN_K8S_OVS=host): no ovs container
		}
		if strings.HasPrefix(s.name, dualStackPrefix) && !c.Config.DualStack {
			continue // single-stack (OFSDN_K8S_OVS=host): no IPv6
		}
		if !t.Run(s.name, s.f) {
			// Later steps build on this one.
			t.Fatalf("stopping after %q failed", s.name)
		}
	}
}

// The cluster tests' images, built once per test binary (clusterImages) into a directory
// TestMain removes.
var builtImages struct {
	once sync.Once
	dir  string
	took time.Duration
	ok   bool
}

// clusterImages returns the directory of the images the cluster tests import (built by
// k8s.BuildImages for the first test that asks, shared by the later ones) and how long
// this call built them (0 when an earlier test did).
func clusterImages(t *testing.T) (string, time.Duration) {
	t.Helper()
	built := false
	builtImages.once.Do(func() {
		built = true
		dir, err := os.MkdirTemp("", "ofsdn-k8s-images-")
		if err != nil {
			t.Fatal(err)
		}
		builtImages.dir = dir
		builtImages.took = k8s.BuildImages(t, dir)
		builtImages.ok = true
	})
	if !builtImages.ok {
		t.Fatal("the cluster images failed to build (in this test or an earlier one: see its log)")
	}
	if !built {
		return builtImages.dir, 0
	}
	return builtImages.dir, builtImages.took
}

func imagesStep(took time.Duration) string {
	if took == 0 {
		return "images (built for an earlier test of this binary)"
	}
	return "images built (make image, test server, pause)"
}

func TestMain(m *testing.M) {
	code := m.Run()
	if builtImages.dir != "" {
		if err := os.RemoveAll(builtImages.dir); err != nil {
			fmt.Fprintf(os.Stderr, "remove the cluster images %s: %v\n", builtImages.dir, err)
			code = 1
		}
	}
	os.Exit(code)
}

// dualStackPrefix starts the names of TestCluster's IPv6 steps, run on a dual-stack
// cluster only.
const dualStackPrefix = "dual-stack: "

func dualStackStep(name string) string { return dualStackPrefix + name }

// ovsKilledStep is TestCluster's step that kills the DaemonSet's ovs container: run only
// when the nodes' Open vSwitch is the DaemonSet's (the default; not OFSDN_K8S_OVS=host).
const ovsKilledStep = "ovs container killed: pings come back, no IP, port or flow changed"

func (e *env) reportTimings(t *testing.T) {
	var b strings.Builder
	for _, tm := range e.c.Timings {
		fmt.Fprintf(&b, "\n  %-90s %6.1f s", tm.Step, tm.Duration.Seconds())
	}
	t.Logf("timings (wall clock):%s", b.String())
	if p := os.Getenv("OFSDN_K8S_TIMINGS"); p != "" {
		js, _ := json.MarshalIndent(e.c.Timings, "", "  ")
		_ = os.WriteFile(p, js, 0o644)
	}
}

func (e *env) timing(step string, d time.Duration) {
	e.c.Timings = append(e.c.Timings, k8s.Timing{Step: step, Duration: d})
}

// ---- helpers ----------------------------------------------------------------------------

// apply runs kubectl apply with manifest on stdin.
func (e *env) apply(t *testing.T, manifest string) {
	t.Helper()
	cmd := e.c.KubectlCmd("apply", "-f", "-")
	cmd.Stdin = strings.NewReader(manifest)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("kubectl apply: %v\n%s\n%s", err, out, manifest)
	}
}

// exec runs args in pod's container and returns stdout and stderr.
func (e *env) exec(pod string, args ...string) (string, error) {
	return e.c.Kubectl(append([]string{"exec", "-n", ns, pod, "--"}, args...)...)
}

func (e *env) pods(t *testing.T, namespace, selector string) []corev1.Pod {
	t.Helper()
	l, err := e.c.CP.Client.CoreV1().Pods(namespace).List(e.ctx, metav1.ListOptions{LabelSelector: selector})
	if err != nil {
		t.Fatal(err)
	}
	sort.Slice(l.Items, func(i, j int) bool { return l.Items[i].Name < l.Items[j].Name })
	return l.Items
}

func podReady(p *corev1.Pod) bool {
	if p.DeletionTimestamp != nil || p.Status.Phase != corev1.PodRunning {
		return false
	}
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// waitPods waits until selector matches exactly n pods, all Ready, and returns them.
func (e *env) waitPods(t *testing.T, namespace, selector string, n int, limit time.Duration) []corev1.Pod {
	t.Helper()
	var got []corev1.Pod
	k8s.WaitFor(t, fmt.Sprintf("%d Ready pods %s in %s", n, selector, namespace), limit, func() error {
		got = e.pods(t, namespace, selector)
		var states []string
		ready := 0
		for i := range got {
			if podReady(&got[i]) {
				ready++
			}
			states = append(states, fmt.Sprintf("%s on %s: %s %s", got[i].Name, got[i].Spec.NodeName, got[i].Status.Phase, podMessage(&got[i])))
		}
		if len(got) != n || ready != n {
			return fmt.Errorf("%d pods, %d Ready: %s\n%s", len(got), ready, strings.Join(states, "; "), e.events(namespace))
		}
		return nil
	})
	return got
}

func podMessage(p *corev1.Pod) string {
	var m []string
	for _, c := range p.Status.Conditions {
		if c.Status != corev1.ConditionTrue && c.Message != "" {
			m = append(m, c.Message)
		}
	}
	for _, s := range p.Status.ContainerStatuses {
		if s.State.Waiting != nil {
			m = append(m, s.State.Waiting.Reason+": "+s.State.Waiting.Message)
		}
	}
	return strings.Join(m, "; ")
}

// events returns the namespace's recent warning events (for failure messages).
func (e *env) events(namespace string) string {
	l, err := e.c.CP.Client.CoreV1().Events(namespace).List(e.ctx, metav1.ListOptions{FieldSelector: "type=Warning"})
	if err != nil {
		return err.Error()
	}
	var b strings.Builder
	for _, ev := range l.Items {
		if len(l.Items) > 15 && b.Len() > 4000 {
			break
		}
		fmt.Fprintf(&b, "  %s %s/%s: %s\n", ev.Reason, ev.InvolvedObject.Kind, ev.InvolvedObject.Name, ev.Message)
	}
	return b.String()
}

// probeResult is one target's outcome: the reply ("NAME PEER") if ok, else the error.
type probeResult struct {
	target, reply string
	ok            bool
}

// probe runs testbin probe in pod for the targets and returns one result per target.
func (e *env) probe(t *testing.T, pod string, targets ...string) []probeResult {
	t.Helper()
	out, err := e.exec(pod, append([]string{"/testbin", "probe"}, targets...)...)
	if err != nil {
		t.Fatalf("probe from %s: %v", pod, err)
	}
	res := parseProbe(out)
	if len(res) != len(targets) {
		t.Fatalf("probe from %s: %d results for %d targets:\n%s", pod, len(res), len(targets), out)
	}
	return res
}

// parseProbe reads `testbin probe` output: one "ok|fail TARGET REPLY" line per target.
func parseProbe(out string) []probeResult {
	var res []probeResult
	sc := bufio.NewScanner(strings.NewReader(out))
	for sc.Scan() {
		f := strings.SplitN(sc.Text(), " ", 3)
		if len(f) == 3 && (f[0] == "ok" || f[0] == "fail") {
			res = append(res, probeResult{target: f[1], reply: f[2], ok: f[0] == "ok"})
		}
	}
	return res
}

// dialFromNode connects to addr (TCP; IPv6 as [IP]:PORT) from the node's network
// namespace (the host) and returns the server's line.
func dialFromNode(n *k8s.Node, addr string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	c, err := k8s.NetnsDialer(n.NetnsPath())(ctx, "tcp", addr)
	if err != nil {
		return "", err
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(5 * time.Second))
	line, err := bufio.NewReader(c).ReadString('\n')
	return strings.TrimSpace(line), err
}

func replyName(reply string) string { return strings.Fields(reply + " ")[0] }

func replyPeerIP(reply string) string {
	f := strings.Fields(reply)
	if len(f) < 2 {
		return ""
	}
	h, _, _ := net.SplitHostPort(f[1])
	return h
}

// gatewayIP is the first address of a node's pod CIDR (ofsdn's gateway).
func gatewayIP(t *testing.T, podCIDR string) string {
	t.Helper()
	_, n, err := net.ParseCIDR(podCIDR)
	if err != nil {
		t.Fatal(err)
	}
	ip := n.IP.To4()
	return net.IPv4(ip[0], ip[1], ip[2], ip[3]+1).String()
}

// ---- steps ------------------------------------------------------------------------------

func (e *env) testNotReadyBeforeOfsdn(t *testing.T) {
	for _, n := range e.c.Nodes {
		k8s.WaitFor(t, n.Name+" NotReady for want of a network", 60*time.Second, func() error {
			node, err := e.c.CP.Client.CoreV1().Nodes().Get(e.ctx, n.Name, metav1.GetOptions{})
			if err != nil {
				return err
			}
			r := k8s.NodeReady(node)
			if r == nil || r.Status == corev1.ConditionTrue || !strings.Contains(r.Message, "network") {
				return fmt.Errorf("Ready condition %+v, want False naming the network plugin", r)
			}
			if len(node.Spec.PodCIDRs) == 0 {
				return fmt.Errorf("no podCIDR allocated yet")
			}
			return nil
		})
		if n.Bundled {
			// No Open vSwitch on the node before ofsdn: no process, nothing in its run
			// directory, the node IP on the NIC.
			if pids := n.OVSProcesses(); len(pids) > 0 {
				t.Errorf("%s: Open vSwitch processes %v run before ofsdn was deployed", n.Name, pids)
			}
			if ents, err := os.ReadDir(n.OVS.Dir); err != nil || len(ents) > 0 {
				t.Errorf("%s: the node's /run/openvswitch holds %v (%v) before ofsdn was deployed", n.Name, ents, err)
			}
			if out := n.OVS.Exec(t, "ip", "-o", "addr", "show", "dev", "uplink0", "scope", "global"); !strings.Contains(out, n.IP+"/") {
				t.Errorf("%s: uplink0 has %q, want the node IP %s", n.Name, out, n.IP)
			}
		}
		for _, d := range []string{n.CNIConfDir(), n.CNIBinDir()} {
			ents, err := os.ReadDir(d)
			if err != nil {
				t.Fatal(err)
			}
			for _, en := range ents {
				if en.Name() != "loopback" {
					t.Errorf("%s: %s holds %s before ofsdn was deployed", n.Name, d, en.Name())
				}
			}
		}
	}
}

func (e *env) testDaemonSet(t *testing.T) {
	start := time.Now()
	e.c.MustKubectl(t, "apply", "-k", e.c.Config.Overlay())
	ds := e.waitPods(t, sysNS, "app=ofsdn-node", len(e.c.Nodes), 180*time.Second)
	for _, n := range e.c.Nodes {
		k8s.WaitFor(t, n.Name+" Ready", 120*time.Second, func() error {
			node, err := e.c.CP.Client.CoreV1().Nodes().Get(e.ctx, n.Name, metav1.GetOptions{})
			if err != nil {
				return err
			}
			if r := k8s.NodeReady(node); r == nil || r.Status != corev1.ConditionTrue {
				return fmt.Errorf("Ready condition %+v", r)
			}
			return nil
		})
	}
	e.timing("kubectl apply -k "+e.c.Config.Overlay()+" → every ofsdn-node pod Ready and every node Ready", time.Since(start))

	for _, p := range ds {
		if p.Spec.ServiceAccountName != "ofsdn" || !p.Spec.HostNetwork {
			t.Errorf("%s: serviceAccount %q hostNetwork %v", p.Name, p.Spec.ServiceAccountName, p.Spec.HostNetwork)
		}
		if img := p.Spec.Containers[0].Image; img != k8s.OfsdnImage {
			t.Errorf("%s runs image %s, want %s (the overlay's)", p.Name, img, k8s.OfsdnImage)
		}
	}
	for _, n := range e.c.Nodes {
		conf, err := os.ReadFile(filepath.Join(n.CNIConfDir(), "10-ofsdn.conflist"))
		if err != nil {
			t.Errorf("%s: no conflist after ofsdn-node is Ready: %v", n.Name, err)
		} else if !strings.Contains(string(conf), `"type": "ofsdn"`) {
			t.Errorf("%s: conflist %s", n.Name, conf)
		}
		if st, err := os.Stat(filepath.Join(n.CNIBinDir(), "ofsdn")); err != nil || st.Mode().Perm()&0o111 == 0 {
			t.Errorf("%s: plugin binary not installed: %v", n.Name, err)
		}
		// The daemon took the node's pod subnet from the podCIDR kube-controller-manager
		// allocated, and its gateway holds the subnet's first address.
		node, err := e.c.CP.Client.CoreV1().Nodes().Get(e.ctx, n.Name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		gw := gatewayIP(t, node.Spec.PodCIDR)
		out := n.OVS.Exec(t, "ip", "-4", "-o", "addr", "show", "dev", gatewayIf)
		if !strings.Contains(out, gw+"/") {
			t.Errorf("%s: gateway %s has %q, want %s from podCIDR %s", n.Name, gatewayIf, out, gw, node.Spec.PodCIDR)
		}
		if n.Bundled {
			checkBundledOVS(t, n, ds)
		}
		// The daemon runs in the node's network namespace, so its nftables table is there.
		if out := n.OVS.Exec(t, "nft", "list", "table", "ip", "ofsdn"); !strings.Contains(out, "ip saddr "+node.Spec.PodCIDR) {
			t.Errorf("%s: nftables table ip ofsdn:\n%s", n.Name, out)
		}
	}
}

// checkBundledOVS checks a node whose Open vSwitch is the DaemonSet's: ovsdb-server and
// ovs-vswitchd run in its ofsdn-node pod's cgroup, the node's addresses (its IPv4 node IP,
// its IPv6 one: dual-stack or IPv6-only) moved from uplink0 onto br-phy's internal port,
// uplink0 a port of br-phy, the datapath chosen (auto: netdev here).
func checkBundledOVS(t *testing.T, n *k8s.Node, ds []corev1.Pod) {
	t.Helper()
	var uid string
	for _, p := range ds {
		if p.Spec.NodeName == n.Name {
			uid = string(p.UID)
		}
	}
	pids := n.OVSProcesses()
	if len(pids) != 2 {
		t.Errorf("%s: Open vSwitch processes %v, want ovsdb-server and ovs-vswitchd", n.Name, pids)
	}
	for _, pid := range pids {
		b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cgroup", pid))
		// cgroupfs driver: .../kubepods/.../pod<UID>/<container>
		if uid == "" || !strings.Contains(string(b), "pod"+uid) {
			t.Errorf("%s: OVS process %d is not in the ofsdn-node pod's cgroup (pod %s):\n%s", n.Name, pid, uid, b)
		}
	}
	var want []string
	for _, ip := range []string{n.IP, n.IPv6} {
		switch {
		case ip == "":
		case strings.Contains(ip, ":"):
			want = append(want, "br-phy    inet6 "+ip+"/64")
		default:
			want = append(want, "br-phy    inet "+ip+"/24")
		}
	}
	out := n.OVS.Exec(t, "ip", "-o", "addr", "show", "scope", "global")
	for _, w := range want {
		if !strings.Contains(out, w) || strings.Contains(out, "uplink0    inet") {
			t.Errorf("%s: addresses %s; want %q, none on uplink0", n.Name, out, want)
			break
		}
	}
	if ports := n.OVS.Vsctl(t, "list-ports", "br-phy"); ports != "uplink0" {
		t.Errorf("%s: br-phy's ports %q, want uplink0", n.Name, ports)
	}
	if dp := n.OVS.Vsctl(t, "get", "bridge", "br-int", "datapath_type"); dp != "netdev" {
		t.Errorf("%s: br-int datapath_type %s, want netdev (auto on a kernel without the openvswitch module)", n.Name, dp)
	}
}

// ClusterRole rules as the manifest states them.
func manifestRules(t *testing.T) []rbacv1.PolicyRule {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(k8s.RepoRoot(), "deploy", "ofsdn.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	for _, doc := range strings.Split(string(b), "\n---\n") {
		var r rbacv1.ClusterRole
		if err := yaml.Unmarshal([]byte(doc), &r); err == nil && r.Kind == "ClusterRole" && r.Name == "ofsdn" {
			return r.Rules
		}
	}
	t.Fatal("no ClusterRole ofsdn in deploy/ofsdn.yaml")
	return nil
}

func granted(rules []rbacv1.PolicyRule, group, resource, verb string) bool {
	has := func(l []string, v string) bool {
		for _, x := range l {
			if x == v || x == "*" {
				return true
			}
		}
		return false
	}
	for _, r := range rules {
		if has(r.APIGroups, group) && has(r.Resources, resource) && has(r.Verbs, verb) {
			return true
		}
	}
	return false
}

func (e *env) testRBAC(t *testing.T) {
	// A token of the daemon's ServiceAccount, used alone (no admin certificate).
	token := strings.TrimSpace(e.c.MustKubectl(t, "create", "token", "-n", sysNS, "ofsdn", "--duration=10m"))
	asSA := func(args ...string) (string, error) {
		return e.c.Kubectl(append([]string{"--kubeconfig=/dev/null", "--server=" + e.c.CP.Server,
			"--certificate-authority=" + e.c.CP.PKI.Path("ca.crt"), "--token=" + token}, args...)...)
	}
	who, err := asSA("auth", "whoami", "-o", "jsonpath={.status.userInfo.username}")
	if err != nil || strings.TrimSpace(who) != saUser {
		t.Fatalf("the token is %q (%v), want %s", who, err, saUser)
	}
	// What a user checks by hand: the daemon's account can read nodes, not secrets.
	if out, err := asSA("get", "nodes"); err != nil {
		t.Errorf("kubectl get nodes as the daemon: %v\n%s", err, out)
	}
	if out, err := asSA("get", "secrets", "-A"); err == nil || !strings.Contains(out, "Forbidden") {
		t.Errorf("kubectl get secrets as the daemon: want Forbidden, got %v\n%s", err, out)
	}

	// The whole grid, as `kubectl auth can-i` asks it (SelfSubjectAccessReview with the
	// token): allowed exactly where deploy/ofsdn.yaml's ClusterRole says.
	rules := manifestRules(t)
	for _, need := range []string{"get", "list", "watch"} {
		if !granted(rules, "", "nodes", need) {
			t.Errorf("deploy/ofsdn.yaml does not grant %s nodes, which the Node source needs", need)
		}
	}
	saConf := rest.AnonymousClientConfig(e.c.CP.Rest)
	saConf.BearerToken = token
	sa, err := kubernetes.NewForConfig(saConf)
	if err != nil {
		t.Fatal(err)
	}
	resources := []struct{ group, resource string }{
		{"", "nodes"}, {"", "pods"}, {"", "namespaces"}, {"", "secrets"}, {"", "configmaps"},
		{"", "services"}, {"", "endpoints"}, {"", "serviceaccounts"}, {"discovery.k8s.io", "endpointslices"},
		{"networking.k8s.io", "networkpolicies"}, {"apps", "daemonsets"},
	}
	for _, r := range resources {
		for _, verb := range []string{"get", "list", "watch", "create", "update", "patch", "delete"} {
			rev, err := sa.AuthorizationV1().SelfSubjectAccessReviews().Create(e.ctx, &authzv1.SelfSubjectAccessReview{
				Spec: authzv1.SelfSubjectAccessReviewSpec{ResourceAttributes: &authzv1.ResourceAttributes{
					Verb: verb, Group: r.group, Resource: r.resource}}}, metav1.CreateOptions{})
			if err != nil {
				t.Fatal(err)
			}
			if want := granted(rules, r.group, r.resource, verb); rev.Status.Allowed != want {
				t.Errorf("%s may %s %s.%s: %v, but the manifest's ClusterRole says %v", saUser, verb, r.resource, r.group, rev.Status.Allowed, want)
			}
		}
	}
	// And the daemons, running under that account, were refused nothing.
	for _, p := range e.pods(t, sysNS, "app=ofsdn-node") {
		logs := e.c.MustKubectl(t, "logs", "-n", sysNS, p.Name)
		if strings.Contains(strings.ToLower(logs), "forbidden") {
			t.Errorf("%s was refused something:\n%s", p.Name, logs)
		}
	}
}

const echoManifest = `apiVersion: apps/v1
kind: Deployment
metadata: {name: echo, namespace: default}
spec:
  replicas: 4
  selector: {matchLabels: {app: echo}}
  template:
    metadata: {labels: {app: echo}}
    spec:
      terminationGracePeriodSeconds: 1
      topologySpreadConstraints:
      - {maxSkew: 1, topologyKey: kubernetes.io/hostname, whenUnsatisfiable: DoNotSchedule, labelSelector: {matchLabels: {app: echo}}}
      containers:
      - name: echo
        image: ofsdn.test/testbin:1
        imagePullPolicy: Never
        env: [{name: POD_NAME, valueFrom: {fieldRef: {fieldPath: metadata.name}}}]
        ports: [{containerPort: 8080}, {containerPort: 8081, protocol: UDP}, {containerPort: 8082}]
        readinessProbe: {httpGet: {path: /healthz, port: 8082}, periodSeconds: 1}
        livenessProbe: {tcpSocket: {port: 8080}, periodSeconds: 2}
`

func (e *env) testPods(t *testing.T) {
	start := time.Now()
	e.apply(t, echoManifest)
	pods := e.waitPods(t, ns, "app=echo", 4, 180*time.Second)
	e.timing("kubectl apply of a 4-pod Deployment → every pod Running and Ready (probes through the gateway)", time.Since(start))

	nodes := map[string]*corev1.Node{}
	perNode := map[string]int{}
	for _, n := range e.c.Nodes {
		node, err := e.c.CP.Client.CoreV1().Nodes().Get(e.ctx, n.Name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		nodes[n.Name] = node
	}
	for _, p := range pods {
		perNode[p.Spec.NodeName]++
		_, subnet, _ := net.ParseCIDR(nodes[p.Spec.NodeName].Spec.PodCIDR)
		if ip := net.ParseIP(p.Status.PodIP); ip == nil || !subnet.Contains(ip) {
			t.Errorf("%s on %s has IP %s outside the node's podCIDR %s", p.Name, p.Spec.NodeName, p.Status.PodIP, subnet)
		}
		if leases := e.c.Node(p.Spec.NodeName).Leases(t); leases[p.Status.PodIP] == "" {
			t.Errorf("%s: no IPAM lease for %s on %s: %v", p.Name, p.Status.PodIP, p.Spec.NodeName, leases)
		}
		for _, s := range p.Status.ContainerStatuses {
			if s.RestartCount != 0 {
				t.Errorf("%s restarted %d times (a failing liveness probe?)", p.Name, s.RestartCount)
			}
		}
	}
	if len(perNode) != 2 {
		t.Fatalf("pods not spread over both nodes: %v", perNode)
	}

	t.Run("every pod reaches every other over TCP and UDP, with its own address", func(t *testing.T) {
		for _, from := range pods {
			var targets []string
			for _, to := range pods {
				targets = append(targets, "tcp:"+to.Status.PodIP+":8080", "udp:"+to.Status.PodIP+":8081")
			}
			for i, r := range e.probe(t, from.Name, targets...) {
				to := pods[i/2]
				switch {
				case !r.ok:
					t.Errorf("%s (%s) → %s (%s, %s): %s", from.Name, from.Spec.NodeName, to.Name, to.Spec.NodeName, r.target, r.reply)
				case replyName(r.reply) != to.Name:
					t.Errorf("%s → %s: answered by %q", from.Name, r.target, r.reply)
				case replyPeerIP(r.reply) != from.Status.PodIP:
					t.Errorf("%s → %s: the server saw %s, want the client's own address %s", from.Name, r.target, replyPeerIP(r.reply), from.Status.PodIP)
				}
			}
		}
	})
	t.Run("each node reaches its pods and the other node's from the host", func(t *testing.T) {
		for _, n := range e.c.Nodes {
			gw := gatewayIP(t, nodes[n.Name].Spec.PodCIDR)
			for _, p := range pods {
				reply, err := dialFromNode(n, p.Status.PodIP+":8080")
				if err != nil || replyName(reply) != p.Name {
					t.Errorf("%s host → %s (%s on %s): %q %v", n.Name, p.Name, p.Status.PodIP, p.Spec.NodeName, reply, err)
					continue
				}
				if p.Spec.NodeName == n.Name && replyPeerIP(reply) != gw {
					t.Errorf("%s host → local pod %s: source %s, want the gateway address %s", n.Name, p.Name, replyPeerIP(reply), gw)
				}
			}
		}
	})
}

const servicesManifest = `apiVersion: v1
kind: Service
metadata: {name: echo, namespace: default}
spec:
  selector: {app: echo}
  ports:
  - {name: tcp, port: 80, targetPort: 8080}
  - {name: udp, port: 81, targetPort: 8081, protocol: UDP}
---
apiVersion: v1
kind: Pod
metadata: {name: hairpin, namespace: default, labels: {app: hairpin}}
spec:
  terminationGracePeriodSeconds: 1
  containers:
  - name: echo
    image: ofsdn.test/testbin:1
    imagePullPolicy: Never
    env: [{name: POD_NAME, valueFrom: {fieldRef: {fieldPath: metadata.name}}}]
    readinessProbe: {httpGet: {path: /healthz, port: 8082}, periodSeconds: 1}
---
apiVersion: v1
kind: Service
metadata: {name: hairpin, namespace: default}
spec:
  selector: {app: hairpin}
  ports:
  - {name: tcp, port: 80, targetPort: 8080}
  - {name: udp, port: 81, targetPort: 8081, protocol: UDP}
---
apiVersion: v1
kind: Service
metadata: {name: empty, namespace: default}
spec:
  selector: {app: nobody}
  ports: [{name: tcp, port: 80, targetPort: 8080}]
---
apiVersion: apps/v1
kind: Deployment
metadata: {name: flip, namespace: default}
spec:
  replicas: 0
  selector: {matchLabels: {app: flip}}
  template:
    metadata: {labels: {app: flip}}
    spec:
      terminationGracePeriodSeconds: 1
      containers:
      - name: echo
        image: ofsdn.test/testbin:1
        imagePullPolicy: Never
        env: [{name: POD_NAME, valueFrom: {fieldRef: {fieldPath: metadata.name}}}]
        readinessProbe: {httpGet: {path: /healthz, port: 8082}, periodSeconds: 1}
---
apiVersion: v1
kind: Service
metadata: {name: flip, namespace: default}
spec:
  selector: {app: flip}
  ports: [{name: tcp, port: 80, targetPort: 8080}]
`

func (e *env) clusterIP(t *testing.T, svc string) string {
	t.Helper()
	s, err := e.c.CP.Client.CoreV1().Services(ns).Get(e.ctx, svc, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return s.Spec.ClusterIP
}

// readyEndpoints counts the ready endpoints of a Service's EndpointSlices.
func (e *env) readyEndpoints(t *testing.T, svc string) int {
	t.Helper()
	l, err := e.c.CP.Client.DiscoveryV1().EndpointSlices(ns).List(e.ctx, metav1.ListOptions{LabelSelector: "kubernetes.io/service-name=" + svc})
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, s := range l.Items {
		for _, ep := range s.Endpoints {
			if ep.Conditions.Ready == nil || *ep.Conditions.Ready {
				n++
			}
		}
	}
	return n
}

// waitProbe polls one probe from pod until check accepts the result: kube-proxy programs a
// change a moment after the API shows it.
func (e *env) waitProbe(t *testing.T, what, pod, target string, check func(probeResult) error) {
	t.Helper()
	k8s.WaitFor(t, what, 60*time.Second, func() error { return check(e.probe(t, pod, target)[0]) })
}

func refused(r probeResult) error {
	if r.ok || !strings.Contains(r.reply, "connection refused") {
		return fmt.Errorf("%s: ok=%v %q, want connection refused", r.target, r.ok, r.reply)
	}
	return nil
}

func (e *env) testServices(t *testing.T) {
	e.apply(t, servicesManifest)
	e.waitPods(t, ns, "app=hairpin", 1, 120*time.Second)
	pods := e.pods(t, ns, "app=echo")
	echoIP := e.clusterIP(t, "echo")
	k8s.WaitFor(t, "4 ready endpoints of Service echo", 60*time.Second, func() error {
		if n := e.readyEndpoints(t, "echo"); n != 4 {
			return fmt.Errorf("%d", n)
		}
		return nil
	})

	t.Run("ClusterIP from every pod, TCP and UDP, spread over the endpoints on both nodes", func(t *testing.T) {
		const tries = 30
		seen := map[string]int{}
		for _, from := range pods {
			// First one answer from another pod (kube-proxy may need a moment; a pod reaching
			// itself proves less: kube-proxy masquerades hairpin traffic on its own).
			e.waitProbe(t, from.Name+" → Service echo answered by another pod", from.Name, "tcp:"+echoIP+":80", func(r probeResult) error {
				if !r.ok || replyName(r.reply) == from.Name {
					return fmt.Errorf("ok=%v %q", r.ok, r.reply)
				}
				return nil
			})
			var targets []string
			for i := 0; i < tries; i++ {
				targets = append(targets, "tcp:"+echoIP+":80", "udp:"+echoIP+":81")
			}
			fromSeen := map[string]bool{}
			for _, r := range e.probe(t, from.Name, targets...) {
				if !r.ok {
					t.Errorf("%s (%s) → %s: %s", from.Name, from.Spec.NodeName, r.target, r.reply)
					continue
				}
				seen[replyName(r.reply)]++
				fromSeen[replyName(r.reply)] = true
			}
			if len(fromSeen) < 2 {
				t.Errorf("%s: %d connections to Service echo all went to %v", from.Name, 2*tries, fromSeen)
			}
		}
		for _, p := range pods {
			if seen[p.Name] == 0 {
				t.Errorf("endpoint %s (%s) never answered through the Service: %v", p.Name, p.Spec.NodeName, seen)
			}
		}
		t.Logf("answers per endpoint: %v", seen)
	})
	t.Run("sessionAffinity ClientIP: a client keeps one endpoint within timeoutSeconds, then gets one anew", func(t *testing.T) {
		// Kubernetes API reference (ServiceSpec.sessionAffinity, ClientIPConfig.timeoutSeconds):
		// a client's connections go to the endpoint it last got while each comes within the
		// timeout of the previous one.
		const timeout = 3 * time.Second
		e.apply(t, fmt.Sprintf(`apiVersion: v1
kind: Service
metadata: {name: echo-affinity, namespace: default}
spec:
  selector: {app: echo}
  sessionAffinity: ClientIP
  sessionAffinityConfig: {clientIP: {timeoutSeconds: %d}}
  ports: [{name: tcp, port: 80, targetPort: 8080}]
`, int(timeout.Seconds())))
		defer e.c.MustKubectl(t, "delete", "-n", ns, "service/echo-affinity", "--wait=true")
		ip := e.clusterIP(t, "echo-affinity")
		target := "tcp:" + ip + ":80"
		answered := func(r probeResult) error {
			if !r.ok {
				return fmt.Errorf("%s: %s", r.target, r.reply)
			}
			return nil
		}
		for _, from := range pods {
			e.waitProbe(t, from.Name+" → Service echo-affinity", from.Name, target, answered)
			var targets []string
			for i := 0; i < 20; i++ {
				targets = append(targets, target)
			}
			got := map[string]int{}
			for _, r := range e.probe(t, from.Name, targets...) {
				if !r.ok {
					t.Errorf("%s → %s: %s", from.Name, r.target, r.reply)
					continue
				}
				got[replyName(r.reply)]++
			}
			if len(got) != 1 {
				t.Errorf("%s: 20 connections within the affinity timeout went to %d endpoints %v, want one", from.Name, len(got), got)
			}
		}
		// Idle past the timeout, a client's next connection is load-balanced again: over
		// rounds of one connection after an idle timeout+2 s, it must reach another endpoint
		// (4 endpoints: the same one 8 times in a row has odds of about 1 in 16,000).
		client := pods[0].Name
		first := e.probe(t, client, target)[0]
		endpoints := map[string]bool{replyName(first.reply): true}
		for round := 0; round < 8 && len(endpoints) < 2; round++ {
			time.Sleep(timeout + 2*time.Second)
			r := e.probe(t, client, target)[0]
			if err := answered(r); err != nil {
				t.Fatalf("%s after an idle timeout: %v", client, err)
			}
			endpoints[replyName(r.reply)] = true
		}
		if len(endpoints) < 2 {
			t.Errorf("%s: after 8 idle timeouts its connections still all went to %v: the affinity does not expire", client, endpoints)
		}
	})
	t.Run("NodePort from every pod to both nodes' addresses, the endpoint sees the client pod", func(t *testing.T) {
		e.apply(t, `apiVersion: v1
kind: Service
metadata: {name: echo-np, namespace: default}
spec:
  type: NodePort
  selector: {app: echo}
  ports: [{name: tcp, port: 80, targetPort: 8080, nodePort: 30080}]
`)
		defer e.c.MustKubectl(t, "delete", "-n", ns, "service/echo-np", "--wait=true")
		for _, from := range pods {
			for _, n := range e.c.Nodes {
				target := "tcp:" + n.IP + ":30080"
				e.waitProbe(t, from.Name+" → NodePort on "+n.Name, from.Name, target, func(r probeResult) error {
					if !r.ok {
						return fmt.Errorf("%s: %s", r.target, r.reply)
					}
					// With ofsdn proxying the endpoint sees the client pod itself (or, when
					// the client is the endpoint, the hairpin address); through kube-proxy it
					// would see a node address.
					want := from.Status.PodIP
					if replyName(r.reply) == from.Name {
						want = "169.254.0.252"
					}
					if got := replyPeerIP(r.reply); got != want {
						return fmt.Errorf("%s answered %q: the endpoint saw %s, want %s", r.target, r.reply, got, want)
					}
					return nil
				})
			}
		}
	})
	t.Run("ClusterIP from each node's host", func(t *testing.T) {
		for _, n := range e.c.Nodes {
			reply, err := dialFromNode(n, echoIP+":80")
			if err != nil || !strings.HasPrefix(replyName(reply), "echo-") {
				t.Errorf("%s host → Service echo: %q %v", n.Name, reply, err)
			}
		}
	})
	t.Run("hairpin: a pod reaches itself through its own Service", func(t *testing.T) {
		ip := e.clusterIP(t, "hairpin")
		e.waitProbe(t, "hairpin → Service hairpin", "hairpin", "tcp:"+ip+":80", func(r probeResult) error {
			if !r.ok || replyName(r.reply) != "hairpin" {
				return fmt.Errorf("ok=%v %q", r.ok, r.reply)
			}
			return nil
		})
		for _, r := range e.probe(t, "hairpin", "tcp:"+ip+":80", "udp:"+ip+":81") {
			if !r.ok || replyName(r.reply) != "hairpin" {
				t.Errorf("hairpin → %s: ok=%v %q", r.target, r.ok, r.reply)
			}
		}
	})
	t.Run("no endpoints: connection refused, also after 0 → 1 → 0", func(t *testing.T) {
		client := pods[0].Name
		emptyIP, flipIP := e.clusterIP(t, "empty"), e.clusterIP(t, "flip")
		e.waitProbe(t, "Service empty refuses", client, "tcp:"+emptyIP+":80", refused)
		for _, n := range e.c.Nodes {
			if _, err := dialFromNode(n, emptyIP+":80"); err == nil || !strings.Contains(err.Error(), "connection refused") {
				t.Errorf("%s host → Service empty: %v, want connection refused", n.Name, err)
			}
		}
		e.waitProbe(t, "Service flip (0 endpoints) refuses", client, "tcp:"+flipIP+":80", refused)
		e.c.MustKubectl(t, "scale", "-n", ns, "deployment/flip", "--replicas=1")
		flip := e.waitPods(t, ns, "app=flip", 1, 120*time.Second)
		e.waitProbe(t, "Service flip (1 endpoint) answers", client, "tcp:"+flipIP+":80", func(r probeResult) error {
			if !r.ok || replyName(r.reply) != flip[0].Name {
				return fmt.Errorf("ok=%v %q", r.ok, r.reply)
			}
			return nil
		})
		e.c.MustKubectl(t, "scale", "-n", ns, "deployment/flip", "--replicas=0")
		k8s.WaitFor(t, "flip's pod gone", 60*time.Second, func() error {
			if p := e.pods(t, ns, "app=flip"); len(p) > 0 {
				return fmt.Errorf("%d pods left", len(p))
			}
			return nil
		})
		e.waitProbe(t, "Service flip (0 endpoints again) refuses", client, "tcp:"+flipIP+":80", refused)
	})
}

func (e *env) testDaemonRestart(t *testing.T) {
	pods := e.pods(t, ns, "app=echo")
	var from, to *corev1.Pod
	for i := range pods {
		if pods[i].Spec.NodeName == e.c.Nodes[0].Name && from == nil {
			from = &pods[i]
		}
		if pods[i].Spec.NodeName == e.c.Nodes[1].Name && to == nil {
			to = &pods[i]
		}
	}
	node := e.c.Nodes[0]
	var old *corev1.Pod
	for _, p := range e.pods(t, sysNS, "app=ofsdn-node") {
		if p.Spec.NodeName == node.Name {
			old = &p
		}
	}
	if from == nil || to == nil || old == nil {
		t.Fatal("need an echo pod on each node and ofsdn-node on the first")
	}
	genBefore := flowGenerations(t, node)

	ping := e.startPing(t, ns, from, to)
	defer ping.kill()
	time.Sleep(2 * time.Second)

	// The old daemon's log to its end, for a failure's report.
	oldLog := &syncWriter{}
	logs := e.c.KubectlCmd("logs", "-f", "--timestamps", "-n", sysNS, "-c", "ofsdn-node", old.Name)
	logs.Stdout, logs.Stderr = oldLog, oldLog
	if err := logs.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = logs.Process.Kill(); _ = logs.Wait() }()

	start := time.Now()
	var ds []corev1.Pod
	if node.Bundled {
		// The pod also runs the node's Open vSwitch, with the userspace datapath the
		// forwarding itself: deleting it stops forwarding until the new pod's OVS runs
		// (measured by "ovs container killed"). The daemon's own restart is its container's.
		restarts := containerRestarts(old, "ofsdn-node")
		pid := node.ProcessPID(t, "/usr/local/bin/ofsdn-node")
		if err := syscall.Kill(pid, syscall.SIGTERM); err != nil {
			t.Fatal(err)
		}
		k8s.WaitFor(t, "ofsdn-node container restarted and its pod Ready on "+node.Name, 120*time.Second, func() error {
			p, err := e.c.CP.Client.CoreV1().Pods(sysNS).Get(e.ctx, old.Name, metav1.GetOptions{})
			if err != nil {
				return err
			}
			if containerRestarts(p, "ofsdn-node") <= restarts || !podReady(p) {
				return fmt.Errorf("not yet: restarts %d, ready %v", containerRestarts(p, "ofsdn-node"), podReady(p))
			}
			ds = []corev1.Pod{*p}
			return nil
		})
		e.timing("ofsdn-node container stopped (SIGTERM) → restarted and its pod Ready", time.Since(start))
	} else {
		e.c.MustKubectl(t, "delete", "pod", "-n", sysNS, old.Name, "--wait=true")
		k8s.WaitFor(t, "a new ofsdn-node pod Ready on "+node.Name, 120*time.Second, func() error {
			ds = e.pods(t, sysNS, "app=ofsdn-node")
			for _, p := range ds {
				if p.Spec.NodeName == node.Name && p.UID != old.UID && podReady(&p) {
					return nil
				}
			}
			return fmt.Errorf("not yet: %d ofsdn-node pods", len(ds))
		})
		e.timing("ofsdn-node pod deleted → its replacement Ready", time.Since(start))
	}
	time.Sleep(2 * time.Second)
	line, sent, received, _ := ping.stop(t)
	out := ping.out
	t.Logf("%s → %s every 10 ms across the ofsdn-node pod's deletion and replacement: %d sent, %d answered %s",
		from.Name, to.Name, sent, received, strings.TrimSpace(line))
	if sent < 300 {
		t.Fatalf("only %d echo requests: the ping did not run through the restart", sent)
	}
	if received != sent {
		t.Errorf("%d of %d echo requests lost across the ofsdn-node restart: %s", sent-received, sent, line)
		var newName string
		for _, p := range ds {
			if p.Spec.NodeName == node.Name && (p.UID != old.UID || node.Bundled) {
				newName = p.Name
			}
		}
		newLog, _ := e.c.Kubectl("logs", "--timestamps", "-n", sysNS, "-c", "ofsdn-node", newName)
		t.Logf("ping output:\n%s\npod %s deleted at %s (UTC)\n---- old daemon %s (last 40 lines) ----\n%s\n---- new daemon %s (last 60 lines) ----\n%s\n---- %s ovs-vswitchd.log (last 40 lines) ----\n%s",
			out.String(), old.Name, start.UTC().Format("15:04:05.000"), old.Name, lastLines(oldLog.String(), 40), newName, lastLines(newLog, 60),
			node.Name, node.OVSLogTail(40))
		// Where the datapath dropped what, on both nodes: drop reasons and port counters.
		for _, n := range e.c.Nodes {
			var drops []string
			for _, l := range strings.Split(n.OVS.AppctlOutput("coverage/show"), "\n") {
				if strings.Contains(l, "drop") || strings.Contains(l, "upcall") || strings.Contains(l, "tnl") {
					drops = append(drops, l)
				}
			}
			t.Logf("---- %s ovs-vswitchd coverage (drop, upcall, tnl) ----\n%s\n---- %s dpctl/show -s ----\n%s",
				n.Name, strings.Join(drops, "\n"), n.Name, n.OVS.AppctlOutput("dpctl/show", "-s"))
		}
	}
	if genAfter := flowGenerations(t, node); len(genAfter) != 1 || equalKeys(genAfter, genBefore) {
		t.Errorf("flow generations on %s before %v, after %v: want one new generation (the new daemon's)", node.Name, genBefore, genAfter)
	}
}

// testOVSContainerKilled (nodes whose OVS is the DaemonSet's): the ovs container of the
// first node's pod is killed (SIGKILL to its PID 1, ofsdn-ovs, which takes ovsdb-server
// and ovs-vswitchd with it) while a pod there pings one on the other node every 10 ms.
// The kubelet restarts the container, ovs-vswitchd takes its bridges back from the
// database on the host, and the daemon, reconnected, replays its flows. Checked: the pings
// come back (the last second of them all answered) and the outage is measured and logged;
// the node's leases, br-int's ports and the flows' generation are those from before.
func (e *env) testOVSContainerKilled(t *testing.T) {
	node := e.c.Nodes[0]
	pods := e.pods(t, ns, "app=echo")
	var from, to *corev1.Pod
	for i := range pods {
		if pods[i].Spec.NodeName == node.Name && from == nil {
			from = &pods[i]
		}
		if pods[i].Spec.NodeName == e.c.Nodes[1].Name && to == nil {
			to = &pods[i]
		}
	}
	var dsPod *corev1.Pod
	for _, p := range e.pods(t, sysNS, "app=ofsdn-node") {
		if p.Spec.NodeName == node.Name {
			dsPod = &p
		}
	}
	if from == nil || to == nil || dsPod == nil {
		t.Fatal("need an echo pod on each node and ofsdn-node on the first")
	}
	leasesBefore := node.Leases(t)
	portsBefore := node.OVS.Vsctl(t, "list-ports", "br-int")
	genBefore := flowGenerations(t, node)
	restarts := containerRestarts(dsPod, "ovs")

	ping := e.startPing(t, ns, from, to)
	defer ping.kill()
	time.Sleep(2 * time.Second)

	start := time.Now()
	if err := syscall.Kill(node.ProcessPID(t, "/usr/local/bin/ofsdn-ovs"), syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	k8s.WaitFor(t, "ovs container restarted and the pod Ready on "+node.Name, 120*time.Second, func() error {
		p, err := e.c.CP.Client.CoreV1().Pods(sysNS).Get(e.ctx, dsPod.Name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		if containerRestarts(p, "ovs") <= restarts || !podReady(p) {
			return fmt.Errorf("not yet: ovs restarts %d, ready %v", containerRestarts(p, "ovs"), podReady(p))
		}
		return nil
	})
	e.timing("ovs container killed → restarted and its pod Ready", time.Since(start))
	// Pings answered again; then a quiet second that must be all answered.
	k8s.WaitFor(t, "TCP from "+from.Name+" to "+to.Name+" again", 60*time.Second, func() error {
		out, err := e.exec(from.Name, "/testbin", "probe", "tcp:"+to.Status.PodIP+":8080")
		if err != nil {
			return err
		}
		if r := parseProbe(out); len(r) != 1 || !r[0].ok {
			return fmt.Errorf("probe: %s", out)
		}
		return nil
	})
	time.Sleep(3 * time.Second)
	_, sent, received, missing := ping.stop(t)
	var first, last int
	if len(missing) > 0 {
		first, last = missing[0], missing[len(missing)-1]
	}
	t.Logf("%s → %s every 10 ms, ovs container of %s killed: %d sent, %d answered; unanswered from seq %d to %d: an outage of %.2f s (%d lost)",
		from.Name, to.Name, node.Name, sent, received, first, last, float64(last-first+1)*0.01, sent-received)
	e.timing(fmt.Sprintf("ovs container killed: pings unanswered for %.2f s (%d lost of %d)", float64(last-first+1)*0.01, sent-received, sent), 0)
	if last > sent-100 {
		t.Errorf("pings still lost in the last second (last lost seq %d of %d): not back", last, sent)
	}
	// The daemon logged the outage once, not per retry (its container kept running).
	logs := e.c.MustKubectl(t, "logs", "-n", sysNS, dsPod.Name, "-c", "ofsdn-node", "--since-time", start.Add(-time.Second).UTC().Format(time.RFC3339))
	for msg, lines := range harness.RepeatedWarnings(logs, start) {
		t.Errorf("%s: ofsdn-node logged %q %d times during one OVS outage, want once:\n%s", node.Name, msg, len(lines), strings.Join(lines, "\n"))
	}
	if got := node.Leases(t); fmt.Sprint(got) != fmt.Sprint(leasesBefore) {
		t.Errorf("%s: leases %v after the OVS restart, %v before", node.Name, got, leasesBefore)
	}
	if got := node.OVS.Vsctl(t, "list-ports", "br-int"); got != portsBefore {
		t.Errorf("%s: br-int ports %q after the OVS restart, %q before", node.Name, got, portsBefore)
	}
	if got := flowGenerations(t, node); !equalKeys(got, genBefore) {
		t.Errorf("%s: flow generations %v after the OVS restart, %v before: want the daemon's own, replayed", node.Name, got, genBefore)
	}
}

// containerRestarts is the restart count of pod's container name.
func containerRestarts(p *corev1.Pod, name string) int32 {
	for _, s := range p.Status.ContainerStatuses {
		if s.Name == name {
			return s.RestartCount
		}
	}
	return 0
}

// lastLines returns the last n lines of s.
func lastLines(s string, n int) string {
	l := strings.Split(strings.TrimRight(s, "\n"), "\n")
	return strings.Join(l[max(0, len(l)-n):], "\n")
}

// syncWriter appends to b under a lock, so that b can be read while a command still writes.
// pingRun is /testbin ping from one pod to another every 10 ms, run through kubectl exec in
// the background until stop.
type pingRun struct {
	cmd   *exec.Cmd
	stdin io.WriteCloser
	out   *syncWriter
}

// startPing starts pinging to's pod IP from pod from (namespace ns) every 10 ms.
func (e *env) startPing(t *testing.T, ns string, from, to *corev1.Pod) *pingRun {
	t.Helper()
	cmd := e.c.KubectlCmd("exec", "-i", "-n", ns, from.Name, "--", "/testbin", "ping", "-i", "10ms", to.Status.PodIP)
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	p := &pingRun{cmd: cmd, stdin: stdin, out: &syncWriter{}}
	cmd.Stdout, cmd.Stderr = p.out, p.out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	return p
}

// kill ends the ping at once if stop did not (deferred by its starter).
func (p *pingRun) kill() {
	if p.cmd.ProcessState == nil {
		_ = p.cmd.Process.Kill()
		_ = p.cmd.Wait()
	}
}

// stop ends the ping (its stdin closed: it prints its summary and exits) and returns the
// summary line ("sent N received M missing [s1 s2 ...]"), the echo requests sent and
// answered, and the sequence numbers left unanswered, in order. It fails the test when
// the ping fails or does not stop within 60 s.
func (p *pingRun) stop(t *testing.T) (line string, sent, received int, missing []int) {
	t.Helper()
	_ = p.stdin.Close()
	done := make(chan error, 1)
	go func() { done <- p.cmd.Wait() }()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("ping: %v\n%s", err, p.out.String())
		}
	case <-time.After(60 * time.Second):
		t.Fatalf("ping did not stop after its stdin closed:\n%s", p.out.String())
	}
	line = p.out.String()
	if i := strings.LastIndex(line, "sent "); i >= 0 {
		line = line[i:]
	}
	if _, err := fmt.Sscanf(line, "sent %d received %d", &sent, &received); err != nil {
		t.Fatalf("ping output %q: %v", p.out.String(), err)
	}
	if i := strings.Index(line, "missing"); i >= 0 {
		for _, f := range strings.Fields(strings.Trim(strings.TrimSpace(line[i+len("missing"):]), "[]")) {
			n, err := strconv.Atoi(f)
			if err != nil {
				t.Fatalf("ping output %q: missing sequence %q: %v", p.out.String(), f, err)
			}
			missing = append(missing, n)
		}
	}
	return line, sent, received, missing
}

type syncWriter struct {
	mu sync.Mutex
	b  strings.Builder
}

func (w *syncWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.b.Write(p)
}

func (w *syncWriter) String() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.b.String()
}

// flowGenerations returns the generations (cookie bits 55..40) of the flows on the node's
// br-int, with counts.
func flowGenerations(t *testing.T, n *k8s.Node) map[uint16]int {
	t.Helper()
	gens := map[uint16]int{}
	for _, c := range flowCookies(t, n) {
		gens[uint16(c>>40)]++
	}
	return gens
}

func flowCookies(t *testing.T, n *k8s.Node) []flows.Cookie {
	t.Helper()
	var out []flows.Cookie
	for _, l := range strings.Split(n.Ofctl(t, "dump-flows", "--no-stats"), "\n") {
		l = strings.TrimSpace(l)
		if !strings.HasPrefix(l, "cookie=") {
			continue
		}
		hex, _, _ := strings.Cut(strings.TrimPrefix(l, "cookie=0x"), ",")
		c, err := strconv.ParseUint(hex, 16, 64)
		if err != nil {
			t.Fatalf("flow %q: %v", l, err)
		}
		out = append(out, flows.Cookie(c))
	}
	return out
}

func equalKeys(a, b map[uint16]int) bool {
	if len(a) != len(b) {
		return false
	}
	for k := range a {
		if _, ok := b[k]; !ok {
			return false
		}
	}
	return true
}

func (e *env) testKubeletRestart(t *testing.T) {
	node := e.c.Nodes[0]
	type podState struct {
		ip       string
		uid      string
		restarts int32
	}
	snapshot := func() map[string]podState {
		st := map[string]podState{}
		for _, p := range e.pods(t, ns, "") {
			if p.Spec.NodeName != node.Name {
				continue
			}
			var r int32
			for _, s := range p.Status.ContainerStatuses {
				r += s.RestartCount
			}
			st[p.Name] = podState{p.Status.PodIP, string(p.UID), r}
		}
		return st
	}
	before := snapshot()
	leasesBefore := node.Leases(t)
	if len(before) == 0 {
		t.Fatalf("no pods on %s", node.Name)
	}
	restarted := time.Now()
	node.RestartKubelet(t)
	k8s.WaitFor(t, node.Name+" heartbeat from the restarted kubelet", 120*time.Second, func() error {
		l, err := e.c.CP.Client.CoordinationV1().Leases("kube-node-lease").Get(e.ctx, node.Name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		if l.Spec.RenewTime == nil || l.Spec.RenewTime.Time.Before(restarted.Add(time.Second)) {
			return fmt.Errorf("lease renewed %v, restart at %v", l.Spec.RenewTime, restarted)
		}
		return nil
	})
	// The restarted kubelet serves exec for a pod once it has taken the pod over from the
	// runtime (the pod sync in which it would have made a new sandbox, had it lost it).
	for name := range before {
		k8s.WaitFor(t, "the restarted kubelet serves exec in "+name, 120*time.Second, func() error {
			_, err := e.exec(name, "/testbin", "probe")
			return err
		})
	}
	e.waitPods(t, ns, "app=echo", 4, 120*time.Second)
	after := snapshot()
	for name, b := range before {
		a, ok := after[name]
		switch {
		case !ok:
			t.Errorf("pod %s gone after the kubelet restart", name)
		case a != b:
			t.Errorf("pod %s before the kubelet restart %+v, after %+v: want the same IP, UID and no restart", name, b, a)
		}
	}
	if la := node.Leases(t); fmt.Sprint(la) != fmt.Sprint(leasesBefore) {
		t.Errorf("IPAM leases changed across the kubelet restart:\nbefore %v\nafter  %v", leasesBefore, la)
	}
	// Still reachable across nodes.
	pods := e.pods(t, ns, "app=echo")
	var targets []string
	for _, p := range pods {
		targets = append(targets, "tcp:"+p.Status.PodIP+":8080")
	}
	for _, r := range e.probe(t, pods[0].Name, targets...) {
		if !r.ok {
			t.Errorf("after the kubelet restart %s → %s: %s", pods[0].Name, r.target, r.reply)
		}
	}
}

func (e *env) testDeletion(t *testing.T) {
	before := e.pods(t, ns, "")
	if len(before) == 0 {
		t.Fatal("no pods to delete")
	}
	e.c.MustKubectl(t, "delete", "-n", ns, "deployment/echo", "deployment/flip", "pod/hairpin", "--wait=true")
	k8s.WaitFor(t, "every pod in default gone", 120*time.Second, func() error {
		if p := e.pods(t, ns, ""); len(p) > 0 {
			return fmt.Errorf("%d pods left", len(p))
		}
		return nil
	})
	for _, n := range e.c.Nodes {
		k8s.WaitFor(t, n.Name+": nothing left of the deleted pods", 60*time.Second, func() error {
			if l := n.Leases(t); len(l) > 0 {
				return fmt.Errorf("IP leases left: %v", l)
			}
			ports := strings.Fields(n.OVS.Vsctl(t, "list-ports", "br-int"))
			sort.Strings(ports)
			if strings.Join(ports, " ") != gatewayIf+" vxlan0" {
				return fmt.Errorf("br-int ports %v, want only %s and vxlan0", ports, gatewayIf)
			}
			for _, c := range flowCookies(t, n) {
				if c.Owner() == flows.OwnerPod {
					return fmt.Errorf("pod flows left:\n%s", n.Ofctl(t, "dump-flows", "--no-stats"))
				}
			}
			// The pods' host-side veths are gone: uplink0 is the node's only veth.
			links := strings.Split(n.OVS.Exec(t, "ip", "-o", "link", "show", "type", "veth"), "\n")
			if len(links) != 1 || !strings.Contains(links[0], "uplink0") {
				return fmt.Errorf("veths in the node: %s", strings.Join(links, "\n"))
			}
			return nil
		})
	}
	// The echo pods' IPs are free again: a new pod may take one (the IPAM hands them out).
	for _, p := range before {
		for _, n := range e.c.Nodes {
			if _, ok := n.Leases(t)[p.Status.PodIP]; ok {
				t.Errorf("%s's IP %s still leased on %s", p.Name, p.Status.PodIP, n.Name)
			}
		}
	}
}

// guardedManifest: Service guarded over two pods, one per node, that a NetworkPolicy opens
// only to pods labelled role=allowed; clients of each kind pinned to each node (%[1]s and
// %[2]s are the node names); and a pod whose egress a second policy denies entirely.
// Service open is over the role=allowed pods, which no ingress policy guards. Both
// Services are PreferDualStack: an IPv4 and an IPv6 ClusterIP on the dual-stack cluster,
// IPv4 alone on a single-stack one.
var guardedManifest = `apiVersion: apps/v1
kind: Deployment
metadata: {name: guarded, namespace: default}
spec:
  replicas: 2
  selector: {matchLabels: {app: guarded}}
  template:
    metadata: {labels: {app: guarded}}
    spec:
      terminationGracePeriodSeconds: 1
      topologySpreadConstraints:
      - {maxSkew: 1, topologyKey: kubernetes.io/hostname, whenUnsatisfiable: DoNotSchedule, labelSelector: {matchLabels: {app: guarded}}}
      containers:
      - name: echo
        image: ofsdn.test/testbin:1
        imagePullPolicy: Never
        env: [{name: POD_NAME, valueFrom: {fieldRef: {fieldPath: metadata.name}}}]
        readinessProbe: {httpGet: {path: /healthz, port: 8082}, periodSeconds: 1}
---
apiVersion: v1
kind: Service
metadata: {name: guarded, namespace: default}
spec:
  ipFamilyPolicy: PreferDualStack
  selector: {app: guarded}
  ports:
  - {name: tcp, port: 80, targetPort: 8080}
  - {name: udp, port: 81, targetPort: 8081, protocol: UDP}
---
apiVersion: v1
kind: Service
metadata: {name: open, namespace: default}
spec:
  ipFamilyPolicy: PreferDualStack
  selector: {role: allowed}
  ports: [{name: tcp, port: 80, targetPort: 8080}]
---
apiVersion: networking.k8s.io/v1
kind: NetworkPolicy
metadata: {name: guarded-ingress, namespace: default}
spec:
  podSelector: {matchLabels: {app: guarded}}
  policyTypes: [Ingress]
  ingress:
  - from: [{podSelector: {matchLabels: {role: allowed}}}]
    ports: [{protocol: TCP, port: 8080}, {protocol: UDP, port: 8081}]
---
apiVersion: networking.k8s.io/v1
kind: NetworkPolicy
metadata: {name: sealed-egress, namespace: default}
spec:
  podSelector: {matchLabels: {role: sealed}}
  policyTypes: [Egress]
` + clientPod("allowed-1", "allowed", "%[1]s") + clientPod("allowed-2", "allowed", "%[2]s") +
	clientPod("denied-1", "denied", "%[1]s") + clientPod("denied-2", "denied", "%[2]s") + clientPod("sealed", "sealed", "%[1]s")

func clientPod(name, role, node string) string {
	return `---
apiVersion: v1
kind: Pod
metadata: {name: ` + name + `, namespace: default, labels: {role: ` + role + `}}
spec:
  nodeName: ` + node + `
  terminationGracePeriodSeconds: 1
  containers:
  - name: echo
    image: ofsdn.test/testbin:1
    imagePullPolicy: Never
    env: [{name: POD_NAME, valueFrom: {fieldRef: {fieldPath: metadata.name}}}]
    readinessProbe: {httpGet: {path: /healthz, port: 8082}, periodSeconds: 1}
`
}

// testPolicyThroughServices: the hole of issue 22, closed by serviceProxy: ofsdn (the
// default with the Kubernetes topology). Through a Service's ClusterIP, as on
// pod IPs, an ingress policy admits exactly the pods it selects, on either node, and the
// endpoint sees the client pod's own address; the pods it does not select are refused;
// a pod whose egress is denied reaches no Service. Through kube-proxy on the host all
// three fail: the reply comes back masqueraded to the gateway, which policy lets by.
// On the dual-stack cluster all three hold over the Services' IPv6 ClusterIPs too, the
// endpoint seeing the client's own IPv6 address.
func (e *env) testPolicyThroughServices(t *testing.T) {
	start := time.Now()
	e.apply(t, fmt.Sprintf(guardedManifest, e.c.Nodes[0].Name, e.c.Nodes[1].Name))
	servers := e.waitPods(t, ns, "app=guarded", 2, 120*time.Second)
	clients := map[string]*corev1.Pod{}
	for role, n := range map[string]int{"allowed": 2, "denied": 2, "sealed": 1} {
		for _, p := range e.waitPods(t, ns, "role="+role, n, 120*time.Second) {
			clients[p.Name] = &p
		}
	}
	dual := e.c.Config.DualStack
	families := []string{"IPv4"}
	if dual {
		families = append(families, "IPv6")
	}
	for _, fam := range families {
		k8s.WaitFor(t, "2 ready "+fam+" endpoints of Service guarded", 60*time.Second, func() error {
			if n := e.readyEndpointsByFamily(t, "guarded", fam); n != 2 {
				return fmt.Errorf("%d", n)
			}
			return nil
		})
	}
	guardedIPs, openIPs := e.clusterIPs(t, "guarded"), e.clusterIPs(t, "open")
	if len(guardedIPs) != len(families) || len(openIPs) != len(families) {
		t.Fatalf("Services guarded and open have ClusterIPs %v and %v, want one per family %v", guardedIPs, openIPs, families)
	}
	guardedIP, echoIP := guardedIPs[0], e.clusterIP(t, "echo")
	// (Over IPv6 the allowed clients' first answers below wait for the switch.)
	for _, n := range e.c.Nodes {
		k8s.WaitFor(t, n.Name+": ofsdnctl services lists default/guarded at "+guardedIP+" with 2 endpoints", 60*time.Second, func() error {
			p, out := e.servicePortAt(t, n, "guarded", "TCP", guardedIP)
			if p == nil || len(p.Endpoints) != 2 {
				return fmt.Errorf("not yet:\n%s", out)
			}
			return nil
		})
	}
	// The targets through Service guarded, per family.
	tcp, udp := map[string]string{}, map[string]string{}
	for i, fam := range families {
		host := net.JoinHostPort(guardedIPs[i], "")
		tcp[fam], udp[fam] = "tcp:"+host+"80", "udp:"+host+"81"
	}
	failed := func(r probeResult) error {
		if r.ok {
			return fmt.Errorf("%s answered %q, want no answer", r.target, r.reply)
		}
		return nil
	}
	// The policies are realized a moment after the API has them.
	e.waitProbe(t, "denied-1 refused through Service guarded", "denied-1", tcp["IPv4"], failed)

	t.Run("selected pods on both nodes are answered by both endpoints, with their own address", func(t *testing.T) {
		seen := map[string]map[string]bool{"IPv4": {}, "IPv6": {}}
		for _, name := range []string{"allowed-1", "allowed-2"} {
			c := clients[name]
			self := map[string]string{"IPv4": c.Status.PodIP, "IPv6": podIPv6(c)}
			var targets []string
			for _, fam := range families {
				e.waitProbe(t, name+" answered through Service guarded over "+fam, name, tcp[fam], func(r probeResult) error {
					if !r.ok {
						return fmt.Errorf("%s: %s", r.target, r.reply)
					}
					return nil
				})
				for i := 0; i < 8; i++ {
					targets = append(targets, tcp[fam])
				}
				targets = append(targets, udp[fam])
			}
			for i, r := range e.probe(t, name, targets...) {
				fam := families[i/9]
				if !r.ok {
					t.Errorf("%s (%s, role=allowed) → %s: %s", name, c.Spec.NodeName, r.target, r.reply)
					continue
				}
				seen[fam][replyName(r.reply)] = true
				if got := replyPeerIP(r.reply); !sameIP(got, self[fam]) {
					t.Errorf("%s → %s: the endpoint saw %s, want the client's own %s address %s", name, r.target, got, fam, self[fam])
				}
			}
		}
		for _, fam := range families {
			for _, s := range servers {
				if !seen[fam][s.Name] {
					t.Errorf("endpoint %s (%s) never answered an allowed client through the Service over %s: %v", s.Name, s.Spec.NodeName, fam, seen[fam])
				}
			}
		}
	})
	t.Run("ofsdnctl services and the metrics show the Service port, its endpoints and connections", func(t *testing.T) {
		node := e.c.Nodes[0]
		// The count is the service_lb flow's packets: connections whose first packet hit an
		// existing datapath flow are counted once ovs-vswitchd's revalidators push that
		// flow's statistics to it (within about a second), not at once.
		found, out := e.servicePortAt(t, node, "guarded", "TCP", guardedIP)
		k8s.WaitFor(t, "default/guarded:tcp's connection count on "+node.Name+" reaching allowed-1's 8", 15*time.Second, func() error {
			if found, out = e.servicePortAt(t, node, "guarded", "TCP", guardedIP); found != nil && found.Connections < 8 {
				return fmt.Errorf("%d", found.Connections)
			}
			return nil
		})
		want := map[string]bool{}
		for _, s := range servers {
			want[net.JoinHostPort(s.Status.PodIP, "8080")] = true
		}
		switch {
		case found == nil:
			t.Fatalf("ofsdnctl services on %s lists no default/guarded TCP port:\n%s", node.Name, out)
		case found.Frontend != net.JoinHostPort(guardedIP, "80") || found.Verdict != "forward":
			t.Errorf("default/guarded:tcp: frontend %s verdict %s, want %s:80 forward", found.Frontend, found.Verdict, guardedIP)
		case len(found.Endpoints) != len(want) || !want[found.Endpoints[0]] || !want[found.Endpoints[len(found.Endpoints)-1]]:
			t.Errorf("default/guarded:tcp endpoints %v, want the guarded pods' %v", found.Endpoints, want)
		case found.Connections < 8:
			t.Errorf("default/guarded:tcp took %d connections on %s, want at least allowed-1's 8", found.Connections, node.Name)
		}
		m := e.nodeMetrics(t, node)
		if !strings.Contains(m, "\nofsdn_service_ports ") || !strings.Contains(m, "\nofsdn_service_endpoints ") {
			t.Errorf("%s's metrics lack ofsdn_service_ports or ofsdn_service_endpoints", node.Name)
		}
		// The guarded pods' EndpointSlice changes carry trigger times: each realized
		// change is one network programming latency sample.
		if n := metricValue(m, "ofsdn_network_programming_duration_seconds_count"); n < 1 {
			t.Errorf("%s: ofsdn_network_programming_duration_seconds_count = %v, want the realized EndpointSlice changes (>= 1)", node.Name, n)
		}
		if n := metricValue(m, "ofsdn_service_sync_duration_seconds_count"); n < 1 {
			t.Errorf("%s: ofsdn_service_sync_duration_seconds_count = %v, want >= 1", node.Name, n)
		}
	})
	t.Run("pods the policy does not select are refused on both nodes, TCP and UDP", func(t *testing.T) {
		// Every refusal waits out its probe's timeout: one probe per target, side by side.
		var wg sync.WaitGroup
		for _, name := range []string{"denied-1", "denied-2"} {
			var targets []string
			for _, fam := range families {
				targets = append(targets, tcp[fam], udp[fam])
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				for _, r := range e.probeApart(t, name, targets...) {
					if r.ok {
						t.Errorf("%s (%s, role=denied) → %s answered %q: the policy admits only role=allowed", name, clients[name].Spec.NodeName, r.target, r.reply)
					}
				}
			}()
		}
		wg.Wait()
	})
	t.Run("a pod whose egress is denied reaches no Service", func(t *testing.T) {
		targets := []string{tcp["IPv4"], "tcp:" + echoIP + ":80"}
		if dual {
			// Service open's IPv6 ClusterIP, whose endpoints no ingress policy guards: a pod
			// whose egress is not denied reaches it.
			open6 := "tcp:" + net.JoinHostPort(openIPs[1], "80")
			e.waitProbe(t, "denied-1 answered through Service open over IPv6", "denied-1", open6, func(r probeResult) error {
				if !r.ok || !sameIP(replyPeerIP(r.reply), podIPv6(clients["denied-1"])) {
					return fmt.Errorf("%s: ok=%v %q, want an answer seeing denied-1's own IPv6 address", r.target, r.ok, r.reply)
				}
				return nil
			})
			targets = append(targets, tcp["IPv6"], open6)
		}
		for _, r := range e.probeApart(t, "sealed", targets...) {
			if r.ok {
				t.Errorf("sealed (egress denied) → %s answered %q", r.target, r.reply)
			}
		}
	})
	if dual {
		t.Run("dual-stack: the same policies over the pods' IPv6 addresses", func(t *testing.T) {
			e.testPolicyIPv6(t, servers, clients)
		})
	}
	e.timing("NetworkPolicy through Services (ClusterIPs of "+strings.Join(families, " and ")+"): admitted, refused, egress denied", time.Since(start))
	// Leave the later steps the cluster they expect.
	e.c.MustKubectl(t, "delete", "-n", ns, "--wait=true", "deployment/guarded", "service/guarded", "service/open",
		"networkpolicy/guarded-ingress", "networkpolicy/sealed-egress",
		"pod/allowed-1", "pod/allowed-2", "pod/denied-1", "pod/denied-2", "pod/sealed")
}

// testKubeProxyMode: with serviceProxy: kube-proxy (the DaemonSet rolled to it) pods'
// Service traffic goes through the host's kube-proxy again: every echo pod still reaches
// Service echo, the hairpin pod itself, and no node holds a Service group; rolled back to
// the default, every node lists Service echo in ofsdnctl services again.
func (e *env) testKubeProxyMode(t *testing.T) {
	// The two DaemonSet rolls below (with OVS in the pod, Open vSwitch rolls with them)
	// keep every pod's IP lease and br-int port.
	leases, ports := map[string]string{}, map[string]string{}
	for _, n := range e.c.Nodes {
		leases[n.Name] = fmt.Sprint(n.Leases(t))
		ports[n.Name] = n.OVS.Vsctl(t, "list-ports", "br-int")
	}
	defer func() {
		for _, n := range e.c.Nodes {
			if got := fmt.Sprint(n.Leases(t)); got != leases[n.Name] {
				t.Errorf("%s: leases %s after the DaemonSet rolls, %s before", n.Name, got, leases[n.Name])
			}
			if got := n.OVS.Vsctl(t, "list-ports", "br-int"); got != ports[n.Name] {
				t.Errorf("%s: br-int ports %q after the DaemonSet rolls, %q before", n.Name, got, ports[n.Name])
			}
		}
	}()
	restore := e.setServiceProxy(t, "kube-proxy")
	restored := false
	defer func() {
		if !restored {
			restore()
		}
	}()
	for _, n := range e.c.Nodes {
		k8s.WaitFor(t, n.Name+" holds no Service group with serviceProxy: kube-proxy", 60*time.Second, func() error {
			if g := strings.TrimSpace(n.Ofctl(t, "dump-groups")); strings.Contains(g, "group_id=") {
				return fmt.Errorf("groups left:\n%s", g)
			}
			return nil
		})
	}
	echoIP, hairpinIP := e.clusterIP(t, "echo"), e.clusterIP(t, "hairpin")
	for _, p := range e.pods(t, ns, "app=echo") {
		e.waitProbe(t, p.Name+" → Service echo through kube-proxy", p.Name, "tcp:"+echoIP+":80", func(r probeResult) error {
			if !r.ok || !strings.HasPrefix(replyName(r.reply), "echo-") {
				return fmt.Errorf("ok=%v %q", r.ok, r.reply)
			}
			return nil
		})
	}
	e.waitProbe(t, "hairpin → Service hairpin through kube-proxy", "hairpin", "tcp:"+hairpinIP+":80", func(r probeResult) error {
		if !r.ok || replyName(r.reply) != "hairpin" {
			return fmt.Errorf("ok=%v %q", r.ok, r.reply)
		}
		return nil
	})
	restore()
	restored = true
	for _, n := range e.c.Nodes {
		k8s.WaitFor(t, n.Name+": ofsdnctl services lists default/echo again", 60*time.Second, func() error {
			if p, out := e.servicePort(t, n, "echo", "TCP"); p == nil || len(p.Endpoints) == 0 {
				return fmt.Errorf("not yet:\n%s", out)
			}
			return nil
		})
	}
}

const rollingManifest = `apiVersion: apps/v1
kind: Deployment
metadata: {name: rolling, namespace: default}
spec:
  replicas: 3
  strategy: {type: RollingUpdate, rollingUpdate: {maxSurge: 1, maxUnavailable: 0}}
  selector: {matchLabels: {app: rolling}}
  template:
    metadata: {labels: {app: rolling}}
    spec:
      terminationGracePeriodSeconds: 10
      containers:
      - name: echo
        image: ofsdn.test/testbin:1
        imagePullPolicy: Never
        env: [{name: POD_NAME, valueFrom: {fieldRef: {fieldPath: metadata.name}}}]
        readinessProbe: {httpGet: {path: /healthz, port: 8082}, periodSeconds: 1}
        lifecycle: {preStop: {sleep: {seconds: 3}}}
---
apiVersion: v1
kind: Service
metadata: {name: rolling, namespace: default}
spec:
  selector: {app: rolling}
  ports: [{name: tcp, port: 80, targetPort: 8080}]
`

// testRollingUpdate: a client pod connects to Service rolling in a loop while its
// Deployment is rolled (maxSurge 1, maxUnavailable 0; each old pod keeps serving 3 s after
// its deletion, its preStop sleep, as a server with graceful shutdown does). Every
// connection is answered, and once the client's node no longer lists an old pod's
// address for the Service (ofsdnctl services: its removal realized in the switch), no
// connection that starts later reaches it.
func (e *env) testRollingUpdate(t *testing.T) {
	e.apply(t, rollingManifest)
	defer func() {
		e.c.MustKubectl(t, "delete", "-n", ns, "--wait=true", "deployment/rolling", "service/rolling")
		// The Deployment goes at once, its pods after their preStop sleep; their CNI DELs
		// (OVS port deletions) must not land in the next step, which counts every ping
		// across a daemon replacement (a port deletion on the userspace datapath there
		// coincided with one lost echo request).
		k8s.WaitFor(t, "the rolling pods gone", 120*time.Second, func() error {
			if left := e.pods(t, ns, "app=rolling"); len(left) > 0 {
				return fmt.Errorf("%d left", len(left))
			}
			return nil
		})
	}()
	old := map[string]string{} // old pod name → its address
	for _, p := range e.waitPods(t, ns, "app=rolling", 3, 120*time.Second) {
		old[p.Name] = p.Status.PodIP
	}
	ip := e.clusterIP(t, "rolling")
	client := e.pods(t, ns, "app=echo")[0]
	var node *k8s.Node
	for _, n := range e.c.Nodes {
		if n.Name == client.Spec.NodeName {
			node = n
		}
	}
	listed := func() map[string]bool {
		p, _ := e.servicePort(t, node, "rolling", "TCP")
		m := map[string]bool{}
		if p != nil {
			for _, ep := range p.Endpoints {
				h, _, _ := net.SplitHostPort(ep)
				m[h] = true
			}
		}
		return m
	}
	k8s.WaitFor(t, node.Name+" lists the 3 endpoints of Service rolling", 60*time.Second, func() error {
		if m := listed(); len(m) != 3 {
			return fmt.Errorf("%v", m)
		}
		return nil
	})

	type batch struct {
		start time.Time
		res   []probeResult
		err   error
	}
	var mu sync.Mutex
	var batches []batch
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		targets := make([]string, 10)
		for i := range targets {
			targets[i] = "tcp:" + ip + ":80"
		}
		for {
			select {
			case <-stop:
				return
			default:
			}
			b := batch{start: time.Now()}
			out, err := e.exec(client.Name, append([]string{"/testbin", "probe"}, targets...)...)
			b.err, b.res = err, parseProbe(out)
			mu.Lock()
			batches = append(batches, b)
			mu.Unlock()
		}
	}()
	defer func() {
		select {
		case <-stop:
		default:
			close(stop)
		}
		<-done
	}()

	e.c.MustKubectl(t, "rollout", "restart", "-n", ns, "deployment/rolling")
	removed := map[string]time.Time{} // old address → when the node stopped listing it
	k8s.WaitFor(t, node.Name+" lists none of the old pods of Service rolling", 180*time.Second, func() error {
		m := listed()
		now := time.Now()
		for _, a := range old {
			if _, seen := removed[a]; !seen && !m[a] {
				removed[a] = now
			}
		}
		if len(removed) < len(old) {
			return fmt.Errorf("%d of %d old endpoints still listed: %v", len(old)-len(removed), len(old), m)
		}
		return nil
	})
	e.c.MustKubectl(t, "rollout", "status", "-n", ns, "deployment/rolling", "--timeout=180s")
	time.Sleep(2 * time.Second) // a few more batches after the last removal
	close(stop)
	<-done

	total, toOld := 0, 0
	for _, b := range batches {
		if b.err != nil && len(b.res) == 0 {
			t.Errorf("probe batch at %s from %s: %v", b.start.Format("15:04:05.000"), client.Name, b.err)
			continue
		}
		for _, r := range b.res {
			total++
			if !r.ok {
				t.Errorf("connection at %s from %s to Service rolling failed during the rolling update: %s", b.start.Format("15:04:05.000"), client.Name, r.reply)
				continue
			}
			name := replyName(r.reply)
			if a, isOld := old[name]; isOld {
				toOld++
				if at, ok := removed[a]; ok && b.start.After(at) {
					t.Errorf("connection started %s after %s's removal was realized on %s reached it: %q",
						b.start.Sub(at).Round(time.Millisecond), name, node.Name, r.reply)
				}
			}
		}
	}
	if total < 30 {
		t.Errorf("only %d connections during the rolling update, want a loop of them", total)
	}
	t.Logf("%d connections during the rolling update, %d answered by old pods before their removal was realized", total, toOld)
}

// metricValue returns the value of the unlabelled sample name in a /metrics text, -1 if
// absent.
func metricValue(text, name string) float64 {
	for _, l := range strings.Split(text, "\n") {
		if v, ok := strings.CutPrefix(l, name+" "); ok {
			f, err := strconv.ParseFloat(strings.TrimSpace(v), 64)
			if err == nil {
				return f
			}
		}
	}
	return -1
}

// nodeMetrics returns the node's ofsdn-node /metrics text (its metricsAddress, default
// 127.0.0.1:9469, in the node's network namespace: the DaemonSet uses the host network).
func (e *env) nodeMetrics(t *testing.T, n *k8s.Node) string {
	t.Helper()
	hc := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{DialContext: k8s.NetnsDialer(n.NetnsPath())}}
	resp, err := hc.Get("http://127.0.0.1:9469/metrics")
	if err != nil {
		t.Fatalf("%s metrics: %v", n.Name, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// setServiceProxy rewrites ofsdn-node's ConfigMap with serviceProxy set to mode, rolls the
// DaemonSet and waits until it is rolled out and every node Ready; it returns the function
// that puts the original config back the same way.
func (e *env) setServiceProxy(t *testing.T, mode string) func() {
	t.Helper()
	cms := e.c.CP.Client.CoreV1().ConfigMaps(sysNS)
	cm, err := cms.Get(e.ctx, "ofsdn-config", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	orig := cm.Data["config.yaml"]
	roll := func(conf string) {
		t.Helper()
		cm, err := cms.Get(e.ctx, "ofsdn-config", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		cm.Data["config.yaml"] = conf
		if _, err := cms.Update(e.ctx, cm, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
		e.c.MustKubectl(t, "rollout", "restart", "-n", sysNS, "daemonset/"+dsName)
		e.c.MustKubectl(t, "rollout", "status", "-n", sysNS, "daemonset/"+dsName, "--timeout=180s")
	}
	roll(strings.TrimRight(orig, "\n") + "\nserviceProxy: " + mode + "\n")
	return func() { roll(orig) }
}

// clusterIPs returns Service svc's spec.clusterIPs (the primary family first).
func (e *env) clusterIPs(t *testing.T, svc string) []string {
	t.Helper()
	s, err := e.c.CP.Client.CoreV1().Services(ns).Get(e.ctx, svc, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return s.Spec.ClusterIPs
}

// probeApart is probe with one `testbin probe` per target, all at once: refusals wait out
// the probe's timeouts (3 s) side by side. A probe that could not run is an error of t
// and comes back as an answer (ok), so that no refusal check passes on it.
func (e *env) probeApart(t *testing.T, pod string, targets ...string) []probeResult {
	t.Helper()
	res := make([]probeResult, len(targets))
	var wg sync.WaitGroup
	for i, target := range targets {
		wg.Add(1)
		go func() {
			defer wg.Done()
			out, err := e.exec(pod, "/testbin", "probe", target)
			r := parseProbe(out)
			if err != nil || len(r) != 1 {
				t.Errorf("probe from %s to %s: %v\n%s", pod, target, err, out)
				res[i] = probeResult{target: target, reply: "probe did not run", ok: true}
				return
			}
			res[i] = r[0]
		}()
	}
	wg.Wait()
	return res
}

// servicePortAt is servicePort for the Service port whose frontend is at ip (one family's
// ClusterIP of a dual-stack Service).
func (e *env) servicePortAt(t *testing.T, n *k8s.Node, name, proto, ip string) (*ctl.ServicePort, string) {
	t.Helper()
	p, out := e.servicePorts(t, n, name, proto)
	for i := range p {
		if host, _, _ := net.SplitHostPort(p[i].Frontend); sameIP(host, ip) {
			return &p[i], out
		}
	}
	return nil, out
}

// servicePort asks the ofsdn-node pod on n for `ofsdnctl -o json services` and returns the
// Service port of Service name (namespace default) with protocol proto, nil if not listed,
// and the output.
func (e *env) servicePort(t *testing.T, n *k8s.Node, name, proto string) (*ctl.ServicePort, string) {
	t.Helper()
	p, out := e.servicePorts(t, n, name, proto)
	if len(p) == 0 {
		return nil, out
	}
	return &p[0], out
}

// servicePorts is servicePort's every match (one per family of a dual-stack Service).
func (e *env) servicePorts(t *testing.T, n *k8s.Node, name, proto string) ([]ctl.ServicePort, string) {
	t.Helper()
	var daemon string
	for _, p := range e.pods(t, sysNS, "app=ofsdn-node") {
		if p.Spec.NodeName == n.Name && p.DeletionTimestamp == nil && podReady(&p) {
			daemon = p.Name
		}
	}
	out, err := e.c.Kubectl("exec", "-n", sysNS, daemon, "--", "/usr/local/bin/ofsdnctl", "-o", "json", "services")
	if err != nil {
		return nil, fmt.Sprintf("ofsdnctl services on %s (%s): %v\n%s", n.Name, daemon, err, out)
	}
	var rep ctl.ServiceReport
	if err := json.Unmarshal([]byte(out), &rep); err != nil {
		t.Fatalf("ofsdnctl -o json services on %s: %v\n%s", n.Name, err, out)
	}
	var found []ctl.ServicePort
	for _, p := range rep.Ports {
		if p.Namespace == ns && p.Name == name && p.Protocol == proto {
			found = append(found, p)
		}
	}
	return found, out
}
