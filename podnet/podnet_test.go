package podnet

import (
	"context"
	"errors"
	"net"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/containernetworking/plugins/pkg/ns"
	"github.com/containernetworking/plugins/pkg/testutils"
	"github.com/vishvananda/netlink"

	"github.com/ofsdn/ofsdn/test/testenv"
)

// newTap returns a persistent tap link (like an OVS userspace internal port)
// for netlink.LinkAdd; this kernel has no dummy module. It lives until its
// namespace is deleted.
func newTap(name string) *netlink.Tuntap {
	return &netlink.Tuntap{LinkAttrs: netlink.LinkAttrs{Name: name}, Mode: netlink.TUNTAP_MODE_TAP}
}

// newNS creates a fresh named network namespace (under /var/run/netns) that
// is unmounted when the test ends. Tests never touch the machine's own
// namespace: the "host" side is a namespace of its own too.
func newNS(t *testing.T) ns.NetNS {
	t.Helper()
	testenv.Privileged(t)
	n, err := testutils.NewNS()
	if err != nil {
		t.Fatalf("create netns: %v", err)
	}
	t.Cleanup(func() {
		n.Close()
		testutils.UnmountNS(n)
	})
	return n
}

// in runs f inside n, failing the test on error.
func in(t *testing.T, n ns.NetNS, f func() error) {
	t.Helper()
	if err := n.Do(func(ns.NetNS) error { return f() }); err != nil {
		t.Fatal(err)
	}
}

func cidr(t *testing.T, s string) *net.IPNet {
	t.Helper()
	ip, n, err := net.ParseCIDR(s)
	if err != nil {
		t.Fatal(err)
	}
	n.IP = ip
	return n
}

func testSpec(t *testing.T, pod ns.NetNS, containerID string) Spec {
	return Spec{
		Netns:             pod.Path(),
		IfName:            "eth0",
		HostVeth:          HostVethName(containerID, "eth0"),
		MTU:               1400,
		Addr:              cidr(t, "10.200.0.5/24"),
		Gateway:           net.ParseIP("10.200.0.1"),
		DisableTxChecksum: true,
	}
}

func setupIn(t *testing.T, host ns.NetNS, spec Spec) (Result, error) {
	var res Result
	err := host.Do(func(ns.NetNS) error {
		var err error
		res, err = Setup(spec)
		return err
	})
	return res, err
}

func TestHostVethName(t *testing.T) {
	const long = "2f6b1c0d9e8a7b6c5d4e3f2a1b0c9d8e7f6a5b4c3d2e1f0a9b8c7d6e5f4a3b"
	cases := []struct{ id, ifName string }{
		{long + "0", "eth0"},
		{long + "1", "eth0"},
		{long + "0", "net1"},
		{long + "1", "net1"},
		{long[:40], "eth0"},
		{"a", "eth0"},
		{"", "eth0"},
	}
	seen := map[string]int{}
	for i, c := range cases {
		name := HostVethName(c.id, c.ifName)
		if len(name) != maxIfNameLen {
			t.Errorf("HostVethName(%q,%q) = %q, %d bytes, want %d", c.id, c.ifName, name, len(name), maxIfNameLen)
		}
		if !strings.HasPrefix(name, "ofs") {
			t.Errorf("HostVethName(%q,%q) = %q lacks prefix ofs", c.id, c.ifName, name)
		}
		if err := validIfName(name); err != nil {
			t.Errorf("HostVethName gave an invalid interface name: %v", err)
		}
		if name != HostVethName(c.id, c.ifName) {
			t.Errorf("HostVethName(%q,%q) is not stable", c.id, c.ifName)
		}
		if j, dup := seen[name]; dup {
			t.Errorf("cases %d and %d both map to %s", j, i, name)
		}
		seen[name] = i
	}
}

func TestMACFromIP(t *testing.T) {
	if got := MACFromIP(net.ParseIP("10.200.0.5")).String(); got != "0a:58:0a:c8:00:05" {
		t.Errorf("MACFromIP = %s", got)
	}
	if MACFromIP(net.ParseIP("fd00::1")) != nil {
		t.Error("MACFromIP of IPv6 is not nil")
	}
}

