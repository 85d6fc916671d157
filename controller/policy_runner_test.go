package controller

import (
	"fmt"
	"net"
	"net/netip"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/labels"

	"github.com/ofsdn/ofsdn/policy"
)

// TestPolicyRealizationOffTheAgentLock, against a real OVS whose ovs-vswitchd is frozen
// (SIGSTOP) while a pod's policy bundle is in flight: an API event, 15 more pod ADDs and
// `ofsdnctl policies` (PodPolicies) all go on instead of waiting behind that bundle (they
// waited on the agent's or the realizer's lock for the whole switch round trip before);
// the event's resourceVersion does not count as realized (policy.Agent.Versions, what
// `ofsdnctl policies` and the tests read) until its bundle is confirmed; once the switch
// runs again the 15 ADDs share ONE bundle, and every pod's flows, rule flows included,
// are on the switch.
func TestPolicyRealizationOffTheAgentLock(t *testing.T) {
	ovs, sw, n, ctx := switchTestNode(t, false)
	var bundles atomic.Int32
	n.store.SetObserver(func(kind string, _ int, _ time.Duration, _ error) {
		if kind == "bundle" {
			bundles.Add(1)
		}
	})
	if err := n.store.Sync(ctx, sw, nil, nil); err != nil {
		t.Fatal(err)
	}
	bundles.Store(0)

	const pods = 16
	a, atts := policyTestPods(n, pods)
	a.Update(func(e *policy.Engine) policy.Changes {
		return e.UpsertPolicy(&policy.Policy{Namespace: "x", Name: "from-a", PodSelector: labels.SelectorFromSet(labels.Set{"app": "a"}),
			IngressType: true, Ingress: []policy.Rule{{AllPorts: true, Peers: []policy.Peer{{PodSelector: labels.SelectorFromSet(labels.Set{"app": "a"})}}}}})
	})
	a.MarkSynced()
	p := newPolicyRealizer(n, PolicyOptions{Agent: a, RealizeTimeout: 30 * time.Second})
	n.policy = p
	p.load(nil)
	defer p.close()

	queued := func() int {
		p.qmu.Lock()
		defer p.qmu.Unlock()
		return len(p.queue)
	}
	waitFor := func(what string, cond func() bool) {
		t.Helper()
		deadline := time.Now().Add(20 * time.Second)
		for !cond() {
			if time.Now().After(deadline) {
				t.Fatalf("not within 20 s: %s", what)
			}
			time.Sleep(5 * time.Millisecond)
		}
	}

	ovs.StopVswitchd(t)
	frozen := true
	defer func() {
		if frozen {
			ovs.ContVswitchd(t)
		}
	}()
	errs := make([]error, pods)
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { defer wg.Done(); errs[0] = p.attach(ctx, atts[0]) }()
	waitFor("the first pod's bundle in flight (the runner took its item)", func() bool { return bundles.Load() == 0 && queued() == 0 && p.mu.TryLock() && unlockTrue(&p.mu) })
	time.Sleep(50 * time.Millisecond) // the runner is now inside store.Update, on the frozen switch

	// While that bundle waits on the frozen switch: an API event returns, ...
	evDone := make(chan struct{})
	go func() {
		a.Update(func(e *policy.Engine) policy.Changes {
			return e.UpsertPod(&policy.Pod{Namespace: "x", Name: "remote", Labels: map[string]string{"app": "a"},
				IPs: []netip.Addr{netip.MustParseAddr("10.244.2.7")}, NodeName: "n2"})
		})
		a.Observed("pods", "4242") // as the watcher does after each event
		close(evDone)
	}()
	select {
	case <-evDone:
	case <-time.After(20 * time.Second):
		t.Fatal("an API event waited for the bundle in flight on the frozen switch")
	}
	if v := a.Versions()["pods"]; v == 4242 {
		t.Fatal("the API event's resourceVersion counts as realized while its bundle cannot have reached the frozen switch")
	}
	// ... inspection answers, ...
	insp := make(chan []PodPolicy, 1)
	go func() { insp <- n.PodPolicies() }()
	select {
	case <-insp:
	case <-time.After(20 * time.Second):
		t.Fatal("PodPolicies (ofsdnctl policies) waited for the bundle in flight on the frozen switch")
	}
	// ... and the other ADDs queue their changes instead of waiting for the agent's lock.
	for i := 1; i < pods; i++ {
		wg.Add(1)
		go func() { defer wg.Done(); errs[i] = p.attach(ctx, atts[i]) }()
	}
	waitFor("15 ADDs, the API event and its version queued behind the bundle in flight", func() bool { return queued() == pods+1 })
	if b := bundles.Load(); b != 0 {
		t.Fatalf("%d bundles completed while the switch was frozen", b)
	}

	ovs.ContVswitchd(t)
	frozen = false
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Fatalf("attach of pod %d: %v", i, err)
		}
	}
	waitFor("the API event's resourceVersion realized once the switch ran again", func() bool { return a.Versions()["pods"] == 4242 })
	if b := bundles.Load(); b != 2 {
		t.Errorf("%d bundles for 16 ADDs and one API event, want 2 (the one in flight, then one for everything queued behind it)", b)
	}

	// Every pod's flows and the rule flows naming it are on the switch.
	dump := ovs.Ofctl(t, "dump-flows", ovs.MgmtSocket("br-int"))
	for _, att := range atts {
		cookie, mask := att.owner().Cookie()
		got := ovs.Ofctl(t, "dump-flows", ovs.MgmtSocket("br-int"), fmt.Sprintf("cookie=%#x/%#x", cookie, mask))
		want, _ := n.store.Owner(att.owner())
		if c := strings.Count(got, "cookie="); c != len(want) || c == 0 {
			t.Errorf("pod %s: %d flows on the switch, the store wants %d", att.PodName, c, len(want))
		}
		if !strings.Contains(dump, "reg1=0x"+fmt.Sprintf("%x", att.OFPort)) && !strings.Contains(dump, fmt.Sprintf("nw_src=%s", att.IPv4().IP)) {
			t.Errorf("no rule flow names pod %s (ofport %d, %s)", att.PodName, att.OFPort, att.IPv4().IP)
		}
	}
	if rules, _ := n.store.Owner(ownerPolicy); len(rules) == 0 {
		t.Error("no rule flows in the store")
	}
}

