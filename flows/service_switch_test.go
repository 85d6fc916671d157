package flows

// A Service load-balanced by the switch, with real packets: three pods (network
// namespaces with a veth each) on a sandbox br-int, a client and two endpoints that echo
// the peer address they see, the pipeline with Services and NetworkPolicy on.

import (
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/containernetworking/plugins/pkg/ns"
	"github.com/ofsdn/ofsdn/test/sandbox"
)

// onlyKey returns a key of m ("" when empty).
func onlyKey(m map[string]int) string {
	for k := range m {
		return k
	}
	return ""
}

// svcPod is one pod of the Service test: a netns whose eth0 is a veth into the bridge.
type svcPod struct {
	pod  Pod
	name string // netns name
}

func (p svcPod) do(t testing.TB, f func() error) {
	t.Helper()
	h, err := ns.GetNS("/var/run/netns/" + p.name)
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	if err := h.Do(func(ns.NetNS) error { return f() }); err != nil {
		t.Fatalf("in pod %s: %v", p.pod, err)
	}
}

func run(t testing.TB, args ...string) {
	t.Helper()
	if out, err := exec.Command(args[0], args[1:]...).CombinedOutput(); err != nil {
		t.Fatalf("%s: %v\n%s", strings.Join(args, " "), err, out)
	}
}

// addSvcPod makes a pod netns with eth0 (MAC, IP/24, default route via the gateway, a
// permanent neighbour entry for it, transmit checksum offload off so that the userspace
// datapath's conntrack and NAT see full checksums) and its veth peer on br-int at ofport.
func addSvcPod(t testing.TB, ovs *sandbox.OVS, cfg NodeConfig, ofport uint32, ip string) svcPod {
	t.Helper()
	name := fmt.Sprintf("svc-%d-%d", ofport, time.Now().UnixNano()%1e6)
	run(t, "ip", "netns", "add", name)
	t.Cleanup(func() { _ = exec.Command("ip", "netns", "del", name).Run() })
	mac := net.HardwareAddr{0x0a, 0x58, 0x0a, 0xf4, 0x01, byte(ofport)}
	host := fmt.Sprintf("svch%d", ofport)
	run(t, "ip", "-n", ovs.Netns, "link", "add", host, "type", "veth", "peer", "name", "eth0", "netns", name)
	run(t, "ip", "-n", ovs.Netns, "link", "set", host, "up")
	for _, c := range [][]string{
		{"link", "set", "lo", "up"},
		{"link", "set", "eth0", "address", mac.String()},
		{"addr", "add", ip + "/24", "dev", "eth0"},
		{"link", "set", "eth0", "up"},
		{"route", "add", "default", "via", cfg.GatewayIP.String()},
		{"neigh", "add", cfg.GatewayIP.String(), "lladdr", cfg.GatewayMAC.String(), "dev", "eth0", "nud", "permanent"},
	} {
		run(t, append([]string{"ip", "-n", name}, c...)...)
	}
	run(t, "ip", "netns", "exec", name, "ethtool", "-K", "eth0", "tx", "off")
	ovs.Vsctl(t, "add-port", "br-int", host, "--", "set", "interface", host, fmt.Sprintf("ofport_request=%d", ofport))
	return svcPod{pod: Pod{OFPort: ofport, MAC: mac, IPs: []net.IP{net.ParseIP(ip)}}, name: name}
}

// echo serves TCP and UDP on port in pod p: each connection or datagram is answered with
// "PEER-IP SERVER-IP", the address the endpoint sees the client by and its own.
func echo(t testing.TB, p svcPod, port int) {
	var ln net.Listener
	var pc net.PacketConn
	p.do(t, func() (err error) {
		if ln, err = net.Listen("tcp4", fmt.Sprintf(":%d", port)); err != nil {
			return err
		}
		pc, err = net.ListenPacket("udp4", fmt.Sprintf(":%d", port))
		return err
	})
	t.Cleanup(func() { ln.Close(); pc.Close() })
	me := p.pod.IPv4().String()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			fmt.Fprintf(c, "%s %s\n", c.RemoteAddr().(*net.TCPAddr).IP, me)
			c.Close()
		}
	}()
	go func() {
		buf := make([]byte, 1500)
		for {
			_, from, err := pc.ReadFrom(buf)
			if err != nil {
				return
			}
			_, _ = pc.WriteTo([]byte(fmt.Sprintf("%s %s\n", from.(*net.UDPAddr).IP, me)), from)
		}
	}()
}

