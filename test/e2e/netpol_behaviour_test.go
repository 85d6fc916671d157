package e2e

// NetworkPolicy behaviour beyond the upstream truth tables, on the same two-node cluster:
// statefulness, incremental flow changes, no unprotected first packet, ADD of a pod the
// API does not know, and the denied connections in ofsdnctl and the metrics.

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/containernetworking/cni/pkg/types"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/ofsdn/ofsdn/controller"
	"github.com/ofsdn/ofsdn/metrics"
)

// createPolicy creates np and waits until both nodes realized it; it returns the object.
func (c *npCluster) createPolicy(np *networkingv1.NetworkPolicy) *networkingv1.NetworkPolicy {
	c.t.Helper()
	o, err := c.api.Admin.NetworkingV1().NetworkPolicies(np.Namespace).Create(context.Background(), np, metav1.CreateOptions{})
	if err != nil {
		c.t.Fatalf("create policy %s/%s: %v", np.Namespace, np.Name, err)
	}
	c.waitRealized("networkpolicies", o.ResourceVersion)
	return o
}

// updatePolicySpec replaces np's spec and waits until both nodes realized it.
func (c *npCluster) updatePolicySpec(ns, name string, spec networkingv1.NetworkPolicySpec) {
	c.t.Helper()
	ctx := context.Background()
	cur, err := c.api.Admin.NetworkingV1().NetworkPolicies(ns).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		c.t.Fatal(err)
	}
	cur.Spec = spec
	o, err := c.api.Admin.NetworkingV1().NetworkPolicies(ns).Update(ctx, cur, metav1.UpdateOptions{})
	if err != nil {
		c.t.Fatal(err)
	}
	c.waitRealized("networkpolicies", o.ResourceVersion)
}

// setPodLabel sets (v != "") or removes a label of pod p and waits until realized.
func (c *npCluster) setPodLabel(p, k, v string) {
	c.t.Helper()
	ns, name, _ := strings.Cut(p, "/")
	ctx := context.Background()
	pod, err := c.api.Admin.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		c.t.Fatal(err)
	}
	if v == "" {
		delete(pod.Labels, k)
	} else {
		pod.Labels[k] = v
	}
	o, err := c.api.Admin.CoreV1().Pods(ns).Update(ctx, pod, metav1.UpdateOptions{})
	if err != nil {
		c.t.Fatal(err)
	}
	c.waitRealized("pods", o.ResourceVersion)
}

// echoServer accepts TCP connections on port in the pod's netns and echoes lines back.
func echoServer(t *testing.T, s *npServer, port int) {
	t.Helper()
	var l net.Listener
	if err := inNS(s.netns, func() (err error) {
		l, err = net.Listen("tcp4", fmt.Sprintf(":%d", port))
		return err
	}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = l.Close() })
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				r := bufio.NewReader(c)
				for {
					line, err := r.ReadString('\n')
					if err != nil {
						return
					}
					if _, err := io.WriteString(c, line); err != nil {
						return
					}
				}
			}()
		}
	}()
}

// echoConn is a long-lived TCP connection from a pod.
type echoConn struct{ c net.Conn }

func dialEcho(from, to *npServer, port int) (*echoConn, error) {
	var c net.Conn
	err := inNS(from.netns, func() (err error) {
		c, err = net.DialTimeout("tcp4", net.JoinHostPort(to.ip.String(), strconv.Itoa(port)), 3*time.Second)
		return err
	})
	if err != nil {
		return nil, err
	}
	return &echoConn{c: c}, nil
}

// roundTrip sends a line and waits (bounded) for it to come back.
func (e *echoConn) roundTrip(msg string) error {
	_ = e.c.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := io.WriteString(e.c, msg+"\n"); err != nil {
		return err
	}
	got, err := bufio.NewReader(e.c).ReadString('\n')
	if err != nil {
		return err
	}
	if got != msg+"\n" {
		return fmt.Errorf("echo %q, want %q", got, msg)
	}
	return nil
}

