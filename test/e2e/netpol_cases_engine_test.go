package e2e

import (
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/ofsdn/ofsdn/policy"
)

// npModelIP is the address the engine check gives pod "ns/name": pods a, c of x, b of y,
// a and c of z on node 1 (10.244.1.0/24), the others on node 2.
func npModelIP(pod string) string {
	ns, name, _ := strings.Cut(pod, "/")
	node := npModelNode(pod)
	return fmt.Sprintf("10.244.%d.%d", node, 10+10*strings.Index("xyz", ns)+strings.Index("abc", name))
}

func npModelNode(pod string) int {
	ns, name, _ := strings.Cut(pod, "/")
	if (ns == "y") != (name == "b") {
		return 1
	}
	return 2
}

// npServePorts are the container ports every test pod declares (upstream's names).
func npServePorts() []corev1.ContainerPort {
	var out []corev1.ContainerPort
	for _, proto := range npProtocols {
		for _, p := range npPorts {
			out = append(out, corev1.ContainerPort{Name: fmt.Sprintf("serve-%d-%s", p, strings.ToLower(string(proto))), ContainerPort: p, Protocol: proto})
		}
	}
	return out
}

// engineAllows judges one connection with the two nodes' engines, as the pipeline does:
// egress on the source's node, ingress on the destination's.
func engineAllows(engs map[int]*policy.Engine, from, to string, proto corev1.Protocol, port int32) bool {
	pr := map[corev1.Protocol]policy.Protocol{corev1.ProtocolTCP: policy.ProtocolTCP, corev1.ProtocolUDP: policy.ProtocolUDP, corev1.ProtocolSCTP: policy.ProtocolSCTP}[proto]
	side := func(self, peer string, dir policy.Direction) bool {
		e := engs[npModelNode(self)]
		ns, name, _ := strings.Cut(self, "/")
		iso := e.Isolation(ns, name)
		if dir == policy.Egress && !iso.Egress || dir == policy.Ingress && !iso.Ingress {
			return true
		}
		selfIP, peerIP := netip.MustParseAddr(npModelIP(self)), netip.MustParseAddr(npModelIP(peer))
		for _, c := range e.Conjunctions() {
			if c.Key.Direction != dir {
				continue
			}
			ok := false
			for _, p := range c.Pods {
				ok = ok || slices.Contains(p.IPs, selfIP)
			}
			peerOK := c.AnyPeer
			for _, p := range c.Peers {
				peerOK = peerOK || p.Contains(peerIP)
			}
			portOK := c.AnyPort
			for _, p := range c.Ports {
				portOK = portOK || p.Protocol == pr && p.Matches(uint16(port))
			}
			if ok && peerOK && portOK {
				return true
			}
		}
		return false
	}
	return side(from, to, policy.Egress) && side(to, from, policy.Ingress)
}

// TestNetpolCasesAgainstEngine runs the 48 upstream cases through the policy engine of
// two nodes (no switch) and compares every table: it checks the hand-written expectations
// against an implementation, and the engine against upstream's cases, before the e2e test
// spends minutes on real packets.
func TestNetpolCasesAgainstEngine(t *testing.T) {
	serial(t)
	cases := npCases(npModelIP)
	if len(cases) != 48 {
		t.Fatalf("%d cases, want the upstream suite's 48", len(cases))
	}
	for _, c := range cases {
		t.Run(c.upstream, func(t *testing.T) {
			engs := map[int]*policy.Engine{1: policy.NewEngine(nil), 2: policy.NewEngine(nil)}
			nsLabels := map[string]map[string]string{}
			podLabels := map[string]map[string]string{}
			for _, ns := range npNamespaces {
				nsLabels[ns] = map[string]string{nsName: ns}
			}
			for _, p := range npPods() {
				_, name, _ := strings.Cut(p, "/")
				podLabels[p] = map[string]string{"pod": name}
			}
			pushNS := func(ns string) {
				for _, e := range engs {
					e.UpsertNamespace(policy.ConvertNamespace(&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns, Labels: nsLabels[ns]}}))
				}
			}
			pushPod := func(p string) {
				ns, name, _ := strings.Cut(p, "/")
				pod := &corev1.Pod{
					ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Labels: podLabels[p]},
					Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Ports: npServePorts()}}},
					Status:     corev1.PodStatus{Phase: corev1.PodRunning, PodIPs: []corev1.PodIP{{IP: npModelIP(p)}}},
				}
				for _, e := range engs {
					e.UpsertPod(policy.ConvertPod(pod))
				}
			}
			for _, ns := range npNamespaces {
				pushNS(ns)
			}
			for i, p := range npPods() {
				pushPod(p)
				ns, name, _ := strings.Cut(p, "/")
				engs[npModelNode(p)].SetLocalPod(policy.LocalPod{Namespace: ns, Name: name, IPs: []netip.Addr{netip.MustParseAddr(npModelIP(p))}, OFPort: uint32(3 + i)})
			}
			live := map[string]*networkingv1.NetworkPolicy{}
			for si, st := range c.steps {
				for _, np := range append(append([]*networkingv1.NetworkPolicy(nil), st.create...), st.update...) {
					live[np.Namespace+"/"+np.Name] = np
					for _, e := range engs {
						e.UpsertPolicy(policy.ConvertPolicy(np))
					}
				}
				if st.deletePolicies {
					for k, np := range live {
						for _, e := range engs {
							e.DeletePolicy(np.Namespace, np.Name)
						}
						delete(live, k)
					}
				}
				for ns, l := range st.nsLabels {
					for k, v := range l {
						nsLabels[ns][k] = v
					}
					pushNS(ns)
				}
				for p, l := range st.podLabels {
					for k, v := range l {
						podLabels[p][k] = v
					}
					pushPod(p)
				}
				for _, proto := range npProtocols {
					for _, port := range npPorts {
						want := st.want(proto, port)
						var bad []string
						for _, f := range npPods() {
							for _, to := range npPods() {
								if f == to {
									continue
								}
								if got := engineAllows(engs, f, to, proto, port); got != want[f][to] {
									bad = append(bad, fmt.Sprintf("%s -> %s: engine %v, case %v", f, to, got, want[f][to]))
								}
							}
						}
						if len(bad) > 0 {
							t.Errorf("step %d (%s) %s/%d:\n  %s", si+1, st.what, proto, port, strings.Join(bad, "\n  "))
						}
					}
				}
			}
		})
	}
}