func TestSetupValidation(t *testing.T) {
	pod := newNS(t)
	good := testSpec(t, pod, "c")
	for name, mutate := range map[string]func(*Spec){
		"no netns":    func(s *Spec) { s.Netns = "" },
		"long ifname": func(s *Spec) { s.IfName = "this-is-too-long0" },
		"bad host":    func(s *Spec) { s.HostVeth = "a/b" },
		"mtu small":   func(s *Spec) { s.MTU = 67 },
		"mtu big":     func(s *Spec) { s.MTU = 65536 },
		"no addr":     func(s *Spec) { s.Addr = nil },
		"v6 addr":     func(s *Spec) { s.Addr = cidr(t, "fd00::5/64") },
		"gw outside":  func(s *Spec) { s.Gateway = net.ParseIP("10.201.0.1") },
		"gw is pod":   func(s *Spec) { s.Gateway = net.ParseIP("10.200.0.5") },
		"mcast mac":   func(s *Spec) { s.MAC = net.HardwareAddr{1, 2, 3, 4, 5, 6} },
		"short mac":   func(s *Spec) { s.MAC = net.HardwareAddr{2, 2, 3} },
		"gone netns":  func(s *Spec) { s.Netns = filepath.Join(t.TempDir(), "nope") },
	} {
		s := good
		mutate(&s)
		if _, err := Setup(s); err == nil {
			t.Errorf("%s: Setup accepted %+v", name, s)
		}
	}
	// Nothing was created in this (the test's own) namespace.
	if HostVethExists(good.HostVeth) {
		t.Errorf("validation failures left %s behind", good.HostVeth)
	}
}

func TestSetup(t *testing.T) {
	host, pod := newNS(t), newNS(t)
	spec := testSpec(t, pod, "container-1")
	res, err := setupIn(t, host, spec)
	if err != nil {
		t.Fatalf("Setup: %v", err)
	}
	wantMAC := "0a:58:0a:c8:00:05"
	if res.HostVeth != spec.HostVeth || res.MTU != 1400 || res.ContainerMAC.String() != wantMAC || res.ContainerIfIndex <= 0 || len(res.HostMAC) != 6 {
		t.Errorf("Result = %+v", res)
	}

	in(t, host, func() error {
		l, err := netlink.LinkByName(spec.HostVeth)
		if err != nil {
			return err
		}
		if _, ok := l.(*netlink.Veth); !ok {
			t.Errorf("host end is a %s", l.Type())
		}
		a := l.Attrs()
		if a.MTU != 1400 || a.Flags&net.FlagUp == 0 || a.HardwareAddr.String() != res.HostMAC.String() {
			t.Errorf("host end: mtu %d flags %v mac %v, want 1400, up, %v", a.MTU, a.Flags, a.HardwareAddr, res.HostMAC)
		}
		return nil
	})
	in(t, pod, func() error {
		l, err := netlink.LinkByName("eth0")
		if err != nil {
			return err
		}
		a := l.Attrs()
		if a.Index != res.ContainerIfIndex || a.MTU != 1400 || a.Flags&net.FlagUp == 0 || a.HardwareAddr.String() != wantMAC {
			t.Errorf("pod end: index %d mtu %d flags %v mac %v", a.Index, a.MTU, a.Flags, a.HardwareAddr)
		}
		on, err := txChecksum("eth0")
		if err != nil {
			return err
		}
		if on {
			t.Error("TX checksum offload still on in the pod")
		}
		return nil
	})
	// Cross-check with iproute2 (tests may exec ip; product code never does).
	podName := filepath.Base(pod.Path())
	out := run(t, "ip", "-n", podName, "-4", "addr", "show", "dev", "eth0")
	if !strings.Contains(out, "inet 10.200.0.5/24") {
		t.Errorf("ip addr in pod:\n%s", out)
	}
	out = run(t, "ip", "-n", podName, "-4", "route", "show")
	if !strings.Contains(out, "default via 10.200.0.1 dev eth0") || !strings.Contains(out, "10.200.0.0/24 dev eth0") {
		t.Errorf("routes in pod:\n%s", out)
	}
	if err := host.Do(func(ns.NetNS) error {
		return Check(pod.Path(), "eth0", []Expect{{Addr: spec.Addr, Gateway: spec.Gateway}}, res.ContainerMAC)
	}); err != nil {
		t.Errorf("Check after Setup: %v", err)
	}
}

