package podnet

// The node IP's move between the underlay NIC and an OVS bridge's internal port (the
// userspace datapath with Open vSwitch in the DaemonSet, issue 25): controller.MoveUnderlay
// moves it onto the bridge, cmd/ofsdn-ovs back onto the NIC when it stops Open vSwitch
// (and onto the bridge again when it starts it), so the node keeps its address whether or
// not the bridge forwards.

import (
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"

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

// MoveIPv4 moves every IPv4 address of link from onto link to, and every IPv4 route
// through from to the same route through to, in the calling thread's network namespace:
// to gets from's MTU and is set up, the addresses are added to to, the routes replaced,
// then the addresses deleted from from, so the node is never without its address or its
// routes.
//
// An address keeps what `ip addr` shows of it: prefix, peer (a point-to-point address,
// "peer 192.168.92.1/32"), broadcast, scope, the remaining valid and preferred lifetimes
// (a DHCP lease's; the DHCP client itself, which knows from, may add the address there
// again when it renews: README, "Run on Kubernetes"), flags such as noprefixroute, and
// its label (renamed to to's: "eth0:1" becomes "br-phy:1"). Primary addresses keep being
// primary (added in from's order). A route keeps its table (main and others), metric,
// protocol, scope, preferred source and flags; a multipath route moves the nexthops
// through from. Routes without a gateway move first, so that a gateway reachable only
// through such a route is reachable when its own route moves. The kernel's own routes
// (protocol kernel: prefix and local routes) follow the addresses.
//
// arp_ignore moves with the addresses: to gets from's value (the node's own setting when
// from is the NIC, that setting again when the addresses come back), and from answers no
// ARP (arp_ignore 8; the kernel would otherwise answer for the moved addresses with its
// MAC). Nothing to move (from has no IPv4 address) is not an error. Errors name the step,
// the links and the fix.
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
	routes, err := routesThrough(src.Attrs().Index)
	if err != nil {
		return m, fmt.Errorf("podnet: routes through %s: %w", from, err)
	}
	arpIgnore, err := ARPIgnore(from)
	if err != nil {
		return m, err
	}
	if err := SetARPIgnore(to, arpIgnore); err != nil {
		return m, err
	}
	if dst.Attrs().MTU != src.Attrs().MTU {
		if err := netlink.LinkSetMTU(dst, src.Attrs().MTU); err != nil {
			return m, fmt.Errorf("podnet: MTU %d on %s (as %s's): %w", src.Attrs().MTU, to, from, err)
		}
	}
	for _, a := range addrs {
		na := movedAddr(a, from, to)
		if err := netlink.AddrReplace(dst, &na); err != nil {
			return m, fmt.Errorf("podnet: address %s on %s: %w", addrString(a), to, err)
		}
		m.Addresses = append(m.Addresses, addrString(a))
	}
	if err := netlink.LinkSetUp(dst); err != nil {
		return m, fmt.Errorf("podnet: set %s up: %w", to, err)
	}
	for _, r := range routes {
		// The kernel's nexthop flags (linkdown, dead: from without carrier) are not ours
		// to set; onlink is.
		r.ILinkIndex, r.Flags = 0, r.Flags&unix.RTNH_F_ONLINK
		if r.LinkIndex == src.Attrs().Index {
			r.LinkIndex = dst.Attrs().Index
		}
		for _, nh := range r.MultiPath {
			nh.Flags &= unix.RTNH_F_ONLINK
			if nh.LinkIndex == src.Attrs().Index {
				nh.LinkIndex = dst.Attrs().Index
			}
		}
		if err := netlink.RouteReplace(&r); err != nil {
			return m, fmt.Errorf("podnet: route %s through %s: %w", routeString(r), to, err)
		}
		m.Routes = append(m.Routes, routeString(r))
	}
	// Secondary addresses first: deleting a primary one deletes its secondaries with it
	// unless the kernel promotes them (promote_secondaries), which is not ours to assume.
	for i := len(addrs) - 1; i >= 0; i-- {
		a := addrs[i]
		if err := netlink.AddrDel(src, &netlink.Addr{IPNet: a.IPNet, Peer: a.Peer}); err != nil {
			if errors.Is(err, unix.EADDRNOTAVAIL) && !hasAddr(src, a) {
				continue // gone with its primary, or deleted meanwhile
			}
			return m, fmt.Errorf("podnet: delete address %s from %s: %w", addrString(a), from, err)
		}
	}
	return m, SetARPIgnore(from, 8)
}

