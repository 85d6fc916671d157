package topology

import (
	"fmt"
	"net"
	"os/exec"
	"testing"
	"time"

	"github.com/containernetworking/plugins/pkg/ns"
	"github.com/vishvananda/netlink"

	"github.com/ofsdn/ofsdn/test/testenv"
)

// TestFindUnderlay builds, in a network namespace of its own, a link with MTU 1400 and the
// node IP, and a default route through it; the underlay found by address and by default
// route is that link, and the pod MTU is 1400 − 50.
func TestFindUnderlay(t *testing.T) {
	testenv.Privileged(t)
	name := fmt.Sprintf("ofsdn-ul-%d", time.Now().UnixNano()%1e9)
	if out, err := exec.Command("ip", "netns", "add", name).CombinedOutput(); err != nil {
		t.Fatalf("ip netns add: %v\n%s", err, out)
	}
	t.Cleanup(func() { _ = exec.Command("ip", "netns", "del", name).Run() })
	netns, err := ns.GetNS("/var/run/netns/" + name)
	if err != nil {
		t.Fatal(err)
	}
	defer netns.Close()
	err = netns.Do(func(ns.NetNS) error {
		// A veth pair (the kernel here has no dummy module); the peer end stays unused.
		l := &netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: "uplink0", MTU: 1400}, PeerName: "uplink0p"}
		if err := netlink.LinkAdd(l); err != nil {
			return err
		}
		peer, err := netlink.LinkByName("uplink0p")
		if err != nil {
			return err
		}
		if err := netlink.LinkSetUp(peer); err != nil {
			return err
		}
		if err := netlink.LinkSetUp(l); err != nil {
			return err
		}
		addr, _ := netlink.ParseAddr("172.16.5.1/24")
		if err := netlink.AddrAdd(l, addr); err != nil {
			return err
		}
		if err := netlink.RouteAdd(&netlink.Route{LinkIndex: l.Attrs().Index, Gw: net.ParseIP("172.16.5.254")}); err != nil {
			return err
		}
		u, err := FindUnderlay(net.ParseIP("172.16.5.1"))
		if err != nil {
			return err
		}
		if u.Name != "uplink0" || u.MTU != 1400 || u.PodMTU() != 1350 {
			return fmt.Errorf("FindUnderlay = %+v (pod MTU %d), want uplink0 1400 (1350)", u, u.PodMTU())
		}
		d, err := DefaultUnderlay()
		if err != nil {
			return err
		}
		if d.Name != "uplink0" || !d.IP.Equal(net.ParseIP("172.16.5.1")) {
			return fmt.Errorf("DefaultUnderlay = %+v", d)
		}
		if _, err := FindUnderlay(net.ParseIP("172.16.5.9")); err == nil {
			return fmt.Errorf("FindUnderlay found an address no link has")
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}
