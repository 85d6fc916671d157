package e2e

// Restarts and crashes (issue 4): ovs-vswitchd killed and restarted, ovsdb-server killed
// and restarted, the daemon killed (also in the middle of an ADD), broken attachments left
// behind. Every test asserts what a user would check: packets pass, flows are exactly the
// desired ones, no IP is handed out twice, nothing broken is left.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/containernetworking/cni/libcni"
	"github.com/containernetworking/cni/pkg/types"

	"github.com/ofsdn/ofsdn/flows"
	"github.com/ofsdn/ofsdn/podnet"
	"github.com/ofsdn/ofsdn/test/harness"
)

// TestVswitchdRestartReplaysFlows: ovs-vswitchd is killed with SIGKILL and started again
// the way ovs-ctl restarts it (other_config:flow-restore-wait=true first). The daemon
// reconnects by itself, replays its flows and clears flow-restore-wait: every pod pair
// pings again, and the flow table is exactly what it was (the daemon's desired state), with
// nothing missing and nothing extra.
func TestVswitchdRestartReplaysFlows(t *testing.T) {
	serial(t)
	n := startNode(t, "10.140.0.0/24")
	pods := []*testPod{n.addPod("r1"), n.addPod("r2"), n.addPod("r3")}
	gw := net.ParseIP("10.140.0.1")
	if d := allPairsPing(t, pods, gw, 20*time.Second); d < 0 {
		t.Fatal("pods do not reach each other before the restart")
	}
	before := n.flowSet(t)
	gen := n.generation(t)
	for _, l := range before {
		if g := cookieGeneration(t, l); g != gen {
			t.Fatalf("flow of generation %d, want only %d:\n%s", g, gen, l)
		}
	}

	for round := 1; round <= 2; round++ {
		killed := time.Now()
		n.OVS.KillVswitchd(t)
		n.OVS.StartVswitchd(t, true)
		back := time.Now()
		d := allPairsPing(t, pods, gw, 60*time.Second)
		if d < 0 {
			t.Fatalf("round %d: pods do not reach each other and the gateway 60s after ovs-vswitchd returned", round)
		}
		t.Logf("round %d: all %d pod pairs and the gateway ping again %s after ovs-vswitchd returned (issue target: 2s)",
			round, len(pods)*(len(pods)-1), d.Round(time.Millisecond))
		t.Logf("round %d: ovs-vswitchd returned at %s (compare with the daemon's log times below)", round, back.UTC().Format("15:04:05.000"))
		n.logDaemonLines(t, "OpenFlow connection ready", "flow tables synchronised")
		n.assertOutageLoggedOnce(t, fmt.Sprintf("round %d", round), killed)

		after := n.flowSet(t)
		if missing, extra := diffLines(before, after); len(missing)+len(extra) > 0 {
			t.Errorf("round %d: flow table differs from the desired state\nmissing:\n%s\nextra:\n%s",
				round, strings.Join(missing, "\n"), strings.Join(extra, "\n"))
		}
		if v := n.OVS.Vsctl(t, "--if-exists", "get", "Open_vSwitch", ".", "other_config:flow-restore-wait"); v != "" {
			t.Errorf("round %d: other_config:flow-restore-wait is still %s after the replay", round, v)
		}
	}
	// The daemon kept serving: a new pod works and reaches the old ones.
	p := n.addPod("r4")
	if err := pingOnce(p.netns, pods[0].ip()); err != nil {
		t.Errorf("pod added after the restarts: %v", err)
	}
}

