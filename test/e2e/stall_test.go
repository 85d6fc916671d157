package e2e

// Open vSwitch that stops answering (issue 20, items 2 and 3): ovs-vswitchd frozen with
// SIGSTOP, ovsdb-server killed, ovsdb-server frozen. Through the real plugin binary and
// libcni, what a runtime and a kubelet see: every ADD is answered within addTimeout plus
// a stated margin with CNI error 11, /readyz turns 503 within a stated bound and 200
// again once OVS answers, and once it does nothing of the failed ADDs is left behind (no
// port, flow, host veth or IP lease), while a new ADD works.

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/containernetworking/cni/pkg/types"

	"github.com/ofsdn/ofsdn/metrics"
	"github.com/ofsdn/ofsdn/podnet"
	"github.com/ofsdn/ofsdn/test/sandbox"
)

const (
	// stallAddTimeout is the daemon's -add-timeout in these tests.
	stallAddTimeout = 3 * time.Second
	// stallAddMargin is what an ADD's answer may take beyond addTimeout: the plugin's
	// exec, the HTTP round trip and the handler's bookkeeping on a loaded 2-core machine
	// (the README states the bound as addTimeout + 1 s).
	stallAddMargin = time.Second
	// stallReadyBound is how soon /readyz must say 503 once Open vSwitch stops
	// answering: the README's bound (4 s: one probe interval of 1 s plus the probe's
	// 3 s timeout) plus 1 s of margin for the poll and a loaded machine.
	stallReadyBound = 5 * time.Second
)

