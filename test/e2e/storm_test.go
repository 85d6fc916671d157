package e2e

// Storms: many pods through ADD/DEL at concurrency 16 in the awkward orders real runtimes
// produce, then an account of everything a pod can leave behind. And the ADD deadline: an
// ADD while ovs-vswitchd is stopped fails cleanly within the daemon's addTimeout.

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime/debug"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/containernetworking/cni/libcni"
	"github.com/containernetworking/cni/pkg/types"
	current "github.com/containernetworking/cni/pkg/types/100"
	"github.com/containernetworking/plugins/pkg/ns"
	"github.com/containernetworking/plugins/pkg/testutils"

	"github.com/ofsdn/ofsdn/flows"
	"github.com/ofsdn/ofsdn/podnet"
)

var (
	raceOnce sync.Once
	raceBin  string
	raceErr  error
)

// raceEnabled reports whether this test binary was built with -race.
func raceEnabled() bool {
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return false
	}
	for _, s := range bi.Settings {
		if s.Key == "-race" && s.Value == "true" {
			return true
		}
	}
	return false
}

// daemonBinary returns the ofsdn-node binary for storms: built with -race when the tests
// are (so `go test -race ./test/e2e/` checks the daemon too), the harness's otherwise.
func daemonBinary(t *testing.T) string {
	t.Helper()
	bin := buildBinaries(t)
	if !raceEnabled() {
		return filepath.Join(bin, "ofsdn-node")
	}
	raceOnce.Do(func() {
		dir, err := os.MkdirTemp("", "ofsdn-e2e-race-")
		if err != nil {
			raceErr = err
			return
		}
		raceBin = filepath.Join(dir, "ofsdn-node")
		out, err := exec.Command("go", "build", "-race", "-o", raceBin, "github.com/ofsdn/ofsdn/cmd/ofsdn-node").CombinedOutput()
		if err != nil {
			raceErr = fmt.Errorf("go build -race ofsdn-node: %v\n%s", err, out)
		}
	})
	if raceErr != nil {
		t.Fatal(raceErr)
	}
	return raceBin
}

// startNodeWith is startNode with a chosen daemon binary and extra daemon flags.
func startNodeWith(t *testing.T, subnet, daemonBin string, extra ...string) *testNode {
	t.Helper()
	n := startNode(t, subnet)
	// Replace the harness's daemon by ours, on the same sandbox, socket and data dir.
	n.stopDaemon()
	n.StartDaemon(daemonBin, 60*time.Second, append([]string{"--pod-subnet", n.Subnet, "--log-level", "debug"}, extra...)...)
	return n
}

// hostVethName matches `ip -o link` names of host veths (podnet.HostVethName: "ofs" and 12
// hex digits), e.g. "ofs0123456789ab@if3:".
var hostVethName = regexp.MustCompile(`^ofs[0-9a-f]{12}[@:]`)

// stormPod is one sandbox of a storm: its own netns, container ID and pod name.
type stormPod struct {
	name string
	ns   ns.NetNS
	rt   *libcni.RuntimeConf
}

func newStormPod(t *testing.T, podName, containerID string) *stormPod {
	t.Helper()
	netns, err := testutils.NewNS()
	if err != nil {
		t.Fatalf("create netns: %v", err)
	}
	t.Cleanup(func() {
		netns.Close()
		_ = testutils.UnmountNS(netns)
	})
	return &stormPod{name: podName, ns: netns, rt: &libcni.RuntimeConf{
		ContainerID: containerID, NetNS: netns.Path(), IfName: "eth0",
		Args: [][2]string{{"IgnoreUnknown", "1"}, {"K8S_POD_NAMESPACE", "storm"}, {"K8S_POD_NAME", podName},
			{"K8S_POD_INFRA_CONTAINER_ID", containerID}},
	}}
}

// stormCounter counts CNI operations and the unexpected failures of a storm.
type stormCounter struct {
	ops  atomic.Int64
	mu   sync.Mutex
	errs []string
}

