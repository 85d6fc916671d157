package controller

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"sort"
	"sync"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/labels"

	"github.com/ofsdn/ofsdn/flows"
	"github.com/ofsdn/ofsdn/openflow"
	"github.com/ofsdn/ofsdn/policy"
	"github.com/ofsdn/ofsdn/switchstate"
	"github.com/ofsdn/ofsdn/test/testenv"
)

// burstAgent returns a synced agent holding make bench-policy-ab's model at a smaller
// scale: nsCount namespaces of 100 pods (labels app=a<k%10>, role=r<k%5>; namespace
// label team=t<i%7>), and a namespace "burst" with pods b-000.. (app=burst, no address
// yet) selected by 10 policies, each of one ingress rule from the pods of two labels in
// the namespaces of one team (about nsCount/7*10 peers) on TCP 80, 8000-8099 and the
// named port "http". The burst pods are scheduled to node n1; with node "n1" the
// agent is that node's (policy.Engine.SetNode: the rules' peer and port clauses exist
// before the pods' ADDs), with "" it counts attached pods only.
func burstAgent(nsCount, pods int, node string) *policy.Agent {
	a := policy.NewAgent()
	a.View(func(e *policy.Engine) { e.SetNode(node) })
	for i := range nsCount {
		ns := fmt.Sprintf("ns-%03d", i)
		a.Update(func(e *policy.Engine) policy.Changes {
			return e.UpsertNamespace(&policy.Namespace{Name: ns, Labels: map[string]string{"team": fmt.Sprintf("t%d", i%7)}})
		})
		for k := range 100 {
			a.Update(func(e *policy.Engine) policy.Changes {
				return e.UpsertPod(&policy.Pod{Namespace: ns, Name: fmt.Sprintf("p-%03d", k), NodeName: "elsewhere",
					Labels: map[string]string{"app": fmt.Sprintf("a%d", k%10), "role": fmt.Sprintf("r%d", k%5)},
					IPs:    []netip.Addr{netip.AddrFrom4([4]byte{10, 251, byte(i), byte(k + 1)})},
					Ports:  []policy.ContainerPort{{Name: "http", Protocol: policy.ProtocolTCP, Port: uint16(8080 + k%3)}}})
			})
		}
	}
	a.Update(func(e *policy.Engine) policy.Changes {
		return e.UpsertNamespace(&policy.Namespace{Name: "burst", Labels: map[string]string{"team": "burst"}})
	})
	for i := range pods {
		a.Update(func(e *policy.Engine) policy.Changes {
			return e.UpsertPod(&policy.Pod{Namespace: "burst", Name: fmt.Sprintf("b-%03d", i), NodeName: "n1",
				Labels: map[string]string{"app": "burst"}})
		})
	}
	for j := range 10 {
		a.Update(func(e *policy.Engine) policy.Changes {
			return e.UpsertPolicy(&policy.Policy{Namespace: "burst", Name: fmt.Sprintf("bp-%02d", j),
				PodSelector: labels.SelectorFromSet(labels.Set{"app": "burst"}), IngressType: true,
				Ingress: []policy.Rule{{
					Peers: []policy.Peer{{
						NamespaceSelector: labels.SelectorFromSet(labels.Set{"team": fmt.Sprintf("t%d", j%7)}),
						PodSelector:       labels.SelectorFromSet(labels.Set{"role": fmt.Sprintf("r%d", j%5), "app": fmt.Sprintf("a%d", j%10)}),
					}},
					Ports: []policy.Port{{Protocol: policy.ProtocolTCP, Port: 80}, {Protocol: policy.ProtocolTCP, Port: 8000, EndPort: 8099}, {Name: "http"}},
				}}})
		})
	}
	a.MarkSynced()
	return a
}

