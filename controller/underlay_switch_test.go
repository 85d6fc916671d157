package controller

// MoveUnderlay against a real sandbox switch (userspace datapath) and real links: a node
// whose IP sits on its NIC (uplink0, a veth to an "underlay" namespace holding the
// gateway) gets it moved onto br-phy's internal port, its IPv6 address (ULA, default route
// via the gateway's link-local address) with it. Checked as a user would: the addresses
// and the default routes are on br-phy and off the NIC, the NIC is br-phy's port and
// answers no ARP, the gateway is reached through the bridge (ping over both families),
// the gateway's ARP entry for the node IP names br-phy's MAC, its neighbor entry for the
// node's IPv6 address too without being flushed (the unsolicited Neighbor Advertisement),
// and a second call changes nothing.

import (
	"context"
	"log/slog"
	"net"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/containernetworking/plugins/pkg/ns"

	"github.com/ofsdn/ofsdn/ovsdb"
	"github.com/ofsdn/ofsdn/podnet"
	"github.com/ofsdn/ofsdn/test/sandbox"
	"github.com/ofsdn/ofsdn/test/testenv"
)

func out(t *testing.T, name string, args ...string) string {
	t.Helper()
	b, err := exec.Command(name, args...).CombinedOutput()
	if err != nil {
		t.Fatalf("%s %s: %v\n%s", name, strings.Join(args, " "), err, b)
	}
	return string(b)
}

