package podnet

// A dual-stack pod's IPv6 (issue 23, first slice).
//
// Design history. Duplicate address detection delays a new address by ~1 s
// (RetransTimer × DupAddrDetectTransmits, RFC 4862 §5.4) and a waiting DAD once pushed
// Kubernetes pod creation p50 to 16–19 s (kubernetes #54651); the addresses here are
// unique by construction (the node's IPAM, a MAC derived from the IPv4 address), so the
// pod interface gets accept_dad 0 before it is up and both its addresses IFA_F_NODAD
// (the bridge plugin of containernetworking/plugins turns DAD off the same way, with
// accept_dad, when hairpin mode would echo its probes). The link-local address is
// pinned: the kernel's own generation is off (addr_gen_mode none, IFLA_INET6_ADDR_GEN_MODE,
// set before the link is up, so no other link-local address ever appears) and exactly
// the modified EUI-64 of the pod's MAC is added (RFC 4291 §2.5.6, appendix A), the one
// address besides its global one the node's spoof guard lets the pod send from
// (flows.LinkLocalFromMAC; LinkLocalFromMAC here is the same function, podnet imports
// no other package of ofsdn). The IPv6 default route is via the gateway's global IPv6
// address, on-link through the prefix route of the pod's address. The host end keeps
// IPv6 off (disable_ipv6 1, hostend.go): the host neither answers neighbor discovery on
// it nor sends its own (router and neighbor solicitations, MLD) straight to the pod past
// OVS.