func (c *stormCounter) fail(format string, args ...any) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.errs = append(c.errs, fmt.Sprintf(format, args...))
}

func (n *testNode) stormAdd(c *stormCounter, p *stormPod) (*current.Result, error) {
	c.ops.Add(1)
	res, err := n.CNI.AddNetworkList(context.Background(), n.Netconf, p.rt)
	if err != nil {
		return nil, err
	}
	return current.NewResultFromResult(res)
}

func (n *testNode) stormDel(c *stormCounter, p *stormPod) error {
	c.ops.Add(1)
	return n.CNI.DelNetworkList(context.Background(), n.Netconf, p.rt)
}

// leases returns the IPAM store's leases: IP → container ID.
func (n *testNode) leases(t *testing.T) map[string]string {
	t.Helper()
	if _, err := os.Stat(n.LeasesPath()); errors.Is(err, os.ErrNotExist) {
		return map[string]string{}
	}
	return n.Leases(t)
}

// assertNoLeaks checks that no pod is left on the node: no IP lease, no OVS port but the
// gateway, no flow with a pod owner cookie, no host veth, no stray file in the data dir or
// the runtime's result cache, and that the daemon logged no data race or panic.
func (n *testNode) assertNoLeaks(t *testing.T) {
	t.Helper()
	if l := n.leases(t); len(l) != 0 {
		t.Errorf("IP leases left: %v", l)
	}
	if ports := n.OVS.Vsctl(t, "list-ports", "br-int"); ports != "ofsdn-gw0" {
		t.Errorf("OVS ports left on br-int: %q", ports)
	}
	cookie, _ := flows.Owner{Kind: flows.OwnerPod}.Cookie()
	dump := n.OVS.Ofctl(t, "dump-flows", "--no-stats", n.mgmt(), fmt.Sprintf("cookie=%#x/%#x", cookie, flows.CookieOwnerKindMask))
	if lines := flowLines(dump); len(lines) > 0 {
		t.Errorf("%d pod flows left:\n%s", len(lines), strings.Join(lines, "\n"))
	}
	links := n.OVS.Exec(t, "ip", "-o", "link", "show")
	for _, l := range strings.Split(links, "\n") {
		if f := strings.Fields(l); len(f) > 1 && hostVethName.MatchString(f[1]) {
			t.Errorf("host veth left in the node netns: %s", l)
		}
	}
	entries, err := os.ReadDir(filepath.Join(n.DataDir, "ipam"))
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		if e.Name() != "leases.json" && e.Name() != "lock" {
			t.Errorf("stray file in the IPAM dir: %s", e.Name())
		}
	}
	if cached, _ := filepath.Glob(filepath.Join(n.Dir, "cni-cache", "results", "*")); len(cached) > 0 {
		t.Errorf("runtime result cache still holds %d attachments: %v", len(cached), cached)
	}
	log, _ := os.ReadFile(n.LogPath)
	for _, bad := range []string{"WARNING: DATA RACE", "panic:", "handler panicked"} {
		if strings.Contains(string(log), bad) {
			t.Errorf("daemon log contains %q", bad)
		}
	}
	if err := n.CNI.GetStatusNetworkList(context.Background(), n.Netconf); err != nil {
		t.Errorf("STATUS after the storm: %v", err)
	}
}