// TestOVSDBRestart: ovsdb-server is killed and started again on the same database. An ADD
// during the outage fails in bounded time with an error saying OVS is unavailable (and
// leaves nothing behind); after the restart a new ADD succeeds without restarting the
// daemon, and old and new pods reach each other.
func TestOVSDBRestart(t *testing.T) {
	serial(t)
	n := startNode(t, "10.141.0.0/24")
	a := n.addPod("o1")
	before := n.flowSet(t)

	killed := time.Now()
	n.OVS.KillOVSDB(t)
	down := n.newPodSpec("o-down")
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	start := time.Now()
	_, err := n.CNI.AddNetworkList(ctx, n.Netconf, down.rt)
	cancel()
	took := time.Since(start)
	if err == nil {
		t.Fatal("ADD succeeded while ovsdb-server was down")
	}
	var te *types.Error
	code := uint(0)
	if errors.As(err, &te) {
		code = te.Code
	}
	t.Logf("ADD during the ovsdb-server outage failed after %s with CNI code %d: %v", took.Round(time.Millisecond), code, err)
	if code != uint(types.ErrTryAgainLater) || !strings.Contains(strings.ToLower(err.Error()), "unavailable") {
		t.Errorf("ADD during the outage: want CNI error 11 (try again later) saying OVS is unavailable, got code %d: %v", code, err)
	}

	// STATUS polled through the outage, as a runtime does: each poll fails.
	for i := 0; i < 5; i++ {
		_ = n.CNI.GetStatusNetworkList(context.Background(), n.Netconf)
		time.Sleep(100 * time.Millisecond)
	}
	n.OVS.StartOVSDB(t)
	n.waitStatus(60 * time.Second)
	n.assertOutageLoggedOnce(t, "ovsdb-server outage", killed)
	b := n.addPod("o2")
	if err := pingOnce(b.netns, a.ip()); err != nil {
		t.Errorf("new pod to old pod after the ovsdb-server restart: %v", err)
	}
	if err := pingOnce(a.netns, b.ip()); err != nil {
		t.Errorf("old pod to new pod after the ovsdb-server restart: %v", err)
	}
	// Same ports after the restart: the pipeline was not rebuilt, the old flows are intact
	// (plus the new pod's).
	n.logDaemonLines(t, "re-ensured", "rebuil")
	after := n.flowSet(t)
	if missing, _ := diffLines(before, after); len(missing) > 0 {
		t.Errorf("flows gone after the ovsdb-server restart:\n%s", strings.Join(missing, "\n"))
	}
	// The failed ADD leaves no lease and no port: its undo goes on in the background
	// until OVS answers (README "Faults and restarts"), and must have finished within
	// 30 s of the restart.
	var leftLease, leftPort string
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(200 * time.Millisecond) {
		leftLease, leftPort = "", ""
		for ip, cid := range n.leases(t) {
			if cid == down.containerID {
				leftLease = ip
			}
		}
		if ports := n.OVS.Vsctl(t, "list-ports", "br-int"); strings.Contains(ports, podnet.HostVethName(down.containerID, "eth0")) {
			leftPort = ports
		}
		if (leftLease == "" && leftPort == "") || time.Now().After(deadline) {
			break
		}
	}
	if leftLease != "" {
		t.Errorf("the ADD that failed during the outage left lease %s 30 s after the restart", leftLease)
	}
	if leftPort != "" {
		t.Errorf("the ADD that failed during the outage left its port 30 s after the restart: %s", leftPort)
	}
}