// routesThrough lists the IPv4 routes of every table leaving through the link index
// (their device, or one of their nexthops'), the kernel's own aside, those without a
// gateway first.
func routesThrough(index int) ([]netlink.Route, error) {
	all, err := netlink.RouteListFiltered(netlink.FAMILY_V4, &netlink.Route{Table: unix.RT_TABLE_UNSPEC}, netlink.RT_FILTER_TABLE)
	if err != nil && !errors.Is(err, netlink.ErrDumpInterrupted) {
		return nil, err
	}
	var direct, viaGw []netlink.Route
	for _, r := range all {
		if r.Protocol == unix.RTPROT_KERNEL || r.Type != unix.RTN_UNICAST {
			continue
		}
		through, gw := r.LinkIndex == index, r.Gw != nil
		for _, nh := range r.MultiPath {
			through = through || nh.LinkIndex == index
			gw = gw || nh.Gw != nil
		}
		switch {
		case !through:
		case gw:
			viaGw = append(viaGw, r)
		default:
			direct = append(direct, r)
		}
	}
	return append(direct, viaGw...), nil
}

// addrFlagsKept are the address flags a moved address keeps: the ones a user sets
// (noprefixroute, home, mngtmpaddr, autojoin, nodad, optimistic); the kernel's own
// (secondary, permanent, deprecated, tentative, dadfailed) follow from the address's
// place and lifetimes.
const addrFlagsKept = unix.IFA_F_NOPREFIXROUTE | unix.IFA_F_HOMEADDRESS | unix.IFA_F_MANAGETEMPADDR |
	unix.IFA_F_MCAUTOJOIN | unix.IFA_F_NODAD | unix.IFA_F_OPTIMISTIC

// movedAddr is address a of link from as it is added to link to.
func movedAddr(a netlink.Addr, from, to string) netlink.Addr {
	na := netlink.Addr{IPNet: a.IPNet, Peer: a.Peer, Broadcast: a.Broadcast, Scope: a.Scope,
		Flags: a.Flags & addrFlagsKept}
	if na.Broadcast == nil {
		na.Broadcast = net.IPv4zero // none, as on from (netlink would make one up)
	}
	if a.ValidLft != 0 && uint32(a.ValidLft) != infinityLifetime {
		na.ValidLft, na.PreferedLft = a.ValidLft, a.PreferedLft
	}
	if a.Label == from {
		na.Label = to
	} else if suffix, ok := strings.CutPrefix(a.Label, from+":"); ok {
		na.Label = to + ":" + suffix
	}
	return na
}

// infinityLifetime is an address lifetime of "forever" (INFINITY_LIFE_TIME).
const infinityLifetime = 0xFFFFFFFF

// addrString is the address as `ip addr` shows it: "IP/LEN", or "IP peer PEER/LEN".
func addrString(a netlink.Addr) string {
	if a.Peer != nil && !a.Peer.IP.Equal(a.IP) {
		return a.IP.String() + " peer " + a.Peer.String()
	}
	return a.IPNet.String()
}

// hasAddr reports whether link still has address a.
func hasAddr(link netlink.Link, a netlink.Addr) bool {
	list, err := netlink.AddrList(link, netlink.FAMILY_V4)
	if err != nil {
		return true
	}
	for _, b := range list {
		if b.IP.Equal(a.IP) {
			return true
		}
	}
	return false
}

func routeString(r netlink.Route) string {
	s := "default"
	if r.Dst != nil && r.Dst.String() != "0.0.0.0/0" {
		s = r.Dst.String()
	}
	if r.Gw != nil {
		s += " via " + r.Gw.String()
	}
	for _, nh := range r.MultiPath {
		if nh.Gw != nil {
			s += " nexthop via " + nh.Gw.String()
		}
	}
	if r.Table != unix.RT_TABLE_MAIN && r.Table != 0 {
		s += fmt.Sprintf(" table %d", r.Table)
	}
	return s
}

// ARPIgnore returns the IPv4 arp_ignore of the link name (0-8; see SetARPIgnore), read from
// /proc/sys/net/ipv4/conf/NAME/arp_ignore in the calling thread's network namespace.
// Errors name the link.
func ARPIgnore(name string) (uint32, error) {
	b, err := os.ReadFile(filepath.Join("/proc/sys/net/ipv4/conf", name, "arp_ignore"))
	if err != nil {
		return 0, fmt.Errorf("podnet: %s: read IPv4 arp_ignore: %w", name, err)
	}
	v, err := strconv.ParseUint(strings.TrimSpace(string(b)), 10, 32)
	if err != nil {
		return 0, fmt.Errorf("podnet: %s: IPv4 arp_ignore %q: %w", name, b, err)
	}
	return uint32(v), nil
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