// TestStorm runs several hundred CNI operations at concurrency 16 through libcni and the
// plugin binary, in the orders runtimes produce:
//   - plain: ADD, DEL, DEL again (DEL is idempotent);
//   - retry: ADD twice at once and once more afterwards with the same container ID: one
//     allocation, every successful ADD returns the same address;
//   - race: ADD and DEL of one container at once, then the runtime's final DEL;
//   - unknown: DEL of a container never added, with and without a netns;
//   - replace: a new sandbox (new container ID, same pod name) added while the old one's
//     DEL runs; the new one must stay wired (CHECK passes, the gateway answers).
//
// Afterwards nothing may be left: leases, ports, pod flows, host veths, files.
func TestStorm(t *testing.T) {
	serial(t)
	n := startNodeWith(t, "10.140.0.0/24", daemonBinary(t), "--log-level", "info")
	const workers = 16
	type job func(c *stormCounter, i int)
	var c stormCounter
	var seq atomic.Int64
	id := func(kind string) string { return fmt.Sprintf("storm-%s-%d", kind, seq.Add(1)) }

	plain := func(c *stormCounter, i int) {
		p := newStormPod(t, fmt.Sprintf("plain-%d", i), id("plain"))
		if _, err := n.stormAdd(c, p); err != nil {
			c.fail("plain ADD %s: %v", p.rt.ContainerID, err)
			return
		}
		for k := 0; k < 2; k++ {
			if err := n.stormDel(c, p); err != nil {
				c.fail("plain DEL #%d %s: %v", k+1, p.rt.ContainerID, err)
			}
		}
	}
	retry := func(c *stormCounter, i int) {
		p := newStormPod(t, fmt.Sprintf("retry-%d", i), id("retry"))
		var wg sync.WaitGroup
		results := make([]*current.Result, 3)
		errs := make([]error, 3)
		for k := 0; k < 2; k++ {
			wg.Add(1)
			go func() { defer wg.Done(); results[k], errs[k] = n.stormAdd(c, p) }()
		}
		wg.Wait()
		results[2], errs[2] = n.stormAdd(c, p)
		var ip string
		for k, r := range results {
			if errs[k] != nil {
				var e *types.Error
				if !errors.As(errs[k], &e) || e.Msg == "" {
					c.fail("retry ADD %s: unclear error %v", p.rt.ContainerID, errs[k])
				}
				continue
			}
			got := r.IPs[0].Address.IP.String()
			if ip != "" && got != ip {
				c.fail("retry ADD %s: addresses %s and %s for one container", p.rt.ContainerID, ip, got)
			}
			ip = got
		}
		if ip == "" {
			c.fail("retry ADD %s: no ADD succeeded: %v", p.rt.ContainerID, errs)
		}
		held := 0
		for _, cid := range n.leases(t) {
			if cid == p.rt.ContainerID {
				held++
			}
		}
		if held != 1 {
			c.fail("retry ADD %s: %d leases for one container, want 1", p.rt.ContainerID, held)
		}
		if err := n.stormDel(c, p); err != nil {
			c.fail("retry DEL %s: %v", p.rt.ContainerID, err)
		}
	}
	race := func(c *stormCounter, i int) {
		p := newStormPod(t, fmt.Sprintf("race-%d", i), id("race"))
		var wg sync.WaitGroup
		wg.Add(2)
		go func() { defer wg.Done(); _, _ = n.stormAdd(c, p) }() // either order is fine
		go func() {
			defer wg.Done()
			if err := n.stormDel(c, p); err != nil {
				c.fail("race DEL %s: %v", p.rt.ContainerID, err)
			}
		}()
		wg.Wait()
		if err := n.stormDel(c, p); err != nil {
			c.fail("race final DEL %s: %v", p.rt.ContainerID, err)
		}
	}
	unknown := func(c *stormCounter, i int) {
		rt := &libcni.RuntimeConf{ContainerID: id("never"), IfName: "eth0"}
		if i%2 == 0 {
			p := newStormPod(t, "never", rt.ContainerID)
			rt = p.rt
		}
		c.ops.Add(1)
		if err := n.CNI.DelNetworkList(context.Background(), n.Netconf, rt); err != nil {
			c.fail("DEL of never-added %s: %v", rt.ContainerID, err)
		}
	}
	replace := func(c *stormCounter, i int) {
		name := fmt.Sprintf("replace-%d", i)
		old := newStormPod(t, name, id("replace-old"))
		if _, err := n.stormAdd(c, old); err != nil {
			c.fail("replace ADD old %s: %v", old.rt.ContainerID, err)
			return
		}
		nu := newStormPod(t, name, id("replace-new"))
		var wg sync.WaitGroup
		var res *current.Result
		var addErr error
		wg.Add(2)
		go func() {
			defer wg.Done()
			if err := n.stormDel(c, old); err != nil {
				c.fail("replace DEL old %s: %v", old.rt.ContainerID, err)
			}
		}()
		go func() { defer wg.Done(); res, addErr = n.stormAdd(c, nu) }()
		wg.Wait()
		if addErr != nil {
			c.fail("replace ADD new %s: %v", nu.rt.ContainerID, addErr)
			return
		}
		c.ops.Add(1)
		if err := n.CNI.CheckNetworkList(context.Background(), n.Netconf, nu.rt); err != nil {
			c.fail("replace CHECK new %s after the old one's DEL: %v", nu.rt.ContainerID, err)
		}
		if err := ping(nu.rt.NetNS, net.ParseIP("10.140.0.1"), "-c", "1", "-W", "5"); err != nil {
			c.fail("replace: new sandbox %s (%s) cannot reach the gateway: %v", nu.rt.ContainerID, res.IPs[0].Address.IP, err)
		}
		if err := n.stormDel(c, nu); err != nil {
			c.fail("replace DEL new %s: %v", nu.rt.ContainerID, err)
		}
	}

	var jobs []job
	for i := 0; i < 40; i++ {
		jobs = append(jobs, plain, retry)
	}
	for i := 0; i < 25; i++ {
		jobs = append(jobs, race, unknown)
	}
	for i := 0; i < 15; i++ {
		jobs = append(jobs, replace)
	}
	start := time.Now()
	ch := make(chan int)
	var wg sync.WaitGroup
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range ch {
				jobs[i](&c, i)
			}
		}()
	}
	for i := range jobs {
		ch <- i
	}
	close(ch)
	wg.Wait()
	t.Logf("storm: %d CNI operations (%d jobs) at concurrency %d in %s, daemon race-checked: %v",
		c.ops.Load(), len(jobs), workers, time.Since(start).Round(time.Millisecond), raceEnabled())
	for _, e := range c.errs {
		t.Error(e)
	}
	if c.ops.Load() < 300 {
		t.Errorf("only %d operations, want several hundred", c.ops.Load())
	}
	n.assertNoLeaks(t)
}