// TestSetupTxChecksumDefault shows the checksum test above is meaningful:
// without DisableTxChecksum a veth keeps TX checksum offload on.
func TestSetupTxChecksumDefault(t *testing.T) {
	host, pod := newNS(t), newNS(t)
	spec := testSpec(t, pod, "container-csum")
	spec.DisableTxChecksum = false
	spec.MAC = net.HardwareAddr{0x02, 0, 0, 0, 0, 0x42}
	if _, err := setupIn(t, host, spec); err != nil {
		t.Fatal(err)
	}
	in(t, pod, func() error {
		on, err := txChecksum("eth0")
		if err != nil {
			return err
		}
		if !on {
			t.Error("TX checksum offload is off although DisableTxChecksum is false")
		}
		mac, err := LinkMAC("eth0")
		if err != nil {
			return err
		}
		if mac.String() != "02:00:00:00:00:42" {
			t.Errorf("pod MAC = %v, want the spec's 02:00:00:00:00:42", mac)
		}
		return nil
	})
}

func TestSetupRetryAndCollision(t *testing.T) {
	host, pod, other := newNS(t), newNS(t), newNS(t)
	spec := testSpec(t, pod, "container-2")
	first, err := setupIn(t, host, spec)
	if err != nil {
		t.Fatal(err)
	}
	// A retry of the same ADD (e.g. the runtime timed out) succeeds and
	// reports the same pair, even after someone removed the route.
	in(t, pod, func() error {
		return netlink.RouteDel(&netlink.Route{Dst: &net.IPNet{IP: net.IPv4zero.To4(), Mask: net.CIDRMask(0, 32)}, Gw: spec.Gateway})
	})
	again, err := setupIn(t, host, spec)
	if err != nil {
		t.Fatalf("retried Setup: %v", err)
	}
	if again.HostMAC.String() != first.HostMAC.String() || again.ContainerIfIndex != first.ContainerIfIndex {
		t.Errorf("retry result %+v differs from %+v", again, first)
	}
	if err := host.Do(func(ns.NetNS) error {
		return Check(pod.Path(), "eth0", []Expect{{Addr: spec.Addr, Gateway: spec.Gateway}}, nil)
	}); err != nil {
		t.Errorf("Check after retry: %v", err)
	}

	// The same host name for another pod namespace is a collision.
	clash := spec
	clash.Netns = other.Path()
	_, err = setupIn(t, host, clash)
	if err == nil || !strings.Contains(err.Error(), spec.HostVeth) || !strings.Contains(err.Error(), "another network namespace") {
		t.Errorf("Setup with a colliding host name in another netns: %v", err)
	}
	// ... and so is the same host name for another interface of the pod.
	clash = spec
	clash.IfName = "net1"
	if _, err = setupIn(t, host, clash); err == nil || !strings.Contains(err.Error(), "already exists") {
		t.Errorf("Setup with a colliding host name for another ifname: %v", err)
	}
	// The first pod's pair survived both attempts.
	if err := host.Do(func(ns.NetNS) error {
		return Check(pod.Path(), "eth0", []Expect{{Addr: spec.Addr, Gateway: spec.Gateway}}, first.ContainerMAC)
	}); err != nil {
		t.Errorf("first pod damaged by collisions: %v", err)
	}
	in(t, other, func() error {
		if _, err := netlink.LinkByName("eth0"); err == nil {
			t.Error("collision created eth0 in the other netns")
		}
		return nil
	})

	// A host end that is not a veth is never taken over.
	in(t, host, func() error {
		return netlink.LinkAdd(newTap("ofsdummy"))
	})
	clash = testSpec(t, other, "x")
	clash.HostVeth = "ofsdummy"
	if _, err = setupIn(t, host, clash); err == nil || !strings.Contains(err.Error(), "not a veth") {
		t.Errorf("Setup over a dummy link: %v", err)
	}
}

