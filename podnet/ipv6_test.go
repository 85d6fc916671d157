package podnet

import (
	"bytes"
	"errors"
	"net"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/containernetworking/plugins/pkg/ns"
	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

func dualSpec(t *testing.T, spec Spec) Spec {
	spec.Addr6 = cidr(t, "fd00:200::5/64")
	spec.Gateway6 = net.ParseIP("fd00:200::1")
	return spec
}

func TestLinkLocalFromMAC(t *testing.T) {
	if got := LinkLocalFromMAC(MACFromIP(net.ParseIP("10.200.0.5"))); !got.Equal(net.ParseIP("fe80::858:aff:fec8:5")) {
		t.Fatalf("LinkLocalFromMAC = %v, want fe80::858:aff:fec8:5 (RFC 4291 appendix A)", got)
	}
	if LinkLocalFromMAC(net.HardwareAddr{1}) != nil {
		t.Fatal("an 8-bit MAC has a link-local address")
	}
}

func TestSetupValidationIPv6(t *testing.T) {
	pod := newNS(t)
	for _, c := range []struct {
		name string
		mod  func(*Spec)
		want string
	}{
		{"gateway without address", func(s *Spec) { s.Addr6 = nil }, "pod IPv6 address: address is nil"},
		{"address without gateway", func(s *Spec) { s.Gateway6 = nil }, "IPv6 gateway <nil> must be"},
		{"IPv4 as Addr6", func(s *Spec) { s.Addr6 = cidr(t, "10.9.0.5/24") }, "is not an IPv6 address"},
		{"gateway outside", func(s *Spec) { s.Gateway6 = net.ParseIP("fd00:999::1") }, "must be an IPv6 address in pod subnet"},
		{"link-local", func(s *Spec) { s.Addr6 = cidr(t, "fe80::5/64"); s.Gateway6 = net.ParseIP("fe80::1") }, "is link-local"},
	} {
		spec := dualSpec(t, testSpec(t, pod, "container-v6val"))
		c.mod(&spec)
		if _, err := Setup(spec); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: Setup = %v, want an error saying %q", c.name, err, c.want)
		}
	}
}

// TestSetupDualStack: a dual-stack pod gets its IPv4 address, exactly one link-local
// address (the EUI-64 of its MAC) and its global IPv6 address, neither tentative (DAD
// off: accept_dad 0, IFA_F_NODAD), both default routes; the host end has no IPv6 at all.
func TestSetupDualStack(t *testing.T) {
	host, pod := newNS(t), newNS(t)
	spec := dualSpec(t, testSpec(t, pod, "container-v6"))
	res, err := setupIn(t, host, spec)
	if err != nil {
		t.Fatalf("Setup: %v", err)
	}
	in(t, pod, func() error {
		link, err := netlink.LinkByName("eth0")
		if err != nil {
			return err
		}
		addrs, err := netlink.AddrList(link, netlink.FAMILY_V6)
		if err != nil {
			return err
		}
		want := map[string]bool{LinkLocalFromMAC(res.ContainerMAC).String(): true, "fd00:200::5": true}
		if len(addrs) != 2 {
			t.Errorf("eth0 has IPv6 addresses %v, want exactly the link-local %v and fd00:200::5", addrs, LinkLocalFromMAC(res.ContainerMAC))
		}
		for _, a := range addrs {
			if !want[a.IP.String()] {
				t.Errorf("eth0 has IPv6 address %v, not one ofsdn gives it", a.IPNet)
			}
			if a.Flags&(unix.IFA_F_TENTATIVE|unix.IFA_F_DADFAILED) != 0 {
				t.Errorf("address %v is tentative or failed DAD (flags %#x): DAD must be off", a.IPNet, a.Flags)
			}
		}
		routes, err := netlink.RouteList(link, netlink.FAMILY_V6)
		if err != nil {
			return err
		}
		found := false
		for _, r := range routes {
			if (r.Dst == nil || r.Dst.IP.IsUnspecified()) && r.Gw.Equal(net.ParseIP("fd00:200::1")) {
				found = true
			}
		}
		if !found {
			t.Errorf("no IPv6 default route via fd00:200::1 on eth0: %v", routes)
		}
		return nil
	})
	podName, hostName := filepath.Base(pod.Path()), filepath.Base(host.Path())
	for key, want := range map[string]string{"net.ipv6.conf.eth0.accept_dad": "0", "net.ipv6.conf.eth0.addr_gen_mode": "1"} {
		if got := strings.TrimSpace(run(t, "ip", "netns", "exec", podName, "sysctl", "-n", key)); got != want {
			t.Errorf("pod %s = %s, want %s", key, got, want)
		}
	}
	if out := run(t, "ip", "-n", hostName, "-6", "addr", "show", "dev", spec.HostVeth); strings.Contains(out, "inet6") {
		t.Errorf("host end %s has IPv6 addresses: %s", spec.HostVeth, out)
	}
	// A retry of the same spec succeeds and changes nothing.
	if _, err := setupIn(t, host, spec); err != nil {
		t.Fatalf("Setup retry: %v", err)
	}
}