// testStateful: replies of allowed connections pass whatever the other side's policy,
// and an established connection survives an update that still allows it while a new
// connection the update forbids is refused.
func testStateful(t *testing.T, c *npCluster) {
	created := map[string]*networkingv1.NetworkPolicy{}
	defer c.reset(created, nil)

	// B = x/b ingress deny-all; A = y/a (no policy: egress allowed). A→B refused, B→A
	// connects (its SYN-ACK, a reply to B, passes B's ingress isolation).
	o := c.createPolicy(ingress(npPolicy("x", "b-deny-ingress", map[string]string{"pod": "b"})))
	created["x/b-deny-ingress"] = o
	a, b := c.servers["y/a"], c.servers["x/b"]
	for _, proto := range []corev1.Protocol{corev1.ProtocolTCP, corev1.ProtocolUDP} {
		if ok, err := probe(a, b, proto, 80, 1500*time.Millisecond); err != nil || ok {
			t.Errorf("A (y/a) -> B (x/b) %s/80 with B ingress deny-all: allowed=%v err=%v, want refused", proto, ok, err)
		}
		ok, err := probe(b, a, proto, 80, 3*time.Second)
		if err != nil || !ok {
			t.Errorf("B (x/b) -> A (y/a) %s/80: allowed=%v err=%v, want the connection and its replies to pass", proto, ok, err)
		}
	}

	// An established connection from y/c to x/c:8080, allowed by namespace y.
	echoServer(t, c.servers["x/c"], 8080)
	spec := func(nss ...string) networkingv1.NetworkPolicySpec {
		sel := &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{{Key: nsName, Operator: metav1.LabelSelectorOpIn, Values: nss}}}
		return networkingv1.NetworkPolicySpec{
			PodSelector: metav1.LabelSelector{MatchLabels: map[string]string{"pod": "c"}},
			PolicyTypes: []networkingv1.PolicyType{networkingv1.PolicyTypeIngress},
			Ingress:     []networkingv1.NetworkPolicyIngressRule{withPorts(from(nsPeer(sel)), npPort(corev1.ProtocolTCP, 8080))},
		}
	}
	np := &networkingv1.NetworkPolicy{ObjectMeta: metav1.ObjectMeta{Namespace: "x", Name: "c-from-y"}, Spec: spec("y")}
	created["x/c-from-y"] = c.createPolicy(np)
	conn, err := dialEcho(c.servers["y/c"], c.servers["x/c"], 8080)
	if err != nil {
		t.Fatalf("y/c -> x/c:8080 allowed by the policy: %v", err)
	}
	defer conn.c.Close()
	if err := conn.roundTrip("before"); err != nil {
		t.Fatalf("established connection y/c -> x/c:8080: %v", err)
	}
	// Update that still allows y (and adds z): the connection survives.
	c.updatePolicySpec("x", "c-from-y", spec("y", "z"))
	if err := conn.roundTrip("after an update that still allows it"); err != nil {
		t.Errorf("established connection broken by an update that still allows it: %v", err)
	}
	if e, err := dialEcho(c.servers["z/a"], c.servers["x/c"], 8080); err != nil {
		t.Errorf("z/a -> x/c:8080 after the update allowed z: %v", err)
	} else {
		e.c.Close()
	}
	// Update that forbids y: a new connection from y is refused.
	c.updatePolicySpec("x", "c-from-y", spec("z"))
	if e, err := dialEcho(c.servers["y/a"], c.servers["x/c"], 8080); err == nil {
		e.c.Close()
		t.Errorf("y/a -> x/c:8080: a new connection the update forbids was accepted")
	}
}

// statLine is one dumped flow with its counters.
type statLine struct {
	text     string // without statistics
	packets  uint64
	duration float64
}

var (
	statPkts = regexp.MustCompile(`n_packets=(\d+)`)
	statDur  = regexp.MustCompile(`duration=([0-9.]+)s`)
	statsRe  = regexp.MustCompile(`(duration|n_packets|n_bytes|idle_age|hard_age|idle_time)=[^,]*, ?`)
)