func TestMoveUnderlay(t *testing.T) {
	testenv.Privileged(t)
	o := sandbox.Start(t)
	ul := o.Netns + "-ul"
	run(t, "ip", "netns", "add", ul)
	t.Cleanup(func() { _ = exec.Command("ip", "netns", "del", ul).Run() })
	run(t, "ip", "-n", ul, "link", "add", "gw0", "type", "veth", "peer", "name", "uplink0", "netns", o.Netns)
	run(t, "ip", "-n", ul, "addr", "add", "192.168.77.1/24", "dev", "gw0")
	run(t, "ip", "-n", ul, "link", "set", "gw0", "up")
	// The userspace datapath reads uplink0 through a packet socket and never completes
	// checksums the kernel left to an offload (as test/k8s does for its underlay).
	run(t, "ip", "netns", "exec", ul, "ethtool", "-K", "gw0", "tx", "off")
	run(t, "ip", "-n", o.Netns, "addr", "add", "192.168.77.11/24", "dev", "uplink0")
	run(t, "ip", "-n", o.Netns, "link", "set", "uplink0", "up")
	run(t, "ip", "-n", o.Netns, "route", "add", "default", "via", "192.168.77.1")
	run(t, "ip", "netns", "exec", o.Netns, "ping", "-c1", "-W2", "192.168.77.1")
	run(t, "ip", "-n", ul, "addr", "add", "fd00:77::1/64", "dev", "gw0", "nodad")
	run(t, "ip", "-n", ul, "addr", "add", "fe80::1/64", "dev", "gw0", "nodad")
	run(t, "ip", "-n", o.Netns, "addr", "add", "fd00:77::11/64", "dev", "uplink0", "nodad")
	run(t, "ip", "-n", o.Netns, "-6", "route", "add", "default", "via", "fe80::1", "dev", "uplink0")
	// The gateway's neighbor entry for the node's IPv6 address: uplink0's MAC.
	run(t, "ip", "netns", "exec", o.Netns, "ping", "-c1", "-W2", "fd00:77::1")
	nicMAC := strings.TrimSpace(out(t, "ip", "netns", "exec", o.Netns, "cat", "/sys/class/net/uplink0/address"))
	if n := out(t, "ip", "-n", ul, "-6", "neigh", "show", "fd00:77::11"); !strings.Contains(n, nicMAC) {
		t.Fatalf("the gateway's neighbor entry for fd00:77::11 %q, want uplink0's MAC %s", n, nicMAC)
	}

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	db, err := ovsdb.Connect(ctx, o.OVSDBEndpoint(), ovsdb.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	var holder string
	move := func() {
		t.Helper()
		err := ns.WithNetNSPath(o.NetnsPath(), func(ns.NetNS) error {
			var err error
			holder, err = MoveUnderlay(ctx, db, "br-phy", net.ParseIP("192.168.77.11"), slog.Default())
			return err
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	move()
	if holder != "br-phy" {
		t.Errorf("node IP holder %q, want br-phy", holder)
	}
	addrs := out(t, "ip", "-n", o.Netns, "-4", "-o", "addr", "show") + out(t, "ip", "-n", o.Netns, "-6", "-o", "addr", "show", "scope", "global")
	if !strings.Contains(addrs, "br-phy    inet 192.168.77.11/24") || !strings.Contains(addrs, "br-phy    inet6 fd00:77::11/64") || strings.Contains(addrs, "uplink0    inet") {
		t.Errorf("addresses after the move, want 192.168.77.11/24 and fd00:77::11/64 on br-phy only:\n%s", addrs)
	}
	routes := out(t, "ip", "-n", o.Netns, "-4", "route", "show") + out(t, "ip", "-n", o.Netns, "-6", "route", "show", "default")
	if !strings.Contains(routes, "default via 192.168.77.1 dev br-phy") || !strings.Contains(routes, "default via fe80::1 dev br-phy") || strings.Contains(routes, "uplink0") {
		t.Errorf("routes after the move, want the default routes through br-phy and none through uplink0:\n%s", routes)
	}
	if ports := o.Vsctl(t, "list-ports", "br-phy"); ports != "uplink0" {
		t.Errorf("br-phy's ports %q, want uplink0", ports)
	}
	if v := strings.TrimSpace(out(t, "ip", "netns", "exec", o.Netns, "cat", "/proc/sys/net/ipv4/conf/uplink0/arp_ignore")); v != "8" {
		t.Errorf("uplink0 arp_ignore %s, want 8", v)
	}
	brMAC := strings.TrimSpace(out(t, "ip", "netns", "exec", o.Netns, "cat", "/sys/class/net/br-phy/address"))
	// Not flushed: the entry learned before the move names br-phy's MAC now.
	if n := out(t, "ip", "-n", ul, "-6", "neigh", "show", "fd00:77::11"); !strings.Contains(n, brMAC) {
		t.Errorf("the gateway's neighbor entry for fd00:77::11 after the move %q, want br-phy's MAC %s (the move's Neighbor Advertisement)", n, brMAC)
	}
	run(t, "ip", "netns", "exec", o.Netns, "ping", "-c2", "-i0.2", "-W2", "fd00:77::1")
	run(t, "ip", "-n", ul, "neigh", "flush", "dev", "gw0")
	run(t, "ip", "netns", "exec", o.Netns, "ping", "-c3", "-i0.2", "-W2", "192.168.77.1")
	neigh := out(t, "ip", "-n", ul, "neigh", "show", "192.168.77.11")
	if !strings.Contains(neigh, brMAC) {
		t.Errorf("the gateway's ARP entry for the node IP %q, want br-phy's MAC %s", neigh, brMAC)
	}

	move() // idempotent
	if holder != "br-phy" {
		t.Errorf("second call: holder %q, want br-phy", holder)
	}
	if again := out(t, "ip", "-n", o.Netns, "-4", "-o", "addr", "show") + out(t, "ip", "-n", o.Netns, "-6", "-o", "addr", "show", "scope", "global"); again != addrs {
		t.Errorf("second call changed the addresses:\n%s\nwas\n%s", again, addrs)
	}

	// What cmd/ofsdn-ovs does around an ovs-vswitchd stop: back onto the NIC, then onto
	// the bridge again; the gateway answers each time.
	for _, step := range []struct{ from, to string }{{"br-phy", "uplink0"}, {"uplink0", "br-phy"}} {
		err := ns.WithNetNSPath(o.NetnsPath(), func(ns.NetNS) error {
			_, err := podnet.MoveAddresses(step.from, step.to)
			return err
		})
		if err != nil {
			t.Fatal(err)
		}
		addrs := out(t, "ip", "-n", o.Netns, "-4", "-o", "addr", "show") + out(t, "ip", "-n", o.Netns, "-6", "-o", "addr", "show", "scope", "global")
		routes := out(t, "ip", "-n", o.Netns, "-4", "route", "show") + out(t, "ip", "-n", o.Netns, "-6", "route", "show", "default")
		if !strings.Contains(addrs, step.to+"    inet 192.168.77.11/24") || !strings.Contains(addrs, step.to+"    inet6 fd00:77::11/64") || strings.Contains(addrs, step.from+"    inet") ||
			!strings.Contains(routes, "default via 192.168.77.1 dev "+step.to) || !strings.Contains(routes, "default via fe80::1 dev "+step.to) {
			t.Errorf("after moving %s → %s: addresses\n%s\nroutes\n%s", step.from, step.to, addrs, routes)
		}
		for dev, want := range map[string]string{step.from: "8", step.to: "0"} {
			if v := strings.TrimSpace(out(t, "ip", "netns", "exec", o.Netns, "cat", "/proc/sys/net/ipv4/conf/"+dev+"/arp_ignore")); v != want {
				t.Errorf("after moving %s → %s: %s arp_ignore %s, want %s", step.from, step.to, dev, v, want)
			}
		}
		run(t, "ip", "-n", ul, "neigh", "flush", "dev", "gw0")
		run(t, "ip", "netns", "exec", o.Netns, "ping", "-c2", "-i0.2", "-W2", "192.168.77.1")
		run(t, "ip", "netns", "exec", o.Netns, "ping", "-c2", "-i0.2", "-W2", "fd00:77::1")
	}
}
