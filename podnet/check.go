package podnet

import (
	"bytes"
	"errors"
	"fmt"
	"net"
	"strings"

	"github.com/containernetworking/plugins/pkg/netlinksafe"
	"github.com/containernetworking/plugins/pkg/ns"
	"github.com/vishvananda/netlink"
)

// Expect is one address a pod interface must hold, with its family's default gateway.
type Expect struct {
	// Addr is the address with its pod subnet's prefix length (IPv4 or IPv6).
	Addr *net.IPNet
	// Gateway is the default route's next hop for Addr's family, in Addr's subnet.
	Gateway net.IP
}

// Check verifies the pod end of an attachment (CNI spec 1.1 section
// "CHECK"): ifName exists in the namespace at netnsPath and is up, has every
// address of want (IP and prefix length) with a default route of its family via
// its gateway through it, and, if mac is not nil, that MAC. An IPv6 address
// needs the link-local address derived from the MAC too (LinkLocalFromMAC).
//
// Errors: an entry of want that is neither IPv4 nor IPv6 or has a gateway of
// another family; the namespace cannot be entered; the interface is missing;
// or one error listing every missing item, e.g.
// "podnet: eth0 in netns /var/run/netns/x: no address 10.0.0.5/24; no default route via 10.0.0.1".
func Check(netnsPath, ifName string, want []Expect, mac net.HardwareAddr) error {
	if len(want) == 0 {
		return errors.New("podnet: check: no address to check: pass the attachment's addresses")
	}
	norm := make([]Expect, 0, len(want))
	for _, e := range want {
		if e.Addr != nil && e.Addr.IP.To4() == nil {
			a, err := ipv6Net(e.Addr)
			if err != nil {
				return fmt.Errorf("podnet: check: pod IPv6 address: %w", err)
			}
			if e.Gateway.To4() != nil || len(e.Gateway) != net.IPv6len {
				return fmt.Errorf("podnet: check: IPv6 gateway %v is not IPv6", e.Gateway)
			}
			norm = append(norm, Expect{Addr: a, Gateway: e.Gateway})
			continue
		}
		a, err := ipv4Net(e.Addr)
		if err != nil {
			return fmt.Errorf("podnet: check: pod address: %w", err)
		}
		gw4 := e.Gateway.To4()
		if gw4 == nil {
			return fmt.Errorf("podnet: check: gateway %v is not IPv4", e.Gateway)
		}
		norm = append(norm, Expect{Addr: a, Gateway: gw4})
	}
	return ns.WithNetNSPath(netnsPath, func(ns.NetNS) error {
		link, err := netlinksafe.LinkByName(ifName)
		if err != nil {
			return fmt.Errorf("podnet: interface %s not found in netns %s: %w", ifName, netnsPath, err)
		}
		var missing []string
		if link.Attrs().Flags&net.FlagUp == 0 {
			missing = append(missing, "interface is down")
		}
		if mac != nil && !bytes.Equal(link.Attrs().HardwareAddr, mac) {
			missing = append(missing, fmt.Sprintf("MAC is %v, want %v", link.Attrs().HardwareAddr, mac))
		}
		linkLocal := false
		for _, e := range norm {
			want := []*net.IPNet{e.Addr}
			if e.Addr.IP.To4() == nil && !linkLocal && len(link.Attrs().HardwareAddr) == 6 {
				want = append(want, &net.IPNet{IP: LinkLocalFromMAC(link.Attrs().HardwareAddr), Mask: net.CIDRMask(64, 128)})
				linkLocal = true
			}
			for _, w := range want {
				m, err := checkAddr(link, w)
				if err != nil {
					return err
				}
				missing = append(missing, m...)
			}
			m, err := checkDefaultRoute(link, e.Gateway)
			if err != nil {
				return err
			}
			missing = append(missing, m...)
		}
		if len(missing) > 0 {
			return fmt.Errorf("podnet: %s in netns %s: %s", ifName, netnsPath, strings.Join(missing, "; "))
		}
		return nil
	})
}

// checkAddr reports a missing address on link.
func checkAddr(link netlink.Link, want *net.IPNet) ([]string, error) {
	addrs, err := netlinksafe.AddrList(link, family(want.IP))
	if err != nil {
		return nil, fmt.Errorf("podnet: list addresses of %s: %w", link.Attrs().Name, err)
	}
	for _, a := range addrs {
		if a.IP.Equal(want.IP) && bytes.Equal(a.Mask, want.Mask) {
			return nil, nil
		}
	}
	return []string{fmt.Sprintf("no address %v", want)}, nil
}

// checkDefaultRoute reports a missing default route via gw through link.
func checkDefaultRoute(link netlink.Link, gw net.IP) ([]string, error) {
	routes, err := netlinksafe.RouteListFiltered(family(gw), &netlink.Route{LinkIndex: link.Attrs().Index}, netlink.RT_FILTER_OIF)
	if err != nil {
		return nil, fmt.Errorf("podnet: list routes of %s: %w", link.Attrs().Name, err)
	}
	for _, r := range routes {
		if isDefault(r.Dst) && r.Gw.Equal(gw) {
			return nil, nil
		}
	}
	return []string{fmt.Sprintf("no default route via %v", gw)}, nil
}

// family is ip's netlink address family: FAMILY_V4 or FAMILY_V6.
func family(ip net.IP) int {
	if ip.To4() != nil {
		return netlink.FAMILY_V4
	}
	return netlink.FAMILY_V6
}

func isDefault(dst *net.IPNet) bool {
	if dst == nil {
		return true
	}
	ones, _ := dst.Mask.Size()
	return ones == 0
}