// policyStats dumps a node's flows of every table with their counters, by text.
func policyStats(t *testing.T, cn *clusterNode) map[string]statLine {
	t.Helper()
	out := map[string]statLine{}
	for _, l := range strings.Split(cn.OVS.Ofctl(t, "dump-flows", "--names", cn.mgmt()), "\n") {
		l = strings.TrimSpace(l)
		if l == "" || strings.HasPrefix(l, "OFPST_FLOW") {
			continue
		}
		s := statLine{text: statsRe.ReplaceAllString(l, "")}
		if m := statPkts.FindStringSubmatch(l); m != nil {
			s.packets, _ = strconv.ParseUint(m[1], 10, 64)
		}
		if m := statDur.FindStringSubmatch(l); m != nil {
			s.duration, _ = strconv.ParseFloat(m[1], 64)
		}
		out[s.text] = s
	}
	return out
}

// flowDiff returns the flows only in after (added) and only in before (removed), sorted.
func flowDiff(before, after map[string]statLine) (added, removed []string) {
	for k := range after {
		if _, ok := before[k]; !ok {
			added = append(added, k)
		}
	}
	for k := range before {
		if _, ok := after[k]; !ok {
			removed = append(removed, k)
		}
	}
	sort.Strings(added)
	sort.Strings(removed)
	return added, removed
}

// testIncremental: a label change on one pod changes exactly the flows of the rule it
// enters or leaves, on the node that enforces it, and every other flow keeps its counters
// (it was not re-installed).
func testIncremental(t *testing.T, c *npCluster) {
	created := map[string]*networkingv1.NetworkPolicy{}
	defer c.reset(created, map[string][]string{"pod:x/b": {"role"}, "pod:x/c": {"role"}})
	// P1: x/a takes ingress from pods role=client of x (x/c is one: the rule has flows).
	// P2: every pod of y takes z.
	c.setPodLabel("x/c", "role", "client")
	created["x/p1"] = c.createPolicy(ingress(npPolicy("x", "p1", map[string]string{"pod": "a"}), from(podPeer(labels("role", "client")))))
	created["y/p2"] = c.createPolicy(ingress(npPolicy("y", "p2", nil), from(nsPeer(labels(nsName, "z")))))
	// Traffic through P2's rules and deny flows, so counters are not zero.
	for _, dst := range []string{"y/a", "y/b", "y/c"} {
		if ok, _ := probe(c.servers["z/a"], c.servers[dst], corev1.ProtocolTCP, 80, 3*time.Second); !ok {
			t.Fatalf("z/a -> %s allowed by P2 failed", dst)
		}
		if ok, _ := probe(c.servers["x/b"], c.servers[dst], corev1.ProtocolTCP, 80, time.Second); ok {
			t.Fatalf("x/c -> %s should be denied by P2", dst)
		}
	}
	before := map[string]map[string]statLine{}
	for name, cn := range c.nodes {
		before[name] = policyStats(t, cn)
	}
	c.setPodLabel("x/b", "role", "client")
	xbIP := c.ips["x/b"]
	xaNode := npNodeName("x/a")
	for name, cn := range c.nodes {
		after := policyStats(t, cn)
		added, removed := flowDiff(before[name], after)
		if name == xaNode {
			if len(added) != 1 || len(removed) != 0 || !strings.Contains(added[0], "ingress_rules") ||
				!strings.Contains(added[0], "nw_src="+xbIP+" ") || !strings.Contains(added[0], "conjunction(") {
				t.Errorf("%s (x/a's node): label role=client on x/b added %q and removed %q; want exactly one clause flow nw_src=%s of P1's conjunction",
					name, added, removed, xbIP)
			}
		} else if len(added)+len(removed) > 0 {
			t.Errorf("%s: label change on x/b changed flows of a node that enforces nothing for it: added %q removed %q", name, added, removed)
		}
		for k, b := range before[name] {
			a, ok := after[k]
			if !ok {
				continue
			}
			if a.packets < b.packets || a.duration+0.001 < b.duration {
				t.Errorf("%s: flow re-installed or counter reset by an unrelated label change: %s (packets %d -> %d, duration %.3f -> %.3f)",
					name, k, b.packets, a.packets, b.duration, a.duration)
			}
		}
	}
	// And it now reaches x/a.
	if ok, _ := probe(c.servers["x/b"], c.servers["x/a"], corev1.ProtocolTCP, 80, 3*time.Second); !ok {
		t.Errorf("x/b -> x/a after role=client: refused")
	}
	// The label goes: exactly that flow goes.
	mid := policyStats(t, c.nodes[xaNode])
	c.setPodLabel("x/b", "role", "")
	added, removed := flowDiff(mid, policyStats(t, c.nodes[xaNode]))
	if len(added) != 0 || len(removed) != 1 || !strings.Contains(removed[0], "nw_src="+xbIP+" ") {
		t.Errorf("removing role=client from x/b added %q and removed %q; want exactly the clause flow of x/b", added, removed)
	}
}

