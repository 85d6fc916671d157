package controller

// The node IP onto an OVS bridge (underlayBridge, issue 25). With the userspace datapath,
// Open vSwitch encapsulates and decapsulates tunnel packets itself ("native tunneling"):
// the outer packet's route must leave through the local port of an OVS bridge of the same
// ovs-vswitchd, and arriving tunnel packets are taken only when addressed to such a local
// port's IP and MAC. So the node IP must sit on a bridge's internal port, with the underlay
// NIC a port of that bridge, as OVS-DPDK setups arrange it. A node whose Open vSwitch
// comes with the DaemonSet (ovs: bundled) boots with the node IP on its NIC, since no OVS
// runs before the kubelet; MoveUnderlay then moves it, once, over OVSDB and netlink:
//
//  1. the bridge (datapath netdev, fail mode standalone: a learning switch, the NORMAL
//     action) is made, the NIC added to it as a port;
//  2. podnet.MoveAddresses: every IPv4 address and every IPv6 address but the
//     link-local (and temporary) ones of the NIC is added to the bridge's internal port
//     (a tap device), which is set up with the NIC's MTU (peer, lifetimes, flags and
//     label kept; IPv6 ones without duplicate address detection); every IPv4 and IPv6
//     route through the NIC (any table, multipath nexthops too, an IPv6 default route via
//     a link-local next hop keeping it, not the kernel's own prefix routes) is replaced
//     by the same route through the bridge; the addresses are deleted from the NIC, the
//     bridge takes the NIC's arp_ignore and the NIC stops answering ARP (arp_ignore 8):
//     the kernel still sees its frames (ovs-vswitchd reads it through a packet socket),
//     and would otherwise answer for the node IP with the NIC's MAC (IPv6 neighbor
//     discovery answers only for the link's own addresses); an unsolicited Neighbor
//     Advertisement from the bridge gives peers its MAC for each IPv6 address.
//
// The bridge records the NIC (external_ids:ofsdn-underlay), so that cmd/ofsdn-ovs, which
// runs Open vSwitch in the DaemonSet, moves the addresses back onto the NIC when it stops
// ovs-vswitchd on SIGTERM (a pod deleted or rolled: without it the node would lose its
// address with the bridge's forwarding, and its kubelet could not fetch the pod that
// brings it back), on any other exit and at its start (a crash), and onto the bridge again
// when it has started ovs-vswitchd.
//
// The bridge's internal port has a MAC of its own, so frames for it are "other host"
// frames to the NIC's own IP stack and are taken only through the bridge. Peers learn the
// new MAC from the gratuitous ARP the daemon sends from the interface holding the node IP
// (topology.KeepAnnounced, started after this). The outage is the time from step 4 to the
// peers' ARP update: connections keep their addresses. A node returned to `ovs: host`
// keeps the NIC in the bridge of its old database; delete /var/lib/ofsdn/ovs (or the
// bridge) with the DaemonSet.

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"time"

	"github.com/vishvananda/netlink"

	"github.com/ofsdn/ofsdn/ovsdb"
	"github.com/ofsdn/ofsdn/podnet"
)

// MoveUnderlay makes sure the node IP nodeIP sits on bridge's internal port with the
// interface that held it (the underlay NIC) a port of bridge, moving its IPv4 and IPv6
// addresses and routes as the file's comment says (nodeIP IPv4, or IPv6 for an IPv6
// underlay), in the calling thread's network namespace. It
// returns the name of the interface that holds nodeIP afterwards (bridge, or an OVS
// internal port that already held it: then nothing is changed). Idempotent: a second call
// finds the node IP on the bridge and does nothing. Errors name the step, the interface
// and the fix.
func MoveUnderlay(ctx context.Context, db *ovsdb.Client, bridge string, nodeIP net.IP, log *slog.Logger) (string, error) {
	nic, err := linkHolding(nodeIP)
	if err != nil {
		return "", err
	}
	name := nic.Attrs().Name
	if p, ok := db.GetPort(name); ok && p.Type == "internal" {
		return name, nil // already on an OVS bridge's internal port
	}
	if p, ok := db.GetPort(name); ok && p.Bridge != "" && p.Bridge != bridge {
		return "", fmt.Errorf("underlay: %s (holding node IP %v) is a port of OVS bridge %s, not %s: set underlayBridge to %s, or take the node IP off %s", name, nodeIP, p.Bridge, bridge, p.Bridge, name)
	}
	start := time.Now()
	if err := db.EnsureBridge(ctx, ovsdb.BridgeSpec{Name: bridge, DatapathType: ovsdb.DatapathNetdev,
		FailMode: "standalone", ExternalIDs: map[string]string{"ofsdn-underlay": name}}); err != nil {
		return "", fmt.Errorf("underlay: bridge %s for %s: %w", bridge, name, err)
	}
	if _, err := db.AddPort(ctx, bridge, name, map[string]string{"ofsdn-underlay": "true"}); err != nil {
		return "", fmt.Errorf("underlay: %s as a port of bridge %s: %w", name, bridge, err)
	}
	if _, err := netlink.LinkByName(bridge); err != nil {
		return "", fmt.Errorf("underlay: bridge %s's internal port (a tap device on the userspace datapath): %w", bridge, err)
	}
	moved, err := podnet.MoveAddresses(name, bridge)
	if err != nil {
		return "", fmt.Errorf("underlay: %w", err)
	}
	if moved.AnnounceErr != nil {
		log.Warn("underlay: IPv6 addresses moved but not announced (peers find the bridge's MAC by neighbor discovery)", "bridge", bridge, "err", moved.AnnounceErr)
	}
	log.Info("underlay moved onto an OVS bridge (userspace datapath: tunnels leave through it)",
		"interface", name, "bridge", bridge, "addresses", moved.Addresses, "routes", moved.Routes,
		"took", time.Since(start).Round(time.Millisecond))
	return bridge, nil
}

// linkHolding returns the link that has ip (IPv4 or IPv6) as one of its addresses.
func linkHolding(ip net.IP) (netlink.Link, error) {
	addrs, err := netlink.AddrList(nil, netlink.FAMILY_ALL)
	if err != nil {
		return nil, fmt.Errorf("underlay: list addresses: %w", err)
	}
	for _, a := range addrs {
		if a.IP.Equal(ip) {
			return netlink.LinkByIndex(a.LinkIndex)
		}
	}
	return nil, fmt.Errorf("underlay: no interface has node IP %v: set nodeIP to an address of this node", ip)
}