// TestSetupPodIfNameExists: eth0 already in the pod namespace fails before
// anything is left behind on the host side.
func TestSetupPodIfNameExists(t *testing.T) {
	host, pod := newNS(t), newNS(t)
	in(t, pod, func() error {
		return netlink.LinkAdd(newTap("eth0"))
	})
	spec := testSpec(t, pod, "container-3")
	_, err := setupIn(t, host, spec)
	if err == nil || !strings.Contains(err.Error(), "eth0 already exists in pod netns") {
		t.Fatalf("Setup with eth0 present in pod: %v", err)
	}
	in(t, host, func() error {
		if HostVethExists(spec.HostVeth) {
			t.Errorf("host veth %s left behind", spec.HostVeth)
		}
		return nil
	})
}

// TestSetupRollback: a failure after the pair exists deletes both ends.
func TestSetupRollback(t *testing.T) {
	host, pod := newNS(t), newNS(t)
	spec := testSpec(t, pod, "container-4")
	boom := errors.New("injected failure")
	testHookAfterCreate = func() error { return boom }
	defer func() { testHookAfterCreate = nil }()
	if _, err := setupIn(t, host, spec); !errors.Is(err, boom) {
		t.Fatalf("Setup = %v, want the injected failure", err)
	}
	in(t, host, func() error {
		if HostVethExists(spec.HostVeth) {
			t.Errorf("host veth %s left behind after a failed Setup", spec.HostVeth)
		}
		return nil
	})
	in(t, pod, func() error {
		if _, err := netlink.LinkByName("eth0"); err == nil {
			t.Error("eth0 left in the pod after a failed Setup")
		}
		return nil
	})
}

func TestTeardown(t *testing.T) {
	host, pod := newNS(t), newNS(t)
	spec := testSpec(t, pod, "container-5")
	if _, err := setupIn(t, host, spec); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 2; i++ {
		in(t, host, func() error { return Teardown(spec.HostVeth, pod.Path(), "eth0") })
	}
	in(t, host, func() error {
		if HostVethExists(spec.HostVeth) {
			t.Error("host veth still exists after Teardown")
		}
		return nil
	})
	in(t, pod, func() error {
		if _, err := netlink.LinkByName("eth0"); err == nil {
			t.Error("eth0 still in the pod after Teardown")
		}
		return nil
	})
	// No netns at all is fine.
	in(t, host, func() error { return Teardown(spec.HostVeth, "", "eth0") })

	// Host end missing but the pod has a veth called eth0: it is not ours (our
	// pair goes as a whole), e.g. another plugin's that made our ADD fail; kept.
	in(t, pod, func() error {
		return netlink.LinkAdd(&netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: "eth0"}, PeerName: "stray"})
	})
	in(t, host, func() error { return Teardown(spec.HostVeth, pod.Path(), "eth0") })
	in(t, pod, func() error {
		if _, err := netlink.LinkByName("eth0"); err != nil {
			t.Error("another owner's veth eth0 deleted by Teardown")
		}
		return nil
	})

	// A non-veth host link with the name is refused.
	in(t, host, func() error {
		return netlink.LinkAdd(newTap("ofsnotveth"))
	})
	if err := host.Do(func(ns.NetNS) error { return Teardown("ofsnotveth", "", "eth0") }); err == nil {
		t.Error("Teardown deleted a dummy link")
	}
}

func TestTeardownAfterNetnsDeleted(t *testing.T) {
	host := newNS(t)
	pod, err := testutils.NewNS()
	if err != nil {
		t.Fatal(err)
	}
	spec := testSpec(t, pod, "container-6")
	if _, err := setupIn(t, host, spec); err != nil {
		t.Fatal(err)
	}
	path := pod.Path()
	pod.Close()
	if err := testutils.UnmountNS(pod); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 2; i++ {
		in(t, host, func() error { return Teardown(spec.HostVeth, path, "eth0") })
	}
	in(t, host, func() error {
		if HostVethExists(spec.HostVeth) {
			t.Error("host veth still exists")
		}
		return nil
	})
	// A path that never was a namespace is fine too.
	in(t, host, func() error { return Teardown(spec.HostVeth, t.TempDir(), "eth0") })
}