// TestPoolExhaustion: on a /28 (13 pod addresses next to the gateway) 16 concurrent ADDs
// give 13 pods and 3 clear errors naming the pool and how many addresses are in use; DEL
// of all leaves nothing, and an address freed is handed out again.
func TestPoolExhaustion(t *testing.T) {
	serial(t)
	n := startNodeWith(t, "10.141.0.0/28", daemonBinary(t), "--log-level", "info")
	var c stormCounter
	pods := make([]*stormPod, 16)
	results := make([]*current.Result, len(pods))
	errs := make([]error, len(pods))
	var wg sync.WaitGroup
	for i := range pods {
		pods[i] = newStormPod(t, fmt.Sprintf("ex-%d", i), fmt.Sprintf("exhaust-%d", i))
		wg.Add(1)
		go func() { defer wg.Done(); results[i], errs[i] = n.stormAdd(&c, pods[i]) }()
	}
	wg.Wait()
	ok, failed := 0, 0
	var victim *stormPod
	for i, err := range errs {
		if err == nil {
			ok++
			victim = pods[i]
			continue
		}
		failed++
		var e *types.Error
		if !errors.As(err, &e) || !strings.Contains(e.Msg, "10.141.0.0/28 exhausted") || !strings.Contains(e.Msg, "13 in use") {
			t.Errorf("ADD %d on a full pool: %v; want a CNI error naming pool 10.141.0.0/28 and \"13 in use\"", i, err)
		} else if i == 0 || failed == 1 {
			t.Logf("runtime sees: code %d %q", e.Code, e.Msg)
		}
	}
	if ok != 13 || failed != 3 {
		t.Errorf("%d ADDs succeeded and %d failed on a /28, want 13 and 3", ok, failed)
	}
	if l := n.leases(t); len(l) != 13 {
		t.Errorf("%d leases, want 13", len(l))
	}
	// A freed address goes to the next pod.
	if victim != nil {
		if err := n.stormDel(&c, victim); err != nil {
			t.Fatal(err)
		}
		late := newStormPod(t, "late", "exhaust-late")
		if _, err := n.stormAdd(&c, late); err != nil {
			t.Errorf("ADD after one DEL on a full pool: %v", err)
		}
		pods = append(pods, late)
	}
	for _, p := range pods {
		if err := n.stormDel(&c, p); err != nil {
			t.Errorf("DEL %s: %v", p.rt.ContainerID, err)
		}
	}
	n.assertNoLeaks(t)
}

