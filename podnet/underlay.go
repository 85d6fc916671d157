package podnet

// The node's addresses' move between the underlay NIC and an OVS bridge's internal port
// (the userspace datapath with Open vSwitch in the DaemonSet, issue 25): controller.MoveUnderlay
// moves them onto the bridge, cmd/ofsdn-ovs back onto the NIC when it stops Open vSwitch
// (and onto the bridge again when it starts it), so the node keeps its addresses whether or
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

// Moved is what MoveAddresses moved.
type Moved struct {
	// Addresses are the addresses moved, IPv4 then IPv6, as CIDRs.
	Addresses []string
	// Routes are the routes moved ("default via GW", "DST via GW", "DST"), IPv4 then IPv6.
	Routes []string
	// AnnounceErr is why a moved IPv6 address was not announced (AnnounceIPv6), or nil:
	// the move itself is done, and peers learn to's MAC by neighbor discovery once their
	// entry for the address goes stale.
	AnnounceErr error
}

// MoveAddresses moves the node's addresses of both families from link from onto link
// to, with the routes through from, in the calling thread's network namespace: every
// IPv4 address and every IPv6 address but the link-local ones (each link keeps its own
// fe80::, made from its MAC) and the kernel's temporary ones (privacy extensions: the
// kernel makes them anew for a mngtmpaddr address on to), and every IPv4 and IPv6 route
// through from, which becomes the same route through to. to gets from's MTU and is set
// up, the addresses are added to to, the routes replaced, then the addresses deleted from
// from, so the node is never without its addresses or its routes.
//
// An address keeps what `ip addr` shows of it: prefix, peer (a point-to-point address,
// "peer 192.168.92.1/32"), broadcast, scope, the remaining valid and preferred lifetimes
// (a DHCP lease's, a SLAAC address's, a deprecated address's preferred_lft 0; permanent
// and dynamic as on from; the DHCP client or the kernel's SLAAC, which know from, may add
// the address there again when the lease is renewed or the next Router Advertisement
// comes: README, "Run on Kubernetes"), flags such as noprefixroute, nodad and mngtmpaddr,
// and its label (IPv4; renamed to to's: "eth0:1" becomes "br-phy:1"). Primary IPv4
// addresses keep being primary (added in from's order). An IPv6 address is added without
// duplicate address detection (IFA_F_NODAD: it is the node's own, still on from, whose
// answer would fail the detection, and it is usable at once, never tentative), then given
// from's flags again (a change of flags starts no detection). A route keeps its table
// (main and others), metric, protocol, scope, preferred source and flags; a multipath
// route moves the nexthops through from; an IPv6 route via a link-local next hop (a
// default route via fe80::1) keeps that next hop, on to's link. Routes without a gateway
// (on-link prefix routes) move first, so that a gateway reachable only through such a
// route is reachable when its own route moves. The kernel's own routes (protocol kernel:
// prefix, local and multicast routes, fe80::/64) follow the addresses; an IPv6 route's
// preference (RTA_PREF) and expiry (a Router Advertisement's) are not kept.
//
// arp_ignore moves with the IPv4 addresses: to gets from's value (the node's own setting
// when from is the NIC, that setting again when the addresses come back), and from
// answers no ARP (arp_ignore 8; the kernel would otherwise answer for the moved addresses
// with its MAC). IPv6 needs no such setting: a link answers neighbor solicitations only
// for its own addresses. Peers learn to's MAC for the moved IPv6 addresses from an
// unsolicited Neighbor Advertisement (RFC 4861 §7.2.6, override flag set) sent from to
// for each (AnnounceIPv6; its failure is Moved.AnnounceErr, not the move's); an IPv4
// address's gratuitous ARP is the caller's (topology.KeepAnnounced). Nothing to move (from has no such address) is not an error.
// Errors name the step, the links and the fix.
func MoveAddresses(from, to string) (Moved, error) {
	var m Moved
	src, err := netlink.LinkByName(from)
	if err != nil {
		return m, fmt.Errorf("podnet: move addresses from %s: %w", from, err)
	}
	dst, err := netlink.LinkByName(to)
	if err != nil {
		return m, fmt.Errorf("podnet: move addresses to %s: %w", to, err)
	}
	addrs, err := NodeAddresses(src)
	if err != nil {
		return m, fmt.Errorf("podnet: addresses of %s: %w", from, err)
	}
	if len(addrs) == 0 {
		return m, nil
	}
	var routes []netlink.Route
	for _, family := range []int{netlink.FAMILY_V4, netlink.FAMILY_V6} {
		r, err := routesThrough(family, src.Attrs().Index)
		if err != nil {
			return m, fmt.Errorf("podnet: routes through %s: %w", from, err)
		}
		routes = append(routes, r...)
	}
	hasV4 := false
	for _, a := range addrs {
		hasV4 = hasV4 || a.IP.To4() != nil
	}
	if hasV4 {
		arpIgnore, err := ARPIgnore(from)
		if err != nil {
			return m, err
		}
		if err := SetARPIgnore(to, arpIgnore); err != nil {
			return m, err
		}
	}
	if dst.Attrs().MTU != src.Attrs().MTU {
		if err := netlink.LinkSetMTU(dst, src.Attrs().MTU); err != nil {
			return m, fmt.Errorf("podnet: MTU %d on %s (as %s's): %w", src.Attrs().MTU, to, from, err)
		}
	}
	for _, a := range addrs {
		na := movedAddr(a, from, to)
		if a.IP.To4() == nil {
			na.Flags |= unix.IFA_F_NODAD
		}
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
	// The IPv6 addresses' own flags again (without the nodad they were added with, unless
	// they had it), and their announcement. The kernel leaves the prefix route of a
	// deleted dynamic IPv6 address (finite lifetime) on from until it expires, which
	// would keep its prefix on from: deleted.
	for _, a := range addrs {
		if a.IP.To4() != nil {
			continue
		}
		if a.Flags&unix.IFA_F_NOPREFIXROUTE == 0 {
			prefix := &net.IPNet{IP: a.IP.Mask(a.Mask), Mask: a.Mask}
			if a.Peer != nil && !a.Peer.IP.Equal(a.IP) {
				prefix = &net.IPNet{IP: a.Peer.IP.Mask(a.Peer.Mask), Mask: a.Peer.Mask}
			}
			err := netlink.RouteDel(&netlink.Route{LinkIndex: src.Attrs().Index, Dst: prefix,
				Protocol: unix.RTPROT_KERNEL, Table: unix.RT_TABLE_MAIN, Family: netlink.FAMILY_V6})
			if err != nil && !errors.Is(err, unix.ESRCH) {
				return m, fmt.Errorf("podnet: prefix route %v of deleted address %s on %s: %w", prefix, addrString(a), from, err)
			}
		}
		if a.Flags&unix.IFA_F_NODAD == 0 {
			na := movedAddr(a, from, to)
			if err := netlink.AddrReplace(dst, &na); err != nil {
				return m, fmt.Errorf("podnet: flags of address %s on %s: %w", addrString(a), to, err)
			}
		}
		if err := AnnounceIPv6(to, a.IP); err != nil && m.AnnounceErr == nil {
			m.AnnounceErr = err
		}
	}
	if hasV4 {
		return m, SetARPIgnore(from, 8)
	}
	return m, nil
}

// NodeAddresses returns the addresses of link that MoveAddresses moves: every IPv4
// address, then every IPv6 address but the link-local and the temporary ones (IPv4 in
// the kernel's order, primary ones first). Errors are netlink's.
func NodeAddresses(link netlink.Link) ([]netlink.Addr, error) {
	v4, err := netlink.AddrList(link, netlink.FAMILY_V4)
	if err != nil {
		return nil, err
	}
	v6, err := netlink.AddrList(link, netlink.FAMILY_V6)
	if err != nil {
		return nil, err
	}
	for _, a := range v6 {
		if a.IP.IsLinkLocalUnicast() || a.IP.IsLoopback() || a.Flags&unix.IFA_F_TEMPORARY != 0 {
			continue
		}
		v4 = append(v4, a)
	}
	return v4, nil
}

// AnnounceIPv6 sends one unsolicited Neighbor Advertisement for ip from the link name
// (RFC 4861 §4.4, §7.2.6): to all nodes (ff02::1), hop limit 255, override flag set,
// router flag as the link forwards IPv6, the link's MAC as target link-layer address, so
// that peers holding a neighbor entry for ip take that MAC. ip must be an IPv6 address of
// name. It goes through an ICMPv6 raw socket bound to name (the kernel fills in the
// checksum), in the calling thread's network namespace. Errors name the link and the
// address.
func AnnounceIPv6(name string, ip net.IP) error {
	l, err := netlink.LinkByName(name)
	if err != nil {
		return fmt.Errorf("podnet: announce %v: %w", ip, err)
	}
	mac := l.Attrs().HardwareAddr
	if len(mac) != 6 || ip.To4() != nil || ip.To16() == nil {
		return fmt.Errorf("podnet: announce %v on %s: want an IPv6 address and a link with an Ethernet MAC (%v)", ip, name, mac)
	}
	fd, err := unix.Socket(unix.AF_INET6, unix.SOCK_RAW|unix.SOCK_CLOEXEC, unix.IPPROTO_ICMPV6)
	if err != nil {
		return fmt.Errorf("podnet: announce %v on %s: ICMPv6 socket: %w", ip, name, err)
	}
	defer unix.Close(fd)
	if err := unix.BindToDevice(fd, name); err != nil {
		return fmt.Errorf("podnet: announce %v on %s: bind to the link: %w", ip, name, err)
	}
	if err := unix.SetsockoptInt(fd, unix.IPPROTO_IPV6, unix.IPV6_MULTICAST_HOPS, 255); err != nil {
		return fmt.Errorf("podnet: announce %v on %s: hop limit: %w", ip, name, err)
	}
	if err := unix.SetsockoptInt(fd, unix.IPPROTO_IPV6, unix.IPV6_MULTICAST_IF, l.Attrs().Index); err != nil {
		return fmt.Errorf("podnet: announce %v on %s: multicast link: %w", ip, name, err)
	}
	var local [16]byte
	copy(local[:], ip.To16())
	if err := unix.Bind(fd, &unix.SockaddrInet6{Addr: local}); err != nil {
		return fmt.Errorf("podnet: announce %v on %s: bind the address (is it on %s?): %w", ip, name, name, err)
	}
	na := make([]byte, 32)
	na[0] = 136  // Neighbor Advertisement; code 0, checksum the kernel's
	na[4] = 0x20 // override
	if b, err := os.ReadFile(filepath.Join("/proc/sys/net/ipv6/conf", name, "forwarding")); err == nil && strings.TrimSpace(string(b)) == "1" {
		na[4] |= 0x80 // router
	}
	copy(na[8:24], ip.To16())
	na[24], na[25] = 2, 1 // target link-layer address, 8 bytes
	copy(na[26:32], mac)
	to := &unix.SockaddrInet6{Addr: [16]byte{0xff, 0x02, 15: 1}, ZoneId: uint32(l.Attrs().Index)}
	if err := unix.Sendto(fd, na, 0, to); err != nil {
		return fmt.Errorf("podnet: announce %v on %s: send: %w", ip, name, err)
	}
	return nil
}

// routesThrough lists the routes of family of every table leaving through the link
// index (their device, or one of their nexthops'), the kernel's own aside, those without
// a gateway first.
func routesThrough(family, index int) ([]netlink.Route, error) {
	all, err := netlink.RouteListFiltered(family, &netlink.Route{Table: unix.RT_TABLE_UNSPEC}, netlink.RT_FILTER_TABLE)
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
// (noprefixroute, home, mngtmpaddr, autojoin, nodad); the kernel's own (secondary,
// permanent, deprecated, tentative, optimistic, dadfailed, temporary) follow from the
// address's place, lifetimes and duplicate address detection.
const addrFlagsKept = unix.IFA_F_NOPREFIXROUTE | unix.IFA_F_HOMEADDRESS | unix.IFA_F_MANAGETEMPADDR |
	unix.IFA_F_MCAUTOJOIN | unix.IFA_F_NODAD

// movedAddr is address a of link from as it is added to link to.
func movedAddr(a netlink.Addr, from, to string) netlink.Addr {
	na := netlink.Addr{IPNet: a.IPNet, Peer: a.Peer, Broadcast: a.Broadcast, Scope: a.Scope,
		Flags: a.Flags & addrFlagsKept}
	if na.Broadcast == nil && a.IP.To4() != nil {
		na.Broadcast = net.IPv4zero // none, as on from (netlink would make one up)
	}
	// Finite lifetimes (dynamic), or a forever valid one with a finite preferred one (a
	// deprecated address's 0); both forever (permanent) is what no lifetime means.
	if a.ValidLft != 0 && (uint32(a.ValidLft) != infinityLifetime || uint32(a.PreferedLft) != infinityLifetime) {
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
	family := netlink.FAMILY_V6
	if a.IP.To4() != nil {
		family = netlink.FAMILY_V4
	}
	list, err := netlink.AddrList(link, family)
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
	if r.Dst != nil && r.Dst.String() != "0.0.0.0/0" && r.Dst.String() != "::/0" {
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
