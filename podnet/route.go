package podnet

import (
	"context"
	"fmt"
	"log/slog"
	"net"

	"github.com/containernetworking/plugins/pkg/netlinksafe"
	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// EnsureRoute makes the calling thread's network namespace route dst on-link out of the
// interface name (scope link, preferred source src), replacing a route to dst that
// differs (RTM_NEWROUTE with NLM_F_REPLACE). The node uses it for the cluster CIDR out of
// the gateway port, with the gateway IP as source: the host then ARPs for remote pod
// addresses on the gateway, and the pipeline's ARP responder answers. Errors: the link
// does not exist, dst or src is not IPv4, or netlink fails.
func EnsureRoute(name string, dst *net.IPNet, src net.IP) error {
	if dst == nil || dst.IP.To4() == nil || (src != nil && src.To4() == nil) {
		return fmt.Errorf("podnet: route %v src %v via %s: want IPv4", dst, src, name)
	}
	link, err := netlinksafe.LinkByName(name)
	if err != nil {
		return fmt.Errorf("podnet: route %v: look up %s: %w", dst, name, err)
	}
	r := &netlink.Route{LinkIndex: link.Attrs().Index, Dst: dst, Src: src, Scope: netlink.SCOPE_LINK}
	if err := netlink.RouteReplace(r); err != nil {
		return fmt.Errorf("podnet: route %v dev %s src %v: %w", dst, name, src, err)
	}
	return nil
}

// EnsureRouteIPv6Via makes the calling thread's network namespace route dst (an IPv6
// prefix) out of the interface name via nextHop (an IPv6 link-local address), whose
// neighbor entry it makes permanent with the link-layer address mac (RTM_NEWNEIGH,
// NUD_PERMANENT, replacing one that differs), so the host never sends a Neighbor
// Solicitation for it (RFC 4861 §7.3.2: a permanent entry is not probed). The node uses it
// for the IPv6 cluster CIDR out of the gateway port with flows.VirtualRouterMAC, the IPv6
// counterpart of EnsureRoute's on-link route and the pipeline's ARP responder: the
// pipeline then routes the host's IPv6 for remote pods by ipv6_dst (the kernel picks the
// gateway's own IPv6 address as the source, RFC 6724 rule 5). Idempotent.
//
// Errors: the link does not exist, dst or nextHop is not IPv6, nextHop is not
// link-local, or netlink fails (IPv6 off on the interface).
func EnsureRouteIPv6Via(name string, dst *net.IPNet, nextHop net.IP, mac net.HardwareAddr) error {
	if dst == nil || dst.IP.To4() != nil || len(dst.IP) != net.IPv6len || nextHop.To4() != nil || len(nextHop) != net.IPv6len || !nextHop.IsLinkLocalUnicast() {
		return fmt.Errorf("podnet: route %v via %v dev %s: want an IPv6 prefix via an IPv6 link-local next hop", dst, nextHop, name)
	}
	link, err := netlinksafe.LinkByName(name)
	if err != nil {
		return fmt.Errorf("podnet: route %v: look up %s: %w", dst, name, err)
	}
	idx := link.Attrs().Index
	neigh := &netlink.Neigh{LinkIndex: idx, Family: unix.AF_INET6, State: netlink.NUD_PERMANENT, IP: nextHop, HardwareAddr: mac}
	if err := netlink.NeighSet(neigh); err != nil {
		return fmt.Errorf("podnet: neighbor %v lladdr %v dev %s permanent (is IPv6 on for %s?): %w", nextHop, mac, name, name, err)
	}
	r := &netlink.Route{LinkIndex: idx, Dst: dst, Gw: nextHop, Scope: netlink.SCOPE_UNIVERSE}
	if err := netlink.RouteReplace(r); err != nil {
		return fmt.Errorf("podnet: route %v via %v dev %s: %w", dst, nextHop, name, err)
	}
	return nil
}

// KeepRoute ensures the route (EnsureRoute) and ensures it again whenever the interface
// name is (re)created or comes up (RTNLGRP_LINK), until ctx ends: with the userspace
// datapath a restarted ovs-vswitchd re-creates the gateway's tap device, and with it the
// kernel drops its routes. It returns the first EnsureRoute error, or nil and keeps the
// route in a goroutine; later failures are logged.
func KeepRoute(ctx context.Context, log *slog.Logger, name string, dst *net.IPNet, src net.IP) error {
	return Keep(ctx, log, name, fmt.Sprintf("route %v", dst), func() error { return EnsureRoute(name, dst, src) })
}

// Keep runs ensure (something on the interface name that the kernel drops with the
// interface: a route, a neighbor entry) and runs it again whenever name is (re)created or
// comes up (RTNLGRP_LINK), until ctx ends; what names it in logs. It returns the first
// run's error, or nil and keeps it in a goroutine; later failures are logged.
func Keep(ctx context.Context, log *slog.Logger, name, what string, ensure func() error) error {
	updates := make(chan netlink.LinkUpdate, 64)
	done := make(chan struct{})
	if err := netlink.LinkSubscribeWithOptions(updates, done, netlink.LinkSubscribeOptions{}); err != nil {
		return fmt.Errorf("podnet: subscribe to link updates for %s: %w", name, err)
	}
	if err := ensure(); err != nil {
		close(done)
		go func() {
			for range updates {
			}
		}()
		return err
	}
	go func() {
		defer func() {
			close(done)
			for range updates {
			}
		}()
		for {
			select {
			case <-ctx.Done():
				return
			case u, ok := <-updates:
				if !ok {
					log.Warn("link updates closed; no longer kept", "dev", name, "what", what)
					return
				}
				if u.Header.Type != unix.RTM_NEWLINK || u.Link == nil || u.Link.Attrs().Name != name || u.Attrs().Flags&net.FlagUp == 0 {
					continue
				}
				if err := ensure(); err != nil {
					log.Warn("not restored", "dev", name, "what", what, "err", err)
				}
			}
		}
	}()
	return nil
}