// svcBridge starts a sandbox OVS with br-int (userspace datapath, OpenFlow 1.3, the
// pipeline's table names), the gateway port gw0 at ofport 2 and the reject meter 2, and
// returns it and br-int's management socket.
func svcBridge(t testing.TB) (*sandbox.OVS, string) {
	ovs := sandbox.Start(t)
	mgmt := ovs.MgmtSocket("br-int")
	ovs.Vsctl(t, "add-br", "br-int", "--", "set", "bridge", "br-int",
		"datapath_type=netdev", "protocols=OpenFlow13", "fail_mode=secure")
	args := []string{}
	for _, ti := range Tables() {
		id := "@t" + strconv.Itoa(int(ti.ID))
		args = append(args, "--", "--id="+id, "create", "Flow_Table", "name="+ti.Name,
			"--", "set", "Bridge", "br-int", fmt.Sprintf("flow_tables:%d=%s", ti.ID, id))
	}
	ovs.Vsctl(t, args...)
	ovs.Vsctl(t, "add-port", "br-int", "gw0", "--", "set", "interface", "gw0", "type=internal", "ofport_request=2")
	ovs.Ofctl(t, "add-meter", mgmt, "meter=2,pktps,band=type=drop,rate=100")
	return ovs, mgmt
}

// TestServiceOnSwitch: a client pod's TCP and UDP connections to a ClusterIP:port reach
// one of two endpoint pods through the port's select group (TCP) or multipath slot flows
// (UDP); each endpoint sees the
// client's own address; replies come back from the ClusterIP:port; over many connections
// both endpoints are chosen; after one endpoint's bucket is removed (mod-group), no new
// connection goes to it. NetworkPolicy is on (no rules): its conntrack shares the zone
// with the NAT, and a reply judged +new instead of +est would still pass here, so the
// test also reads conntrack_state's established flow counter.
func TestServiceOnSwitch(t *testing.T) {
	ovs, mgmt := svcBridge(t)

	cfg := testConfig()
	cfg.TunnelOFPort, cfg.NodeIP = 0, nil
	cfg.Services, cfg.Policy = true, true
	client := addSvcPod(t, ovs, cfg, 3, "10.244.1.5")
	ep1 := addSvcPod(t, ovs, cfg, 4, "10.244.1.6")
	ep2 := addSvcPod(t, ovs, cfg, 5, "10.244.1.7")
	echo(t, ep1, 8080)
	echo(t, ep2, 8080)

	vip := net.ParseIP("10.96.0.10")
	eps := []ServiceEndpoint{{IP: ep1.pod.IPv4(), Port: 8080}, {IP: ep2.pod.IPv4(), Port: 8080}}
	tcpPort := ServicePort{ID: 1, ClusterIP: vip, Proto: IPProtoTCP, Port: 80, Endpoints: eps}
	udpPort := ServicePort{ID: 2, ClusterIP: vip, Proto: IPProtoUDP, Port: 53, Endpoints: eps}
	// hairpinPort's only endpoint is ep1, which then reaches itself through it.
	hairpinPort := ServicePort{ID: 4, ClusterIP: vip, Proto: IPProtoTCP, Port: 82, Endpoints: eps[:1]}
	hairpinUDP := ServicePort{ID: 5, ClusterIP: vip, Proto: IPProtoUDP, Port: 82, Endpoints: eps[:1]}
	// affPort has an external IP besides its ClusterIP: one affinity across both.
	affPort := ServicePort{ID: 3, ClusterIP: vip, Proto: IPProtoTCP, Port: 81, AffinitySeconds: 86400, Endpoints: []ServiceEndpoint{
		{IP: ep1.pod.IPv4(), Port: 8080, AffinityID: 1}, {IP: ep2.pod.IPv4(), Port: 8080, AffinityID: 2}},
		Frontends: []ServiceFrontend{{IP: net.ParseIP("192.0.2.20"), Port: 81}}}
	// NodePort and load-balancer frontends (source range: the client's subnet).
	_, clients, _ := net.ParseCIDR("10.244.1.0/24")
	fePort := ServicePort{ID: 6, ClusterIP: vip, Proto: IPProtoTCP, Port: 83, Endpoints: eps,
		Frontends: []ServiceFrontend{{IP: net.ParseIP("198.51.100.7"), Port: 83, SourceRanges: []*net.IPNet{clients}},
			{IP: net.ParseIP("172.16.0.1"), Port: 30082, NodePort: true}}}
	all := PipelineFlows(cfg)
	for _, p := range []svcPod{client, ep1, ep2} {
		all = append(all, PodFlows(cfg, p.pod)...)
	}
	var groups []Group
	for _, sp := range []ServicePort{tcpPort, udpPort, affPort, hairpinPort, hairpinUDP, fePort} {
		fs, gs := ServicePortFlows(cfg, sp)
		all = append(all, fs...)
		groups = append(groups, gs...)
	}
	for _, g := range groups {
		ovs.Ofctl(t, "add-group", mgmt, g.String())
	}
	file := filepath.Join(t.TempDir(), "flows.txt")
	if err := os.WriteFile(file, []byte(strings.Join(lines(all, nil), "\n")+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	ovs.Ofctl(t, "add-flows", mgmt, file)

	// The switch holds exactly the groups and flows as this package prints them.
	var gotGroups []string
	for _, l := range strings.Split(ovs.Ofctl(t, "dump-groups", "--names", mgmt), "\n") {
		if l = strings.TrimSpace(l); strings.HasPrefix(l, "group_id=") {
			gotGroups = append(gotGroups, l)
		}
	}
	var wantGroups []string
	for _, g := range groups {
		wantGroups = append(wantGroups, g.String())
	}
	sort.Strings(gotGroups)
	sort.Strings(wantGroups)
	compareLines(t, "dump-groups", gotGroups, wantGroups)
	n := &switchNode{ovs: ovs, mgmt: mgmt}
	compareLines(t, "dump-flows", n.dump(t), sortedFormat(all, PortNames{2: "gw0", 3: "svch3", 4: "svch4", 5: "svch5"}))

	tcpTry := func() (string, error) {
		var c net.Conn
		var err error
		client.do(t, func() error {
			c, err = net.DialTimeout("tcp4", "10.96.0.10:80", 5*time.Second)
			return nil
		})
		if err != nil {
			return "", err
		}
		defer c.Close()
		if ra := c.RemoteAddr().String(); ra != "10.96.0.10:80" {
			return "", fmt.Errorf("connected to %s", ra)
		}
		_ = c.SetDeadline(time.Now().Add(5 * time.Second))
		buf := make([]byte, 100)
		k, err := c.Read(buf)
		if err != nil {
			return "", err
		}
		return strings.TrimSpace(string(buf[:k])), nil
	}
	udpTry := func() (string, error) {
		var pc net.PacketConn
		var err error
		client.do(t, func() error {
			pc, err = net.ListenPacket("udp4", ":0")
			return nil
		})
		if err != nil {
			return "", err
		}
		defer pc.Close()
		_ = pc.SetDeadline(time.Now().Add(5 * time.Second))
		if _, err := pc.WriteTo([]byte("hi"), &net.UDPAddr{IP: vip, Port: 53}); err != nil {
			return "", err
		}
		buf := make([]byte, 100)
		k, from, err := pc.ReadFrom(buf)
		if err != nil {
			return "", err
		}
		if from.String() != "10.96.0.10:53" {
			return "", fmt.Errorf("reply from %s, want the ClusterIP:port 10.96.0.10:53", from)
		}
		return strings.TrimSpace(string(buf[:k])), nil
	}
	// tries makes k connections with try and returns how many reached each endpoint; every
	// answer must show the client's own address as the peer.
	tries := func(what string, k int, try func() (string, error)) map[string]int {
		t.Helper()
		seen := map[string]int{}
		for i := 0; i < k; i++ {
			got, err := try()
			if err != nil {
				t.Fatalf("%s try %d: %v", what, i, err)
			}
			f := strings.Fields(got)
			if len(f) != 2 || f[0] != "10.244.1.5" {
				t.Fatalf("%s try %d: endpoint answered %q, want the client's address 10.244.1.5 as peer", what, i, got)
			}
			seen[f[1]]++
		}
		return seen
	}
	for _, c := range []struct {
		what string
		try  func() (string, error)
	}{{"tcp", tcpTry}, {"udp", udpTry}} {
		seen := tries(c.what, 24, c.try)
		t.Logf("%s: 24 connections to 10.96.0.10: %v", c.what, seen)
		if seen["10.244.1.6"] == 0 || seen["10.244.1.7"] == 0 {
			t.Errorf("%s: 24 connections reached %v, want both endpoints", c.what, seen)
		}
	}
	// The NodePort on a node address and the load-balancer IP: the same group, replies
	// from the frontend, the endpoint sees the client's address.
	for _, fe := range fePort.Frontends {
		addr := fe.String()
		feTry := func() (string, error) {
			var c net.Conn
			var err error
			client.do(t, func() error {
				c, err = net.DialTimeout("tcp4", addr, 5*time.Second)
				return nil
			})
			if err != nil {
				return "", err
			}
			defer c.Close()
			if ra := c.RemoteAddr().String(); ra != addr {
				return "", fmt.Errorf("connected to %s", ra)
			}
			_ = c.SetDeadline(time.Now().Add(5 * time.Second))
			buf := make([]byte, 100)
			k, err := c.Read(buf)
			return strings.TrimSpace(string(buf[:k])), err
		}
		if seen := tries("tcp to "+addr, 16, feTry); seen["10.244.1.6"] == 0 || seen["10.244.1.7"] == 0 {
			t.Errorf("16 connections to frontend %s reached %v, want both endpoints", addr, seen)
		}
	}
	// Session affinity (86400 s, learned as 65535 s with send_flow_rem): every new
	// connection of the client goes to the endpoint its first one got; the switch holds
	// one learned flow for it.
	affTo := func(addr string) func() (string, error) {
		return func() (string, error) {
			var c net.Conn
			var err error
			client.do(t, func() error {
				c, err = net.DialTimeout("tcp4", addr, 5*time.Second)
				return nil
			})
			if err != nil {
				return "", err
			}
			defer c.Close()
			_ = c.SetDeadline(time.Now().Add(5 * time.Second))
			buf := make([]byte, 100)
			k, err := c.Read(buf)
			return strings.TrimSpace(string(buf[:k])), err
		}
	}
	affTry, affExt := affTo("10.96.0.10:81"), affTo("192.0.2.20:81")
	// The first connection learns; until the revalidators see the learned flow, cached
	// datapath flows (which do not look at nw_src yet) can send another new connection
	// to the group: a known window of learn on a caching datapath (docs/design.md).
	tries("tcp with affinity, first", 1, affTry)
	ovs.Appctl(t, "revalidator/purge")
	if seen := tries("tcp with affinity", 16, affTry); len(seen) != 1 {
		t.Errorf("with session affinity, 16 connections of one client reached %v, want one endpoint", seen)
	}
	learned := ovs.Ofctl(t, "dump-flows", "--names", mgmt, "table=service_affinity")
	if !strings.Contains(learned, "idle_timeout=65535") || !strings.Contains(learned, "send_flow_rem") ||
		!strings.Contains(learned, "reg5=0x3,nw_src=10.244.1.5 ") {
		t.Errorf("service_affinity holds no learned flow for the client and the port with idle_timeout=65535 and send_flow_rem:\n%s", learned)
	}
	// One affinity per Service port across its frontends (kube-proxy's): six times over,
	// the learned state is deleted, the client's first connection through the ClusterIP
	// picks an endpoint, and its connections through the external IP go there too (the
	// learned flow keys on the port, not on the frontend). Learned per frontend, the
	// external IP's first connection would pick on its own (agreeing six times: 1 in 64).
	for round := 0; round < 6; round++ {
		ovs.Ofctl(t, "del-flows", mgmt, fmt.Sprintf("table=service_affinity,cookie=%#x/%#x", uint64(OwnerServiceAffinity)<<32, CookieOwnerKindMask))
		ovs.Appctl(t, "revalidator/purge")
		first := tries("tcp with affinity through the ClusterIP", 1, affTry)
		ovs.Appctl(t, "revalidator/purge")
		ext := tries("tcp with affinity through the external IP", 4, affExt)
		if len(first) != 1 || len(ext) != 1 || first[onlyKey(ext)] != 1 {
			t.Fatalf("round %d: the ClusterIP's connection reached %v, the external IP's 4 then %v: want the same endpoint", round, first, ext)
		}
		if n := strings.Count(ovs.Ofctl(t, "dump-flows", mgmt, "table=service_affinity"), "nw_src=10.244.1.5"); n != 1 {
			t.Fatalf("round %d: %d learned flows for the client, want 1 (one per Service port)", round, n)
		}
	}

	// Hairpin: ep1 reaches itself through a Service whose only endpoint it is, TCP and
	// UDP, several times; it sees the connection come from HairpinSNATIP and gets the
	// replies from the ClusterIP:port.
	for i := 0; i < 4; i++ {
		var got, from string
		ep1.do(t, func() error {
			c, err := net.DialTimeout("tcp4", "10.96.0.10:82", 5*time.Second)
			if err != nil {
				return fmt.Errorf("hairpin TCP connection %d to its own Service 10.96.0.10:82: %v", i, err)
			}
			defer c.Close()
			from = c.RemoteAddr().String()
			_ = c.SetDeadline(time.Now().Add(5 * time.Second))
			buf := make([]byte, 100)
			k, err := c.Read(buf)
			got = strings.TrimSpace(string(buf[:k]))
			return err
		})
		if want := "169.254.0.252 10.244.1.6"; got != want || from != "10.96.0.10:82" {
			t.Errorf("hairpin TCP %d: connected to %s, answer %q; want 10.96.0.10:82 and %q", i, from, got, want)
		}
		ep1.do(t, func() error {
			pc, err := net.ListenPacket("udp4", ":0")
			if err != nil {
				return err
			}
			defer pc.Close()
			_ = pc.SetDeadline(time.Now().Add(5 * time.Second))
			if _, err := pc.WriteTo([]byte("hi"), &net.UDPAddr{IP: vip, Port: 82}); err != nil {
				return err
			}
			buf := make([]byte, 100)
			k, a, err := pc.ReadFrom(buf)
			if err != nil {
				return fmt.Errorf("hairpin UDP datagram %d to its own Service 10.96.0.10:82: %v", i, err)
			}
			from, got = a.String(), strings.TrimSpace(string(buf[:k]))
			return nil
		})
		if want := "169.254.0.252 10.244.1.6"; got != want || from != "10.96.0.10:82" {
			t.Errorf("hairpin UDP %d: reply from %s, answer %q; want 10.96.0.10:82 and %q", i, from, got, want)
		}
	}

	// Replies were judged established by the policy stages: the conntrack_state flow for
	// +est counted packets (each TCP reply and each UDP reply).
	est := 0
	ovs.Appctl(t, "revalidator/purge") // push the datapath flows' statistics to the OpenFlow counters
	for _, l := range strings.Split(ovs.Ofctl(t, "dump-flows", "--names", mgmt, "table=conntrack_state"), "\n") {
		if strings.Contains(l, "ct_state=-new-inv+trk") {
			if m := strings.Index(l, "n_packets="); m >= 0 {
				est, _ = strconv.Atoi(strings.SplitN(l[m+len("n_packets="):], ",", 2)[0])
			}
		}
	}
	if est < 48+16 {
		t.Log(ovs.Ofctl(t, "dump-flows", "--names", mgmt))
		t.Log(ovs.AppctlOutput("dpctl/dump-conntrack"))
		t.Errorf("conntrack_state's established flow counted %d packets, want at least the 48 replies: the policy conntrack does not see the NAT connections as established", est)
	}

	// Remove one endpoint from both ports (the one a UDP flow went to): from the TCP
	// port's group (mod-group) and the UDP port's slot flows (the port's flows replaced):
	// new connections never pick it.
	keep, gone := eps[:1], "10.244.1.7"
	if udp := tries("udp", 1, udpTry); udp["10.244.1.6"] != 0 {
		keep, gone = eps[1:], "10.244.1.6"
	}
	for _, sp := range []ServicePort{tcpPort, udpPort} {
		sp.Endpoints = keep
		fs, gs := ServicePortFlows(cfg, sp)
		if len(gs) > 0 {
			ovs.Ofctl(t, "mod-group", mgmt, gs[0].String())
			continue
		}
		cookie, mask := ServicePortOwner(sp).Cookie()
		ovs.Ofctl(t, "del-flows", mgmt, fmt.Sprintf("cookie=%#x/%#x", cookie, mask))
		file := filepath.Join(t.TempDir(), "udp.txt")
		if err := os.WriteFile(file, []byte(strings.Join(lines(fs, nil), "\n")+"\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		ovs.Ofctl(t, "add-flows", mgmt, file)
		// As the daemon does for a UDP endpoint that left (controller flushStale): a new
		// flow from a client port that an earlier flow used would still find that flow's
		// conntrack entry and its endpoint (the kernel reuses ephemeral UDP ports; seen once
		// in some 50 runs).
		ovs.Appctl(t, "dpctl/flush-conntrack", "zone=65280", "ct_nw_dst=10.96.0.10,ct_nw_proto=17,ct_tp_dst=53",
			"ct_nw_src="+gone+",ct_nw_proto=17,ct_tp_src=8080")
	}
	for _, c := range []struct {
		what string
		try  func() (string, error)
	}{{"tcp", tcpTry}, {"udp", udpTry}} {
		if seen := tries(c.what+" after removing "+gone, 16, c.try); seen[gone] != 0 {
			t.Errorf("%s: after removing its bucket, %s still got %d of 16 new connections", c.what, gone, seen[gone])
		}
	}
}

// TestServiceManyEndpointsOnSwitch: a Service port with 5,000 endpoints (two endpoint
// pods, 2,500 target ports each) on a real switch, TCP and UDP: the TCP port's group
// chains to part groups, the UDP port has 5,000 slot flows; 2,000 connections (UDP: flows,
// each from a new client port) from a client pod are answered by ~1,650 distinct endpoints
// (the expectation for 2,000 uniform picks of 5,000), each eighth of the endpoints (TCP:
// each part) its even share. Were the part's choice tied to the port group's hash, a part
// would reach only a fraction of its buckets.
func TestServiceManyEndpointsOnSwitch(t *testing.T) {
	for _, proto := range []uint8{IPProtoTCP, IPProtoUDP} {
		t.Run(map[uint8]string{IPProtoTCP: "tcp", IPProtoUDP: "udp"}[proto], func(t *testing.T) { manyEndpoints(t, proto) })
	}
}

func manyEndpoints(t *testing.T, proto uint8) {
	ovs, mgmt := svcBridge(t)
	cfg := testConfig()
	cfg.TunnelOFPort, cfg.NodeIP = 0, nil
	cfg.Services = true
	client := addSvcPod(t, ovs, cfg, 3, "10.244.1.5")
	ends := []svcPod{addSvcPod(t, ovs, cfg, 4, "10.244.1.6"), addSvcPod(t, ovs, cfg, 5, "10.244.1.7")}
	const perPod, total = 2500, 5000
	sp := ServicePort{ID: 1, ClusterIP: net.ParseIP("10.96.0.11"), Proto: proto, Port: 80}
	for i := 0; i < total; i++ {
		sp.Endpoints = append(sp.Endpoints, ServiceEndpoint{IP: ends[i%2].pod.IPv4(), Port: uint16(10000 + i/2)})
	}
	for i := 0; i < ServiceGroupParts(sp); i++ {
		sp.GroupParts = append(sp.GroupParts, GroupIDMin+100+uint32(i))
	}
	if err := sp.Validate(); err != nil {
		t.Fatal(err)
	}
	// Each endpoint answers with its own address and port.
	for _, p := range ends {
		me := p.pod.IPv4().String()
		p.do(t, func() error {
			for port := 10000; port < 10000+perPod; port++ {
				if proto == IPProtoUDP {
					pc, err := net.ListenPacket("udp4", fmt.Sprintf(":%d", port))
					if err != nil {
						return err
					}
					t.Cleanup(func() { pc.Close() })
					go func() {
						buf := make([]byte, 64)
						for {
							_, from, err := pc.ReadFrom(buf)
							if err != nil {
								return
							}
							_, _ = pc.WriteTo([]byte(fmt.Sprintf("%s:%d\n", me, pc.LocalAddr().(*net.UDPAddr).Port)), from)
						}
					}()
					continue
				}
				ln, err := net.Listen("tcp4", fmt.Sprintf(":%d", port))
				if err != nil {
					return err
				}
				t.Cleanup(func() { ln.Close() })
				go func() {
					for {
						c, err := ln.Accept()
						if err != nil {
							return
						}
						fmt.Fprintf(c, "%s:%d\n", me, ln.Addr().(*net.TCPAddr).Port)
						c.Close()
					}
				}()
			}
			return nil
		})
	}
	all := PipelineFlows(cfg)
	for _, p := range append([]svcPod{client}, ends...) {
		all = append(all, PodFlows(cfg, p.pod)...)
	}
	fs, groups := ServicePortFlows(cfg, sp)
	all = append(all, fs...)
	if proto == IPProtoUDP {
		if len(groups) != 0 || len(fs) != 1+total {
			t.Fatalf("UDP, %d endpoints: %d groups, %d flows: want none and the port's flow and %d slot flows", total, len(groups), len(fs), total)
		}
	} else if len(groups) != 1+len(sp.GroupParts) || len(sp.GroupParts) < 2 {
		t.Fatalf("%d endpoints: %d groups, %d parts: want the port's group and at least 2 parts", total, len(groups), len(sp.GroupParts))
	}
	dir := t.TempDir()
	var gl []string
	for _, g := range groups { // parts first, the port's group last
		if g.WireLen() > MaxGroupModLen {
			t.Fatalf("group %d: %d bytes, above one group mod", g.ID, g.WireLen())
		}
		gl = append(gl, g.String())
	}
	gfile, ffile := filepath.Join(dir, "groups.txt"), filepath.Join(dir, "flows.txt")
	if err := os.WriteFile(gfile, []byte(strings.Join(gl, "\n")+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(ffile, []byte(strings.Join(lines(all, nil), "\n")+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if len(gl) > 0 {
		ovs.Ofctl(t, "add-groups", mgmt, gfile)
	}
	ovs.Ofctl(t, "add-flows", mgmt, ffile)

	const conns, workers = 2000, 8
	got := make(chan string, conns)
	errs := make(chan error, workers)
	for w := 0; w < workers; w++ {
		go func() {
			var err error
			client.do(t, func() error {
				for i := 0; i < conns/workers && err == nil; i++ {
					var c net.Conn
					if c, err = net.DialTimeout(map[uint8]string{IPProtoTCP: "tcp4", IPProtoUDP: "udp4"}[proto], "10.96.0.11:80", 5*time.Second); err != nil {
						break
					}
					_ = c.SetDeadline(time.Now().Add(5 * time.Second))
					if proto == IPProtoUDP {
						_, _ = c.Write([]byte("hi"))
					}
					buf := make([]byte, 64)
					var k int
					k, err = c.Read(buf)
					c.Close()
					got <- strings.TrimSpace(string(buf[:k]))
				}
				return nil
			})
			errs <- err
		}()
	}
	for w := 0; w < workers; w++ {
		if err := <-errs; err != nil {
			t.Fatalf("connection to 10.96.0.11:80: %v", err)
		}
	}
	close(got)
	seen := map[string]bool{}
	nSlices := max(len(sp.GroupParts), 8) // TCP: the parts; UDP: eighths of the endpoints
	perSlice := make([]int, nSlices)
	for a := range got {
		seen[a] = true
		host, port, _ := net.SplitHostPort(a)
		pn, _ := strconv.Atoi(port)
		idx := (pn-10000)*2 + map[string]int{"10.244.1.6": 0, "10.244.1.7": 1}[host]
		perSlice[idx*nSlices/total]++ // parts are even slices in endpoint order
	}
	t.Logf("%d connections reached %d distinct endpoints of %d; per slice %v", conns, len(seen), total, perSlice)
	// 2,000 uniform picks of 5,000: 5000·(1-e^-0.4) ≈ 1,648 distinct (σ ≈ 17); a part
	// reaching only a sixth of its buckets would give ~760.
	if len(seen) < 1500 {
		t.Errorf("%d connections reached %d distinct endpoints, want about 1,650: the choice is not uniform (TCP: the part groups' choice is not independent of the port group's)", conns, len(seen))
	}
	for i, c := range perSlice {
		if c < conns/len(perSlice)*6/10 { // σ ≈ 15 for 8 slices of 250
			t.Errorf("slice %d got %d of %d connections, want about %d", i, c, conns, conns/len(perSlice))
		}
	}
}

// TestServiceUDPSpreadOnSwitch: new UDP flows from one client address to a ClusterIP
// spread over the endpoints, each flow (a distinct client port) choosing on its own, as
// kube-proxy's conntrack entries do: 200 flows over 4 endpoints give each about 50 (σ ≈
// 6; the bound, 20, is 5σ below); 200 flows over endpoints of weights 1 and 3 share about
// 1:3. Every datagram of one flow reaches the endpoint its first one did (conntrack keeps
// the translation), and with session affinity every flow of the client reaches one
// endpoint. Before the multipath choice (OVS 3.1's select group hashes UDP flows without
// their ports) all 200 flows went to one endpoint.
func TestServiceUDPSpreadOnSwitch(t *testing.T) {
	ovs, mgmt := svcBridge(t)
	cfg := testConfig()
	cfg.TunnelOFPort, cfg.NodeIP = 0, nil
	cfg.Services, cfg.Policy = true, true
	client := addSvcPod(t, ovs, cfg, 3, "10.244.1.5")
	var pods []svcPod
	var eps []ServiceEndpoint
	for i := 0; i < 4; i++ {
		p := addSvcPod(t, ovs, cfg, uint32(4+i), fmt.Sprintf("10.244.1.%d", 6+i))
		echo(t, p, 8080)
		pods = append(pods, p)
		eps = append(eps, ServiceEndpoint{IP: p.pod.IPv4(), Port: 8080, AffinityID: uint32(1 + i)})
	}
	vip := net.ParseIP("10.96.0.10")
	even := ServicePort{ID: 1, ClusterIP: vip, Proto: IPProtoUDP, Port: 53, Endpoints: eps}
	weighted := ServicePort{ID: 2, ClusterIP: vip, Proto: IPProtoUDP, Port: 54, Endpoints: []ServiceEndpoint{
		{IP: eps[0].IP, Port: 8080, Weight: 1}, {IP: eps[1].IP, Port: 8080, Weight: 3}}}
	affinity := ServicePort{ID: 3, ClusterIP: vip, Proto: IPProtoUDP, Port: 55, AffinitySeconds: 600, Endpoints: eps}
	all := PipelineFlows(cfg)
	for _, p := range append([]svcPod{client}, pods...) {
		all = append(all, PodFlows(cfg, p.pod)...)
	}
	for _, sp := range []ServicePort{even, weighted, affinity} {
		if err := sp.Validate(); err != nil {
			t.Fatal(err)
		}
		fs, gs := ServicePortFlows(cfg, sp)
		all = append(all, fs...)
		for _, g := range gs {
			ovs.Ofctl(t, "add-group", mgmt, g.String())
		}
	}
	file := filepath.Join(t.TempDir(), "flows.txt")
	if err := os.WriteFile(file, []byte(strings.Join(lines(all, nil), "\n")+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	ovs.Ofctl(t, "add-flows", mgmt, file)
	n := &switchNode{ovs: ovs, mgmt: mgmt}
	names := PortNames{2: "gw0"}
	for i := uint32(3); i <= 7; i++ {
		names[i] = fmt.Sprintf("svch%d", i)
	}
	compareLines(t, "dump-flows", n.dump(t), sortedFormat(all, names))

	// flow sends k datagrams from one new client socket (one client port) to the
	// ClusterIP at port and returns the endpoint address that answered each.
	flow := func(port, k int) []string {
		t.Helper()
		var pc net.PacketConn
		client.do(t, func() (err error) { pc, err = net.ListenPacket("udp4", ":0"); return err })
		defer pc.Close()
		var got []string
		for i := 0; i < k; i++ {
			_ = pc.SetDeadline(time.Now().Add(5 * time.Second))
			if _, err := pc.WriteTo([]byte("hi"), &net.UDPAddr{IP: vip, Port: port}); err != nil {
				t.Fatal(err)
			}
			buf := make([]byte, 100)
			m, from, err := pc.ReadFrom(buf)
			if err != nil {
				t.Fatalf("UDP datagram %d from %s to 10.96.0.10:%d: %v", i, pc.LocalAddr(), port, err)
			}
			f := strings.Fields(string(buf[:m]))
			if from.String() != fmt.Sprintf("10.96.0.10:%d", port) || len(f) != 2 || f[0] != "10.244.1.5" {
				t.Fatalf("UDP datagram %d to 10.96.0.10:%d: reply %q from %s, want the client's address as peer, from the ClusterIP:port", i, port, buf[:m], from)
			}
			got = append(got, f[1])
		}
		return got
	}
	count := func(port, flows int) map[string]int {
		seen := map[string]int{}
		for i := 0; i < flows; i++ {
			seen[flow(port, 1)[0]]++
		}
		return seen
	}

	seen := count(53, 200)
	t.Logf("200 UDP flows to 10.96.0.10:53 (4 endpoints): %v", seen)
	for _, ep := range eps {
		if seen[ep.IP.String()] < 20 {
			t.Errorf("200 UDP flows from one client over 4 endpoints: %s got %d, want about 50 (at least 20): %v", ep.IP, seen[ep.IP.String()], seen)
		}
	}
	seen = count(54, 200)
	t.Logf("200 UDP flows to 10.96.0.10:54 (weights 1 and 3): %v", seen)
	if a, b := seen[eps[0].IP.String()], seen[eps[1].IP.String()]; a < 20 || b < 120 {
		t.Errorf("200 UDP flows over endpoints of weights 1 and 3: %d and %d, want about 50 and 150 (at least 20 and 120)", a, b)
	}
	// One flow, many datagrams: one endpoint each, and different flows different ones.
	flowsTo := map[string]bool{}
	for i := 0; i < 20; i++ {
		got := flow(53, 5)
		for _, g := range got[1:] {
			if g != got[0] {
				t.Errorf("one UDP flow's datagrams reached %v: want one endpoint (conntrack keeps the translation)", got)
				break
			}
		}
		flowsTo[got[0]] = true
	}
	if len(flowsTo) < 2 {
		t.Errorf("20 UDP flows of 5 datagrams reached only %v", flowsTo)
	}
	// Session affinity: the first flow learns, every later flow of the client goes to
	// the same endpoint (the known window: cached datapath flows until the purge).
	first := flow(55, 1)[0]
	ovs.Appctl(t, "revalidator/purge")
	if seen := count(55, 40); seen[first] != 40 {
		t.Errorf("with session affinity, 40 UDP flows of one client reached %v, want all at %s", seen, first)
	}
	learned := ovs.Ofctl(t, "dump-flows", "--names", mgmt, "table=service_affinity")
	if !strings.Contains(learned, "reg5=0x3,nw_src=10.244.1.5 ") { // one per client and Service port (id 3)
		t.Errorf("service_affinity holds no learned flow for the client's UDP flows:\n%s", learned)
	}
}
