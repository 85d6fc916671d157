package podnet

import (
	"errors"
	"net"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

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
