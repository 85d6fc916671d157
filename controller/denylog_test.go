package controller

import (
	"bytes"
	"encoding/binary"
	"log/slog"
	"net"
	"net/netip"
	"strings"
	"testing"

	"github.com/ofsdn/ofsdn/flows"
	"github.com/ofsdn/ofsdn/openflow"
)

// ipv4Frame builds Ethernet (with vlans 802.1Q tags) + IPv4 (ihl words) + l4.
func ipv4Frame(vlans int, ihl int, proto uint8, fragOff uint16, src, dst string, l4 []byte) []byte {
	f := []byte{2, 0, 0, 0, 0, 2, 2, 0, 0, 0, 0, 1}
	for range vlans {
		f = append(f, 0x81, 0x00, 0x00, 0x05)
	}
	f = append(f, 0x08, 0x00)
	ip := make([]byte, ihl*4)
	ip[0] = 0x40 | byte(ihl)
	binary.BigEndian.PutUint16(ip[2:], uint16(len(ip)+len(l4)))
	binary.BigEndian.PutUint16(ip[6:], fragOff)
	ip[8], ip[9] = 64, proto
	copy(ip[12:], net.ParseIP(src).To4())
	copy(ip[16:], net.ParseIP(dst).To4())
	return append(append(f, ip...), l4...)
}

func ports(s, d uint16) []byte {
	b := make([]byte, 20)
	binary.BigEndian.PutUint16(b, s)
	binary.BigEndian.PutUint16(b[2:], d)
	return b
}

func TestParsePacket(t *testing.T) {
	a, b := netip.MustParseAddr("10.244.1.5"), netip.MustParseAddr("10.244.2.7")
	for _, tc := range []struct {
		name  string
		frame []byte
		want  packetHeaders
		err   string
	}{
		{"tcp", ipv4Frame(0, 5, 6, 0, "10.244.1.5", "10.244.2.7", ports(40000, 80)), packetHeaders{Src: a, Dst: b, Proto: 6, SrcPort: 40000, DstPort: 80}, ""},
		{"udp with options", ipv4Frame(0, 7, 17, 0, "10.244.1.5", "10.244.2.7", ports(5353, 53)[:8]), packetHeaders{Src: a, Dst: b, Proto: 17, SrcPort: 5353, DstPort: 53}, ""},
		{"sctp under two vlan tags", ipv4Frame(2, 5, 132, 0, "10.244.1.5", "10.244.2.7", ports(7, 81)[:12]), packetHeaders{Src: a, Dst: b, Proto: 132, SrcPort: 7, DstPort: 81}, ""},
		{"icmp echo", ipv4Frame(0, 5, 1, 0, "10.244.1.5", "10.244.2.7", []byte{8, 0, 0, 0}), packetHeaders{Src: a, Dst: b, Proto: 1, ICMPType: 8}, ""},
		{"later fragment", ipv4Frame(0, 5, 6, 0x0010, "10.244.1.5", "10.244.2.7", ports(1, 2)), packetHeaders{Src: a, Dst: b, Proto: 6, Fragment: true}, ""},
		{"truncated tcp keeps addresses", ipv4Frame(0, 5, 6, 0, "10.244.1.5", "10.244.2.7", []byte{1, 2}), packetHeaders{Src: a, Dst: b, Proto: 6}, ""},
		{"gre", ipv4Frame(0, 5, 47, 0, "10.244.1.5", "10.244.2.7", nil), packetHeaders{Src: a, Dst: b, Proto: 47}, ""},
		{"arp", append([]byte{2, 0, 0, 0, 0, 2, 2, 0, 0, 0, 0, 1, 0x08, 0x06}, make([]byte, 28)...), packetHeaders{}, "not IPv4 or IPv6"},
		{"short ethernet", []byte{1, 2, 3}, packetHeaders{}, "shorter than an Ethernet header"},
		{"short ip", ipv4Frame(0, 5, 6, 0, "10.244.1.5", "10.244.2.7", nil)[:30], packetHeaders{}, "not a whole IPv4 header"},
		{"ihl beyond capture", ipv4Frame(0, 15, 6, 0, "10.244.1.5", "10.244.2.7", nil)[:40], packetHeaders{}, "IPv4 header length 60"},
	} {
		got, err := parsePacket(tc.frame)
		if tc.err != "" {
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("%s: err %v, want %q", tc.name, err, tc.err)
			}
			continue
		}
		if err != nil || got != tc.want {
			t.Errorf("%s: got %+v, %v; want %+v", tc.name, got, err, tc.want)
		}
	}
}

