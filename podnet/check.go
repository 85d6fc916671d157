package podnet

import (
	"bytes"
	"fmt"
	"net"
	"strings"

	"github.com/containernetworking/plugins/pkg/netlinksafe"
	"github.com/containernetworking/plugins/pkg/ns"
	"github.com/vishvananda/netlink"
)

// Check verifies the pod end of an attachment (CNI spec 1.1 section
// "CHECK"): ifName exists in the namespace at netnsPath and is up, has the
// address addr (IP and prefix length), a default route via gw through it,
// and, if mac is not nil, that MAC.
//
// Errors: the namespace cannot be entered; the interface is missing; or one
// error listing every missing item, e.g.
// "podnet: eth0 in netns /var/run/netns/x: no address 10.0.0.5/24; no default route via 10.0.0.1".
func Check(netnsPath, ifName string, addr *net.IPNet, gw net.IP, mac net.HardwareAddr) error {
	want, err := ipv4Net(addr)
	if err != nil {
		return fmt.Errorf("podnet: check: pod address: %w", err)
	}
	gw4 := gw.To4()
	if gw4 == nil {
		return fmt.Errorf("podnet: check: gateway %v is not IPv4", gw)
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
		m, err := checkAddr(link, want)
		if err != nil {
			return err
		}
		missing = append(missing, m...)
		m, err = checkDefaultRoute(link, gw4)
		if err != nil {
			return err
		}
		missing = append(missing, m...)
		if len(missing) > 0 {
			return fmt.Errorf("podnet: %s in netns %s: %s", ifName, netnsPath, strings.Join(missing, "; "))
		}
		return nil
	})
}

// checkAddr reports a missing address on link.
func checkAddr(link netlink.Link, want *net.IPNet) ([]string, error) {
	addrs, err := netlinksafe.AddrList(link, netlink.FAMILY_V4)
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
	routes, err := netlinksafe.RouteListFiltered(netlink.FAMILY_V4, &netlink.Route{LinkIndex: link.Attrs().Index}, netlink.RT_FILTER_OIF)
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

func isDefault(dst *net.IPNet) bool {
	if dst == nil {
		return true
	}
	ones, _ := dst.Mask.Size()
	return ones == 0
}