// TestAddBoundedWhileOVSStalls: for each way Open vSwitch stops answering, ADDs (new
// pods at once, then a retry of the same container and another new pod while the first
// ones' undo may still run) each answer within addTimeout + 1 s with CNI error 11 (and
// an ADD whose veth step fails, after its flows were sent, within the same bound), and
// /readyz answers 503 within 5 s. When OVS answers again, /readyz returns to 200, the
// failed ADDs leave nothing behind (the flow table is exactly what it was before), the
// runtime's DELs of them succeed, and a new pod is wired and reaches the old one. CNI
// STATUS fails (code 50) during the fault, as /readyz does.
func TestAddBoundedWhileOVSStalls(t *testing.T) {
	serial(t)
	pidOf := func(t *testing.T, o *sandbox.OVS, daemon string) int {
		b, err := os.ReadFile(filepath.Join(o.Dir, daemon+".pid"))
		if err != nil {
			t.Fatal(err)
		}
		pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
		if err != nil {
			t.Fatal(err)
		}
		return pid
	}
	signal := func(t *testing.T, o *sandbox.OVS, daemon string, sig syscall.Signal) {
		if err := syscall.Kill(pidOf(t, o, daemon), sig); err != nil {
			t.Fatalf("signal %v to %s: %v", sig, daemon, err)
		}
	}
	cases := []struct {
		name, subnet string
		stop, resume func(t *testing.T, o *sandbox.OVS)
	}{
		{"vswitchd-frozen", "10.150.0.0/24",
			func(t *testing.T, o *sandbox.OVS) { o.StopVswitchd(t) },
			func(t *testing.T, o *sandbox.OVS) { o.ContVswitchd(t) }},
		{"ovsdb-killed", "10.151.0.0/24",
			func(t *testing.T, o *sandbox.OVS) { o.KillOVSDB(t) },
			func(t *testing.T, o *sandbox.OVS) { o.StartOVSDB(t) }},
		{"ovsdb-frozen", "10.152.0.0/24",
			func(t *testing.T, o *sandbox.OVS) { signal(t, o, "ovsdb-server", syscall.SIGSTOP) },
			func(t *testing.T, o *sandbox.OVS) { signal(t, o, "ovsdb-server", syscall.SIGCONT) }},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			// A flow audit every second keeps one in flight during every fault: an ADD
			// must not wait behind an audit's dump of a switch that does not answer (seen:
			// 7-10 s answers with the default 30 s audit, at the audit's tick).
			n := startNodeWith(t, tc.subnet, filepath.Join(buildBinaries(t), "ofsdn-node"),
				"--add-timeout", stallAddTimeout.String(), "--flow-audit-interval", "1s")
			old := n.addPod("s0")
			before := n.flowSet(t)
			hc := netnsHTTP(t, n.OVS.NetnsPath())
			hc.Timeout = 2 * time.Second
			ready := func() (int, string) {
				code, body, err := get(hc, metrics.PathReadyz)
				if err != nil {
					return 0, err.Error()
				}
				return code, body
			}
			if code, body := ready(); code != http.StatusOK {
				t.Fatalf("/readyz before the fault: %d %s", code, body)
			}

			tc.stop(t, n.OVS)
			stalled := time.Now()
			resumed := false
			defer func() {
				if !resumed {
					tc.resume(t, n.OVS)
				}
			}()

			// /readyz, polled every 100 ms from the fault on.
			notReadyAt := make(chan time.Duration, 1)
			go func() {
				for time.Since(stalled) < 30*time.Second {
					if code, _ := ready(); code != http.StatusOK {
						notReadyAt <- time.Since(stalled)
						return
					}
					time.Sleep(100 * time.Millisecond)
				}
				notReadyAt <- -1
			}()

			// Three new pods at once, then (their undo may still be running) a retry of
			// the first one's container and another new pod.
			var failed []*testPod
			var mu sync.Mutex
			check := func(p *testPod, what string) {
				took, err := n.timedAdd(p)
				t.Logf("%s: ADD %s answered after %s: %v", what, p.name, took.Round(time.Millisecond), err)
				var te *types.Error
				switch {
				case err == nil:
					t.Errorf("%s: ADD %s succeeded while Open vSwitch does not answer", what, p.name)
				case !errors.As(err, &te) || te.Code != types.ErrTryAgainLater:
					t.Errorf("%s: ADD %s: want CNI error 11 (try again later), got %v", what, p.name, err)
				}
				if took > stallAddTimeout+stallAddMargin {
					t.Errorf("%s: ADD %s answered after %s, want within addTimeout %s + %s", what, p.name, took.Round(time.Millisecond), stallAddTimeout, stallAddMargin)
				}
				mu.Lock()
				failed = append(failed, p)
				mu.Unlock()
			}
			var wg sync.WaitGroup
			first := make([]*testPod, 3)
			for i := range first {
				first[i] = n.newPodSpec(fmt.Sprintf("s%d", i+1))
				wg.Add(1)
				go func(p *testPod) { defer wg.Done(); check(p, "during the fault") }(first[i])
			}
			wg.Wait()
			retry := *first[0]
			retry.name += "-retry"
			check(&retry, "retry during the fault")
			check(n.newPodSpec("s4"), "later during the fault")
			// An ADD whose veth step fails (its netns already holds eth0) sent its flows
			// before the veth, to a switch that may not answer: its undo waits for them,
			// and its answer still comes within the bound (an error of the veth step, or
			// 11 when the flows' wait ended it).
			vp := n.newPodSpec("s6")
			if out, err := exec.Command("ip", "-n", filepath.Base(vp.netns), "link", "add", "eth0", "type", "veth", "peer", "name", "taken0").CombinedOutput(); err != nil {
				t.Fatalf("eth0 in %s: %v\n%s", vp.netns, err, out)
			}
			took, err := n.timedAdd(vp)
			t.Logf("veth step failing during the fault: ADD %s answered after %s: %v", vp.name, took.Round(time.Millisecond), err)
			if err == nil {
				t.Errorf("ADD %s succeeded into a netns that already holds eth0", vp.name)
			}
			if took > stallAddTimeout+stallAddMargin {
				t.Errorf("veth step failing during the fault: ADD %s answered after %s, want within addTimeout %s + %s", vp.name, took.Round(time.Millisecond), stallAddTimeout, stallAddMargin)
			}
			failed = append(failed, vp)

			d := <-notReadyAt
			switch {
			case d < 0:
				t.Errorf("/readyz still 200 30s after the fault")
			case d > stallReadyBound:
				t.Errorf("/readyz turned 503 only %s after the fault, want within %s", d.Round(time.Millisecond), stallReadyBound)
			default:
				t.Logf("/readyz turned 503 %s after the fault", d.Round(time.Millisecond))
			}
			code, body := ready()
			t.Logf("/readyz during the fault: %d %s", code, strings.TrimSpace(body))
			// The runtime's CNI STATUS says so too (code 50): a hung side keeps its
			// socket connected, and every ADD would wait for its deadline.
			serr := n.CNI.GetStatusNetworkList(context.Background(), n.Netconf)
			var se *types.Error
			if !errors.As(serr, &se) || se.Code != types.ErrPluginNotAvailable {
				t.Errorf("CNI STATUS during the fault (after /readyz turned 503): %v, want CNI error 50 (plugin not available)", serr)
			} else {
				t.Logf("CNI STATUS during the fault: %v", serr)
			}

			tc.resume(t, n.OVS)
			resumed = true
			back := time.Now()
			waitFor(t, 60*time.Second, "/readyz 200 after Open vSwitch answers again", func() bool {
				code, _ := ready()
				return code == http.StatusOK
			})
			t.Logf("/readyz 200 again %s after Open vSwitch answers", time.Since(back).Round(time.Millisecond))

			// Nothing of the failed ADDs is left once the undos have finished: no lease,
			// port or host veth of theirs, and the flow table is exactly the one before.
			for deadline := time.Now().Add(60 * time.Second); ; time.Sleep(100 * time.Millisecond) {
				left := n.leftovers(t, failed, before)
				if left == "" {
					break
				}
				if time.Now().After(deadline) {
					t.Fatalf("60s after Open vSwitch answers again, the failed ADDs left: %s", left)
				}
			}
			t.Logf("failed ADDs cleaned up %s after Open vSwitch answers", time.Since(back).Round(time.Millisecond))
			for _, p := range failed {
				if err := n.CNI.DelNetworkList(context.Background(), n.Netconf, p.rt); err != nil {
					t.Errorf("the runtime's DEL of failed ADD %s: %v", p.name, err)
				}
			}
			if left := n.leftovers(t, failed, before); left != "" {
				t.Errorf("after the DELs: %s", left)
			}
			p := n.addPod("s5")
			if err := pingOnce(p.netns, old.ip()); err != nil {
				t.Errorf("new pod to the pod from before the fault: %v", err)
			}
		})
	}
}