// TestDaemonCrash: the daemon is killed with SIGKILL in the middle of an ADD (lease
// allocated, veth and port made, answer never sent). While it is down the pods keep
// forwarding. Broken leftovers are planted: a port with our external_ids whose device does
// not exist (ofport -1) with a lease, a lease with no port at all, and a pod whose host veth
// was deleted. After the restart:
// a new generation is persisted and no flow of the earlier one is left; the leftovers are
// gone with their leases; the crashed ADD's address is still leased and never handed out
// again; DEL of a pod from before the crash frees its IP; and a CNI GC removes a valid
// attachment whose veth was deleted by hand.
func TestDaemonCrash(t *testing.T) {
	serial(t)
	n := startNode(t, "10.142.0.0/24")
	a, b, gone := n.addPod("d1"), n.addPod("d2"), n.addPod("d3")
	gen1 := n.generation(t)

	// Crash between allocation and answer: with ovs-vswitchd stopped the ADD waits for an
	// ofport after creating the port; the daemon is killed right then.
	mid := n.newPodSpec("d-mid")
	midPort := podnet.HostVethName(mid.containerID, "eth0")
	n.OVS.StopVswitchd(t)
	contDone := false
	defer func() {
		if !contDone {
			n.OVS.ContVswitchd(t)
		}
	}()
	addErr := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		defer cancel()
		_, err := n.CNI.AddNetworkList(ctx, n.Netconf, mid.rt)
		addErr <- err
	}()
	waitFor(t, 30*time.Second, "the in-flight ADD's port in OVSDB", func() bool {
		return strings.Contains(n.OVS.Vsctl(t, "list-ports", "br-int"), midPort)
	})
	n.stopDaemon() // SIGKILL
	n.OVS.ContVswitchd(t)
	contDone = true
	if err := <-addErr; err == nil {
		t.Fatal("the ADD in flight when the daemon was killed succeeded")
	}
	midIP := ""
	for ip, cid := range n.leases(t) {
		if cid == mid.containerID {
			midIP = ip
		}
	}
	if midIP == "" {
		t.Fatal("the crashed ADD has no lease on disk: the lease must be persisted before anything else")
	}

	// While the daemon is down, pods keep forwarding.
	for i := 0; i < 3; i++ {
		if err := pingOnce(a.netns, b.ip()); err != nil {
			t.Fatalf("ping while the daemon is down: %v", err)
		}
		if err := pingOnce(b.netns, a.ip()); err != nil {
			t.Fatalf("ping while the daemon is down: %v", err)
		}
	}

	// Leftovers: a pod whose veth is deleted while the daemon is down (its port, lease and
	// flows stay behind; only the earlier generation's deletion can remove the flows), a
	// port with no device (ofport -1) and a lease, and a lease with no port.
	n.OVS.Exec(t, "ip", "link", "del", gone.result.Interfaces[0].Name)
	fake := "fake-" + strconv.FormatInt(time.Now().UnixNano(), 36)
	fakePort := podnet.HostVethName(fake, "eth0")
	n.OVS.Vsctl(t, "add-port", "br-int", fakePort, "--", "set", "Interface", fakePort,
		"external_ids:ofsdn-container-id="+fake, "external_ids:ofsdn-ifname=eth0",
		"external_ids:ofsdn-ip=10.142.0.200/24", "external_ids:ofsdn-mac=0a:58:0a:8e:00:c8",
		"external_ids:ofsdn-pod-namespace=e2e", "external_ids:ofsdn-pod-name=fake")
	waitFor(t, 10*time.Second, "ofport -1 on the planted port", func() bool {
		return n.OVS.Vsctl(t, "get", "Interface", fakePort, "ofport") == "-1"
	})
	ghost := "ghost-" + strconv.FormatInt(time.Now().UnixNano(), 36)
	n.addLeases(t, map[string]string{"10.142.0.200": fake, "10.142.0.201": ghost})

	// A pod's host end as an ofsdn before the host-end isolation left it: the restarted
	// daemon isolates it again (podnet.IsolateHostEnd on restore).
	aHost := a.result.Interfaces[0].Name
	sysctls := map[string][2]string{ // key: {as left by an older ofsdn, as now}
		"net.ipv4.conf." + aHost + ".arp_ignore":   {"0", "8"},
		"net.ipv4.conf." + aHost + ".rp_filter":    {"0", "1"},
		"net.ipv6.conf." + aHost + ".disable_ipv6": {"0", "1"},
	}
	for k, v := range sysctls {
		n.OVS.Exec(t, "sysctl", "-w", k+"="+v[0])
	}

	n.startDaemon()

	for k, v := range sysctls {
		if got := strings.TrimSpace(n.OVS.Exec(t, "sysctl", "-n", k)); got != v[1] {
			t.Errorf("after the restart, restored pod's %s = %s, want %s", k, got, v[1])
		}
	}

	gen2 := n.generation(t)
	if gen2 == gen1 {
		t.Errorf("generation still %d after the restart", gen1)
	}
	for _, l := range n.flowSet(t) {
		if g := cookieGeneration(t, l); g != gen2 {
			t.Errorf("flow of generation %d left after the restart with generation %d:\n%s", g, gen2, l)
		}
	}
	n.assertGone(t, gone) // port, flows of the earlier generation, veth, lease
	if ports := n.OVS.Vsctl(t, "list-ports", "br-int"); strings.Contains(ports, fakePort) {
		t.Errorf("port %s with no device was not removed at start: %s", fakePort, ports)
	}
	leased := n.leases(t) // IP → container
	for ip, cid := range leased {
		if cid == fake || cid == ghost {
			t.Errorf("lease %s of broken attachment %s was not freed at start", ip, cid)
		}
	}
	if leased[midIP] != mid.containerID {
		t.Errorf("the crashed ADD's lease %s (its port exists) was freed or reassigned: %q", midIP, leased[midIP])
	}
	if err := pingOnce(a.netns, b.ip()); err != nil {
		t.Errorf("ping after the restart: %v", err)
	}

	// No duplicate IP: more pods, every address distinct from each other, from the pods
	// from before the crash and from the crashed ADD's.
	seen := map[string]string{a.ip().String(): a.name, b.ip().String(): b.name, midIP: mid.name}
	var more []*testPod
	for i := 0; i < 4; i++ {
		p := n.addPod(fmt.Sprintf("d-new%d", i))
		more = append(more, p)
		if other, dup := seen[p.ip().String()]; dup {
			t.Errorf("IP %s handed out twice: %s and %s", p.ip(), other, p.name)
		}
		seen[p.ip().String()] = p.name
	}
	if err := pingOnce(more[0].netns, a.ip()); err != nil {
		t.Errorf("new pod to a pod from before the crash: %v", err)
	}

	// DEL of a pod added before the crash frees its IP and leaves nothing.
	if err := n.delPod(a); err != nil {
		t.Fatalf("DEL of a pod from before the crash: %v", err)
	}
	n.assertGone(t, a)

	// GC keeps valid attachments but removes a valid one whose host veth is gone.
	host := b.result.Interfaces[0].Name
	n.OVS.Exec(t, "ip", "link", "del", host)
	valid := []types.GCAttachment{{ContainerID: b.containerID, IfName: "eth0"}, {ContainerID: mid.containerID, IfName: "eth0"}}
	for _, p := range more {
		valid = append(valid, types.GCAttachment{ContainerID: p.containerID, IfName: "eth0"})
	}
	if err := n.CNI.GCNetworkList(context.Background(), n.Netconf, &libcni.GCArgs{ValidAttachments: valid}); err != nil {
		t.Fatalf("GC: %v", err)
	}
	n.assertGone(t, b)
	for _, p := range more {
		if err := pingOnce(p.netns, more[(len(more)-1)].ip()); p != more[len(more)-1] && err != nil {
			t.Errorf("valid pod %s after GC: %v", p.name, err)
		}
	}
}

