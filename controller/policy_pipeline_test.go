package controller

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/labels"

	"github.com/ofsdn/ofsdn/flows"
	"github.com/ofsdn/ofsdn/openflow"
	"github.com/ofsdn/ofsdn/policy"
	"github.com/ofsdn/ofsdn/switchstate"
	"github.com/ofsdn/ofsdn/test/sandbox"
)

// ofProxy relays one OpenFlow connection between the daemon and a switch's management
// socket, and can hold back the switch's next bundle commit reply (and everything after
// it) until released, so a test sees what the daemon sends while a commit is in flight.
type ofProxy struct {
	path string // the socket to dial instead of the switch's (BRIDGE.mgmt)

	mu       sync.Mutex
	armed    bool          // hold the next commit reply
	holding  bool          // a commit reply is held
	release  chan struct{} // closed: send the held reply on
	opens    int           // bundle open requests from the daemon
	openHeld int           // of which sent while a commit reply was held
	conns    []net.Conn
}

// OpenFlow bundle control (ONF EXT-230, experimenter 0x4f4e4600, type 2300): its type at
// bytes 20-21 (OFPBCT_OPEN_REQUEST 0, OFPBCT_COMMIT_REPLY 5).
func bundleCtrlType(msg []byte) (uint16, bool) {
	if len(msg) < 24 || msg[1] != 4 || binary.BigEndian.Uint32(msg[8:12]) != 0x4f4e4600 || binary.BigEndian.Uint32(msg[12:16]) != 2300 {
		return 0, false
	}
	return binary.BigEndian.Uint16(msg[20:22]), true
}

func readOFMsg(r io.Reader) ([]byte, error) {
	h := make([]byte, 8)
	if _, err := io.ReadFull(r, h); err != nil {
		return nil, err
	}
	n := int(binary.BigEndian.Uint16(h[2:4]))
	if n < 8 {
		return nil, fmt.Errorf("OpenFlow message of length %d", n)
	}
	msg := make([]byte, n)
	copy(msg, h)
	_, err := io.ReadFull(r, msg[8:])
	return msg, err
}

func startOFProxy(t *testing.T, target string) *ofProxy {
	t.Helper()
	p := &ofProxy{path: filepath.Join(t.TempDir(), "br-int.mgmt"), release: make(chan struct{})}
	ln, err := net.Listen("unix", p.path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close(); p.cut() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			s, err := net.Dial("unix", target)
			if err != nil {
				c.Close()
				continue
			}
			p.mu.Lock()
			p.conns = append(p.conns, c, s)
			p.mu.Unlock()
			go func() { // daemon → switch
				for {
					msg, err := readOFMsg(c)
					if err != nil {
						s.Close()
						return
					}
					if typ, ok := bundleCtrlType(msg); ok && typ == 0 {
						p.mu.Lock()
						p.opens++
						if p.holding {
							p.openHeld++
						}
						p.mu.Unlock()
					}
					if _, err := s.Write(msg); err != nil {
						return
					}
				}
			}()
			go func() { // switch → daemon
				for {
					msg, err := readOFMsg(s)
					if err != nil {
						c.Close()
						return
					}
					if typ, ok := bundleCtrlType(msg); ok && typ == 5 {
						p.mu.Lock()
						hold := p.armed
						if hold {
							p.armed, p.holding = false, true
						}
						rel := p.release
						p.mu.Unlock()
						if hold {
							<-rel
						}
					}
					if _, err := c.Write(msg); err != nil {
						return
					}
				}
			}()
		}
	}()
	return p
}

// arm holds the switch's next commit reply.
func (p *ofProxy) arm() {
	p.mu.Lock()
	p.armed, p.holding, p.openHeld, p.release = true, false, 0, make(chan struct{})
	p.mu.Unlock()
}

// unhold sends the held commit reply on.
func (p *ofProxy) unhold() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.holding = false
	select {
	case <-p.release:
	default:
		close(p.release)
	}
}

// cut closes every relayed connection (both sides), releasing what is held.
func (p *ofProxy) cut() {
	p.mu.Lock()
	conns := p.conns
	p.conns = nil
	p.mu.Unlock()
	for _, c := range conns {
		c.Close()
	}
	p.unhold()
}

func (p *ofProxy) state() (holding bool, openHeld int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.holding, p.openHeld
}