// BenchmarkPolicyAttachBurst is the policy side of make bench-policy-ab's ADD burst
// without the API server, the veths and the OVSDB ports: b.N bursts of 96 pods attached
// at concurrency 32 to a real (sandbox) switch with 10 policies selecting them (M grows
// to 96, about 140 peers per rule), each attach followed by the pod's status event (its
// address, as the kubelet writes it), the way the daemon sees a burst. It reports
// pods/s and the attach p50/p99; "nopolicy" installs each pod's forwarding flows through
// the store's group commit instead, the policy-off path. Profile it with
// -cpuprofile/-mutexprofile/-blockprofile. "policy-unscheduled" is "policy" with an agent
// that does not know its node's name (each rule's peer and port clauses come with its
// first pod's ADD, as before the engine counted scheduled pods).
func BenchmarkPolicyAttachBurst(b *testing.B) {
	testenv.Privileged(b)
	for _, mode := range []string{"policy", "policy-unscheduled", "nopolicy"} {
		b.Run(mode, func(b *testing.B) {
			const pods, conc = 96, 32
			var lat []time.Duration
			var wall time.Duration
			for range b.N {
				b.StopTimer()
				_, sw := ofTestBridge(b, openflow.Options{})
				ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
				_, subnet, _ := net.ParseCIDR("10.244.1.0/24")
				gwMAC, _ := net.ParseMAC("0a:58:0a:f4:01:01")
				n := &Node{opts: NodeOptions{DataDir: b.TempDir()}, log: slog.New(slog.DiscardHandler), runCtx: ctx, store: flowStore{switchstate.New()},
					cfg: flows.NodeConfig{GatewayOFPort: 2, GatewayMAC: gwMAC, GatewayIP: net.ParseIP("10.244.1.1").To4(),
						PodSubnet: subnet, Generation: 3, Policy: mode != "nopolicy"}}
				n.owners = n.store
				n.store.Load(flows.PipelineOwner, flows.PipelineFlows(n.cfg))
				var a *policy.Agent
				if mode != "nopolicy" {
					node := "n1"
					if mode == "policy-unscheduled" {
						node = ""
					}
					a = burstAgent(100, pods, node)
					n.policy = newPolicyRealizer(n, PolicyOptions{Agent: a})
					n.policy.load(nil)
				}
				if err := n.store.Sync(ctx, sw, nil, nil); err != nil {
					b.Fatal(err)
				}
				atts := make([]*Attachment, pods)
				for i := range pods {
					ip := net.IPv4(10, 244, 1, byte(10+i)).To4()
					atts[i] = &Attachment{ContainerID: fmt.Sprintf("c%03d", i), IfName: "eth0", PodNamespace: "burst", PodName: fmt.Sprintf("b-%03d", i),
						HostVeth: fmt.Sprintf("veth%03d", i), OFPort: uint32(32768 + i), OwnerID: uint32(1000 + i),
						IPs: []*net.IPNet{{IP: ip, Mask: subnet.Mask}}, MAC: net.HardwareAddr{0x0a, 0x58, 10, 244, 1, byte(10 + i)}}
				}
				b.StartTimer()
				start := time.Now()
				var mu sync.Mutex
				next := make(chan int)
				var wg sync.WaitGroup
				for range conc {
					wg.Add(1)
					go func() {
						defer wg.Done()
						for i := range next {
							s := time.Now()
							if err := n.installPodFlows(ctx, atts[i]); err != nil {
								b.Error(err)
							}
							d := time.Since(s)
							mu.Lock()
							lat = append(lat, d)
							mu.Unlock()
							if a != nil {
								att := atts[i]
								go a.Update(func(e *policy.Engine) policy.Changes {
									return e.UpsertPod(&policy.Pod{Namespace: "burst", Name: att.PodName, NodeName: "n1", Labels: map[string]string{"app": "burst"},
										IPs: []netip.Addr{netip.AddrFrom4([4]byte(att.IPv4().IP.To4()))}})
								})
							}
						}
					}()
				}
				for i := range pods {
					next <- i
				}
				close(next)
				wg.Wait()
				wall += time.Since(start)
				b.StopTimer()
				if n.policy != nil {
					n.policy.close()
				}
				cancel()
				sw.Close()
				b.StartTimer()
			}
			sort.Slice(lat, func(i, j int) bool { return lat[i] < lat[j] })
			b.ReportMetric(float64(pods*b.N)/wall.Seconds(), "pods/s")
			b.ReportMetric(float64(lat[len(lat)/2].Milliseconds()), "p50-ms")
			b.ReportMetric(float64(lat[len(lat)*99/100].Milliseconds()), "p99-ms")
		})
	}
}