// ---- helpers ----------------------------------------------------------------------------

// newPodSpec makes a netns and runtime config for a pod without adding it.
func (n *testNode) newPodSpec(name string) *testPod {
	p := &testPod{name: name, netns: newNetns(n.T, "ofsdn-e2e-"+name), containerID: "ctr-" + name + fmt.Sprint(time.Now().UnixNano())}
	p.rt = &libcni.RuntimeConf{ContainerID: p.containerID, NetNS: p.netns, IfName: "eth0",
		Args: [][2]string{{"K8S_POD_NAMESPACE", "e2e"}, {"K8S_POD_NAME", name}}}
	return p
}

// logDaemonLines logs the daemon's log lines that contain any of subs (measurements).
func (n *testNode) logDaemonLines(t *testing.T, subs ...string) {
	t.Helper()
	b, _ := os.ReadFile(n.LogPath)
	for _, l := range strings.Split(string(b), "\n") {
		for _, s := range subs {
			if strings.Contains(l, s) {
				t.Logf("daemon: %s", l)
				break
			}
		}
	}
}

// assertOutageLoggedOnce fails the test when one warning or error message not about a
// particular pod was logged by the daemon more than once since since
// (harness.RepeatedWarnings): an outage of OVS is logged once, not per retry.
func (n *testNode) assertOutageLoggedOnce(t *testing.T, when string, since time.Time) {
	t.Helper()
	b, err := os.ReadFile(n.LogPath)
	if err != nil {
		t.Fatal(err)
	}
	for msg, lines := range harness.RepeatedWarnings(string(b), since) {
		t.Errorf("%s: the daemon logged %q %d times during one outage, want once:\n%s", when, msg, len(lines), strings.Join(lines, "\n"))
	}
}

// waitStatus waits until CNI STATUS passes.
func (n *testNode) waitStatus(bound time.Duration) {
	n.T.Helper()
	var err error
	deadline := time.Now().Add(bound)
	for time.Now().Before(deadline) {
		if err = n.CNI.GetStatusNetworkList(context.Background(), n.Netconf); err == nil {
			return
		}
		time.Sleep(50 * time.Millisecond)
	}
	n.T.Fatalf("CNI STATUS still failing after %s: %v", bound, err)
}

