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

// KeepRoute ensures the route (EnsureRoute) and ensures it again whenever the interface
// name is (re)created or comes up (RTNLGRP_LINK), until ctx ends: with the userspace
// datapath a restarted ovs-vswitchd re-creates the gateway's tap device, and with it the
// kernel drops its routes. It returns the first EnsureRoute error, or nil and keeps the
// route in a goroutine; later failures are logged.
func KeepRoute(ctx context.Context, log *slog.Logger, name string, dst *net.IPNet, src net.IP) error {
	updates := make(chan netlink.LinkUpdate, 64)
	done := make(chan struct{})
	if err := netlink.LinkSubscribeWithOptions(updates, done, netlink.LinkSubscribeOptions{}); err != nil {
		return fmt.Errorf("podnet: subscribe to link updates for %s: %w", name, err)
	}
	if err := EnsureRoute(name, dst, src); err != nil {
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
					log.Warn("link updates closed; route no longer kept", "dev", name, "route", dst)
					return
				}
				if u.Header.Type != unix.RTM_NEWLINK || u.Link == nil || u.Link.Attrs().Name != name || u.Attrs().Flags&net.FlagUp == 0 {
					continue
				}
				if err := EnsureRoute(name, dst, src); err != nil {
					log.Warn("route not restored", "dev", name, "route", dst, "err", err)
				}
			}
		}
	}()
	return nil
}