// timedAdd runs one ADD of p through libcni and returns how long its answer took. On
// success p.result is set.
func (n *testNode) timedAdd(p *testPod) (time.Duration, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	start := time.Now()
	_, err := n.CNI.AddNetworkList(ctx, n.Netconf, p.rt)
	return time.Since(start), err
}

// leftovers says what the failed ADDs left behind ("" when nothing): leases, OVS ports,
// host veths of theirs, and flows that differ from before.
func (n *testNode) leftovers(t *testing.T, failed []*testPod, before []string) string {
	t.Helper()
	var out []string
	leases := n.leases(t)
	ports := n.OVS.Vsctl(t, "list-ports", "br-int")
	for _, p := range failed {
		for ip, cid := range leases {
			if cid == p.containerID {
				out = append(out, fmt.Sprintf("lease %s of %s", ip, p.name))
			}
		}
		host := podnet.HostVethName(p.containerID, "eth0")
		if strings.Contains(ports, host) {
			out = append(out, fmt.Sprintf("OVS port %s of %s", host, p.name))
		}
		if exec.Command("ip", "netns", "exec", n.OVS.Netns, "ip", "link", "show", host).Run() == nil {
			out = append(out, fmt.Sprintf("host veth %s of %s", host, p.name))
		}
	}
	if missing, extra := diffLines(before, n.flowSet(t)); len(missing)+len(extra) > 0 {
		out = append(out, fmt.Sprintf("flows differ from before the fault; missing:\n%s\nextra:\n%s",
			strings.Join(missing, "\n"), strings.Join(extra, "\n")))
	}
	return strings.Join(out, "; ")
}