// TestHostEndNoNeighborDiscovery: the host never answers the pod's neighbor solicitations
// on the host end (disable_ipv6 1: the host end has no IPv6 address, not even the
// link-local one the kernel would derive from its MAC, and its IPv6 stack ignores what
// arrives there), so the pod's ping6 to that link-local address resolves nothing.
func TestHostEndNoNeighborDiscovery(t *testing.T) {
	host, pod := newNS(t), newNS(t)
	spec := dualSpec(t, testSpec(t, pod, "container-nd"))
	res, err := setupIn(t, host, spec)
	if err != nil {
		t.Fatalf("Setup: %v", err)
	}
	podName := filepath.Base(pod.Path())
	target := LinkLocalFromMAC(res.HostMAC).String()
	// Past the host's duplicate address detection (1 s) for an address it would have.
	time.Sleep(1500 * time.Millisecond)
	_, _ = exec.Command("ip", "netns", "exec", podName, "ping", "-6", "-c", "3", "-W", "1", target+"%eth0").CombinedOutput()
	if neigh := run(t, "ip", "-n", podName, "-6", "neigh", "show", target); strings.Contains(neigh, "lladdr") {
		t.Errorf("the host answered the pod's neighbor solicitation on the host end (%s): %s", res.HostMAC, neigh)
	}
}

// TestConfigureGatewayIPv6: the gateway gets its IPv6 address without DAD, idempotently.
func TestConfigureGatewayIPv6(t *testing.T) {
	host := newNS(t)
	in(t, host, func() error {
		if err := netlink.LinkAdd(newTap("gw6")); err != nil {
			return err
		}
		for i := 0; i < 2; i++ {
			if err := ConfigureGatewayIPv6("gw6", cidr(t, "fd00:200::1/64")); err != nil {
				return err
			}
		}
		link, err := netlink.LinkByName("gw6")
		if err != nil {
			return err
		}
		if err := netlink.LinkSetUp(link); err != nil {
			return err
		}
		addrs, err := netlink.AddrList(link, netlink.FAMILY_V6)
		if err != nil {
			return err
		}
		ok := false
		for _, a := range addrs {
			if a.IP.Equal(net.ParseIP("fd00:200::1")) {
				ok = a.Flags&unix.IFA_F_NODAD != 0
			}
		}
		if !ok {
			t.Errorf("gw6 lacks fd00:200::1 with nodad: %v", addrs)
		}
		if err := ConfigureGatewayIPv6("gw6", cidr(t, "10.0.0.1/24")); err == nil {
			t.Error("an IPv4 address was taken as the gateway's IPv6 address")
		}
		return nil
	})
}

