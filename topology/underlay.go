package topology

// The underlay: the interface that holds the node IP, whose MTU bounds the pods' MTU.

import (
	"errors"
	"fmt"
	"net"

	"github.com/vishvananda/netlink"
)

// TunnelOverhead is the bytes a VXLAN (or option-less Geneve) encapsulation adds over an
// IPv4 underlay: outer IPv4 20 + UDP 8 + VXLAN/Geneve 8 + inner Ethernet 14 = 50
// (RFC 7348 §5, RFC 8926 §3.1).
const TunnelOverhead = 50

// TunnelOverheadIPv6 is the same over an IPv6 underlay: the outer IPv6 header is 40
// bytes, so 40 + 8 + 8 + 14 = 70 (RFC 7348 §5, RFC 8200 §3).
const TunnelOverheadIPv6 = 70

// Underlay is the interface that carries the node IP.
type Underlay struct {
	// Name is the interface's name (e.g. eth0, or br-phy with the userspace datapath).
	Name string
	// MTU is its MTU in bytes.
	MTU int
	// IP is the node IP found on it.
	IP net.IP
}

// PodMTU returns the pod and gateway MTU for this underlay: MTU − TunnelOverhead, or
// MTU − TunnelOverheadIPv6 when the node IP is IPv6 (the tunnels' outer header is).
func (u Underlay) PodMTU() int {
	if u.IP != nil && u.IP.To4() == nil {
		return u.MTU - TunnelOverheadIPv6
	}
	return u.MTU - TunnelOverhead
}

// FindUnderlay returns the interface, in the calling thread's network namespace, that has
// ip as one of its addresses (IPv4, or IPv6 for an IPv6 underlay; netlink address dump).
// It returns an error naming ip if no interface has it: set nodeIP to an address of this
// node.
func FindUnderlay(ip net.IP) (Underlay, error) {
	family, want := netlink.FAMILY_V4, ip.To4()
	if want == nil {
		if len(ip) != net.IPv6len {
			return Underlay{}, fmt.Errorf("underlay: node IP %v is neither IPv4 nor IPv6", ip)
		}
		family, want = netlink.FAMILY_V6, ip
	}
	addrs, err := addrList(family)
	if err != nil {
		return Underlay{}, fmt.Errorf("underlay: list addresses: %w", err)
	}
	for _, a := range addrs {
		if !a.IP.Equal(ip) {
			continue
		}
		l, err := netlink.LinkByIndex(a.LinkIndex)
		if err != nil {
			return Underlay{}, fmt.Errorf("underlay: link %d holding %v: %w", a.LinkIndex, ip, err)
		}
		return Underlay{Name: l.Attrs().Name, MTU: l.Attrs().MTU, IP: want}, nil
	}
	return Underlay{}, fmt.Errorf("underlay: no interface has node IP %v: set nodeIP to an address of this node", ip)
}

// DefaultUnderlay returns the interface of the IPv4 default route and its first IPv4
// address, for nodes whose config names no node IP. It returns an error if there is no
// default route or its interface has no IPv4 address: set nodeIP.
func DefaultUnderlay() (Underlay, error) {
	routes, err := netlink.RouteList(nil, netlink.FAMILY_V4)
	if err != nil && !errors.Is(err, netlink.ErrDumpInterrupted) {
		return Underlay{}, fmt.Errorf("underlay: list routes: %w", err)
	}
	for _, r := range routes {
		if r.Dst != nil && r.Dst.String() != "0.0.0.0/0" {
			continue
		}
		l, err := netlink.LinkByIndex(r.LinkIndex)
		if err != nil {
			continue
		}
		addrs, err := netlink.AddrList(l, netlink.FAMILY_V4)
		if err != nil || len(addrs) == 0 {
			continue
		}
		ip := addrs[0].IP.To4()
		if r.Src != nil {
			ip = r.Src.To4()
		}
		return Underlay{Name: l.Attrs().Name, MTU: l.Attrs().MTU, IP: ip}, nil
	}
	return Underlay{}, errors.New("underlay: no IPv4 default route with an addressed interface: set nodeIP")
}

// addrList dumps all addresses of family (netlink.FAMILY_V4 or FAMILY_V6), retrying a
// dump interrupted by a concurrent change (NLM_F_DUMP_INTR, as containernetworking/plugins'
// netlinksafe does).
func addrList(family int) ([]netlink.Addr, error) {
	var err error
	for range 5 {
		var addrs []netlink.Addr
		addrs, err = netlink.AddrList(nil, family)
		if !errors.Is(err, netlink.ErrDumpInterrupted) {
			return addrs, err
		}
	}
	return nil, err
}
