package e2e

import (
	"strings"
	"testing"
	"time"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"
)

// TestPortOpenLeavesHostLinkAlone: from its creation until its DEL, a pod's host veth
// changes flags only twice, when it is made and when the daemon brings it up (up and
// promiscuous at once); ovs-vswitchd opening the port and closing it again change
// nothing on the link. Every link change in the node's network namespace makes
// ovs-vswitchd 3.1 reconfigure every bridge, at a cost that grows with the ports on it
// (bench/RESULTS.md "Density"): before the daemon set the flag itself, ovs-vswitchd's
// own promiscuous-mode flips were one such change on each ADD and one on each DEL.
func TestPortOpenLeavesHostLinkAlone(t *testing.T) {
	serial(t)
	n := startNode(t, "10.163.0.0/24")

	h, err := netns.GetFromPath(n.OVS.NetnsPath())
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	updates := make(chan netlink.LinkUpdate, 4096)
	done := make(chan struct{})
	defer close(done)
	if err := netlink.LinkSubscribeWithOptions(updates, done, netlink.LinkSubscribeOptions{Namespace: &h}); err != nil {
		t.Fatalf("subscribe to link changes in netns %s: %v", n.OVS.Netns, err)
	}
	reconfBefore := n.OVS.AppctlOutput("coverage/read-counter", "bridge_reconfigure")

	p := n.addPod("density")
	host := p.result.Interfaces[0].Name
	time.Sleep(time.Second) // whatever ovs-vswitchd does once the port is on the bridge

	// The host veth's notifications until now. Carrier and operational state
	// (IFF_RUNNING, IFF_LOWER_UP, IFF_DORMANT) follow the pod end and are not the
	// link's configuration: they are left out of the comparison.
	const state = unix.IFF_RUNNING | unix.IFF_LOWER_UP | unix.IFF_DORMANT
	var seen []string
	var flagChanges []uint32
	next := func(u netlink.LinkUpdate) {
		if u.Header.Type == unix.RTM_DELLINK {
			seen = append(seen, "deleted")
			return
		}
		f := u.IfInfomsg.Flags &^ state
		seen = append(seen, "flags "+flagNames(u.IfInfomsg.Flags))
		if len(flagChanges) == 0 || f != flagChanges[len(flagChanges)-1] {
			flagChanges = append(flagChanges, f)
		}
	}
	for drained := false; !drained; {
		select {
		case u := <-updates:
			if u.Attrs().Name == host {
				next(u)
			}
		default:
			drained = true
		}
	}
	added := len(flagChanges)
	if added != 2 || flagChanges[1]&(unix.IFF_UP|unix.IFF_PROMISC) != unix.IFF_UP|unix.IFF_PROMISC {
		var s []string
		for _, f := range flagChanges {
			s = append(s, flagNames(f))
		}
		t.Errorf("after ADD, host veth %s changed flags %d times (%s), want 2: created, then up and promiscuous; "+
			"each further change makes ovs-vswitchd reconfigure its bridges", host, added, strings.Join(s, " → "))
	}
	reconfAdded := n.OVS.AppctlOutput("coverage/read-counter", "bridge_reconfigure")

	// DEL: the port and the veth go at once. The kernel closes the link as it
	// unregisters it (one notification, "down"), which is all that may happen.
	if err := n.delPod(p); err != nil {
		t.Fatalf("DEL: %v", err)
	}
	deadline := time.After(10 * time.Second)
	for gone := false; !gone; {
		select {
		case u := <-updates:
			if u.Attrs().Name == host {
				next(u)
				gone = u.Header.Type == unix.RTM_DELLINK
			}
		case <-deadline:
			t.Fatalf("host veth %s not deleted 10 s after DEL; its notifications: %s", host, strings.Join(seen, "; "))
		}
	}
	t.Logf("host veth %s: %s; ovs-vswitchd bridge_reconfigure before ADD %s, after ADD %s, after DEL %s", host, strings.Join(seen, "; "),
		strings.TrimSpace(reconfBefore), strings.TrimSpace(reconfAdded), strings.TrimSpace(n.OVS.AppctlOutput("coverage/read-counter", "bridge_reconfigure")))
	for _, f := range flagChanges[added:] {
		if f&unix.IFF_UP != 0 && f&unix.IFF_PROMISC == 0 {
			t.Errorf("on DEL, host veth %s lost promiscuous mode while up (ovs-vswitchd closing the port): one more reconfiguration of every bridge", host)
		}
	}
}

// flagNames names the interface flags that matter here.
func flagNames(f uint32) string {
	var s []string
	for _, x := range []struct {
		bit  uint32
		name string
	}{{unix.IFF_UP, "UP"}, {unix.IFF_PROMISC, "PROMISC"}, {unix.IFF_RUNNING, "RUNNING"}, {unix.IFF_LOWER_UP, "LOWER_UP"}} {
		if f&x.bit != 0 {
			s = append(s, x.name)
		}
	}
	if len(s) == 0 {
		return "down"
	}
	return strings.Join(s, "|")
}