func TestCheck(t *testing.T) {
	host, pod := newNS(t), newNS(t)
	spec := testSpec(t, pod, "container-7")
	res, err := setupIn(t, host, spec)
	if err != nil {
		t.Fatal(err)
	}
	check := func(mac net.HardwareAddr) error {
		return host.Do(func(ns.NetNS) error {
			return Check(pod.Path(), "eth0", []Expect{{Addr: spec.Addr, Gateway: spec.Gateway}}, mac)
		})
	}
	if err := check(res.ContainerMAC); err != nil {
		t.Fatalf("Check: %v", err)
	}
	if err := check(net.HardwareAddr{2, 0, 0, 0, 0, 1}); err == nil || !strings.Contains(err.Error(), "MAC") {
		t.Errorf("Check with the wrong MAC: %v", err)
	}
	if err := host.Do(func(ns.NetNS) error {
		return Check(pod.Path(), "net9", []Expect{{Addr: spec.Addr, Gateway: spec.Gateway}}, nil)
	}); err == nil || !strings.Contains(err.Error(), "net9 not found") {
		t.Errorf("Check of a missing interface: %v", err)
	}
	in(t, pod, func() error {
		return netlink.RouteDel(&netlink.Route{Dst: &net.IPNet{IP: net.IPv4zero.To4(), Mask: net.CIDRMask(0, 32)}, Gw: spec.Gateway})
	})
	err = check(nil)
	if err == nil || !strings.Contains(err.Error(), "no default route via 10.200.0.1") {
		t.Errorf("Check without the default route: %v", err)
	}
	in(t, pod, func() error {
		l, err := netlink.LinkByName("eth0")
		if err != nil {
			return err
		}
		return netlink.AddrDel(l, &netlink.Addr{IPNet: spec.Addr})
	})
	err = check(nil)
	if err == nil || !strings.Contains(err.Error(), "no address 10.200.0.5/24") || !strings.Contains(err.Error(), "no default route") {
		t.Errorf("Check without address and route: %v", err)
	}
}

func TestConfigureGateway(t *testing.T) {
	host := newNS(t)
	addr := cidr(t, "10.200.0.1/24")
	type result struct {
		mac net.HardwareAddr
		err error
	}
	done := make(chan result, 1)
	// The gateway tap appears 200 ms after ConfigureGateway starts waiting,
	// as when ovs-vswitchd creates the internal port.
	go func() {
		var r result
		r.err = host.Do(func(ns.NetNS) error {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			var err error
			r.mac, err = ConfigureGateway(ctx, "ofsgw0", addr, 1400)
			return err
		})
		done <- r
	}()
	time.Sleep(200 * time.Millisecond)
	in(t, host, func() error {
		return netlink.LinkAdd(newTap("ofsgw0"))
	})
	var r result
	select {
	case r = <-done:
	case <-time.After(15 * time.Second):
		t.Fatal("ConfigureGateway did not return after the tap appeared")
	}
	if r.err != nil {
		t.Fatalf("ConfigureGateway: %v", r.err)
	}
	in(t, host, func() error {
		l, err := netlink.LinkByName("ofsgw0")
		if err != nil {
			return err
		}
		a := l.Attrs()
		if a.MTU != 1400 || a.Flags&net.FlagUp == 0 || a.HardwareAddr.String() != r.mac.String() {
			t.Errorf("gateway: mtu %d flags %v mac %v (returned %v)", a.MTU, a.Flags, a.HardwareAddr, r.mac)
		}
		addrs, err := netlink.AddrList(l, netlink.FAMILY_V4)
		if err != nil {
			return err
		}
		if len(addrs) != 1 || addrs[0].IPNet.String() != "10.200.0.1/24" {
			t.Errorf("gateway addresses = %v", addrs)
		}
		// Idempotent: a second call (daemon restart) succeeds at once.
		mac, err := ConfigureGateway(context.Background(), "ofsgw0", addr, 1400)
		if err != nil || mac.String() != r.mac.String() {
			t.Errorf("second ConfigureGateway = %v, %v", mac, err)
		}
		// A link that never appears times out with a clear error.
		ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
		defer cancel()
		if _, err := ConfigureGateway(ctx, "ofsnothere", addr, 1400); err == nil || !strings.Contains(err.Error(), "did not appear") {
			t.Errorf("ConfigureGateway of a missing link: %v", err)
		}
		// A link that exists before the call, MTU left alone (mtu 0).
		if err := netlink.LinkAdd(newTap("ofsgw1")); err != nil {
			return err
		}
		if _, err := ConfigureGateway(context.Background(), "ofsgw1", cidr(t, "10.201.0.1/24"), 0); err != nil {
			t.Errorf("ConfigureGateway on an existing tap: %v", err)
		}
		if l, err := netlink.LinkByName("ofsgw1"); err != nil || l.Attrs().MTU != 1500 || l.Attrs().Flags&net.FlagUp == 0 {
			t.Errorf("ofsgw1 after ConfigureGateway with mtu 0: %v %v", l, err)
		}
		return nil
	})
}

