package controller

import (
	"encoding/binary"
	"net"
	"net/netip"
	"testing"

	"github.com/ofsdn/ofsdn/proxy"
)

// synFrameIPv6 is synFrame over IPv6: [fd00:10:244:1::5]:40000 → [fd00:96::10]:80.
func synFrameIPv6(udp bool) []byte {
	f := make([]byte, 14+40+20)
	copy(f[0:6], []byte{2, 0, 0, 0, 0, 1})
	copy(f[6:12], []byte{2, 0, 0, 0, 0, 5})
	binary.BigEndian.PutUint16(f[12:], 0x86dd)
	ip := f[14:]
	ip[0] = 6 << 4
	binary.BigEndian.PutUint16(ip[4:], 20)
	ip[6], ip[7] = ipProtoTCP, 64
	if udp {
		ip[6] = ipProtoUDP
	}
	copy(ip[8:], net.ParseIP("fd00:10:244:1::5"))
	copy(ip[24:], net.ParseIP("fd00:96::10"))
	l4 := ip[40:]
	binary.BigEndian.PutUint16(l4[0:], 40000)
	binary.BigEndian.PutUint16(l4[2:], 80)
	binary.BigEndian.PutUint32(l4[4:], 1000)
	l4[12] = 5 << 4
	l4[13] = 0x02
	return f
}

// TestRejectFrameIPv6: an IPv6 SYN gets a RST+ACK and an IPv6 UDP datagram an ICMPv6
// port unreachable (type 1 code 4), from the ClusterIP to the client, with checksums
// that verify over the IPv6 pseudo-header.
func TestRejectFrameIPv6(t *testing.T) {
	var src, dst [16]byte
	copy(src[:], net.ParseIP("fd00:96::10"))
	copy(dst[:], net.ParseIP("fd00:10:244:1::5"))
	for _, udp := range []bool{false, true} {
		in := synFrameIPv6(udp)
		out, err := rejectFrame(in)
		if err != nil {
			t.Fatal(err)
		}
		ip := out[14:]
		if binary.BigEndian.Uint16(out[12:]) != 0x86dd || ip[0]>>4 != 6 || netip.AddrFrom16([16]byte(ip[8:24])) != netip.AddrFrom16(src) ||
			netip.AddrFrom16([16]byte(ip[24:40])) != netip.AddrFrom16(dst) || string(out[0:6]) != string(in[6:12]) {
			t.Fatalf("udp=%v: answer %x: want IPv6 from the ClusterIP to the client's MAC and address", udp, out)
		}
		seg := ip[40:]
		if int(binary.BigEndian.Uint16(ip[4:])) != len(seg) {
			t.Errorf("udp=%v: payload length %d, segment %d bytes", udp, binary.BigEndian.Uint16(ip[4:]), len(seg))
		}
		if l4ChecksumIPv6(src, dst, ip[6], seg) != 0 {
			t.Errorf("udp=%v: checksum does not verify", udp)
		}
		if udp && (ip[6] != ipProtoICMPv6 || seg[0] != 1 || seg[1] != 4 || string(seg[8:]) != string(in[14:])) {
			t.Errorf("answer to UDP: next header %d, type %d code %d: want ICMPv6 1/4 quoting the datagram", ip[6], seg[0], seg[1])
		}
		if !udp && (ip[6] != ipProtoTCP || seg[13] != 0x14 || binary.BigEndian.Uint32(seg[8:]) != 1001 ||
			binary.BigEndian.Uint16(seg[0:]) != 80 || binary.BigEndian.Uint16(seg[2:]) != 40000) {
			t.Errorf("answer to the SYN: %x, want RST+ACK 80 → 40000 ack 1001", seg)
		}
	}
}

// TestServicePortViewsFamilies: each family's state gives that family's view only: its
// ClusterIP, frontends, node addresses and endpoints, keyed apart (its own id).
func TestServicePortViewsFamilies(t *testing.T) {
	name := proxy.ServicePortName{ServiceName: proxy.ServiceName{Namespace: "ns", Name: "web"}, Port: "http", Protocol: proxy.ProtocolTCP}
	sp := &proxy.ServicePort{Name: name, Port: 80, NodePort: 30080,
		ClusterIPs:  []netip.Addr{netip.MustParseAddr("10.96.0.10"), netip.MustParseAddr("fd00:96::10")},
		ExternalIPs: []netip.Addr{netip.MustParseAddr("192.0.2.7"), netip.MustParseAddr("2001:db8::7")}}
	eps := map[proxy.Family][]proxy.Endpoint{
		proxy.IPv4: {{Addr: netip.MustParseAddr("10.244.1.6"), Port: 8080, Ready: true, Serving: true}},
		proxy.IPv6: {{Addr: netip.MustParseAddr("fd00:10:244:1::6"), Port: 8080, Ready: true, Serving: true}},
	}
	nodes := []net.IP{net.ParseIP("172.16.0.1").To4()}
	ids := map[portKey]uint32{}
	id := func(k portKey) (uint32, error) {
		if ids[k] == 0 {
			ids[k] = uint32(len(ids) + 1)
		}
		return ids[k], nil
	}
	for _, f := range []proxy.Family{proxy.IPv4, proxy.IPv6} {
		st := &proxy.ServicePortState{Port: sp, Family: f, Endpoints: eps[f]}
		st.Selection = proxy.Select(sp, st.Endpoints, "node-a", "")
		views, err := servicePortViews(st, nodes, id)
		if err != nil || len(views) != 1 {
			t.Fatalf("%v: views %+v, %v", f, views, err)
		}
		v := views[0]
		if v.key != familyKey(name, f) || v.sp.IPv6() != (f == proxy.IPv6) {
			t.Errorf("%v: view key %+v, port %v", f, v.key, v.sp)
		}
		if len(v.sp.Endpoints) != 1 || proxy.FamilyOf(netip.MustParseAddr(v.sp.Endpoints[0].IP.String())) != f {
			t.Errorf("%v: endpoints %v, want the one of its family", f, v.sp.Endpoints)
		}
		for _, fe := range v.sp.Frontends {
			if (fe.IP.To4() != nil) != (f == proxy.IPv4) {
				t.Errorf("%v: frontend %v of the other family", f, fe)
			}
		}
		if err := v.sp.Validate(); err != nil {
			t.Error(err)
		}
	}
	if len(ids) != 2 || ids[familyKey(name, proxy.IPv4)] == ids[familyKey(name, proxy.IPv6)] {
		t.Errorf("ids %v: each family's view needs its own id (and group)", ids)
	}
	if k := familyKey(name, proxy.IPv6).recKey(); k != "ns/web:http/TCP IPv6" || !recKeyIPv6(k) || recKeyIPv6(familyKey(name, proxy.IPv4).recKey()) {
		t.Errorf("IPv6 record key %q", k)
	}
}