// TestAddDeadlineWhenOVSStuck stops ovs-vswitchd (SIGSTOP) during an ADD. With addTimeout
// 6s the ADD fails with CNI error 11 naming the deadline, long before the plugin's own 90s;
// its lease, port and veth are gone; an operation on another pod completes meanwhile (no
// global lock across the wait); after SIGCONT the next ADD works and the earlier pod still
// forwards.
func TestAddDeadlineWhenOVSStuck(t *testing.T) {
	serial(t)
	n := startNodeWith(t, "10.142.0.0/24", daemonBinary(t), "--add-timeout", "6s")
	before := n.addPod("before")

	pidData, err := os.ReadFile(filepath.Join(n.Dir, "ovs-vswitchd.pid"))
	if err != nil {
		t.Fatal(err)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(pidData)))
	if err != nil {
		t.Fatalf("ovs-vswitchd.pid: %v", err)
	}
	var resumed atomic.Bool
	resume := func() {
		if !resumed.Swap(true) {
			if err := syscall.Kill(pid, syscall.SIGCONT); err != nil {
				t.Errorf("SIGCONT ovs-vswitchd: %v", err)
			}
		}
	}
	t.Cleanup(resume)
	if err := syscall.Kill(pid, syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}

	var c stormCounter
	stuck := newStormPod(t, "stuck", "deadline-stuck")
	type addOut struct {
		err error
		d   time.Duration
	}
	done := make(chan addOut, 1)
	start := time.Now()
	go func() {
		_, err := n.stormAdd(&c, stuck)
		done <- addOut{err, time.Since(start)}
	}()
	// Once the ADD waits on OVS (its port row exists, vswitchd cannot give it an ofport),
	// another pod's DEL is served before the ADD's deadline: no global lock is held.
	stuckVeth := podnet.HostVethName(stuck.rt.ContainerID, "eth0")
	for !strings.Contains(n.OVS.Vsctl(t, "list-ports", "br-int"), stuckVeth) {
		select {
		case out := <-done:
			t.Fatalf("ADD with ovs-vswitchd stopped ended before its port was created: %v", out.err)
		case <-time.After(20 * time.Millisecond):
		}
	}
	other := &libcni.RuntimeConf{ContainerID: "deadline-other", IfName: "eth0",
		Args: [][2]string{{"K8S_POD_NAMESPACE", "storm"}, {"K8S_POD_NAME", "other"}}}
	if err := n.CNI.DelNetworkList(context.Background(), n.Netconf, other); err != nil {
		t.Errorf("DEL of another pod while an ADD waits on OVS: %v", err)
	}
	var out addOut
	select {
	case out = <-done:
		t.Errorf("the stuck ADD ended (%v) before another pod's DEL was served: operations on different pods are not concurrent", out.err)
	default:
		select {
		case out = <-done:
		case <-time.After(80 * time.Second):
			resume()
			t.Fatal("ADD with ovs-vswitchd stopped did not return within 80s (addTimeout is 6s)")
		}
	}
	var e *types.Error
	if !errors.As(out.err, &e) || e.Code != types.ErrTryAgainLater || !strings.Contains(e.Msg, "did not finish within 6s (addTimeout)") {
		t.Fatalf("ADD with ovs-vswitchd stopped: %v; want CNI error 11 naming the 6s addTimeout", out.err)
	}
	t.Logf("ADD with ovs-vswitchd stopped returned after %s: code %d %q", out.d.Round(time.Millisecond), e.Code, e.Msg)

	// While vswitchd is still stopped, the undo removes what does not need it (the port
	// row through ovsdb-server, the host veth through netlink) and keeps the lease: the
	// pod's flows may still be on the switch, so its address is not handed out again
	// until their delete is confirmed.
	portGone, vethGone := false, false
	for deadline := time.Now().Add(20 * time.Second); time.Now().Before(deadline) && !(portGone && vethGone); time.Sleep(100 * time.Millisecond) {
		portGone = !strings.Contains(n.OVS.Vsctl(t, "list-ports", "br-int"), stuckVeth)
		vethGone = exec.Command("ip", "netns", "exec", n.OVS.Netns, "ip", "link", "show", stuckVeth).Run() != nil
	}
	if !portGone {
		t.Errorf("port %s of the failed ADD left on br-int while ovs-vswitchd is stopped", stuckVeth)
	}
	if !vethGone {
		t.Errorf("host veth %s of the failed ADD left while ovs-vswitchd is stopped", stuckVeth)
	}
	leased := func() string {
		for ip, cid := range n.leases(t) {
			if cid == stuck.rt.ContainerID {
				return ip
			}
		}
		return ""
	}
	if leased() == "" {
		t.Errorf("the failed ADD's lease was released while its flows' delete cannot have been confirmed (ovs-vswitchd stopped)")
	}
	resume()
	for deadline := time.Now().Add(30 * time.Second); leased() != "" && time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
	}
	if ip := leased(); ip != "" {
		t.Errorf("lease %s of the failed ADD left 30 s after ovs-vswitchd resumed", ip)
	}

	after := n.addPod("after")
	if err := ping(after.netns, before.ip()); err != nil {
		t.Errorf("after SIGCONT: %v", err)
	}
	if err := ping(before.netns, net.ParseIP("10.142.0.1")); err != nil {
		t.Errorf("pod added before the stop: %v", err)
	}
	// The failed container ID can be added once OVS answers again.
	if _, err := n.stormAdd(&c, stuck); err != nil {
		t.Errorf("ADD retried after SIGCONT: %v", err)
	}
	for _, rt := range []*libcni.RuntimeConf{stuck.rt, before.rt, after.rt} {
		if err := n.CNI.DelNetworkList(context.Background(), n.Netconf, rt); err != nil {
			t.Errorf("DEL %s: %v", rt.ContainerID, err)
		}
	}
	n.assertNoLeaks(t)
}

