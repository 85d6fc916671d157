package bench

// `go test -bench . ./bench/` entry points (root, Open vSwitch installed): one pod ADD+DEL
// per iteration in-daemon and at the floor, one pod's flow batch, and IPAM allocation under
// concurrency. The full interleaved comparison with the plugin and the shell-out baseline is
// the ofsdn-bench command (make bench). The Test functions are pure and fast.

import (
	"context"
	"fmt"
	"net"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/ofsdn/ofsdn/flows"
	"github.com/ofsdn/ofsdn/ipam"
	"github.com/ofsdn/ofsdn/openflow"
)

func TestPercentile(t *testing.T) {
	s := []int64{5, 1, 4, 2, 3, 6, 7, 8, 9, 10}
	for _, c := range []struct {
		p    float64
		want int64
	}{{50, 5}, {90, 9}, {99, 10}, {100, 10}, {1, 1}} {
		if got := Percentile(s, c.p); got != c.want {
			t.Errorf("Percentile(1..10, %v) = %d, want %d", c.p, got, c.want)
		}
	}
	if Percentile(nil, 50) != 0 {
		t.Error("Percentile of no samples should be 0")
	}
}

// TestOfctlText checks that the shell-out baseline hands ovs-ofctl table numbers, never
// stage names (with --no-names ovs-ofctl cannot resolve names).
func TestOfctlText(t *testing.T) {
	_, subnet, _ := net.ParseCIDR("10.128.0.0/24")
	cfg := flows.NodeConfig{GatewayOFPort: 1, GatewayMAC: net.HardwareAddr{0x0a, 0x58, 10, 128, 0, 1},
		GatewayIP: net.IPv4(10, 128, 0, 1).To4(), PodSubnet: subnet, Generation: 1}
	pod := flows.Pod{OFPort: 5, MAC: net.HardwareAddr{0x0a, 0x58, 10, 128, 0, 5}, IPs: []net.IP{net.IPv4(10, 128, 0, 5).To4()}, OwnerID: 3}
	for _, f := range flows.PodFlows(cfg, pod) {
		got := ofctlText(f.String())
		for _, tb := range flows.Tables() {
			if strings.Contains(got, "table="+tb.Name) || strings.Contains(got, tb.Name+"\"") || strings.Contains(got, "goto_table:"+tb.Name) {
				t.Errorf("ofctlText(%q) = %q still names table %s", f.String(), got, tb.Name)
			}
		}
		if !strings.Contains(got, fmt.Sprintf("table=%d", f.Table)) {
			t.Errorf("ofctlText(%q) = %q: want table=%d", f.String(), got, f.Table)
		}
	}
}

// benchMode starts a sandbox and a mode on it, and a pod namespace.
func benchMode(b *testing.B, name string) (Mode, string) {
	b.Helper()
	sb, err := StartSandbox("", "gotest")
	if err != nil {
		b.Fatal(err)
	}
	_, subnet, _ := net.ParseCIDR("10.140.0.0/20")
	var log stepLog
	var m Mode
	switch name {
	case ModeInDaemon:
		m, err = newDaemon(context.Background(), sb, subnet, nil, &log)
	case ModeFloor:
		m, err = newFloor(context.Background(), sb, subnet, &log)
	}
	if err != nil {
		sb.Stop()
		b.Fatal(err)
	}
	nsName := fmt.Sprintf("ofsdn-bt-%s", sb.Netns[len(sb.Netns)-6:])
	podNS, err := NewNetns(nsName)
	if err != nil {
		m.Close()
		b.Fatal(err)
	}
	b.Cleanup(func() { DelNetns(nsName); m.Close() })
	return m, podNS
}

// BenchmarkAddDel times one pod's ADD followed by its DEL per iteration, on an empty node.
func BenchmarkAddDel(b *testing.B) {
	for _, name := range []string{ModeInDaemon, ModeFloor} {
		b.Run(name, func(b *testing.B) {
			m, podNS := benchMode(b, name)
			// This goroutine's thread moves into the node's namespace and stays locked, so
			// the runtime discards it when the benchmark ends.
			if err := lockInto(m.Sandbox().NetnsPath()); err != nil {
				b.Fatal(err)
			}
			ctx := context.Background()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				p := Pod{ContainerID: fmt.Sprintf("gobench-%s-%d", name, i), IfName: "eth0", Netns: podNS, Name: "p"}
				if err := m.Add(ctx, p); err != nil {
					b.Fatal(err)
				}
				if err := m.Del(ctx, p); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkPodFlows times one pod's flows as one batch + barrier, and their delete by
// cookie, on a bridge with the base pipeline (no veth, no OVSDB).
func BenchmarkPodFlows(b *testing.B) {
	sb, err := StartSandbox("", "gotest")
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(sb.Stop)
	_, subnet, _ := net.ParseCIDR("10.141.0.0/16")
	n, err := newPlainNode(context.Background(), sb, subnet)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(n.close)
	ctx := context.Background()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		ip := nthIP(subnet, uint32(2+i%60000))
		pod := flows.Pod{OFPort: uint32(100 + i%60000), MAC: net.HardwareAddr{0x0a, 0x58, ip[0], ip[1], ip[2], ip[3]}, IPs: []net.IP{ip}, OwnerID: uint32(1 + i%60000)}
		if err := n.sw.Apply(ctx, addOps("pod", flows.PodFlows(n.cfg, pod))); err != nil {
			b.Fatal(err)
		}
		cookie, mask := flows.PodCookie(pod)
		if err := n.sw.Apply(ctx, []openflow.FlowModOp{{Mod: flows.DeleteByCookie(cookie, mask), Name: "delete"}}); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkIPAMAllocate times a lease Allocate + Release pair with 1, 8 and 32 goroutines
// (SetParallelism per GOMAXPROCS). Every change is on disk (write, fsync, rename, fsync of
// the directory) before the call returns; concurrent changes share one write (group commit),
// so the cost per pair falls as goroutines are added.
func BenchmarkIPAMAllocate(b *testing.B) {
	for _, par := range []int{1, 8, 32} {
		b.Run(fmt.Sprintf("goroutines=%d", par), func(b *testing.B) {
			_, subnet, _ := net.ParseCIDR("10.142.0.0/16")
			s, err := ipam.Open(b.TempDir(), []*net.IPNet{subnet}, net.IPv4(10, 142, 0, 1))
			if err != nil {
				b.Fatal(err)
			}
			defer s.Close()
			b.SetParallelism(max(1, par/runtime.GOMAXPROCS(0)))
			var seq atomic.Int64
			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					id := fmt.Sprintf("c%d", seq.Add(1))
					if _, err := s.Allocate(id, "eth0", "bench/p"); err != nil {
						b.Error(err)
						return
					}
					if err := s.Release(id, "eth0"); err != nil {
						b.Error(err)
						return
					}
				}
			})
		})
	}
}
