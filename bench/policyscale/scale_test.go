//go:build policyscale

// Package policyscale measures NetworkPolicy at scale on one node: 1,000 policies over
// 10,000 Pods in a real kube-apiserver (API objects only, except 100 of them wired on the
// node through the plugin), with the real ofsdn-node on a sandbox OVS. It reports the flows
// installed, the time to realize the policies from none, a daemon restart (everything in
// its first bundle), one new policy and one label change, the daemon's RSS, and, for
// every rule, that its flows are M pods + N peers + K ports + 1; then, in a namespace of
// its own with 8 more local pods, 27 rules of every M in {1,4,8}, N in {1,10,100} and K
// in {1,3,10}, each checked to have exactly M+N+K+1 flows. Times are reported, never
// asserted; flow counts (and the restart's flows equal to those before it) are.
//
// Run it with `make bench-policy` (3 minutes on 2 busy cores, most of it filling the API); it is behind the build tag
// policyscale so `go test ./...` does not build it. Results: bench/RESULTS.md.
package policyscale

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/containernetworking/cni/libcni"
	current "github.com/containernetworking/cni/pkg/types/100"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	benchk8s "github.com/ofsdn/ofsdn/bench/k8s"
	"github.com/ofsdn/ofsdn/ctl"
	"github.com/ofsdn/ofsdn/test/harness"
	"github.com/ofsdn/ofsdn/test/kapi"

	"github.com/ofsdn/ofsdn/test/testenv"
)

const (
	namespaces   = 100
	podsPerNS    = 100 // 10,000 pods
	policiesPerN = 10  // 1,000 policies
	localPods    = 100 // one per namespace, wired on the node
	nodeName     = "scale-node"
	podSubnet    = "10.250.0.0/24"
)

// TestMain removes the binaries the test built once it is done.
func TestMain(m *testing.M) {
	testenv.PrivilegedMain(m)
	code := m.Run()
	harness.RemoveBinaries()
	os.Exit(code)
}

func podName(i int) string { return fmt.Sprintf("p-%03d", i) }
func nsName(i int) string  { return fmt.Sprintf("ns-%03d", i) }

// remoteIP is the address an API-only pod has (another node's, never wired here).
func remoteIP(ns, i int) string { return fmt.Sprintf("10.251.%d.%d", ns, 10+i) }

// policy returns policy k of namespace ns: pods app=a<k%10> take TCP/80, TCP/8000-8099 and
// the named port "http" from pods role=r<k%5> of their namespace and from pods app=a<k%10>
// of namespaces team=t<k%7>.
func policy(ns, k int) *networkingv1.NetworkPolicy {
	tcp := corev1.ProtocolTCP
	p80, p8000, named := intstr.FromInt32(80), intstr.FromInt32(8000), intstr.FromString("http")
	end := int32(8099)
	return &networkingv1.NetworkPolicy{
		ObjectMeta: metav1.ObjectMeta{Namespace: nsName(ns), Name: fmt.Sprintf("np-%02d", k)},
		Spec: networkingv1.NetworkPolicySpec{
			PodSelector: metav1.LabelSelector{MatchLabels: map[string]string{"app": fmt.Sprintf("a%d", k%10)}},
			Ingress: []networkingv1.NetworkPolicyIngressRule{{
				From: []networkingv1.NetworkPolicyPeer{
					{PodSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"role": fmt.Sprintf("r%d", k%5)}}},
					{NamespaceSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"team": fmt.Sprintf("t%d", k%7)}},
						PodSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": fmt.Sprintf("a%d", k%10)}}},
				},
				Ports: []networkingv1.NetworkPolicyPort{{Protocol: &tcp, Port: &p80}, {Protocol: &tcp, Port: &p8000, EndPort: &end}, {Port: &named}},
			}},
		},
	}
}

// parallel runs f(0..n-1) on 16 workers and fails on the first error.
func parallel(t *testing.T, n int, f func(i int) error) {
	t.Helper()
	if err := benchk8s.Parallel(n, 16, f); err != nil {
		t.Fatal(err)
	}
}

type scaleNode struct {
	*harness.Node
	api *kapi.API
	kc  string
	ctl *ctl.Client
}

func (n *scaleNode) start(t *testing.T) time.Duration {
	t.Helper()
	start := time.Now()
	n.StartDaemon(filepath.Join(harness.BuildBinaries(t), "ofsdn-node"), 5*time.Minute,
		"--topology", "kubernetes", "--kubeconfig", n.kc, "--node-name", nodeName, "--cluster-cidr", "10.250.0.0/16",
		"--mtu", "1450", "--start-timeout", "4m", "--add-timeout", "60s", "--flow-audit-interval", "0")
	return time.Since(start)
}