// testFirstProbe: a pod created while a deny-all policy selects it is never reachable,
// not even by probes sent the moment its ADD returns, from its own node and the other.
func testFirstProbe(t *testing.T, c *npCluster) {
	created := map[string]*networkingv1.NetworkPolicy{}
	defer c.reset(created, nil)
	created["z/guard"] = c.createPolicy(ingress(npPolicy("z", "guard", map[string]string{"guard": "on"})))
	ctx := context.Background()
	for _, node := range []string{"np-node-1", "np-node-2"} {
		name := "guarded-" + node[len(node)-1:]
		pod := &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Namespace: "z", Name: name, Labels: map[string]string{"guard": "on"}},
			Spec:       corev1.PodSpec{NodeName: node, Containers: []corev1.Container{{Name: "c", Image: "registry.invalid/none", Ports: npServePorts()}}},
		}
		if _, err := c.api.Admin.CoreV1().Pods("z").Create(ctx, pod, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		// The pod's servers listen before it has an address, as a container that starts
		// serving at once would.
		netnsPath := newNetns(t, "ofsdn-np-guard")
		srv := startServer(t, netnsPath, nil)
		cn := c.nodes[node]
		tp, err := cn.tryAddK8sPodIn(t, "z", name, netnsPath)
		if err != nil {
			t.Fatalf("ADD z/%s: %v", name, err)
		}
		srv.ip = tp.ip()
		// The moment ADD returns: TCP and UDP probes from every pod, all at once.
		var wg sync.WaitGroup
		var mu sync.Mutex
		var reached []string
		for _, p := range npPods() {
			for _, proto := range []corev1.Protocol{corev1.ProtocolTCP, corev1.ProtocolUDP} {
				wg.Add(1)
				go func(p string, proto corev1.Protocol) {
					defer wg.Done()
					if ok, _ := probe(c.servers[p], srv, proto, 80, 1500*time.Millisecond); ok {
						mu.Lock()
						reached = append(reached, p+" "+string(proto))
						mu.Unlock()
					}
				}(p, proto)
			}
		}
		wg.Wait()
		if len(reached) > 0 {
			t.Errorf("z/%s on %s, created under a deny-all policy, was reached right after ADD by %v", name, node, reached)
		}
		// It can still reach out (egress is not isolated).
		if ok, _ := probe(srv, c.servers["x/a"], corev1.ProtocolTCP, 80, 3*time.Second); !ok {
			t.Errorf("z/%s cannot reach x/a; only its ingress is isolated", name)
		}
		if err := cn.CNI.DelNetworkList(ctx, cn.Netconf, tp.rt); err != nil {
			t.Errorf("DEL z/%s: %v", name, err)
		}
		_ = c.api.Admin.CoreV1().Pods("z").Delete(ctx, name, metav1.DeleteOptions{})
	}
}

// tryAddK8sPodIn runs CNI ADD for pod ns/name in an existing netns.
func (cn *clusterNode) tryAddK8sPodIn(t *testing.T, ns, name, netnsPath string) (*testPod, error) {
	p := &testPod{name: ns + "-" + name, netns: netnsPath, containerID: fmt.Sprintf("np-%s-%s-%d", ns, name, time.Now().UnixNano())}
	return cn.addIn(p, ns, name)
}