// ipv6Frame builds Ethernet + IPv6 with the extension headers ext (each whole, its first
// byte its next header) + l4; next is the fixed header's next header.
func ipv6Frame(next uint8, src, dst string, ext []byte, l4 []byte) []byte {
	f := []byte{2, 0, 0, 0, 0, 2, 2, 0, 0, 0, 0, 1, 0x86, 0xdd}
	ip := make([]byte, 40)
	ip[0] = 0x60
	binary.BigEndian.PutUint16(ip[4:], uint16(len(ext)+len(l4)))
	ip[6], ip[7] = next, 64
	copy(ip[8:], net.ParseIP(src).To16())
	copy(ip[24:], net.ParseIP(dst).To16())
	return append(append(append(f, ip...), ext...), l4...)
}

func TestParsePacketIPv6(t *testing.T) {
	a, b := netip.MustParseAddr("fd00:10:244:1::5"), netip.MustParseAddr("fd00:10:244:2::7")
	hop := []byte{6, 0, 1, 4, 0, 0, 0, 0}                          // hop-by-hop, 8 bytes, then TCP
	frag := []byte{17, 0, 0, 0, 0, 0, 0, 1}                        // fragment offset 0, then UDP
	later := []byte{6, 0, 0x05, 0x00, 0, 0, 0, 1}                  // fragment offset 160, TCP
	dst := []byte{58, 1, 1, 4, 0, 0, 0, 0, 1, 4, 0, 0, 0, 0, 0, 0} // 16 bytes, then ICMPv6
	for _, tc := range []struct {
		name  string
		frame []byte
		want  packetHeaders
		err   string
	}{
		{"tcp", ipv6Frame(6, "fd00:10:244:1::5", "fd00:10:244:2::7", nil, ports(40000, 80)), packetHeaders{Src: a, Dst: b, Proto: 6, SrcPort: 40000, DstPort: 80}, ""},
		{"udp", ipv6Frame(17, "fd00:10:244:1::5", "fd00:10:244:2::7", nil, ports(5353, 53)[:8]), packetHeaders{Src: a, Dst: b, Proto: 17, SrcPort: 5353, DstPort: 53}, ""},
		{"sctp", ipv6Frame(132, "fd00:10:244:1::5", "fd00:10:244:2::7", nil, ports(7, 81)[:12]), packetHeaders{Src: a, Dst: b, Proto: 132, SrcPort: 7, DstPort: 81}, ""},
		{"icmpv6 echo", ipv6Frame(58, "fd00:10:244:1::5", "fd00:10:244:2::7", nil, []byte{128, 0, 0, 0}), packetHeaders{Src: a, Dst: b, Proto: 58, ICMPType: 128}, ""},
		{"tcp behind hop-by-hop", ipv6Frame(0, "fd00:10:244:1::5", "fd00:10:244:2::7", hop, ports(1, 80)), packetHeaders{Src: a, Dst: b, Proto: 6, SrcPort: 1, DstPort: 80}, ""},
		{"udp behind a first fragment", ipv6Frame(44, "fd00:10:244:1::5", "fd00:10:244:2::7", frag, ports(2, 53)[:8]), packetHeaders{Src: a, Dst: b, Proto: 17, SrcPort: 2, DstPort: 53}, ""},
		{"later fragment", ipv6Frame(44, "fd00:10:244:1::5", "fd00:10:244:2::7", later, ports(1, 2)), packetHeaders{Src: a, Dst: b, Proto: 6, Fragment: true}, ""},
		{"icmpv6 behind destination options", ipv6Frame(60, "fd00:10:244:1::5", "fd00:10:244:2::7", dst, []byte{1, 4}), packetHeaders{Src: a, Dst: b, Proto: 58, ICMPType: 1, ICMPCode: 4}, ""},
		{"extension header cut by the capture keeps addresses", ipv6Frame(0, "fd00:10:244:1::5", "fd00:10:244:2::7", hop[:1], nil), packetHeaders{Src: a, Dst: b, Proto: 0}, ""},
		{"short ipv6", ipv6Frame(6, "fd00:10:244:1::5", "fd00:10:244:2::7", nil, nil)[:40], packetHeaders{}, "not a whole IPv6 header"},
	} {
		got, err := parsePacket(tc.frame)
		if tc.err != "" {
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("%s: err %v, want %q", tc.name, err, tc.err)
			}
			continue
		}
		if err != nil || got != tc.want {
			t.Errorf("%s: got %+v, %v; want %+v", tc.name, got, err, tc.want)
		}
	}
}

