package controller

import (
	"fmt"
	"math/rand"
	"net/netip"
	"reflect"
	"testing"

	"k8s.io/apimachinery/pkg/labels"

	"github.com/ofsdn/ofsdn/flows"
	"github.com/ofsdn/ofsdn/policy"
)

// TestRuleConverterThroughEngineChanges feeds the runner's ruleConverter the changes a
// real engine reports through attach and detach bursts (Defer/Flush batches, pods
// re-added with another address or ofport, ofports reused by other pods, dual-stack
// pods), peers changing (peer pods relabelled, moved, deleted) and policy updates, and
// checks after each step that every live rule equals ruleOf's conversion of its
// conjunction now, and that no rule converted earlier was changed afterwards (the
// converter shares conversions between rules, the engine shares pod and peer arrays
// between versions of a conjunction).
func TestRuleConverterThroughEngineChanges(t *testing.T) {
	for seed := int64(1); seed <= 4; seed++ {
		t.Run(fmt.Sprint(seed), func(t *testing.T) { converterThroughEngine(t, seed) })
	}
}

func converterThroughEngine(t *testing.T, seed int64) {
	r := rand.New(rand.NewSource(seed))
	e := policy.NewEngine(nil)
	e.SetNode("n1")
	for _, ns := range []string{"a", "b"} {
		e.UpsertNamespace(&policy.Namespace{Name: ns, Labels: map[string]string{"team": ns}})
	}
	peerIP := func() []netip.Addr {
		ips := []netip.Addr{netip.AddrFrom4([4]byte{10, 251, 0, byte(1 + r.Intn(40))})}
		if r.Intn(3) == 0 {
			ips = append(ips, netip.MustParseAddr(fmt.Sprintf("fd00:251::%x", 1+r.Intn(40))))
		}
		return ips
	}
	for i := 0; i < 20; i++ {
		e.UpsertPod(&policy.Pod{Namespace: "b", Name: fmt.Sprintf("peer-%d", i), NodeName: "n2",
			Labels: map[string]string{"role": fmt.Sprintf("r%d", i%3)}, IPs: peerIP(),
			Ports: []policy.ContainerPort{{Name: "http", Protocol: policy.ProtocolTCP, Port: uint16(8080 + i%2)}}})
	}
	const pods = 24
	podPorts := func() []policy.ContainerPort {
		if r.Intn(3) == 0 {
			return nil
		}
		return []policy.ContainerPort{{Name: "http", Protocol: policy.ProtocolTCP, Port: uint16(8080 + r.Intn(2))}}
	}
	for i := 0; i < pods; i++ {
		e.UpsertPod(&policy.Pod{Namespace: "a", Name: fmt.Sprintf("p-%02d", i), NodeName: "n1",
			Labels: map[string]string{"app": "web"}, Ports: podPorts()})
	}
	policyOf := func(j int) *policy.Policy {
		p := &policy.Policy{Namespace: "a", Name: fmt.Sprintf("np-%d", j), PodSelector: labels.SelectorFromSet(labels.Set{"app": "web"})}
		peers := []policy.Peer{{NamespaceSelector: labels.SelectorFromSet(labels.Set{"team": "b"}),
			PodSelector: labels.SelectorFromSet(labels.Set{"role": fmt.Sprintf("r%d", r.Intn(3))})}}
		var ports []policy.Port
		switch r.Intn(3) {
		case 0:
			ports = []policy.Port{{Protocol: policy.ProtocolTCP, Port: 80}, {Name: "http"}}
		case 1:
			ports = []policy.Port{{Protocol: policy.ProtocolTCP, Port: 8000, EndPort: 8099}}
		}
		if r.Intn(2) == 0 {
			p.IngressType = true
			p.Ingress = []policy.Rule{{Peers: peers, Ports: ports, AllPorts: len(ports) == 0}}
		} else {
			p.EgressType = true
			p.Egress = []policy.Rule{{Peers: peers, Ports: ports, AllPorts: len(ports) == 0}}
		}
		return p
	}
	for j := 0; j < 4; j++ {
		e.UpsertPolicy(policyOf(j))
	}
	rc := newRuleConverter()
	live := map[uint32]flows.PolicyRule{}
	printed := map[uint32]string{}
	dual := seed%2 == 0
	apply := func(ch policy.Changes) {
		for _, c := range ch.Conjunctions {
			if c.New == nil {
				delete(live, c.Old.ID)
				delete(printed, c.Old.ID)
				rc.forget(c.Old.ID)
				continue
			}
			if c.Old != nil && c.Old.ID != c.New.ID {
				delete(live, c.Old.ID)
				rc.forget(c.Old.ID)
			}
			live[c.New.ID] = rc.rule(c.New, dual)
			printed[c.New.ID] = fmt.Sprintf("%+v", live[c.New.ID])
		}
	}
	for _, c := range e.Conjunctions() {
		live[c.ID] = rc.rule(c, dual)
		printed[c.ID] = fmt.Sprintf("%+v", live[c.ID])
	}
	ofports := map[string]uint32{}
	attach := func(i int) policy.Changes {
		name := fmt.Sprintf("p-%02d", i)
		lp := policy.LocalPod{Namespace: "a", Name: name, OFPort: uint32(32768 + r.Intn(30)),
			IPs: []netip.Addr{netip.AddrFrom4([4]byte{10, 244, 1, byte(10 + r.Intn(40))})}}
		if dual {
			lp.IPs = append(lp.IPs, netip.MustParseAddr(fmt.Sprintf("fd00:244:1::%x", 10+r.Intn(40))))
		}
		ofports[name] = lp.OFPort
		return e.SetLocalPod(lp)
	}
	detach := func(i int) policy.Changes {
		name := fmt.Sprintf("p-%02d", i)
		// The runner's DEL cleanup (round: delete(p.conv.pods, ofport)), sometimes.
		if o, ok := ofports[name]; ok && r.Intn(2) == 0 {
			delete(rc.pods, o)
		}
		delete(ofports, name)
		return e.DeleteLocalPod("a", name)
	}
	for step := 0; step < 400; step++ {
		var what string
		switch op := r.Intn(10); {
		case op < 4:
			e.Defer()
			n := 1 + r.Intn(12)
			for k := 0; k < n; k++ {
				if r.Intn(3) == 0 {
					detach(r.Intn(pods))
				} else {
					attach(r.Intn(pods))
				}
			}
			what = fmt.Sprintf("batch of %d", n)
			apply(e.Flush())
		case op < 6:
			what = "attach"
			apply(attach(r.Intn(pods)))
		case op < 7:
			what = "detach"
			apply(detach(r.Intn(pods)))
		case op < 8:
			i := r.Intn(20)
			what = "peer change"
			apply(e.UpsertPod(&policy.Pod{Namespace: "b", Name: fmt.Sprintf("peer-%d", i), NodeName: "n2",
				Labels: map[string]string{"role": fmt.Sprintf("r%d", r.Intn(3))}, IPs: peerIP(),
				Ports: []policy.ContainerPort{{Name: "http", Protocol: policy.ProtocolTCP, Port: uint16(8080 + r.Intn(2))}}}))
		case op < 9:
			i := r.Intn(pods)
			what = "local pod ports"
			apply(e.UpsertPod(&policy.Pod{Namespace: "a", Name: fmt.Sprintf("p-%02d", i), NodeName: "n1",
				Labels: map[string]string{"app": "web"}, Ports: podPorts()}))
		default:
			what = "policy update"
			apply(e.UpsertPolicy(policyOf(r.Intn(4))))
		}
		cs := e.Conjunctions()
		if len(cs) != len(live) {
			t.Fatalf("step %d (%s): %d conjunctions, %d rules converted", step, what, len(cs), len(live))
		}
		for _, c := range cs {
			got, ok := live[c.ID]
			if want := ruleOf(c, dual); !ok || !reflect.DeepEqual(got, want) {
				t.Fatalf("step %d (%s): rule %d (%v)\n got  %+v\n want %+v", step, what, c.ID, c.Key, got, want)
			}
			if s := fmt.Sprintf("%+v", got); s != printed[c.ID] {
				t.Fatalf("step %d (%s): rule %d changed after its conversion:\n then %s\n now  %s", step, what, c.ID, printed[c.ID], s)
			}
		}
	}
}
