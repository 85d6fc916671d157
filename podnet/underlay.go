package podnet

// The node IP's move between the underlay NIC and an OVS bridge's internal port (the
// userspace datapath with Open vSwitch in the DaemonSet, issue 25): controller.MoveUnderlay
// moves it onto the bridge, cmd/ofsdn-ovs back onto the NIC when it stops Open vSwitch
// (and onto the bridge again when it starts it), so the node keeps its address whether or
// not the bridge forwards.

import (
	"errors"
	"fmt"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netlink/nl"
	"golang.org/x/sys/unix"
)

// MovedIPv4 is what MoveIPv4 moved.
type MovedIPv4 struct {
	// Addresses are the IPv4 addresses moved, as CIDRs.
	Addresses []string
	// Routes are the routes moved ("default via GW", "DST via GW", "DST").
	Routes []string
}

// MoveIPv4 moves every IPv4 address of link from onto link to, and every IPv4 route of
// the main table through from (the kernel's own prefix routes aside: they follow the
// addresses) to the same route through to, in the calling thread's network namespace:
// to gets from's MTU and is set up, the addresses are added to to, the routes replaced,
// then the addresses deleted from from, so the node is never without its address or its
// routes. The link that ends up without addresses answers no ARP (arp_ignore 8; the
// kernel would otherwise answer for the moved addresses with its MAC); the one that takes
// them answers again (arp_ignore 0, the kernel's default). Nothing to move (from has no
// IPv4 address) is not an error. Errors name the step, the links and the fix.
func MoveIPv4(from, to string) (MovedIPv4, error) {
	var m MovedIPv4
	src, err := netlink.LinkByName(from)
	if err != nil {
		return m, fmt.Errorf("podnet: move IPv4 from %s: %w", from, err)
	}
	dst, err := netlink.LinkByName(to)
	if err != nil {
		return m, fmt.Errorf("podnet: move IPv4 to %s: %w", to, err)
	}
	addrs, err := netlink.AddrList(src, netlink.FAMILY_V4)
	if err != nil {
		return m, fmt.Errorf("podnet: addresses of %s: %w", from, err)
	}
	if len(addrs) == 0 {
		return m, nil
	}
	routes, err := netlink.RouteListFiltered(netlink.FAMILY_V4, &netlink.Route{LinkIndex: src.Attrs().Index, Table: unix.RT_TABLE_MAIN},
		netlink.RT_FILTER_OIF|netlink.RT_FILTER_TABLE)
	if err != nil && !errors.Is(err, netlink.ErrDumpInterrupted) {
		return m, fmt.Errorf("podnet: routes through %s: %w", from, err)
	}
	if err := SetARPIgnore(to, 0); err != nil {
		return m, err
	}
	if dst.Attrs().MTU != src.Attrs().MTU {
		if err := netlink.LinkSetMTU(dst, src.Attrs().MTU); err != nil {
			return m, fmt.Errorf("podnet: MTU %d on %s (as %s's): %w", src.Attrs().MTU, to, from, err)
		}
	}
	for _, a := range addrs {
		if err := netlink.AddrReplace(dst, &netlink.Addr{IPNet: a.IPNet, Broadcast: a.Broadcast}); err != nil {
			return m, fmt.Errorf("podnet: address %s on %s: %w", a.IPNet, to, err)
		}
		m.Addresses = append(m.Addresses, a.IPNet.String())
	}
	if err := netlink.LinkSetUp(dst); err != nil {
		return m, fmt.Errorf("podnet: set %s up: %w", to, err)
	}
	for _, r := range routes {
		if r.Protocol == unix.RTPROT_KERNEL {
			continue
		}
		r.LinkIndex, r.ILinkIndex = dst.Attrs().Index, 0
		if err := netlink.RouteReplace(&r); err != nil {
			return m, fmt.Errorf("podnet: route %s through %s: %w", routeString(r), to, err)
		}
		m.Routes = append(m.Routes, routeString(r))
	}
	for _, a := range addrs {
		if err := netlink.AddrDel(src, &netlink.Addr{IPNet: a.IPNet}); err != nil && !errors.Is(err, unix.EADDRNOTAVAIL) {
			return m, fmt.Errorf("podnet: delete address %s from %s: %w", a.IPNet, from, err)
		}
	}
	return m, SetARPIgnore(from, 8)
}

func routeString(r netlink.Route) string {
	dst := "default"
	if r.Dst != nil {
		dst = r.Dst.String()
	}
	if r.Gw != nil {
		return dst + " via " + r.Gw.String()
	}
	return dst
}

// SetARPIgnore sets the IPv4 arp_ignore of the link name (0: answer for any local
// address, the kernel's default; 8: never answer) over netlink (IFLA_INET_CONF, as
// IsolateHostEnd), in the calling thread's network namespace. Errors name the link and
// the fix.
func SetARPIgnore(name string, value uint32) error {
	link, err := netlink.LinkByName(name)
	if err != nil {
		return fmt.Errorf("podnet: %s: %w", name, err)
	}
	req := nl.NewNetlinkRequest(unix.RTM_SETLINK, unix.NLM_F_ACK)
	msg := nl.NewIfInfomsg(unix.AF_UNSPEC)
	msg.Index = int32(link.Attrs().Index)
	req.AddData(msg)
	afSpec := nl.NewRtAttr(unix.IFLA_AF_SPEC, nil)
	afSpec.AddRtAttr(unix.AF_INET, nil).AddRtAttr(unix.IFLA_INET_CONF, nil).
		AddRtAttr(ipv4DevconfARPIgnore, nl.Uint32Attr(value))
	req.AddData(afSpec)
	if _, err := req.Execute(unix.NETLINK_ROUTE, 0); err != nil {
		return fmt.Errorf("podnet: %s: set IPv4 arp_ignore %d (IFLA_INET_CONF; needs CAP_NET_ADMIN, e.g. a privileged container): %w", name, value, err)
	}
	return nil
}
