package topology

// Announcing the node IP on the underlay.
//
// Design history (issue 10): with the userspace datapath, Open vSwitch resolves a tunnel's
// next hop from its own tunnel neighbour cache (`ovs-appctl tnl/neigh/show`), learned by
// snooping ARP on the bridge that holds the node IP, and keeps an entry for up to 15
// minutes. A peer whose underlay MAC changed (a rebooted or replaced node, a re-created
// br-phy) stayed unreachable until the entry aged out. The daemon now sends a gratuitous
// ARP (an ARP request with sender and target both the node IP, RFC 5227 §3 "ARP
// Announcement") from the interface holding the node IP when it starts and whenever that
// interface's MAC changes; peers' OVS (seen with OVS 3.1) and kernels take the new MAC
// from it. It goes out through a packet socket on that interface: with the userspace
// datapath that is the underlay bridge's internal port, so the frame enters the bridge
// (whose flows, not the daemon's, forward it: the daemon does not own that bridge); with
// the kernel datapath it is the NIC itself.

import (
	"context"
	"encoding/binary"
	"fmt"
	"log/slog"
	"net"
	"sync"
	"time"

	"github.com/containernetworking/plugins/pkg/netlinksafe"
	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// GratuitousARP returns the Ethernet frame of an ARP announcement of ip from mac (RFC 5227
// §3, RFC 826): broadcast, ARP request, sender = target = ip, target hardware address zero.
// It is 42 bytes (the NIC pads it to the Ethernet minimum).
func GratuitousARP(mac net.HardwareAddr, ip net.IP) []byte {
	b := make([]byte, 42)
	copy(b[0:6], []byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff})
	copy(b[6:12], mac)
	binary.BigEndian.PutUint16(b[12:], unix.ETH_P_ARP)
	binary.BigEndian.PutUint16(b[14:], 1)             // htype Ethernet
	binary.BigEndian.PutUint16(b[16:], unix.ETH_P_IP) // ptype IPv4
	b[18], b[19] = 6, 4
	binary.BigEndian.PutUint16(b[20:], 1) // request
	copy(b[22:28], mac)
	copy(b[28:32], ip.To4())
	copy(b[38:42], ip.To4())
	return b
}

// Announce sends one gratuitous ARP for ip from the interface name with its current MAC,
// through an AF_PACKET socket bound to it, and returns that MAC. Errors: ip not IPv4, the
// interface cannot be found or has no Ethernet MAC, or the socket fails.
func Announce(name string, ip net.IP) (net.HardwareAddr, error) {
	if ip.To4() == nil {
		return nil, fmt.Errorf("announce %v on %s: not an IPv4 address", ip, name)
	}
	l, err := netlinksafe.LinkByName(name)
	if err != nil {
		return nil, fmt.Errorf("announce %v: interface %s: %w", ip, name, err)
	}
	mac := l.Attrs().HardwareAddr
	if len(mac) != 6 {
		return nil, fmt.Errorf("announce %v: interface %s has no Ethernet MAC (%v)", ip, name, mac)
	}
	fd, err := unix.Socket(unix.AF_PACKET, unix.SOCK_RAW|unix.SOCK_CLOEXEC, 0) // send only: protocol 0 receives nothing
	if err != nil {
		return nil, fmt.Errorf("announce %v on %s: packet socket: %w", ip, name, err)
	}
	defer unix.Close(fd)
	to := &unix.SockaddrLinklayer{Protocol: htons(unix.ETH_P_ARP), Ifindex: l.Attrs().Index, Halen: 6}
	copy(to.Addr[:], []byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff})
	if err := unix.Sendto(fd, GratuitousARP(mac, ip), 0, to); err != nil {
		return nil, fmt.Errorf("announce %v on %s: send: %w", ip, name, err)
	}
	return mac, nil
}

func htons(v uint16) uint16 { return v<<8 | v>>8 }

// Announcer keeps the node IP announced (Announce) from the interface holding it: once at
// start, again whenever that interface's MAC changes, and again whenever the node IP
// itself changes at run time (SetNodeIP: a topology file or Node object that gives this
// node a new address), from the interface that holds the new address. Create it with
// KeepAnnounced; it is safe for concurrent use.
//
// Design history (issue 20): the announcement took the node IP once, at start; after
// node b's IP changed through its topology file, b's next MAC change announced the OLD
// IP, node a kept the stale MAC for the new one (> 30 s) and pods' pings failed until b's
// daemon restarted. The announced address now follows the topology.
type Announcer struct {
	kick chan struct{} // capacity 1: a node IP change is pending

	mu      sync.Mutex
	pending net.IP // the node IP SetNodeIP asked for; nil = none since the last look
}

