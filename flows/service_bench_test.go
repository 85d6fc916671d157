package flows

import (
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// BenchmarkServiceUDPNewFlow: one new UDP flow to a ClusterIP (a new client socket, one
// datagram and its answer) on a real switch (userspace datapath), 4 endpoints, side by
// side: "group", the port's select group as before UDP ports chose by hash (one datapath
// flow serves every new flow; all go to one endpoint), and "multipath", the UDP port's
// slot flows (every new flow is an upcall: its datapath flow matches the UDP ports).
func BenchmarkServiceUDPNewFlow(b *testing.B) {
	for _, how := range []string{"group", "multipath"} {
		b.Run(how, func(b *testing.B) {
			ovs, mgmt := svcBridge(b)
			cfg := testConfig()
			cfg.TunnelOFPort, cfg.NodeIP = 0, nil
			cfg.Services = true
			client := addSvcPod(b, ovs, cfg, 3, "10.244.1.5")
			var pods []svcPod
			var eps []ServiceEndpoint
			for i := 0; i < 4; i++ {
				p := addSvcPod(b, ovs, cfg, uint32(4+i), fmt.Sprintf("10.244.1.%d", 6+i))
				echo(b, p, 8080)
				pods = append(pods, p)
				eps = append(eps, ServiceEndpoint{IP: p.pod.IPv4(), Port: 8080})
			}
			vip := net.ParseIP("10.96.0.10")
			sp := ServicePort{ID: 1, ClusterIP: vip, Proto: IPProtoUDP, Port: 53, Endpoints: eps}
			all := PipelineFlows(cfg)
			for _, p := range append([]svcPod{client}, pods...) {
				all = append(all, PodFlows(cfg, p.pod)...)
			}
			if how == "group" {
				// The port as a TCP port is built (a select group), with UDP's match.
				tcp := sp
				tcp.Proto = IPProtoTCP
				fs, gs := ServicePortFlows(cfg, tcp)
				for i := range fs {
					fs[i].Match.IPProto = IPProtoUDP
				}
				all = append(all, fs...)
				ovs.Ofctl(b, "add-group", mgmt, gs[0].String())
			} else {
				fs, _ := ServicePortFlows(cfg, sp)
				all = append(all, fs...)
			}
			file := filepath.Join(b.TempDir(), "flows.txt")
			if err := os.WriteFile(file, []byte(strings.Join(lines(all, nil), "\n")+"\n"), 0o600); err != nil {
				b.Fatal(err)
			}
			ovs.Ofctl(b, "add-flows", mgmt, file)
			seen := map[string]int{}
			b.ResetTimer()
			client.do(b, func() error {
				buf := make([]byte, 100)
				for i := 0; i < b.N; i++ {
					c, err := net.DialUDP("udp4", nil, &net.UDPAddr{IP: vip, Port: 53})
					if err != nil {
						return err
					}
					_ = c.SetDeadline(time.Now().Add(5 * time.Second))
					_, _ = c.Write([]byte("hi"))
					k, err := c.Read(buf)
					c.Close()
					if err != nil {
						return fmt.Errorf("new UDP flow %d: %v", i, err)
					}
					seen[strings.Fields(string(buf[:k]))[1]]++
				}
				return nil
			})
			b.StopTimer()
			b.ReportMetric(float64(len(seen)), "endpoints")
			// Datapath flows left for the run's new flows (they idle out after 10 s).
			dp := strings.Count(ovs.AppctlOutput("dpctl/dump-flows"), "\n")
			b.ReportMetric(float64(dp)/float64(b.N), "dpflows/op")
		})
	}
}
