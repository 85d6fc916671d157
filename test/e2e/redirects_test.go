package e2e

// Issue 20, item 5: pods' service traffic goes in and out of the gateway port; the kernel
// must not send ICMP redirects for it, since they spend its per-pod ICMP budget and the
// port unreachable of kube-proxy's reject (a Service without endpoints) was then dropped:
// the pod's connect() was refused only after the SYN's retransmit, 1 s later.

import (
	"errors"
	"fmt"
	"io"
	"net"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/ofsdn/ofsdn/test/harness"
)

// icmpCounter returns the named counter of the Icmp line of /proc/net/snmp in the node's
// network namespace (e.g. OutRedirects).
func icmpCounter(t *testing.T, n *testNode, name string) int {
	t.Helper()
	var head []string
	for _, l := range strings.Split(n.OVS.Exec(t, "cat", "/proc/net/snmp"), "\n") {
		f := strings.Fields(l)
		if len(f) == 0 || f[0] != "Icmp:" {
			continue
		}
		if head == nil {
			head = f
			continue
		}
		for i, h := range head {
			if h == name && i < len(f) {
				v, err := strconv.Atoi(f[i])
				if err != nil {
					t.Fatal(err)
				}
				return v
			}
		}
	}
	t.Fatalf("no Icmp %s in /proc/net/snmp", name)
	return 0
}

// TestServiceRejectNotDelayedByRedirects: kube-proxy's data path emulated by nftables in
// the node's namespace (a Service 10.96.0.10:80 DNAT'ed to pod b, a Service 10.96.0.11:80
// without endpoints rejected as kube-proxy does, ICMP port unreachable). Pod a's
// connections to the first go pod → gateway → DNAT → gateway → pod b and back: the node
// sends no ICMP redirect for them (IcmpOutRedirects unchanged), and right after them a's
// connection to the second is refused on its first SYN: well under the 1 s after which the
// kernel would retransmit it (bound 500 ms; measured 1.0 s before the fix, a few ms after).
func TestServiceRejectNotDelayedByRedirects(t *testing.T) {
	serial(t)
	n := &testNode{harness.NewNode(t, "10.158.0.0/24", "ofsdn-e2e")}
	topo := filepath.Join(n.Dir, "topology.yaml")
	writeTopology(t, topo, "clusterCIDR: 10.158.0.0/16\nnodeName: node-x\npodSubnet: 10.158.0.0/24\n"+
		"nodeIP: 127.0.0.1\npeers:\n- {name: node-y, podSubnet: 10.158.1.0/24, nodeIP: 127.0.0.2}\n")
	n.OVS.Exec(t, "ip", "addr", "add", "127.0.0.2/8", "dev", "lo")
	n.StartDaemon(daemonBinary(t), 60*time.Second, "--log-level", "debug", "--topology-file", topo,
		"--service-cidr", "10.96.0.0/12", "--mtu", "1400")
	a, b := n.addPod("svc-client"), n.addPod("svc-endpoint")

	// Pod b serves an echo on 8080.
	var l net.Listener
	inNetns(t, b.netns, func() (err error) {
		l, err = net.Listen("tcp4", ":8080")
		return err
	})
	t.Cleanup(func() { l.Close() })
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			go func() { defer c.Close(); _, _ = io.Copy(c, c) }()
		}
	}()
	nft := fmt.Sprintf(`table ip ofsdn-test-kube-proxy {
	chain nat-prerouting { type nat hook prerouting priority dstnat; ip daddr 10.96.0.10 tcp dport 80 dnat to %s:8080; }
	chain filter-forward { type filter hook forward priority filter; ip daddr 10.96.0.11 tcp dport 80 reject; }
}`, b.ip())
	n.OVS.Exec(t, "nft", nft)
	// A default route, as a node has (the sandbox has none): the Service range is routed
	// and reaches the forward hook.
	n.OVS.Exec(t, "ip", "link", "add", "ofsdflt0", "type", "veth", "peer", "name", "ofsdflt1")
	n.OVS.Exec(t, "ip", "addr", "add", "192.168.250.1/30", "dev", "ofsdflt0")
	n.OVS.Exec(t, "ip", "link", "set", "ofsdflt0", "up")
	n.OVS.Exec(t, "ip", "link", "set", "ofsdflt1", "up")
	n.OVS.Exec(t, "ip", "route", "add", "default", "via", "192.168.250.2")

	redirectsBefore := icmpCounter(t, n, "OutRedirects")
	// A burst of service connections from pod a (each hairpins through the gateway).
	for i := 0; i < 5; i++ {
		inNetns(t, a.netns, func() error {
			c, err := net.DialTimeout("tcp4", "10.96.0.10:80", 5*time.Second)
			if err != nil {
				return fmt.Errorf("pod a → Service 10.96.0.10:80 (pod b): %w", err)
			}
			defer c.Close()
			_ = c.SetDeadline(time.Now().Add(5 * time.Second))
			msg := []byte("hello through the gateway")
			if _, err := c.Write(msg); err != nil {
				return err
			}
			got := make([]byte, len(msg))
			if _, err := io.ReadFull(c, got); err != nil {
				return fmt.Errorf("echo from pod b through the Service: %w", err)
			}
			return nil
		})
	}
	var took time.Duration
	var dialErr error
	inNetns(t, a.netns, func() error {
		start := time.Now()
		c, err := net.DialTimeout("tcp4", "10.96.0.11:80", 5*time.Second)
		took, dialErr = time.Since(start), err
		if c != nil {
			c.Close()
		}
		return nil
	})
	redirects := icmpCounter(t, n, "OutRedirects") - redirectsBefore
	t.Logf("ICMP redirects sent during the burst: %d; connect to the Service without endpoints: %v after %s (IcmpOutRateLimitHost %d)",
		redirects, dialErr, took, icmpCounter(t, n, "OutRateLimitHost"))
	if redirects != 0 {
		t.Errorf("the node sent %d ICMP redirects for pods' service traffic through the gateway, want 0", redirects)
	}
	if !errors.Is(dialErr, syscall.ECONNREFUSED) {
		t.Fatalf("connect to the Service without endpoints: %v, want connection refused", dialErr)
	}
	if took > 500*time.Millisecond {
		t.Errorf("connect to the Service without endpoints refused after %s, want the first SYN refused (< 500 ms; the SYN retransmit comes at 1 s)", took)
	}
}