// testUnknownPod: ADD of a pod the API does not know fails with CNI code 11 (try again
// later) once addTimeout passes, and leaves no lease, port or flow behind.
func testUnknownPod(t *testing.T, c *npCluster) {
	cn := c.nodes["np-node-1"]
	flowsBefore := len(cn.flowSet(t))
	portsBefore := cn.OVS.Vsctl(t, "list-ports", "br-int")
	leasesBefore := len(cn.Leases(t))
	tp, err := cn.tryAddK8sPod(t, "x", "no-such-pod")
	var te *types.Error
	if err == nil || !errors.As(err, &te) || te.Code != types.ErrTryAgainLater {
		t.Fatalf("ADD of a pod the API does not know: %v, want CNI error 11 (try again later)", err)
	}
	if !strings.Contains(te.Msg, "x/no-such-pod") && !strings.Contains(te.Details, "x/no-such-pod") {
		t.Errorf("error does not name the pod: %+v", te)
	}
	_ = tp
	if n := len(cn.flowSet(t)); n != flowsBefore {
		t.Errorf("%d flows after the failed ADD, %d before", n, flowsBefore)
	}
	if p := cn.OVS.Vsctl(t, "list-ports", "br-int"); p != portsBefore {
		t.Errorf("ports after the failed ADD:\n%s\nbefore:\n%s", p, portsBefore)
	}
	if n := len(cn.Leases(t)); n != leasesBefore {
		t.Errorf("%d IP leases after the failed ADD, %d before", n, leasesBefore)
	}
}

// testFailedSecondSandbox: z/a admits z/b only; an ADD of a second sandbox of z/a (a new
// container ID, z/a's first sandbox not DELeted) fails at the veth step, after its
// flows and its policy attach went out; then the runtime's DEL of it. z/b still reaches
// z/a and x/a still does not, and z/a's node has the flows it had before.
func testFailedSecondSandbox(t *testing.T, c *npCluster) {
	created := map[string]*networkingv1.NetworkPolicy{}
	defer c.reset(created, nil)
	created["z/second-sandbox"] = c.createPolicy(ingress(npPolicy("z", "second-sandbox", map[string]string{"pod": "a"}),
		networkingv1.NetworkPolicyIngressRule{From: []networkingv1.NetworkPolicyPeer{{
			PodSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"pod": "b"}}}}}))
	check := func(when string) {
		t.Helper()
		if ok, err := probe(c.servers["z/b"], c.servers["z/a"], corev1.ProtocolTCP, 80, 3*time.Second); !ok {
			t.Errorf("%s: z/b does not reach z/a, which admits it: %v", when, err)
		}
		if ok, _ := probe(c.servers["x/a"], c.servers["z/a"], corev1.ProtocolTCP, 80, 1500*time.Millisecond); ok {
			t.Errorf("%s: x/a reaches z/a, which admits z/b only", when)
		}
	}
	check("before")
	cn := c.nodes[npNodeName("z/a")]
	before := cn.flowSet(t)
	sameFlows := func(when string) {
		t.Helper()
		var missing, extra []string
		for end := time.Now().Add(10 * time.Second); ; time.Sleep(200 * time.Millisecond) {
			if missing, extra = diffLines(before, cn.flowSet(t)); len(missing)+len(extra) == 0 || time.Now().After(end) {
				break
			}
		}
		if len(missing)+len(extra) > 0 {
			t.Errorf("%s: flows of %s missing:\n%s\nextra:\n%s", when, cn.name, strings.Join(missing, "\n"), strings.Join(extra, "\n"))
		}
	}
	netnsPath := newNetns(t, "ofsdn-np-second")
	// The runtime's interface name is taken in the netns: the veth step fails.
	mustRun(t, "ip", "netns", "exec", filepath.Base(netnsPath), "ip", "link", "add", "eth0", "type", "veth", "peer", "name", "taken0")
	second := &testPod{name: "z-a-second", netns: netnsPath, containerID: fmt.Sprintf("np-z-a-second-%d", time.Now().UnixNano())}
	if _, err := cn.addIn(second, "z", "a"); err == nil || !strings.Contains(err.Error(), "veth") {
		t.Fatalf("ADD of a second sandbox of z/a into a netns that has eth0: %v, want the veth step's error", err)
	}
	sameFlows("after the failed ADD")
	check("after the failed ADD")
	if err := cn.delPod(second); err != nil {
		t.Errorf("the runtime's DEL of the failed ADD: %v", err)
	}
	sameFlows("after its DEL")
	check("after its DEL")
}

