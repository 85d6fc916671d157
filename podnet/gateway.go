package podnet

import (
	"context"
	"errors"
	"fmt"
	"net"

	"github.com/containernetworking/plugins/pkg/netlinksafe"
	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// HostVethExists reports whether an interface called name exists in the
// calling thread's network namespace. Lookup errors other than "not found"
// count as existing, so callers never reuse a name they could not check.
func HostVethExists(name string) bool {
	_, err := netlinksafe.LinkByName(name)
	return err == nil || !isNotFound(err)
}

// LinkMAC returns the MAC of the interface name in the calling thread's
// network namespace. Errors: the link does not exist (wraps
// netlink.LinkNotFoundError), or netlink fails.
func LinkMAC(name string) (net.HardwareAddr, error) {
	link, err := netlinksafe.LinkByName(name)
	if err != nil {
		return nil, fmt.Errorf("podnet: look up %s: %w", name, err)
	}
	return link.Attrs().HardwareAddr, nil
}

// ConfigureGateway prepares the node's gateway interface, the OVS internal
// port of br-int (a tap device created by ovs-vswitchd with the userspace
// datapath), in the calling thread's network namespace: it waits until the
// link exists (watching RTNLGRP_LINK, bounded by ctx), sets its MTU (bytes;
// mtu <= 0 leaves it unchanged), adds addr (the gateway IP with the pod
// subnet prefix, e.g. 10.128.0.1/24; already present is fine), turns its IPv4
// ICMP redirects off (send_redirects 0, and net.ipv4.conf.all.send_redirects 0
// with every other interface kept sending them by its own setting: see
// redirects.go), sets it up, and returns its MAC. It is idempotent. On an
// IPv6-only node addr is nil: the link gets no IPv4 address (ConfigureGatewayIPv6
// gives it its IPv6 one).
//
// Errors: ctx ends before the link appears (names the link and the likely
// fix); addr is not IPv4 or mtu is out of range; a netlink failure; the
// redirect settings cannot be written (CAP_NET_ADMIN, a writable /proc/sys).
func ConfigureGateway(ctx context.Context, name string, addr *net.IPNet, mtu int) (net.HardwareAddr, error) {
	if err := validIfName(name); err != nil {
		return nil, fmt.Errorf("podnet: gateway: %w", err)
	}
	var a *net.IPNet
	if addr != nil {
		var err error
		if a, err = ipv4Net(addr); err != nil {
			return nil, fmt.Errorf("podnet: gateway %s address: %w", name, err)
		}
	}
	if mtu > 0 && (mtu < MinMTU || mtu > MaxMTU) {
		return nil, fmt.Errorf("podnet: gateway %s MTU %d bytes is outside %d-%d", name, mtu, MinMTU, MaxMTU)
	}
	link, err := waitForLink(ctx, name)
	if err != nil {
		return nil, err
	}
	if mtu > 0 && link.Attrs().MTU != mtu {
		if err := netlink.LinkSetMTU(link, mtu); err != nil {
			return nil, fmt.Errorf("podnet: set MTU %d on gateway %s: %w", mtu, name, err)
		}
	}
	if a != nil {
		if err := netlink.AddrAdd(link, &netlink.Addr{IPNet: a}); err != nil && !errors.Is(err, unix.EEXIST) {
			return nil, fmt.Errorf("podnet: add address %v to gateway %s: %w", a, name, err)
		}
	}
	if _, err := disableGatewayRedirects(link.Attrs().Index, name); err != nil {
		return nil, err
	}
	if err := netlink.LinkSetUp(link); err != nil {
		return nil, fmt.Errorf("podnet: set gateway %s up: %w", name, err)
	}
	return link.Attrs().HardwareAddr, nil
}

// waitForLink returns the link called name, waiting for an RTM_NEWLINK for
// it if it does not exist yet. The subscription is opened before the second
// lookup so that a link created in between is not missed.
func waitForLink(ctx context.Context, name string) (netlink.Link, error) {
	if link, err := netlinksafe.LinkByName(name); err == nil || !isNotFound(err) {
		return link, wrapLookup(name, err)
	}
	updates := make(chan netlink.LinkUpdate, 64)
	done := make(chan struct{})
	defer func() {
		close(done)
		go func() { // let the subscription goroutine finish and close updates
			for range updates {
			}
		}()
	}()
	if err := netlink.LinkSubscribeWithOptions(updates, done, netlink.LinkSubscribeOptions{}); err != nil {
		return nil, fmt.Errorf("podnet: subscribe to link updates while waiting for %s: %w", name, err)
	}
	if link, err := netlinksafe.LinkByName(name); err == nil || !isNotFound(err) {
		return link, wrapLookup(name, err)
	}
	for {
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("podnet: interface %s did not appear (%w): check that ovs-vswitchd runs and the bridge's internal port exists", name, ctx.Err())
		case u, ok := <-updates:
			if !ok {
				// The subscription failed; one last direct look.
				link, err := netlinksafe.LinkByName(name)
				if err != nil {
					return nil, fmt.Errorf("podnet: link update subscription closed while waiting for %s: %w", name, err)
				}
				return link, nil
			}
			if u.Header.Type == unix.RTM_NEWLINK && u.Link != nil && u.Link.Attrs().Name == name {
				link, err := netlinksafe.LinkByName(name)
				if err == nil || !isNotFound(err) {
					return link, wrapLookup(name, err)
				}
			}
		}
	}
}

func wrapLookup(name string, err error) error {
	if err == nil {
		return nil
	}
	return fmt.Errorf("podnet: look up %s: %w", name, err)
}