// TestSetupDualStackRollback: a failure after the pod's IPv6 addresses are in (before its
// IPv6 route) removes the whole pair: no host veth, no pod interface with its addresses.
func TestSetupDualStackRollback(t *testing.T) {
	host, pod := newNS(t), newNS(t)
	spec := dualSpec(t, testSpec(t, pod, "container-v6rb"))
	boom := errors.New("injected IPv6 failure")
	testHookBeforeIPv6Route = func() error { return boom }
	defer func() { testHookBeforeIPv6Route = nil }()
	if _, err := setupIn(t, host, spec); !errors.Is(err, boom) {
		t.Fatalf("Setup = %v, want the injected failure", err)
	}
	in(t, host, func() error {
		if HostVethExists(spec.HostVeth) {
			t.Errorf("host veth %s left behind after a failed dual-stack Setup", spec.HostVeth)
		}
		return nil
	})
	in(t, pod, func() error {
		if _, err := netlink.LinkByName("eth0"); err == nil {
			t.Error("eth0 left in the pod after a failed dual-stack Setup")
		}
		return nil
	})
	// The same spec then succeeds.
	testHookBeforeIPv6Route = nil
	if _, err := setupIn(t, host, spec); err != nil {
		t.Fatalf("Setup after the failure: %v", err)
	}
}

// TestSetupIPv6Only: an IPv6-only pod (Addr nil) gets its IPv6 address, the link-local
// one of its MAC (derived from the IPv6 address: MACFromIPv6), an IPv6 default route and
// no IPv4 address or route; Check of its one address passes, and fails naming the
// address once it is removed.
func TestSetupIPv6Only(t *testing.T) {
	host, pod := newNS(t), newNS(t)
	spec := dualSpec(t, testSpec(t, pod, "container-v6only"))
	spec.Addr, spec.Gateway = nil, nil
	res, err := setupIn(t, host, spec)
	if err != nil {
		t.Fatalf("Setup: %v", err)
	}
	if want := MACFromIPv6(spec.Addr6.IP); !bytes.Equal(res.ContainerMAC, want) {
		t.Errorf("pod MAC %v, want %v (from its IPv6 address)", res.ContainerMAC, want)
	}
	in(t, pod, func() error {
		link, err := netlink.LinkByName("eth0")
		if err != nil {
			return err
		}
		if v4, err := netlink.AddrList(link, netlink.FAMILY_V4); err != nil || len(v4) != 0 {
			t.Errorf("IPv6-only pod has IPv4 addresses %v (%v)", v4, err)
		}
		if r4, err := netlink.RouteList(link, netlink.FAMILY_V4); err != nil || len(r4) != 0 {
			t.Errorf("IPv6-only pod has IPv4 routes %v (%v)", r4, err)
		}
		return nil
	})
	want := []Expect{{Addr: spec.Addr6, Gateway: spec.Gateway6}}
	check := func() error {
		return host.Do(func(ns.NetNS) error { return Check(pod.Path(), "eth0", want, res.ContainerMAC) })
	}
	if err := check(); err != nil {
		t.Fatalf("Check: %v", err)
	}
	in(t, pod, func() error {
		l, err := netlink.LinkByName("eth0")
		if err != nil {
			return err
		}
		return netlink.AddrDel(l, &netlink.Addr{IPNet: spec.Addr6})
	})
	if err := check(); err == nil || !strings.Contains(err.Error(), "no address "+spec.Addr6.String()) {
		t.Errorf("Check without the IPv6 address: %v, want it named", err)
	}
}

// TestMACFromIPv6: 0a:58 and the address's last 4 bytes; nil for IPv4.
func TestMACFromIPv6(t *testing.T) {
	if got := MACFromIPv6(net.ParseIP("fd00:10:128::a:5")).String(); got != "0a:58:00:0a:00:05" {
		t.Errorf("MACFromIPv6(fd00:10:128::a:5) = %s", got)
	}
	if got := MACFromIPv6(net.ParseIP("10.0.0.5")); got != nil {
		t.Errorf("MACFromIPv6(10.0.0.5) = %v, want nil", got)
	}
}