// TestDaemonRefusesBadNetns: the daemon checks CNI_NETNS itself (the socket is an API too):
// a path that does not exist or is not a network namespace gets code 4 naming CNI_NETNS,
// the daemon's own namespace code 8; nothing is allocated.
func TestDaemonRefusesBadNetns(t *testing.T) {
	serial(t)
	n := startNode(t, "10.144.0.0/24")
	file := filepath.Join(t.TempDir(), "not-a-netns")
	if err := os.WriteFile(file, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		netns string
		code  uint
	}{
		{"/var/run/netns/ofsdn-e2e-does-not-exist", types.ErrInvalidEnvironmentVariables},
		{file, types.ErrInvalidEnvironmentVariables},
		{n.OVS.NetnsPath(), types.ErrInvalidNetNS}, // where ofsdn-node runs
	} {
		rt := &libcni.RuntimeConf{ContainerID: "badns", NetNS: tc.netns, IfName: "eth0"}
		_, err := n.CNI.AddNetworkList(context.Background(), n.Netconf, rt)
		var e *types.Error
		if !errors.As(err, &e) || e.Code != tc.code || !strings.Contains(e.Msg, "CNI_NETNS "+tc.netns) {
			t.Errorf("ADD with CNI_NETNS %s: %v; want CNI error %d naming it", tc.netns, err, tc.code)
		} else {
			t.Logf("runtime sees: code %d %q", e.Code, e.Msg)
		}
	}
	if l := n.leases(t); len(l) != 0 {
		t.Errorf("leases after refused ADDs: %v", l)
	}
}