// denyLogLines returns the deny log lines in a node's log (JSON, one object a line).
func denyLogLines(t *testing.T, cn *clusterNode) []map[string]any {
	t.Helper()
	b, err := os.ReadFile(cn.LogPath)
	if err != nil {
		t.Fatal(err)
	}
	var out []map[string]any
	for _, l := range strings.Split(string(b), "\n") {
		var m map[string]any
		if json.Unmarshal([]byte(l), &m) == nil && m["msg"] == controller.DenyLogMessage {
			out = append(out, m)
		}
	}
	return out
}

// testDeniedShown: denied probes show in ofsdnctl policies, in the metrics and in the
// deny log; a burst of denied connections over the log's rate is logged up to the
// meter's rate and burst, the rest counted as dropped by the meter.
func testDeniedShown(t *testing.T, c *npCluster) {
	created := map[string]*networkingv1.NetworkPolicy{}
	defer c.reset(created, nil)
	created["y/deny"] = c.createPolicy(ingress(npPolicy("y", "deny", map[string]string{"pod": "a"})))
	target := "y/a"
	cn := c.nodes[npNodeName(target)]
	deniedBefore := func() uint64 {
		for _, pp := range cn.policies(t).PodPolicies {
			if pp.Namespace+"/"+pp.Name == target {
				return pp.Denied["ingress"]
			}
		}
		return 0
	}()
	logBefore := len(denyLogLines(t, cn))
	const probes = 5
	for i := 0; i < probes; i++ {
		if ok, _ := probe(c.servers["z/b"], c.servers[target], corev1.ProtocolUDP, 81, 300*time.Millisecond); ok {
			t.Fatal("a denied probe went through")
		}
	}
	// Each probe's first packet is a new connection denied by y/a's ingress isolation:
	// one log line each, naming both pods, the protocol, the port and the direction.
	src, dst := c.ips["z/b"], c.ips[target]
	waitUntil(t, "deny log lines of the probes", 10*time.Second, func() error {
		n := 0
		for _, m := range denyLogLines(t, cn)[logBefore:] {
			if m["direction"] == "ingress" && m["isolated_pod"] == target && m["src"] == "z/b" && m["src_ip"] == src &&
				m["dst"] == target && m["dst_ip"] == dst && m["protocol"] == "UDP" && m["port"] == float64(81) {
				n++
			}
		}
		if n < probes {
			return fmt.Errorf("%d matching lines, want at least %d", n, probes)
		}
		return nil
	})
	r := cn.policies(t)
	var found bool
	for _, pp := range r.PodPolicies {
		if pp.Namespace+"/"+pp.Name != target {
			continue
		}
		found = true
		if !pp.IngressIsolated || len(pp.IngressPolicies) != 1 || pp.IngressPolicies[0] != "deny" {
			t.Errorf("ofsdnctl policies for %s: %+v, want ingress-isolated by policy deny", target, pp)
		}
		// UDP probes resend within their timeout: at least one packet per probe.
		if pp.Denied["ingress"] < deniedBefore+probes {
			t.Errorf("ofsdnctl policies: %s denied %d ingress packets, want at least %d more than %d", target, pp.Denied["ingress"], probes, deniedBefore)
		}
	}
	if !found {
		t.Fatalf("ofsdnctl policies does not list %s: %+v", target, r.PodPolicies)
	}
	mfs, _ := scrape(t, netnsHTTP(t, cn.OVS.NetnsPath()))
	var denied float64
	for _, m := range samples(mfs, metrics.NetworkPolicyDenied, map[string]string{"direction": "ingress"}) {
		denied += m.GetCounter().GetValue()
	}
	if denied < probes {
		t.Errorf("%s{direction=ingress} = %v, want at least %d", metrics.NetworkPolicyDenied, denied, probes)
	}
	if n := samples(mfs, metrics.NetworkPolicies, nil); len(n) != 1 || n[0].GetGauge().GetValue() < 1 {
		t.Errorf("%s = %v, want the policy counted", metrics.NetworkPolicies, n)
	}

	// The log's rate limit: a burst of denied new connections (one UDP datagram each,
	// from a new source port) far over policyDenyLogRate. The meter lets through at most
	// its burst (= the rate) plus the rate for the time the burst took, and drops the
	// rest; every denied packet is either logged or counted as not logged.
	counters := func() (logged, notLogged float64) {
		mfs, _ := scrape(t, netnsHTTP(t, cn.OVS.NetnsPath()))
		logged = value(t, mfs, metrics.NetworkPolicyDenyLogEntries, nil)
		for _, m := range samples(mfs, metrics.NetworkPolicyDenyLogDropped, nil) {
			notLogged += m.GetCounter().GetValue()
		}
		return logged, notLogged
	}
	// Start from counters that no longer move (the probes' packet-ins are handled).
	logged0, dropped0 := counters()
	waitUntil(t, "deny log counters settled", 15*time.Second, func() error {
		time.Sleep(500 * time.Millisecond)
		l, d := counters()
		if l != logged0 || d != dropped0 {
			logged0, dropped0 = l, d
			return fmt.Errorf("still moving: %v logged, %v not logged", l, d)
		}
		return nil
	})
	deniedNow := func() uint64 {
		for _, pp := range cn.policies(t).PodPolicies {
			if pp.Namespace+"/"+pp.Name == target {
				return pp.Denied["ingress"]
			}
		}
		t.Fatalf("ofsdnctl policies does not list %s", target)
		return 0
	}
	// The deny flow's counter too must have stopped moving (flow counters follow the
	// datapath's by up to a revalidation round).
	denied0 := deniedNow()
	waitUntil(t, "deny flow counter settled", 15*time.Second, func() error {
		time.Sleep(500 * time.Millisecond)
		if d := deniedNow(); d != denied0 {
			denied0 = d
			return fmt.Errorf("still moving: %d", d)
		}
		return nil
	})
	const burst = 400
	start := time.Now()
	if err := inNS(c.servers["z/b"].netns, func() error {
		for i := 0; i < burst; i++ {
			u, err := net.Dial("udp4", net.JoinHostPort(dst, "81"))
			if err != nil {
				return err
			}
			_, _ = u.Write([]byte("denied"))
			_ = u.Close()
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	took := time.Since(start)
	// The switch's count of what it denied is the default-deny flow's counter (a
	// datagram the kernel or the userspace datapath's packet socket dropped on the way
	// never reached it): every one of those is logged or counted as not logged.
	var logged, dropped float64
	var deniedDelta uint64
	waitUntil(t, "every packet the switch denied logged or counted as dropped", 15*time.Second, func() error {
		logged, dropped = counters()
		deniedDelta = deniedNow() - denied0
		if d := (logged - logged0) + (dropped - dropped0); deniedDelta <= npDenyLogRate || d != float64(deniedDelta) {
			return fmt.Errorf("%v logged + %v not logged, the deny flow counted %d of %d sent", logged-logged0, dropped-dropped0, deniedDelta, burst)
		}
		return nil
	})
	if limit := npDenyLogRate + npDenyLogRate*(took.Seconds()+1); logged-logged0 > limit {
		t.Errorf("a burst of %d denied connections in %v logged %v lines, over the meter's %d/s with burst %d (at most %.0f)",
			burst, took, logged-logged0, npDenyLogRate, npDenyLogRate, limit)
	}
	if logged-logged0 < 1 || dropped-dropped0 < 1 {
		t.Errorf("burst of %d: %v logged, %v dropped; want some of each", burst, logged-logged0, dropped-dropped0)
	}
	t.Logf("deny log burst: %d denied UDP connections sent in %v, %d reached the deny flow, %v logged, %v dropped (rate %d/s)", burst, took, deniedDelta, logged-logged0, dropped-dropped0, npDenyLogRate)
}

// conjIDsOnSwitch returns the conjunction ids the node's flows match (conj_id=N), sorted,
// and the generations their cookies carry.
func conjIDsOnSwitch(t *testing.T, cn *clusterNode) (ids []string, gens map[uint16]bool) {
	t.Helper()
	gens = map[uint16]bool{}
	for _, l := range strings.Split(cn.OVS.Ofctl(t, "dump-flows", "--no-stats", cn.mgmt()), "\n") {
		if m := regexp.MustCompile(`conj_id=(\d+)`).FindStringSubmatch(l); m != nil {
			ids = append(ids, m[1])
			gens[cookieGeneration(t, l)] = true
		}
	}
	sort.Strings(ids)
	return ids, gens
}

// testRestartKeepsRuleIDs: the daemon enforcing two policies is killed and started again;
// every rule's conjunction keeps its id (the record of policy rule ids), the flows carry
// the new generation only, and the policies' verdicts hold.
func testRestartKeepsRuleIDs(t *testing.T, c *npCluster) {
	created := map[string]*networkingv1.NetworkPolicy{}
	defer c.reset(created, map[string][]string{"pod:x/c": {"role"}})
	c.setPodLabel("x/c", "role", "client")
	// A policy made and deleted first moves the ids forward, so the rules' ids differ
	// from those a daemon starting without the record would give (1, 2, ...).
	churn := map[string]*networkingv1.NetworkPolicy{}
	churn["x/churn"] = c.createPolicy(ingress(npPolicy("x", "churn", map[string]string{"pod": "a"}), from(podPeer(labels("role", "client"))), from(nsPeer(labels(nsName, "z")))))
	c.reset(churn, nil)
	created["x/r1"] = c.createPolicy(ingress(npPolicy("x", "r1", map[string]string{"pod": "a"}), from(podPeer(labels("role", "client")))))
	created["x/r2"] = c.createPolicy(ingress(npPolicy("x", "r2", map[string]string{"pod": "a"}), from(nsPeer(labels(nsName, "y")))))
	check := func(when string) {
		t.Helper()
		if ok, _ := probe(c.servers["x/c"], c.servers["x/a"], corev1.ProtocolTCP, 80, 3*time.Second); !ok {
			t.Errorf("%s: x/c (role=client) -> x/a refused; r1 allows it", when)
		}
		if ok, _ := probe(c.servers["y/b"], c.servers["x/a"], corev1.ProtocolTCP, 80, 3*time.Second); !ok {
			t.Errorf("%s: y/b -> x/a refused; r2 allows it", when)
		}
		if ok, _ := probe(c.servers["x/b"], c.servers["x/a"], corev1.ProtocolTCP, 80, time.Second); ok {
			t.Errorf("%s: x/b -> x/a allowed; r1 and r2 isolate x/a", when)
		}
	}
	check("before the restart")
	name := npNodeName("x/a")
	cn := c.nodes[name]
	before, gens := conjIDsOnSwitch(t, cn)
	if len(before) < 2 || len(gens) != 1 {
		t.Fatalf("%s before the restart: conjunction ids %v in generations %v: want r1's and r2's in one", name, before, gens)
	}
	var old uint16
	for g := range gens {
		old = g
	}
	cn.StopDaemon()
	cn.StartDaemon(daemonBinary(t), 90*time.Second, c.daemonArgs(name)...)
	deadline := time.Now().Add(30 * time.Second)
	var after []string
	for {
		after, gens = conjIDsOnSwitch(t, cn)
		if !gens[old] && len(after) == len(before) || time.Now().After(deadline) {
			break
		}
		time.Sleep(200 * time.Millisecond)
	}
	if fmt.Sprint(after) != fmt.Sprint(before) || gens[old] || len(gens) != 1 {
		t.Errorf("%s after the restart: conjunction ids %v in generations %v; want %v as before, in the new generation only (not %d)", name, after, gens, before, old)
	}
	check("after the restart")
}