// unlockTrue unlocks mu and returns true (for a TryLock probe in a condition).
func unlockTrue(mu *sync.Mutex) bool { mu.Unlock(); return true }

// policyTestPods returns a policy agent knowing namespace x and pods x/p00.. (n of them,
// label app=a, node n1, addresses 10.244.1.10.. of n's pod subnet) and their attachments
// (ofports 100..); the caller adds its policies and calls MarkSynced.
func policyTestPods(n *Node, pods int) (*policy.Agent, []*Attachment) {
	a := policy.NewAgent()
	a.Update(func(e *policy.Engine) policy.Changes { return e.UpsertNamespace(&policy.Namespace{Name: "x"}) })
	atts := make([]*Attachment, pods)
	for i := range pods {
		ip := net.IPv4(10, 244, 1, byte(10+i)).To4()
		name := fmt.Sprintf("p%02d", i)
		a.Update(func(e *policy.Engine) policy.Changes {
			return e.UpsertPod(&policy.Pod{Namespace: "x", Name: name, Labels: map[string]string{"app": "a"},
				IPs: []netip.Addr{netip.AddrFrom4([4]byte(ip))}, NodeName: "n1"})
		})
		atts[i] = &Attachment{ContainerID: "c" + name, IfName: "eth0", PodNamespace: "x", PodName: name,
			HostVeth: "veth" + name, OFPort: uint32(100 + i), IPs: []*net.IPNet{{IP: ip, Mask: n.cfg.PodSubnet.Mask}},
			MAC: net.HardwareAddr{0x0a, 0x58, 10, 244, 1, byte(10 + i)}}
	}
	return a, atts
}
