package controller

import (
	"encoding/binary"
	"fmt"
	"net"
	"net/netip"
	"testing"

	"github.com/ofsdn/ofsdn/flows"
)

// synFrame is an Ethernet frame with an IPv4 TCP SYN (or, with udp, a UDP datagram) from
// 10.244.1.5:40000 to 10.96.0.10:80, client MAC 02:00:00:00:00:05, gateway MAC
// 02:00:00:00:00:01, as the no-endpoint flow sends it (max_len 128).
func synFrame(udp bool) []byte {
	f := make([]byte, 14+20+20)
	copy(f[0:6], []byte{2, 0, 0, 0, 0, 1})
	copy(f[6:12], []byte{2, 0, 0, 0, 0, 5})
	binary.BigEndian.PutUint16(f[12:], 0x0800)
	ip := f[14:]
	ip[0] = 0x45
	binary.BigEndian.PutUint16(ip[2:], 40)
	ip[8] = 64
	ip[9] = ipProtoTCP
	if udp {
		ip[9] = ipProtoUDP
	}
	copy(ip[12:], []byte{10, 244, 1, 5})
	copy(ip[16:], []byte{10, 96, 0, 10})
	binary.BigEndian.PutUint16(ip[10:], checksum(ip[:20], 0))
	l4 := ip[20:]
	binary.BigEndian.PutUint16(l4[0:], 40000)
	binary.BigEndian.PutUint16(l4[2:], 80)
	binary.BigEndian.PutUint32(l4[4:], 1000) // seq
	l4[12] = 5 << 4
	l4[13] = 0x02 // SYN
	return f
}

func TestRejectFrameTCP(t *testing.T) {
	out, err := rejectFrame(synFrame(false))
	if err != nil {
		t.Fatal(err)
	}
	h, err := parsePacket(out)
	if err != nil {
		t.Fatal(err)
	}
	if h.Src != netip.MustParseAddr("10.96.0.10") || h.Dst != netip.MustParseAddr("10.244.1.5") || h.Proto != ipProtoTCP ||
		h.SrcPort != 80 || h.DstPort != 40000 {
		t.Fatalf("reset %+v: want 10.96.0.10:80 → 10.244.1.5:40000 TCP", h)
	}
	if out[5] != 5 || out[11] != 1 {
		t.Errorf("Ethernet dst %x src %x: want the client's MAC as destination, the gateway's as source", out[0:6], out[6:12])
	}
	ip := out[14:]
	if checksum(ip[:20], 0) != 0 {
		t.Error("IPv4 header checksum does not verify")
	}
	tcp := ip[20:]
	var src, dst [4]byte
	copy(src[:], ip[12:16])
	copy(dst[:], ip[16:20])
	if l4Checksum(src, dst, ipProtoTCP, tcp) != 0 {
		t.Error("TCP checksum does not verify")
	}
	if tcp[13] != 0x14 || binary.BigEndian.Uint32(tcp[8:]) != 1001 || binary.BigEndian.Uint32(tcp[4:]) != 0 {
		t.Errorf("flags %#x ack %d seq %d: want RST+ACK, ack = SYN's seq + 1 (1001), seq 0", tcp[13], binary.BigEndian.Uint32(tcp[8:]), binary.BigEndian.Uint32(tcp[4:]))
	}
	// Anything but a SYN is not answered.
	ack := synFrame(false)
	ack[14+20+13] = 0x10
	if _, err := rejectFrame(ack); err == nil {
		t.Error("an ACK was answered with a reset")
	}
}

func TestRejectFrameUDP(t *testing.T) {
	in := synFrame(true)
	out, err := rejectFrame(in)
	if err != nil {
		t.Fatal(err)
	}
	h, err := parsePacket(out)
	if err != nil {
		t.Fatal(err)
	}
	if h.Proto != ipProtoICMP || h.ICMPType != 3 || h.ICMPCode != 3 || h.Src != netip.MustParseAddr("10.96.0.10") || h.Dst != netip.MustParseAddr("10.244.1.5") {
		t.Fatalf("answer %+v: want ICMP port unreachable 10.96.0.10 → 10.244.1.5", h)
	}
	icmp := out[14+20:]
	if checksum(icmp, 0) != 0 {
		t.Error("ICMP checksum does not verify")
	}
	if string(icmp[8:]) != string(in[14:14+28]) {
		t.Error("ICMP does not quote the datagram's IPv4 header and first 8 bytes")
	}
}

// TestStaleAffinity: which endpoints' learned affinity flows go with a change of the
// Service port: the endpoints that left; all of them when the timeout changed, affinity
// was removed or the port went; none without affinity.
func TestStaleAffinity(t *testing.T) {
	ep := func(id uint32) flows.ServiceEndpoint { return flows.ServiceEndpoint{AffinityID: id} }
	old := flows.ServicePort{AffinitySeconds: 60, Endpoints: []flows.ServiceEndpoint{ep(1), ep(2), ep(3)}}
	for what, c := range map[string]struct {
		now  *flows.ServicePort
		want []uint32
	}{
		"endpoint 2 left":   {&flows.ServicePort{AffinitySeconds: 60, Endpoints: []flows.ServiceEndpoint{ep(1), ep(3)}}, []uint32{2}},
		"unchanged":         {&flows.ServicePort{AffinitySeconds: 60, Endpoints: old.Endpoints}, nil},
		"timeout changed":   {&flows.ServicePort{AffinitySeconds: 86400, Endpoints: []flows.ServiceEndpoint{ep(4), ep(5), ep(6)}}, []uint32{1, 2, 3}},
		"affinity removed":  {&flows.ServicePort{Endpoints: old.Endpoints}, []uint32{1, 2, 3}},
		"Service port gone": {nil, []uint32{1, 2, 3}},
	} {
		if got := staleAffinity(old, c.now); fmt.Sprint(got) != fmt.Sprint(c.want) {
			t.Errorf("%s: stale affinity ids %v, want %v", what, got, c.want)
		}
	}
	if got := staleAffinity(flows.ServicePort{Endpoints: old.Endpoints}, nil); got != nil {
		t.Errorf("a port without affinity has stale affinity ids %v", got)
	}
}

// TestServiceFamilies: the node runs one Service tracker per family of its pod subnets:
// IPv4 alone, both on a dual-stack node, IPv6 alone on an IPv6-only node; none with the
// Service proxy off.
func TestServiceFamilies(t *testing.T) {
	_, v4, _ := net.ParseCIDR("10.244.1.0/24")
	_, v6, _ := net.ParseCIDR("fd00:10:244:1::/64")
	for _, c := range []struct {
		name   string
		v4, v6 *net.IPNet
		want   string
	}{{"IPv4-only", v4, nil, "[IPv4]"}, {"dual-stack", v4, v6, "[IPv4 IPv6]"}, {"IPv6-only", nil, v6, "[IPv6]"}} {
		n := &Node{services: &serviceProxy{}}
		n.cfg.PodSubnet, n.cfg.PodSubnetIPv6 = c.v4, c.v6
		if got := fmt.Sprint(n.ServiceFamilies()); got != c.want {
			t.Errorf("%s node: ServiceFamilies() = %s, want %s", c.name, got, c.want)
		}
		n.services = nil
		if got := n.ServiceFamilies(); got != nil {
			t.Errorf("%s node without the Service proxy: ServiceFamilies() = %v, want none", c.name, got)
		}
	}
}