// TestPolicyRoundsPipelined, against a real OVS through a relay that holds the switch's
// reply to a bundle commit: while round k's commit (pod a's ADD) is unconfirmed, the
// runner opens round k+1's bundle (pod b's ADD) and adds its mods (before, it waited for
// k's reply first: two round trips per round), but does not let pod b's ADD return; once
// the reply comes, both ADDs return and their flows are on the switch. Then the
// connection is cut while another commit's reply is held (the switch committed it, the
// daemon never heard): both ADDs in flight fail, and after the next connection's replay
// and the runner's resynchronisation the switch holds exactly what the store wants.
func TestPolicyRoundsPipelined(t *testing.T) {
	ovs := sandbox.Start(t)
	ovs.Vsctl(t, "add-br", "br-int", "--", "set", "bridge", "br-int",
		"datapath_type=netdev", "protocols=OpenFlow13", "fail_mode=secure")
	proxy := startOFProxy(t, ovs.MgmtSocket("br-int"))
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	sw, err := openflow.Dial(ctx, proxy.path, openflow.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { sw.Close() }()
	_, subnet, _ := net.ParseCIDR("10.244.1.0/24")
	gwMAC, _ := net.ParseMAC("0a:58:0a:f4:01:01")
	n := &Node{opts: NodeOptions{DataDir: t.TempDir()}, log: slog.Default(), runCtx: ctx, store: flowStore{switchstate.New()},
		cfg: flows.NodeConfig{GatewayOFPort: 2, GatewayMAC: gwMAC, GatewayIP: net.ParseIP("10.244.1.1").To4(),
			PodSubnet: subnet, Generation: 3, Policy: true}}
	n.store.Load(flows.PipelineOwner, flows.PipelineFlows(n.cfg))
	if err := n.store.Sync(ctx, sw, nil, nil); err != nil {
		t.Fatal(err)
	}

	const pods = 4
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
	attach := func(i int) chan error {
		ch := make(chan error, 1)
		go func() { ch <- p.attach(ctx, atts[i]) }()
		return ch
	}
	sameAsStore := func(when string) {
		t.Helper()
		want := cookieCounts(n.store.All())
		if got := switchCookieCounts(t, ovs); !sameCounts(got, want) {
			t.Fatalf("%s the switch has\n%sthe store wants\n%s", when, fmtCounts(got), fmtCounts(want))
		}
	}

	// 1. Pod a's round commits; its reply is held. An API event that changes no flow
	// (a Pod status write: only its version gate's record) is taken alone meanwhile: it
	// must neither count as realized before pod a's commit is confirmed nor hold the
	// runner from opening the next round's bundle.
	proxy.arm()
	errA := attach(0)
	waitFor("pod a's commit reply held", func() bool { h, _ := proxy.state(); return h })
	a.Observed("pods", "4242")
	waitFor("the event's record taken by the runner", func() bool {
		p.qmu.Lock()
		defer p.qmu.Unlock()
		return len(p.queue) == 0
	})
	errB := attach(1)
	waitFor("pod b's bundle opened while pod a's commit is unconfirmed (rounds pipelined)", func() bool { _, o := proxy.state(); return o >= 1 })
	time.Sleep(100 * time.Millisecond)
	select {
	case err := <-errA:
		t.Fatalf("pod a's ADD returned (%v) before the switch's commit reply", err)
	case err := <-errB:
		t.Fatalf("pod b's ADD returned (%v) while the round before its own was unconfirmed", err)
	default:
	}
	if v := a.Versions()["pods"]; v >= 4242 {
		t.Fatalf("pods version %d counts as realized while the round before it is unconfirmed", v)
	}
	proxy.unhold()
	for i, ch := range []chan error{errA, errB} {
		select {
		case err := <-ch:
			if err != nil {
				t.Fatalf("attach of pod %d: %v", i, err)
			}
		case <-time.After(20 * time.Second):
			t.Fatalf("attach of pod %d not confirmed 20 s after the commit reply", i)
		}
	}
	for _, att := range atts[:2] {
		if fs, ok := n.store.Owner(att.owner()); !ok || len(fs) == 0 {
			t.Fatalf("pod %s has no flows in the store", att.PodName)
		}
	}
	waitFor("the event's version realized once pod a's round is confirmed", func() bool { return a.Versions()["pods"] >= 4242 })
	sameAsStore("after two pipelined rounds")

	// 2. Pod c's commit reply is held, pod d's bundle opened behind it; the connection is
	// cut. Both ADDs fail; pod c's bundle may be on the switch although the store never
	// recorded it: the next connection's replay (delete every flow, then the store) and
	// the runner's resynchronisation make the switch equal the store again.
	proxy.arm()
	errC := attach(2)
	waitFor("pod c's commit reply held", func() bool { h, _ := proxy.state(); return h })
	errD := attach(3)
	waitFor("pod d's bundle opened behind pod c's commit", func() bool { _, o := proxy.state(); return o >= 1 })
	proxy.cut()
	for i, ch := range []chan error{errC, errD} {
		select {
		case err := <-ch:
			if err == nil {
				t.Fatalf("attach of pod %d succeeded over a cut connection", 2+i)
			}
			if !errors.Is(err, ErrOVSUnavailable) {
				t.Errorf("attach of pod %d: %v; want an error matching ErrOVSUnavailable", 2+i, err)
			}
		case <-time.After(20 * time.Second):
			t.Fatalf("attach of pod %d did not fail within 20 s of the cut", 2+i)
		}
	}
	sw2, err := openflow.Dial(ctx, proxy.path, openflow.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer sw2.Close()
	if err := n.store.Sync(ctx, sw2, []openflow.FlowModOp{{Mod: flows.DeleteByCookie(0, 0), Name: "delete every flow before the replay"}}, nil); err != nil {
		t.Fatal(err)
	}
	waitFor("the runner's resynchronisation", func() bool {
		p.mu.Lock()
		defer p.mu.Unlock()
		return !p.dirty && p.lastErr == nil
	})
	sameAsStore("after the cut, the replay and the resynchronisation")
}