func run(t *testing.T, name string, args ...string) string {
	t.Helper()
	out, err := exec.Command(name, args...).CombinedOutput()
	if err != nil {
		t.Fatalf("%s %s: %v\n%s", name, strings.Join(args, " "), err, out)
	}
	return string(out)
}

// TestHostEndIgnoredByHostIPStack: the host's kernel never answers a pod's ARP on the
// host end, even for an address that is local to the host (as the gateway address is),
// so nothing a pod sends reaches the host's IP stack except through the bridge; and the
// host end's sysctls say so.
func TestHostEndIgnoredByHostIPStack(t *testing.T) {
	host, pod := newNS(t), newNS(t)
	spec := testSpec(t, pod, "container-arp")
	in(t, host, func() error {
		lo, err := netlink.LinkByName("lo")
		if err != nil {
			return err
		}
		if err := netlink.LinkSetUp(lo); err != nil {
			return err
		}
		// The pod's gateway address, local to the host.
		return netlink.AddrAdd(lo, &netlink.Addr{IPNet: cidr(t, "10.200.0.1/32")})
	})
	hostName := filepath.Base(host.Path())
	// A routing host: new links inherit forwarding 1, so the host end's 0 below is ours.
	run(t, "ip", "netns", "exec", hostName, "sysctl", "-q", "-w", "net.ipv4.conf.all.forwarding=1", "net.ipv4.conf.default.forwarding=1")
	res, err := setupIn(t, host, spec)
	if err != nil {
		t.Fatalf("Setup: %v", err)
	}
	podName := filepath.Base(pod.Path())
	// The pod tries to reach its gateway: it ARPs for 10.200.0.1 on eth0.
	_, _ = exec.Command("ip", "netns", "exec", podName, "ping", "-c", "2", "-W", "1", "10.200.0.1").CombinedOutput()
	neigh := run(t, "ip", "-n", podName, "neigh", "show", "10.200.0.1")
	if strings.Contains(neigh, "lladdr") {
		t.Errorf("the host answered the pod's ARP for a host address on the host end (%s): %s", res.HostMAC, neigh)
	}
	for key, want := range map[string]string{
		"net.ipv4.conf." + spec.HostVeth + ".arp_ignore":   "8",
		"net.ipv4.conf." + spec.HostVeth + ".forwarding":   "0",
		"net.ipv4.conf." + spec.HostVeth + ".rp_filter":    "1",
		"net.ipv6.conf." + spec.HostVeth + ".disable_ipv6": "1",
	} {
		if got := strings.TrimSpace(run(t, "ip", "netns", "exec", hostName, "sysctl", "-n", key)); got != want {
			t.Errorf("%s = %s, want %s", key, got, want)
		}
	}
}

// TestSetupBelowIPv6MinimumMTU: a pod MTU below IPv6's minimum link MTU (1279; Linux keeps
// no IPv6 on such a link, so the host end has no disable_ipv6 to write) still wires an
// IPv4 pod, and its host end is still off the host's IPv4 stack.
func TestSetupBelowIPv6MinimumMTU(t *testing.T) {
	host, pod := newNS(t), newNS(t)
	spec := testSpec(t, pod, "container-mtu1279")
	spec.MTU = 1279
	if _, err := setupIn(t, host, spec); err != nil {
		t.Fatalf("Setup with MTU 1279: %v", err)
	}
	hostName := filepath.Base(host.Path())
	if got := strings.TrimSpace(run(t, "ip", "netns", "exec", hostName, "sysctl", "-n", "net.ipv4.conf."+spec.HostVeth+".arp_ignore")); got != "8" {
		t.Errorf("host end arp_ignore = %s, want 8", got)
	}
	if out := run(t, "ip", "-n", hostName, "link", "show", spec.HostVeth); !strings.Contains(out, "mtu 1279") {
		t.Errorf("host end: %s, want mtu 1279", out)
	}
}