import (
	"errors"
	"fmt"
	"net"
	"strings"

	"github.com/containernetworking/plugins/pkg/utils/sysctl"
	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// addrGenModeNone is IN6_ADDR_GEN_MODE_NONE (include/uapi/linux/if_link.h): the kernel
// generates no link-local address for the interface.
const addrGenModeNone = 1

// LinkLocalFromMAC returns the IPv6 link-local address fe80::/64 with the modified
// EUI-64 interface identifier of mac (RFC 4291 §2.5.6 and appendix A: the 48-bit MAC
// split by ff:fe, its universal/local bit inverted), 16 bytes; nil for a MAC that is not
// 48 bits. Setup gives a dual-stack pod exactly this link-local address.
func LinkLocalFromMAC(mac net.HardwareAddr) net.IP {
	if len(mac) != 6 {
		return nil
	}
	return net.IP{0xfe, 0x80, 0, 0, 0, 0, 0, 0,
		mac[0] ^ 0x02, mac[1], mac[2], 0xff, 0xfe, mac[3], mac[4], mac[5]}
}

// ipv6Net returns n with a 16-byte IP and mask, or an error if it is not an IPv6
// address (not IPv4-mapped) with a prefix length of at most /126.
func ipv6Net(n *net.IPNet) (*net.IPNet, error) {
	if n == nil {
		return nil, errors.New("address is nil")
	}
	ones, bits := n.Mask.Size()
	if len(n.IP) != net.IPv6len || n.IP.To4() != nil || bits != 128 || ones > 126 {
		return nil, fmt.Errorf("%v is not an IPv6 address with a prefix length of /126 or shorter", n)
	}
	return &net.IPNet{IP: n.IP.To16(), Mask: net.CIDRMask(ones, 128)}, nil
}

// validateIPv6 checks the spec's IPv6 part (Addr6, Gateway6): both or neither; an IPv6
// address, not link-local, with a gateway in its subnet other than itself.
func (s *Spec) validateIPv6() error {
	if s.Addr6 == nil && s.Gateway6 == nil {
		return nil
	}
	addr, err := ipv6Net(s.Addr6)
	if err != nil {
		return fmt.Errorf("podnet: pod IPv6 address: %w", err)
	}
	if addr.IP.IsLinkLocalUnicast() || addr.IP.IsMulticast() {
		return fmt.Errorf("podnet: pod IPv6 address %v is link-local or multicast: give the pod an address of the node's IPv6 pod subnet (the link-local one is derived from its MAC)", addr)
	}
	s.Addr6 = addr
	gw := s.Gateway6
	if len(gw) != net.IPv6len || gw.To4() != nil || !addr.Contains(gw) || gw.Equal(addr.IP) {
		return fmt.Errorf("podnet: IPv6 gateway %v must be an IPv6 address in pod subnet %v other than the pod's", s.Gateway6, addr)
	}
	return nil
}

// prepareIPv6 readies the pod interface ifName (in the calling thread's netns, before it
// is up) for its IPv6 addresses: IPv6 on (disable_ipv6 0 where the runtime's netns
// defaults it to 1), duplicate address detection off (accept_dad 0), and no
// kernel-generated link-local address (addr_gen_mode none).
func prepareIPv6(link netlink.Link, ifName, netnsPath string) error {
	disable := fmt.Sprintf("net/ipv6/conf/%s/disable_ipv6", ifName)
	if v, err := sysctl.Sysctl(disable); err != nil {
		return fmt.Errorf("podnet: read %s in pod netns %s (is IPv6 off in this kernel, ipv6.disable=1? a dual-stack node needs it): %w", disable, netnsPath, err)
	} else if strings.TrimSpace(v) != "0" {
		if _, err := sysctl.Sysctl(disable, "0"); err != nil {
			return fmt.Errorf("podnet: set %s to 0 in pod netns %s (the pod gets an IPv6 address): %w", disable, netnsPath, err)
		}
	}
	dad := fmt.Sprintf("net/ipv6/conf/%s/accept_dad", ifName)
	if _, err := sysctl.Sysctl(dad, "0"); err != nil {
		return fmt.Errorf("podnet: set %s to 0 in pod netns %s (no duplicate address detection wait): %w", dad, netnsPath, err)
	}
	if err := netlink.LinkSetIP6AddrGenMode(link, addrGenModeNone); err != nil {
		return fmt.Errorf("podnet: set addr_gen_mode none on %s in pod netns %s (pins its link-local address): %w", ifName, netnsPath, err)
	}
	return nil
}

// testHookBeforeIPv6Route, when set by tests, runs in Setup after the pod's IPv6
// addresses are added and before its IPv6 route, to exercise the rollback of a
// dual-stack pod's half-configured interface.
var testHookBeforeIPv6Route func() error

// addIPv6 adds the pod's link-local address (LinkLocalFromMAC(mac)/64) and its global
// address, both IFA_F_NODAD, and the IPv6 default route via gw, to link (in the calling
// thread's netns, the link up). Addresses and a route already present are fine (a retry).
func addIPv6(link netlink.Link, ifName, netnsPath string, mac net.HardwareAddr, addr *net.IPNet, gw net.IP) error {
	ll := &net.IPNet{IP: LinkLocalFromMAC(mac), Mask: net.CIDRMask(64, 128)}
	for _, a := range []*net.IPNet{ll, addr} {
		if err := netlink.AddrAdd(link, &netlink.Addr{IPNet: a, Flags: unix.IFA_F_NODAD}); err != nil && !errors.Is(err, unix.EEXIST) {
			return fmt.Errorf("podnet: add address %v (nodad) to %s in pod netns %s: %w", a, ifName, netnsPath, err)
		}
	}
	if testHookBeforeIPv6Route != nil {
		if err := testHookBeforeIPv6Route(); err != nil {
			return err
		}
	}
	route := &netlink.Route{
		LinkIndex: link.Attrs().Index,
		Dst:       &net.IPNet{IP: net.IPv6zero, Mask: net.CIDRMask(0, 128)},
		Gw:        gw,
		Scope:     netlink.SCOPE_UNIVERSE,
	}
	if err := netlink.RouteReplace(route); err != nil {
		return fmt.Errorf("podnet: add IPv6 default route via %v dev %s in pod netns %s: %w", gw, ifName, netnsPath, err)
	}
	return nil
}

// ConfigureGatewayIPv6 gives the node's gateway interface name (in the calling thread's
// network namespace; ConfigureGateway has made it exist) its IPv6 address addr (the
// gateway's address with the IPv6 pod subnet's prefix, e.g. fd00:10:244:1::1/64):
// IPv6 on (disable_ipv6 0), duplicate address detection off (accept_dad 0), the address
// IFA_F_NODAD (already present is fine). The host's interface then answers pods'
// neighbor solicitations for it (RFC 4861 §7.2.4), as it answers ARP for the IPv4
// gateway, and the prefix route sends the host's IPv6 for pods through it. Idempotent.
//
// Errors: addr is not IPv6; the link is missing; a sysctl cannot be written (IPv6 off in
// the kernel, a read-only /proc/sys: run the daemon privileged); a netlink failure.
func ConfigureGatewayIPv6(name string, addr *net.IPNet) error {
	if err := validIfName(name); err != nil {
		return fmt.Errorf("podnet: gateway: %w", err)
	}
	a, err := ipv6Net(addr)
	if err != nil {
		return fmt.Errorf("podnet: gateway %s IPv6 address: %w", name, err)
	}
	link, err := netlink.LinkByName(name)
	if err != nil {
		return fmt.Errorf("podnet: gateway %s: %w", name, err)
	}
	for _, kv := range []struct{ key, value, why string }{
		{fmt.Sprintf("net/ipv6/conf/%s/disable_ipv6", name), "0", "the gateway carries the pods' IPv6 gateway address; is IPv6 off in this kernel?"},
		{fmt.Sprintf("net/ipv6/conf/%s/accept_dad", name), "0", "no duplicate address detection wait"},
	} {
		if _, err := sysctl.Sysctl(kv.key, kv.value); err != nil {
			return fmt.Errorf("podnet: gateway %s: set %s to %s (%s; the daemon needs a writable /proc/sys): %w", name, kv.key, kv.value, kv.why, err)
		}
	}
	if err := netlink.AddrAdd(link, &netlink.Addr{IPNet: a, Flags: unix.IFA_F_NODAD}); err != nil && !errors.Is(err, unix.EEXIST) {
		return fmt.Errorf("podnet: add address %v to gateway %s: %w", a, name, err)
	}
	return nil
}