// report returns the daemon's policy report.
func (n *scaleNode) report(t *testing.T) ctl.PolicyReport {
	t.Helper()
	r, err := n.ctl.Policies(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// waitVersion polls (every 20 ms) until kind's realized version reaches rv; it returns
// the time since since. It polls the light status (ctl PolicyStatus): the full report
// (Policies) formats every rule's flows and dumps the switch's counters, about a second
// per call at this scale, which would both quantize the times and slow the daemon.
func (n *scaleNode) waitVersion(t *testing.T, kind, rv string, since time.Time) time.Duration {
	t.Helper()
	want, _ := strconv.ParseUint(rv, 10, 64)
	deadline := time.Now().Add(10 * time.Minute)
	for time.Now().Before(deadline) {
		if r, err := n.ctl.PolicyStatus(context.Background()); err == nil && r.Versions[kind] >= want && !r.Dirty {
			return time.Since(since)
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Fatalf("%s %s not realized within 10 minutes", kind, rv)
	return 0
}

// wire ADDs the API pod ns/name on the node through the plugin (container id) and writes
// its IP into the pod's status, as the kubelet would.
func (n *scaleNode) wire(t *testing.T, ns, name, id string) error {
	ctx := context.Background()
	netns := harness.NewNetns(t, "ofsdn-scale-pod")
	rt := &libcni.RuntimeConf{ContainerID: id, NetNS: netns, IfName: "eth0",
		Args: [][2]string{{"K8S_POD_NAMESPACE", ns}, {"K8S_POD_NAME", name}}}
	res, err := n.CNI.AddNetworkList(ctx, n.Netconf, rt)
	if err != nil {
		return fmt.Errorf("ADD %s/%s: %w", ns, name, err)
	}
	r, err := current.NewResultFromResult(res)
	if err != nil {
		return err
	}
	o, err := n.api.Admin.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return err
	}
	o.Status.Phase = corev1.PodRunning
	o.Status.PodIPs = []corev1.PodIP{{IP: r.IPs[0].Address.IP.String()}}
	_, err = n.api.Admin.CoreV1().Pods(ns).UpdateStatus(ctx, o, metav1.UpdateOptions{})
	return err
}

// shapePolicy selects the first m of the shape namespace's local pods and lets n /32
// ipBlock peers reach them on k TCP ports: one rule of M=m, N=n, K=k.
func shapePolicy(m, n, k int) *networkingv1.NetworkPolicy {
	var idx []string
	for i := 0; i < m; i++ {
		idx = append(idx, strconv.Itoa(i))
	}
	var peers []networkingv1.NetworkPolicyPeer
	for i := 0; i < n; i++ {
		peers = append(peers, networkingv1.NetworkPolicyPeer{IPBlock: &networkingv1.IPBlock{CIDR: fmt.Sprintf("192.168.%d.%d/32", i/250, 1+i%250)}})
	}
	tcp := corev1.ProtocolTCP
	var ports []networkingv1.NetworkPolicyPort
	for i := 0; i < k; i++ {
		p := intstr.FromInt32(int32(9000 + i))
		ports = append(ports, networkingv1.NetworkPolicyPort{Protocol: &tcp, Port: &p})
	}
	return &networkingv1.NetworkPolicy{
		ObjectMeta: metav1.ObjectMeta{Namespace: "shape", Name: fmt.Sprintf("m%d-n%d-k%d", m, n, k)},
		Spec: networkingv1.NetworkPolicySpec{
			PodSelector: metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{{Key: "i", Operator: metav1.LabelSelectorOpIn, Values: idx}}},
			Ingress:     []networkingv1.NetworkPolicyIngressRule{{From: peers, Ports: ports}},
		},
	}
}

func rssMiB(t *testing.T, pid int) float64 {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range strings.Split(string(b), "\n") {
		if strings.HasPrefix(l, "VmRSS:") {
			kb, _ := strconv.ParseFloat(strings.Fields(l)[1], 64)
			return kb / 1024
		}
	}
	return 0
}

func countFlows(t *testing.T, n *scaleNode) (total int, byStage map[string]int) {
	stages, err := n.ctl.Flows(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	byStage = map[string]int{}
	for _, s := range stages {
		byStage[s.Name] = len(s.Flows)
		total += len(s.Flows)
	}
	return total, byStage
}

func TestPolicyScale(t *testing.T) {
	ctx := context.Background()
	n := &scaleNode{Node: harness.NewNode(t, podSubnet, "ofsdn-scale")}
	n.Name = "scale ofsdn-node"
	// An underlay address for the Node's InternalIP (no dummy module here: a veth pair).
	n.OVS.Exec(t, "ip", "link", "add", "ul0", "type", "veth", "peer", "name", "ul1")
	n.OVS.Exec(t, "ip", "addr", "add", "172.31.0.1/24", "dev", "ul0")
	n.OVS.Exec(t, "ip", "link", "set", "ul0", "up")
	n.OVS.Exec(t, "ip", "link", "set", "ul1", "up")
	// The API server on the underlay address: kube-apiserver refuses to advertise a
	// loopback one.
	n.api = kapi.Start(t, n.OVS.NetnsPath(), "172.31.0.1", "../../deploy/ofsdn.yaml")
	n.kc = n.api.Kubeconfig(t)
	n.ctl = ctl.NewClient(filepath.Join(filepath.Dir(n.Socket), "ctl.sock"), time.Minute)
	admin := n.api.Admin

	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: nodeName}, Spec: corev1.NodeSpec{PodCIDR: podSubnet, PodCIDRs: []string{podSubnet}}}
	created, err := admin.CoreV1().Nodes().Create(ctx, node, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	created.Status.Addresses = []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: "172.31.0.1"}}
	if _, err := admin.CoreV1().Nodes().UpdateStatus(ctx, created, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}

	start := time.Now()
	parallel(t, namespaces, func(i int) error {
		return n.api.CreateNamespace(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: nsName(i),
			Labels: map[string]string{"team": fmt.Sprintf("t%d", i%7)}}})
	})
	parallel(t, namespaces*podsPerNS, func(i int) error {
		ns, k := i/podsPerNS, i%podsPerNS
		pod := &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Namespace: nsName(ns), Name: podName(k),
				Labels: map[string]string{"app": fmt.Sprintf("a%d", k%10), "role": fmt.Sprintf("r%d", k%5)}},
			Spec: corev1.PodSpec{NodeName: "elsewhere", Containers: []corev1.Container{{Name: "c", Image: "registry.invalid/none",
				Ports: []corev1.ContainerPort{{Name: "http", ContainerPort: 8080 + int32(k%3)}}}}},
		}
		if k == 0 {
			pod.Spec.NodeName = nodeName // wired here below
		}
		o, err := admin.CoreV1().Pods(pod.Namespace).Create(ctx, pod, metav1.CreateOptions{})
		if err != nil || k == 0 {
			return err
		}
		o.Status.Phase = corev1.PodRunning
		o.Status.PodIPs = []corev1.PodIP{{IP: remoteIP(ns, k)}}
		_, err = admin.CoreV1().Pods(pod.Namespace).UpdateStatus(ctx, o, metav1.UpdateOptions{})
		return err
	})
	t.Logf("API filled: %d namespaces, %d pods in %s", namespaces, namespaces*podsPerNS, time.Since(start).Round(time.Second))

	t.Logf("daemon ready (informers synced over %d pods) in %s", namespaces*podsPerNS, n.start(t).Round(time.Millisecond))
	pid := n.Daemon.Process.Pid

	// 100 local pods, one per namespace (p-000), wired through the plugin.
	start = time.Now()
	parallel(t, localPods, func(i int) error { return n.wire(t, nsName(i), podName(0), fmt.Sprintf("scale-%03d", i)) })
	t.Logf("%d local pods wired in %s", localPods, time.Since(start).Round(time.Millisecond))

	// 1,000 policies, created as fast as the API takes them: time until all are realized.
	start = time.Now()
	var last string
	var lastMu sync.Mutex
	parallel(t, namespaces*policiesPerN, func(i int) error {
		o, err := admin.NetworkingV1().NetworkPolicies(nsName(i/policiesPerN)).Create(ctx, policy(i/policiesPerN, i%policiesPerN), metav1.CreateOptions{})
		if err != nil {
			return err
		}
		lastMu.Lock()
		if a, _ := strconv.ParseUint(o.ResourceVersion, 10, 64); a > func() uint64 { b, _ := strconv.ParseUint(last, 10, 64); return b }() {
			last = o.ResourceVersion
		}
		lastMu.Unlock()
		return nil
	})
	created1000 := time.Since(start)
	realized1000 := n.waitVersion(t, "networkpolicies", last, start)
	rep := n.report(t)
	total, byStage := countFlows(t, n)
	rss := rssMiB(t, pid)
	t.Logf("1000 policies: created in %s, all realized %s after the first create; %d rules on this node, rule flows ingress %d egress %d; %d flows on the switch %v; daemon RSS %.1f MiB",
		created1000.Round(time.Millisecond), realized1000.Round(time.Millisecond), rep.Rules, rep.RuleFlows["ingress"], rep.RuleFlows["egress"], total, byStage, rss)

	// One new policy.
	start = time.Now()
	o, err := admin.NetworkingV1().NetworkPolicies(nsName(5)).Create(ctx, policy(5, 10), metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	onePolicy := n.waitVersion(t, "networkpolicies", o.ResourceVersion, start)

	// One label change: a pod that becomes a peer of rules across many namespaces (its
	// namespace's team matches 1/7 of the policies' namespace selectors).
	start = time.Now()
	p, err := admin.CoreV1().Pods(nsName(7)).Get(ctx, podName(13), metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	p.Labels["app"] = "a0"
	po, err := admin.CoreV1().Pods(nsName(7)).Update(ctx, p, metav1.UpdateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	oneLabel := n.waitVersion(t, "pods", po.ResourceVersion, start)
	t.Logf("one new policy realized in %s; one pod label change realized in %s",
		onePolicy.Round(time.Microsecond), oneLabel.Round(time.Microsecond))

	// Flows per rule: M pods + N peers + K ports + 1 (conj_id).
	reportStart := time.Now()
	rep = n.report(t)
	reportTime := time.Since(reportStart)
	total1001, byStage1001 := countFlows(t, n)
	t.Logf("after them: %d rules, rule flows ingress %d egress %d; %d flows on the switch; RSS %.1f MiB; one full policy report (ofsdnctl policies) took %s",
		rep.Rules, rep.RuleFlows["ingress"], rep.RuleFlows["egress"], total1001, rssMiB(t, pid), reportTime.Round(time.Millisecond))
	type row struct {
		rule          string
		m, nn, k, tot int
	}
	var rows []row
	seen := map[uint32]bool{}
	for _, pp := range rep.PodPolicies {
		for _, r := range pp.Rules {
			if seen[r.ConjID] {
				continue
			}
			seen[r.ConjID] = true
			var x row
			x.rule, x.tot = r.Rule+" "+r.Group, len(r.Flows)
			for _, f := range r.Flows {
				switch {
				case strings.Contains(f.Flow, "conj_id="):
				case strings.Contains(f.Flow, "reg1="):
					x.m++
				case strings.Contains(f.Flow, "nw_src="):
					x.nn++
				default:
					x.k++
				}
			}
			rows = append(rows, x)
		}
	}
	sort.Slice(rows, func(i, j int) bool { return rows[i].nn > rows[j].nn })
	bad := 0
	for _, x := range rows {
		if x.tot != x.m+x.nn+x.k+1 {
			bad++
		}
	}
	if bad > 0 {
		t.Errorf("%d of %d rules do not have M+N+K+1 flows", bad, len(rows))
	}
	var sample []string
	for i, x := range rows {
		if i < 5 || i == len(rows)-1 {
			sample = append(sample, fmt.Sprintf("%s: M=%d N=%d K=%d flows=%d (product M*N*K=%d)", x.rule, x.m, x.nn, x.k, x.tot, x.m*x.nn*x.k))
		}
	}
	t.Logf("flows per rule (%d rules, all M+N+K+1):\n  %s", len(rows), strings.Join(sample, "\n  "))

	// Restart: the daemon realizes everything in its first bundle, so once it is ready
	// the switch holds exactly the flows it held before.
	n.StopDaemon()
	restartBegan := time.Now()
	restart := n.start(t)
	total2, byStage2 := countFlows(t, n)
	st2, err := n.ctl.PolicyStatus(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("daemon restart with 1001 policies, 10,000 pods, %d local pods: ready in %s, %d flows %v, %d rules; RSS %.1f MiB",
		localPods, restart.Round(time.Millisecond), total2, byStage2, st2.Rules, rssMiB(t, n.Daemon.Process.Pid))
	if total2 != total1001 || st2.Rules != rep.Rules {
		t.Errorf("after the restart the daemon was ready with %d flows and %d rules, before it %d flows and %d rules (by stage %v, before %v)",
			total2, st2.Rules, total1001, rep.Rules, byStage2, byStage1001)
		if b, err := os.ReadFile(n.LogPath); err == nil {
			lines := strings.Split(strings.TrimSpace(string(b)), "\n")
			t.Logf("daemon log, last 40 lines:\n%s", strings.Join(lines[max(0, len(lines)-40):], "\n"))
		}
		// How long until the switch catches up, if it does.
		for deadline := time.Now().Add(2 * time.Minute); time.Now().Before(deadline); time.Sleep(time.Second) {
			if tot, _ := countFlows(t, n); tot == total1001 {
				t.Logf("the switch had the %d flows %s after the restart began", tot, time.Since(restartBegan).Round(time.Millisecond))
				break
			}
		}
	}

	// Shape: in a namespace of its own with 8 local pods, one rule for each M in {1,4,8},
	// N in {1,10,100}, K in {1,3,10}: its flows are M+N+K+1, never M*N*K.
	const shapePods = 8
	if err := n.api.CreateNamespace(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "shape"}}); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < shapePods; i++ {
		pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "shape", Name: fmt.Sprintf("s-%d", i), Labels: map[string]string{"i": strconv.Itoa(i)}},
			Spec: corev1.PodSpec{NodeName: nodeName, Containers: []corev1.Container{{Name: "c", Image: "registry.invalid/none"}}}}
		if _, err := admin.CoreV1().Pods("shape").Create(ctx, pod, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	parallel(t, shapePods, func(i int) error { return n.wire(t, "shape", fmt.Sprintf("s-%d", i), fmt.Sprintf("shape-%d", i)) })
	type shape struct{ m, n, k int }
	var shapes []shape
	var shapeRV string
	for _, m := range []int{1, 4, 8} {
		for _, nn := range []int{1, 10, 100} {
			for _, k := range []int{1, 3, 10} {
				o, err := admin.NetworkingV1().NetworkPolicies("shape").Create(ctx, shapePolicy(m, nn, k), metav1.CreateOptions{})
				if err != nil {
					t.Fatal(err)
				}
				shapes = append(shapes, shape{m, nn, k})
				shapeRV = o.ResourceVersion
			}
		}
	}
	n.waitVersion(t, "networkpolicies", shapeRV, time.Now())
	flowsOf := map[string]int{}
	for _, pp := range n.report(t).PodPolicies {
		for _, r := range pp.Rules {
			if strings.HasPrefix(r.Rule, "shape/") {
				flowsOf[strings.Fields(strings.TrimPrefix(r.Rule, "shape/"))[0]] = len(r.Flows)
			}
		}
	}
	shapeTable := []string{"| M pods | N peers | K ports | flows | M+N+K+1 | M*N*K |", "|---:|---:|---:|---:|---:|---:|"}
	shapeOK := true
	for _, x := range shapes {
		got, want := flowsOf[fmt.Sprintf("m%d-n%d-k%d", x.m, x.n, x.k)], x.m+x.n+x.k+1
		if got != want {
			shapeOK = false
			t.Errorf("rule M=%d N=%d K=%d: %d flows, want M+N+K+1 = %d", x.m, x.n, x.k, got, want)
		}
		shapeTable = append(shapeTable, fmt.Sprintf("| %d | %d | %d | %d | %d | %d |", x.m, x.n, x.k, got, want, x.m*x.n*x.k))
	}
	t.Logf("flows per rule by shape (%d rules):\n%s", len(shapes), strings.Join(shapeTable, "\n"))

	out := map[string]any{
		"policies": namespaces*policiesPerN + 1, "pods": namespaces * podsPerNS, "localPods": localPods,
		"rules": rep.Rules, "ruleFlowsIngress": rep.RuleFlows["ingress"], "ruleFlowsEgress": rep.RuleFlows["egress"],
		"switchFlows": total, "switchFlows1001": total1001, "restartSwitchFlows": total2, "reportSeconds": reportTime.Seconds(),
		"realize1000Seconds": realized1000.Seconds(), "create1000Seconds": created1000.Seconds(),
		"onePolicySeconds": onePolicy.Seconds(), "oneLabelSeconds": oneLabel.Seconds(), "rssMiB": rss,
		"restartReadySeconds": restart.Seconds(), "flowsPerRuleOK": bad == 0, "shapeOK": shapeOK, "rulesChecked": len(rows),
	}
	b, _ := json.MarshalIndent(out, "", "  ")
	if f := os.Getenv("POLICY_SCALE_OUT"); f != "" {
		_ = os.WriteFile(f, b, 0o644)
	}
	t.Logf("results:\n%s", b)
}
