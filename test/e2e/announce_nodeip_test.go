package e2e

// Issue 20, item 6: the gratuitous ARP follows the node IP that the topology gives at run
// time. The node's underlay is a veth pair (ofsul0 in the node, ofsulp in a peer
// namespace of the test's own); the test captures every ARP frame that reaches the peer
// through an AF_PACKET socket there.

import (
	"encoding/binary"
	"fmt"
	"net"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/ofsdn/ofsdn/test/harness"
)

// garp is one gratuitous ARP seen on the wire: the sender's MAC and its IPv4 address.
type garp struct {
	mac string
	ip  string
}

// arpCapture receives ARP frames on one interface of a namespace.
type arpCapture struct {
	mu   sync.Mutex
	seen []garp
	fd   int
	stop chan struct{}
	done chan struct{}
}

// captureARP opens an AF_PACKET socket for ARP bound to ifName inside netnsPath and
// records every announcement (an ARP request whose sender and target IPs are equal).
func captureARP(t *testing.T, netnsPath, ifName string) *arpCapture {
	t.Helper()
	c := &arpCapture{stop: make(chan struct{}), done: make(chan struct{})}
	const proto = (unix.ETH_P_ARP&0xff)<<8 | unix.ETH_P_ARP>>8 // htons(ETH_P_ARP)
	inNetns(t, netnsPath, func() error {
		l, err := net.InterfaceByName(ifName)
		if err != nil {
			return err
		}
		fd, err := unix.Socket(unix.AF_PACKET, unix.SOCK_RAW|unix.SOCK_CLOEXEC, proto)
		if err != nil {
			return err
		}
		if err := unix.Bind(fd, &unix.SockaddrLinklayer{Protocol: uint16(proto), Ifindex: l.Index}); err != nil {
			unix.Close(fd)
			return err
		}
		tv := unix.Timeval{Usec: 200000}
		if err := unix.SetsockoptTimeval(fd, unix.SOL_SOCKET, unix.SO_RCVTIMEO, &tv); err != nil {
			unix.Close(fd)
			return err
		}
		c.fd = fd
		return nil
	})
	go func() {
		defer close(c.done)
		buf := make([]byte, 1600)
		for {
			select {
			case <-c.stop:
				return
			default:
			}
			n, _, err := unix.Recvfrom(c.fd, buf, 0)
			if err != nil || n < 42 {
				continue
			}
			f := buf[:n]
			if binary.BigEndian.Uint16(f[12:]) != unix.ETH_P_ARP || binary.BigEndian.Uint16(f[20:]) != 1 {
				continue
			}
			sip, tip := net.IP(f[28:32]), net.IP(f[38:42])
			if !sip.Equal(tip) {
				continue
			}
			c.mu.Lock()
			c.seen = append(c.seen, garp{mac: net.HardwareAddr(f[22:28]).String(), ip: sip.String()})
			c.mu.Unlock()
		}
	}()
	t.Cleanup(func() {
		close(c.stop)
		<-c.done
		unix.Close(c.fd)
	})
	return c
}

// since returns the announcements seen after the first from.
func (c *arpCapture) since(from int) []garp {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]garp(nil), c.seen[from:]...)
}

func (c *arpCapture) count() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.seen)
}

// waitFor waits up to limit for an announcement after from that match accepts.
func (c *arpCapture) waitFor(from int, limit time.Duration, match func(garp) bool) (garp, bool) {
	deadline := time.Now().Add(limit)
	for {
		for _, g := range c.since(from) {
			if match(g) {
				return g, true
			}
		}
		if time.Now().After(deadline) {
			return garp{}, false
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// TestNodeIPChangeAnnounced: a node whose IP changes in its topology file at run time
// announces the new IP at once and on the next MAC change of its underlay interface, from
// the new MAC; never the old IP from the new MAC (what peers then cached: the new IP kept
// the stale MAC until the daemon restarted).
func TestNodeIPChangeAnnounced(t *testing.T) {
	serial(t)
	n := &testNode{harness.NewNode(t, "10.157.0.0/24", "ofsdn-e2e")}
	o := n.OVS
	peer := newNetns(t, "ofsdn-garp-peer")
	const oldIP, newIP, newMAC = "172.31.57.10", "172.31.57.11", "02:00:00:00:57:5a"
	o.Exec(t, "ip", "link", "add", "ofsul0", "type", "veth", "peer", "name", "ofsulp", "netns", filepath.Base(peer))
	o.Exec(t, "ip", "addr", "add", oldIP+"/24", "dev", "ofsul0")
	o.Exec(t, "ip", "link", "set", "ofsul0", "up")
	mustRun(t, "ip", "netns", "exec", filepath.Base(peer), "ip", "addr", "add", "172.31.57.2/24", "dev", "ofsulp")
	mustRun(t, "ip", "netns", "exec", filepath.Base(peer), "ip", "link", "set", "ofsulp", "up")
	capture := captureARP(t, peer, "ofsulp")

	topo := filepath.Join(n.Dir, "topology.yaml")
	spec := func(ip string) string {
		return fmt.Sprintf("clusterCIDR: 10.157.0.0/16\nnodeName: node-x\npodSubnet: 10.157.0.0/24\nnodeIP: %s\n"+
			"peers:\n- {name: node-y, podSubnet: 10.157.1.0/24, nodeIP: 172.31.57.2}\n", ip)
	}
	writeTopology(t, topo, spec(oldIP))
	n.StartDaemon(daemonBinary(t), 60*time.Second, "--log-level", "debug", "--topology-file", topo)
	oldMAC := o.Exec(t, "cat", "/sys/class/net/ofsul0/address")
	if _, ok := capture.waitFor(0, 10*time.Second, func(g garp) bool { return g == garp{oldMAC, oldIP} }); !ok {
		t.Fatalf("no announcement of %s from %s at the daemon's start; seen %v", oldIP, oldMAC, capture.since(0))
	}

	// The node gets a new address and the topology names it (the operator's order: the
	// address first, then the file).
	o.Exec(t, "ip", "addr", "add", newIP+"/24", "dev", "ofsul0")
	mark := capture.count()
	writeTopology(t, topo, spec(newIP))
	if _, ok := capture.waitFor(mark, 10*time.Second, func(g garp) bool { return g.ip == newIP }); !ok {
		t.Errorf("the new node IP %s was not announced within 10 s of the topology change; seen %v", newIP, capture.since(mark))
	}

	// The underlay interface's MAC changes: the announcement names the node IP of now.
	mark = capture.count()
	o.Exec(t, "ip", "link", "set", "ofsul0", "address", newMAC)
	g, ok := capture.waitFor(mark, 10*time.Second, func(g garp) bool { return g.mac == newMAC })
	if !ok {
		t.Fatalf("no announcement from the new MAC %s within 10 s; seen %v", newMAC, capture.since(mark))
	}
	if g.ip != newIP {
		t.Errorf("after the MAC change the daemon announced %s from %s, want the node IP of the topology, %s (all seen: %v)",
			g.ip, g.mac, newIP, capture.since(mark))
	}
	time.Sleep(300 * time.Millisecond) // anything else the change sends
	for _, g := range capture.since(mark) {
		if g.ip == oldIP {
			t.Errorf("the old node IP %s was announced after it left the topology (from %s)", oldIP, g.mac)
		}
	}
}