// KeepAnnounced announces ip on the interface name (Announce) now and again whenever the
// interface's MAC changes (RTNLGRP_LINK) or the node IP changes (Announcer.SetNodeIP),
// until ctx ends. A failed announcement is logged, never fatal: peers then learn the MAC
// from the next ARP exchange or when their cache entry ages out. It returns an error only
// when link or address updates cannot be subscribed to.
func KeepAnnounced(ctx context.Context, log *slog.Logger, name string, ip net.IP) (*Announcer, error) {
	updates := make(chan netlink.LinkUpdate, 64)
	done := make(chan struct{})
	if err := netlink.LinkSubscribeWithOptions(updates, done, netlink.LinkSubscribeOptions{}); err != nil {
		return nil, fmt.Errorf("announce %v on %s: subscribe to link updates: %w", ip, name, err)
	}
	// Address updates: a new node IP the topology names before the address is on an
	// interface is announced once an interface gets it.
	addrs := make(chan netlink.AddrUpdate, 64)
	addrDone := make(chan struct{})
	if err := netlink.AddrSubscribeWithOptions(addrs, addrDone, netlink.AddrSubscribeOptions{}); err != nil {
		close(done)
		go func() {
			for range updates {
			}
		}()
		return nil, fmt.Errorf("announce %v on %s: subscribe to address updates: %w", ip, name, err)
	}
	a := &Announcer{kick: make(chan struct{}, 1)}
	ip = ip.To4()
	announce := func(name string, ip net.IP, why string) net.HardwareAddr {
		mac, err := Announce(name, ip)
		if err != nil {
			log.Warn("gratuitous ARP for the node IP not sent; peers learn a new MAC only from later ARP", "interface", name, "node_ip", ip.String(), "err", err)
			return nil
		}
		log.Info("gratuitous ARP sent for the node IP", "interface", name, "node_ip", ip.String(), "mac", mac.String(), "why", why)
		return mac
	}
	last := announce(name, ip, "start")
	// unplaced is a node IP no interface held when it was set: looked up again on every
	// address update until one does.
	var unplaced net.IP
	place := func(newIP net.IP, why string) {
		u, err := FindUnderlay(newIP)
		if err != nil {
			if !newIP.Equal(unplaced) {
				log.Warn("the node IP changed but no interface holds it yet; it is announced once one does", "node_ip", newIP.String(), "announced_ip", ip.String(), "err", err)
			}
			unplaced = newIP
			return
		}
		unplaced = nil
		old := ip
		name, ip = u.Name, u.IP
		if m := announce(name, ip, why+" from "+old.String()); m != nil {
			last = m
		}
	}
	addrC := addrs // nil once closed
	go func() {
		defer func() {
			close(done)
			close(addrDone)
			for range updates {
			}
			for range addrs {
			}
		}()
		for {
			select {
			case <-ctx.Done():
				return
			case <-a.kick:
				a.mu.Lock()
				newIP := a.pending
				a.pending = nil
				a.mu.Unlock()
				if newIP == nil || (newIP.Equal(ip) && unplaced == nil) {
					continue
				}
				if newIP.Equal(ip) { // back to the announced address before the new one was placed
					unplaced = nil
					continue
				}
				place(newIP, "node IP changed")
			case u, ok := <-addrC:
				if !ok {
					log.Warn("address updates closed; a new node IP is announced only if an interface holds it when it is set", "node_ip", ip.String())
					addrC = nil
					continue
				}
				if unplaced != nil && u.NewAddr && u.LinkAddress.IP.Equal(unplaced) {
					place(unplaced, "node IP changed (address added)")
				}
			case u, ok := <-updates:
				if !ok {
					log.Warn("link updates closed; the node IP is no longer announced on MAC changes", "interface", name)
					return
				}
				if u.Header.Type != unix.RTM_NEWLINK || u.Link == nil || u.Attrs().Name != name || u.Attrs().Flags&net.FlagUp == 0 {
					continue
				}
				if mac := u.Attrs().HardwareAddr; len(mac) != 6 || mac.String() == last.String() {
					continue
				}
				// Let the address settle (a device re-created or brought up sends a burst
				// of updates; Open vSwitch may set its internal port's MAC back), then
				// announce the MAC it has now if it really changed.
				time.Sleep(50 * time.Millisecond)
				if l, err := netlinksafe.LinkByName(name); err == nil && l.Attrs().HardwareAddr.String() == last.String() {
					continue
				}
				if m := announce(name, ip, "MAC changed from "+last.String()); m != nil {
					last = m
				}
			}
		}
	}()
	return a, nil
}

// SetNodeIP makes ip (IPv4) the announced node IP: the interface holding it announces it
// at once, and from then on on every MAC change of that interface. An ip no interface
// holds yet is announced once an interface gets it (RTNLGRP_IPV4_IFADDR); until then the
// previous address stays announced. It does not block; the latest call wins. A nil or
// non-IPv4 ip is ignored.
func (a *Announcer) SetNodeIP(ip net.IP) {
	if a == nil || ip.To4() == nil {
		return
	}
	a.mu.Lock()
	a.pending = ip.To4()
	a.mu.Unlock()
	select {
	case a.kick <- struct{}{}:
	default:
	}
}