// TestDenyLogIPv6Line: a denied IPv6 connection logs with its IPv6 addresses, ports, and
// for ICMPv6 its type and code.
func TestDenyLogIPv6Line(t *testing.T) {
	var buf bytes.Buffer
	names := map[netip.Addr]string{netip.MustParseAddr("10.244.1.5"): "x/a", netip.MustParseAddr("fd00:10:244:1::5"): "x/a"}
	owners := map[uint32]netip.Addr{17: netip.MustParseAddr("10.244.1.5")}
	d := newDenyLog(slog.New(slog.NewJSONHandler(&buf, nil)), 100, func(ip netip.Addr) string { return names[ip] },
		func(id uint32) (netip.Addr, bool) { ip, ok := owners[id]; return ip, ok })
	egress, ingress := policyTables()
	ck := uint64(flows.NewCookie(7, flows.OwnerPod, 17))
	d.handle(openflow.PacketIn{TableID: uint8(ingress), Cookie: ck, Data: ipv6Frame(6, "fd00:10:244:2::9", "fd00:10:244:1::5", nil, ports(40001, 81))})
	d.handle(openflow.PacketIn{TableID: uint8(egress), Cookie: ck, Data: ipv6Frame(58, "fd00:10:244:1::5", "2001:db8::1", nil, []byte{128, 0})})
	lines := strings.Split(strings.TrimSpace(buf.String()), "\n")
	if len(lines) != 2 || d.logged.Load() != 2 || d.undecodable.Load() != 0 {
		t.Fatalf("logged %d, undecodable %d, lines:\n%s", d.logged.Load(), d.undecodable.Load(), buf.String())
	}
	for i, want := range []string{
		`"msg":"network policy denied connection","direction":"ingress","isolated_pod":"x/a","src":"fd00:10:244:2::9","src_ip":"fd00:10:244:2::9","dst":"x/a","dst_ip":"fd00:10:244:1::5","protocol":"TCP","src_port":40001,"port":81}`,
		`"msg":"network policy denied connection","direction":"egress","isolated_pod":"x/a","src":"x/a","src_ip":"fd00:10:244:1::5","dst":"2001:db8::1","dst_ip":"2001:db8::1","protocol":"ICMPv6","icmp_type":128,"icmp_code":0}`,
	} {
		if !strings.HasSuffix(lines[i], want) {
			t.Errorf("line %d:\n%s\nwant it to end with\n%s", i, lines[i], want)
		}
	}
}

func TestDenyLogDecodeAndLine(t *testing.T) {
	var buf bytes.Buffer
	names := map[netip.Addr]string{netip.MustParseAddr("10.244.1.5"): "x/a"}
	// The isolated pod is found by its flow owner id, which is not its address.
	owners := map[uint32]netip.Addr{17: netip.MustParseAddr("10.244.1.5")}
	d := newDenyLog(slog.New(slog.NewJSONHandler(&buf, nil)), 100, func(ip netip.Addr) string { return names[ip] },
		func(id uint32) (netip.Addr, bool) { ip, ok := owners[id]; return ip, ok })
	egress, ingress := policyTables()
	pod := flows.Pod{IPs: []net.IP{net.ParseIP("10.244.1.5")}, OwnerID: 17}
	ck, _ := flows.PodCookie(pod)
	ck |= uint64(flows.NewCookie(7, flows.OwnerPod, 0)) // version and generation bits as on the switch
	frame := ipv4Frame(0, 5, 6, 0, "10.244.9.9", "10.244.1.5", ports(40001, 81))
	d.handle(openflow.PacketIn{TableID: uint8(ingress), Cookie: ck, Data: frame})
	d.handle(openflow.PacketIn{TableID: uint8(egress), Cookie: ck, Data: ipv4Frame(0, 5, 1, 0, "10.244.1.5", "10.96.0.10", []byte{8, 0})})
	d.handle(openflow.PacketIn{TableID: 0, Cookie: ck, Data: frame})                                                            // not a rule stage
	d.handle(openflow.PacketIn{TableID: uint8(ingress), Cookie: uint64(flows.NewCookie(7, flows.OwnerPolicy, 1)), Data: frame}) // not a pod's flow
	lines := strings.Split(strings.TrimSpace(buf.String()), "\n")
	if len(lines) != 2 || d.logged.Load() != 2 || d.undecodable.Load() != 2 {
		t.Fatalf("logged %d, undecodable %d, lines:\n%s", d.logged.Load(), d.undecodable.Load(), buf.String())
	}
	for i, want := range []string{
		`"msg":"network policy denied connection","direction":"ingress","isolated_pod":"x/a","src":"10.244.9.9","src_ip":"10.244.9.9","dst":"x/a","dst_ip":"10.244.1.5","protocol":"TCP","src_port":40001,"port":81}`,
		`"msg":"network policy denied connection","direction":"egress","isolated_pod":"x/a","src":"x/a","src_ip":"10.244.1.5","dst":"10.96.0.10","dst_ip":"10.96.0.10","protocol":"ICMP","icmp_type":8,"icmp_code":0}`,
	} {
		if !strings.HasSuffix(lines[i], want) {
			t.Errorf("line %d:\n%s\nwant it to end with\n%s", i, lines[i], want)
		}
	}
}
