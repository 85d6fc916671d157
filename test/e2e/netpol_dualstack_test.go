package e2e

// NetworkPolicy on dual-stack nodes (issue 23): TestNetworkPolicy's second cluster has
// nodes with an IPv4 and an IPv6 pod CIDR and pods with both addresses in status.podIPs.
// The upstream cases with pod and namespace selectors are probed over both families at
// once (the same expected tables: a selected pod is a peer by every address), the ipBlock
// cases over IPv6 with blocks built from the pods' IPv6 addresses (npJobs); then a
// denied IPv6 connection must show in the deny log and in ofsdnctl policies, and neighbor
// discovery must keep working between pods under deny-all (it never enters the policy
// stages, as ARP does not).

import (
	"fmt"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// npJob is one upstream case on one cluster, over IPv4 (v4), IPv6 (v6) or both.
type npJob struct {
	name    string
	cluster int
	tc      npCase
	v4, v6  bool
}

// usesIPBlock reports whether a case's policies have an ipBlock peer (its expected tables
// hold for the family of its blocks only).
func usesIPBlock(tc npCase) bool {
	for _, st := range tc.steps {
		for _, np := range append(append([]*networkingv1.NetworkPolicy(nil), st.create...), st.update...) {
			for _, r := range np.Spec.Ingress {
				for _, p := range r.From {
					if p.IPBlock != nil {
						return true
					}
				}
			}
			for _, r := range np.Spec.Egress {
				for _, p := range r.To {
					if p.IPBlock != nil {
						return true
					}
				}
			}
		}
	}
	return false
}

// npJobs spreads the upstream cases over the clusters: on an IPv4-only set of clusters
// case i on cluster i mod n, as before; with a dual-stack cluster, the ipBlock cases over
// IPv4 on the others and over IPv6 (built with the IPv6 addresses) on it, the other cases
// each on the cluster with the fewest steps so far, over both families on the dual-stack
// one.
func npJobs(cs []*npCluster) []npJob {
	cases := make([][]npCase, len(cs))
	var cases6 []npCase
	dual := -1
	for k, c := range cs {
		cases[k] = npCases(func(p string) string { return c.ips[p] })
		if c.dual {
			dual = k
			cases6 = npCases(func(p string) string { return c.ips6[p] })
		}
	}
	var jobs []npJob
	if dual < 0 || len(cs) < 2 {
		for i := range cases[0] {
			k := i % len(cs)
			jobs = append(jobs, npJob{name: cases[k][i].upstream, cluster: k, tc: cases[k][i], v4: true})
		}
		return jobs
	}
	steps := make([]int, len(cs))
	least := func(skip int) int {
		best := -1
		for k := range cs {
			if k != skip && (best < 0 || steps[k] < steps[best]) {
				best = k
			}
		}
		return best
	}
	for i := range cases[0] {
		if usesIPBlock(cases[0][i]) {
			k := least(dual)
			jobs = append(jobs, npJob{name: cases[k][i].upstream, cluster: k, tc: cases[k][i], v4: true})
			jobs = append(jobs, npJob{name: cases6[i].upstream + " [IPv6]", cluster: dual, tc: cases6[i], v6: true})
			steps[k] += len(cases[k][i].steps)
			steps[dual] += len(cases6[i].steps)
			continue
		}
		k := least(-1)
		jobs = append(jobs, npJob{name: cases[k][i].upstream, cluster: k, tc: cases[k][i], v4: true, v6: k == dual})
		steps[k] += len(cases[k][i].steps)
	}
	return jobs
}

// neighbour returns pod netns's neighbor entry for ip as `ip -6 neigh show` prints it.
func neighbour(t *testing.T, netnsPath string, ip string) string {
	t.Helper()
	out, err := exec.Command("ip", "netns", "exec", filepath.Base(netnsPath), "ip", "-6", "neigh", "show", ip).CombinedOutput()
	if err != nil {
		t.Fatalf("ip -6 neigh show %s: %v\n%s", ip, err, out)
	}
	return strings.TrimSpace(string(out))
}

// flushNeighbours empties pod netns's IPv6 neighbor cache.
func flushNeighbours(t *testing.T, netnsPath string) {
	t.Helper()
	if out, err := exec.Command("ip", "netns", "exec", filepath.Base(netnsPath), "ip", "-6", "neigh", "flush", "all").CombinedOutput(); err != nil {
		t.Fatalf("ip -6 neigh flush: %v\n%s", err, out)
	}
}

// testDualStackPolicyBehaviour checks on a dual-stack cluster: a denied IPv6 connection
// is logged (IPv6 addresses, protocol, port) and counted in ofsdnctl policies; neighbor
// discovery between two pods of one node works while deny-all isolates them both ways (the
// allowed IPv6 connection between them still opens with empty neighbor caches, and a
// pod with nothing allowed still resolves its neighbor); IPv4 under the same policies is
// judged as IPv6.
func testDualStackPolicyBehaviour(t *testing.T, c *npCluster) {
	created := map[string]*networkingv1.NetworkPolicy{}
	defer func() {
		c.t = t
		c.reset(created, nil)
	}()

	t.Run("a denied IPv6 connection shows in the deny log and ofsdnctl", func(t *testing.T) {
		c.t = t
		created["y/deny6"] = c.createPolicy(ingress(npPolicy("y", "deny6", map[string]string{"pod": "a"})))
		const target, from = "y/a", "z/b"
		cn := c.nodes[npNodeName(target)]
		denied := func() uint64 {
			for _, pp := range cn.policies(t).PodPolicies {
				if pp.Namespace+"/"+pp.Name == target {
					return pp.Denied["ingress"]
				}
			}
			t.Fatalf("ofsdnctl policies does not list %s", target)
			return 0
		}
		before, logBefore := denied(), len(denyLogLines(t, cn))
		const probes = 3
		for i := 0; i < probes; i++ {
			if ok, _ := probe(c.servers6[from], c.servers6[target], corev1.ProtocolUDP, 81, 300*time.Millisecond); ok {
				t.Fatal("a denied IPv6 probe went through")
			}
		}
		src, dst := c.ips6[from], c.ips6[target]
		waitUntil(t, "deny log lines of the IPv6 probes", 10*time.Second, func() error {
			n := 0
			for _, m := range denyLogLines(t, cn)[logBefore:] {
				if m["direction"] == "ingress" && m["isolated_pod"] == target && m["src"] == from && m["src_ip"] == src &&
					m["dst"] == target && m["dst_ip"] == dst && m["protocol"] == "UDP" && m["port"] == float64(81) {
					n++
				}
			}
			if n < probes {
				return fmt.Errorf("%d matching lines, want at least %d", n, probes)
			}
			return nil
		})
		if got := denied(); got < before+probes {
			t.Errorf("ofsdnctl policies: %s denied %d ingress packets, want at least %d more than %d", target, got, probes, before)
		}
		// IPv4 is judged the same.
		if ok, _ := probe(c.servers[from], c.servers[target], corev1.ProtocolUDP, 81, 300*time.Millisecond); ok {
			t.Error("a denied IPv4 probe went through on the dual-stack node")
		}
		c.deletePolicies(created)
	})
	c.t = t

	t.Run("neighbor discovery between pods under deny-all", func(t *testing.T) {
		c.t = t
		// x/a and x/c share a node (their IPv6 addresses are on-link to each other).
		const a, b = "x/a", "x/c"
		if npNodeName(a) != npNodeName(b) {
			t.Fatalf("%s and %s on different nodes", a, b)
		}
		all := &metav1.LabelSelector{}
		deny := npPolicy("x", "deny-all", nil)
		deny.Spec.PodSelector = *all
		deny.Spec.PolicyTypes = []networkingv1.PolicyType{networkingv1.PolicyTypeIngress, networkingv1.PolicyTypeEgress}
		created["x/deny-all"] = c.createPolicy(deny)
		// Nothing allowed: a's IPv6 to c is refused, yet a resolves c's address.
		flushNeighbours(t, c.pods[a].netns)
		flushNeighbours(t, c.pods[b].netns)
		if ok, _ := probe(c.servers6[a], c.servers6[b], corev1.ProtocolTCP, 80, time.Second); ok {
			t.Fatal("IPv6 TCP went through deny-all")
		}
		mac := c.pods[b].mac(t).String()
		waitUntil(t, "x/a resolves x/c under deny-all", 5*time.Second, func() error {
			if n := neighbour(t, c.pods[a].netns, c.ips6[b]); !strings.Contains(n, "lladdr "+mac) {
				return fmt.Errorf("neighbor entry %q, want lladdr %s", n, mac)
			}
			return nil
		})
		// Allow a → c TCP 80 (a's egress, c's ingress): it opens over IPv6 with both
		// neighbor caches empty; the other way and other ports stay refused.
		created["x/a-to-c"] = c.createPolicy(egress(npPolicy("x", "a-to-c", map[string]string{"pod": "a"}),
			egressPorts(to(podPeer(labels("pod", "c"))), npPort(corev1.ProtocolTCP, 80))))
		created["x/c-from-a"] = c.createPolicy(ingress(npPolicy("x", "c-from-a", map[string]string{"pod": "c"}),
			withPorts(from(podPeer(labels("pod", "a"))), npPort(corev1.ProtocolTCP, 80))))
		flushNeighbours(t, c.pods[a].netns)
		flushNeighbours(t, c.pods[b].netns)
		if ok, _ := probe(c.servers6[a], c.servers6[b], corev1.ProtocolTCP, 80, 5*time.Second); !ok {
			t.Fatalf("allowed IPv6 TCP %s -> %s:80 did not open with empty neighbor caches (neighbors: %q, %q)",
				a, b, neighbour(t, c.pods[a].netns, c.ips6[b]), neighbour(t, c.pods[b].netns, c.ips6[a]))
		}
		for _, p := range []struct {
			from, to string
			port     int32
		}{{a, b, 81}, {b, a, 80}} {
			if ok, _ := probe(c.servers6[p.from], c.servers6[p.to], corev1.ProtocolTCP, p.port, time.Second); ok {
				t.Errorf("IPv6 TCP %s -> %s:%d went through", p.from, p.to, p.port)
			}
			if ok, _ := probe(c.servers[p.from], c.servers[p.to], corev1.ProtocolTCP, p.port, time.Second); ok {
				t.Errorf("IPv4 TCP %s -> %s:%d went through", p.from, p.to, p.port)
			}
		}
		if ok, _ := probe(c.servers[a], c.servers[b], corev1.ProtocolTCP, 80, 5*time.Second); !ok {
			t.Errorf("allowed IPv4 TCP %s -> %s:80 refused", a, b)
		}
	})
}