// generation reads the daemon's generation from the bridge's external_ids.
func (n *testNode) generation(t *testing.T) uint16 {
	t.Helper()
	v := strings.Trim(n.OVS.Vsctl(t, "get", "Bridge", "br-int", "external_ids:ofsdn-generation"), `"`)
	g, err := strconv.ParseUint(v, 10, 16)
	if err != nil || g == 0 {
		t.Fatalf("bridge external_ids:ofsdn-generation = %q, want 1..65535", v)
	}
	return uint16(g)
}

var cookieRe = regexp.MustCompile(`cookie=(0x[0-9a-f]+)`)

// cookieGeneration returns the generation bits of a dump-flows line's cookie.
func cookieGeneration(t *testing.T, line string) uint16 {
	t.Helper()
	m := cookieRe.FindStringSubmatch(line)
	if m == nil {
		return 0
	}
	c, err := strconv.ParseUint(m[1], 0, 64)
	if err != nil {
		t.Fatalf("cookie in %q: %v", line, err)
	}
	return flows.Cookie(c).Generation()
}

// flowSet returns the bridge's flows (dump-flows --no-stats), sorted.
func (n *testNode) flowSet(t *testing.T) []string {
	t.Helper()
	lines := flowLines(n.OVS.Ofctl(t, "dump-flows", "--no-stats", n.mgmt()))
	sort.Strings(lines)
	return lines
}

// diffLines returns the lines of want missing from got and those of got not in want.
func diffLines(want, got []string) (missing, extra []string) {
	count := map[string]int{}
	for _, l := range want {
		count[l]++
	}
	for _, l := range got {
		count[l]--
	}
	for l, c := range count {
		for ; c > 0; c-- {
			missing = append(missing, l)
		}
		for ; c < 0; c++ {
			extra = append(extra, l)
		}
	}
	sort.Strings(missing)
	sort.Strings(extra)
	return missing, extra
}

// pingOnce sends one echo request with a 1 s wait.
func pingOnce(netnsPath string, dst net.IP) error {
	out, err := exec.Command("ip", "netns", "exec", filepath.Base(netnsPath), "ping", "-c", "1", "-W", "1", dst.String()).CombinedOutput()
	if err != nil {
		return fmt.Errorf("ping %s from %s: %v\n%s", dst, filepath.Base(netnsPath), err, out)
	}
	return nil
}

// allPairsPing retries until every ordered pod pair and every pod→gw ping has succeeded
// once, and returns how long that took, or -1 after bound.
func allPairsPing(t *testing.T, pods []*testPod, gw net.IP, bound time.Duration) time.Duration {
	t.Helper()
	type pair struct {
		from *testPod
		to   net.IP
	}
	var todo []pair
	for _, p := range pods {
		for _, q := range pods {
			if p != q {
				todo = append(todo, pair{p, q.ip()})
			}
		}
		todo = append(todo, pair{p, gw})
	}
	start := time.Now()
	var last error
	for len(todo) > 0 {
		if time.Since(start) > bound {
			t.Logf("still failing after %s: %v", bound, last)
			return -1
		}
		var left []pair
		for _, pr := range todo {
			if err := pingOnce(pr.from.netns, pr.to); err != nil {
				last = err
				left = append(left, pr)
			}
		}
		todo = left
	}
	return time.Since(start)
}

// waitFor polls cond every 20 ms until it holds, failing the test after bound.
func waitFor(t *testing.T, bound time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(bound)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting for %s", bound, what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// addLeases writes leases (IP → container ID, interface eth0) into the store's file while
// the daemon is down, as a crashed daemon would have left them.
func (n *testNode) addLeases(t *testing.T, add map[string]string) {
	t.Helper()
	b, err := os.ReadFile(n.LeasesPath())
	if err != nil {
		t.Fatal(err)
	}
	var st map[string]any
	if err := json.Unmarshal(b, &st); err != nil {
		t.Fatal(err)
	}
	leases, _ := st["leases"].(map[string]any)
	if leases == nil {
		leases = map[string]any{}
	}
	for ip, cid := range add {
		leases[ip] = map[string]any{"containerID": cid, "ifName": "eth0", "owner": "e2e/planted", "allocated": time.Now().UTC().Format(time.RFC3339)}
	}
	st["leases"] = leases
	b, _ = json.Marshal(st)
	if err := os.WriteFile(n.LeasesPath(), b, 0o600); err != nil {
		t.Fatal(err)
	}
}
