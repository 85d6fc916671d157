package openflow

// Meters and packet-ins against a real sandbox OVS (userspace datapath): our
// OFPT_METER_MOD bytes as ovs-ofctl reads them, the meter as dump-meters shows it, and
// packets sent into the pipeline (packet-outs to OFPP_TABLE from a second connection)
// reaching our connection as packet-ins through the meter, rate-limited, with the meter's
// band counting what it dropped.

import (
	"context"
	"encoding/binary"
	"encoding/hex"
	"os/exec"
	"strings"
	"testing"
	"time"
)

func TestMeterModBytesAsOvsOfctlReadsThem(t *testing.T) {
	if _, err := exec.LookPath("ovs-ofctl"); err != nil {
		t.Fatal("ovs-ofctl not installed (hack/install-deps.sh)")
	}
	for _, tc := range []struct {
		m    MeterMod
		want string
	}{
		{MeterMod{Command: MeterAdd, ID: 1, Flags: MeterFlagPktps | MeterFlagBurst | MeterFlagStats, Rate: 100, Burst: 100},
			"ADD meter=1 pktps burst stats bands=\ntype=drop rate=100 burst_size=100"},
		{MeterMod{Command: MeterModify, ID: 7, Flags: MeterFlagKbps, Rate: 5000},
			"MOD meter=7 kbps bands=\ntype=drop rate=5000"},
		{MeterMod{Command: MeterDelete, ID: 1}, "DEL meter=1"},
	} {
		b, err := encodeMeterMod(tc.m, 0x42)
		if err != nil {
			t.Fatalf("%+v: %v", tc.m, err)
		}
		out, err := exec.Command("ovs-ofctl", "ofp-print", hex.EncodeToString(b)).CombinedOutput()
		if err != nil {
			t.Fatalf("ofp-print: %v\n%s", err, out)
		}
		got := strings.TrimSpace(string(out))
		if !strings.Contains(got, "OFPT_METER_MOD (OF1.3) (xid=0x42): "+tc.want) || strings.Contains(got, "error") {
			t.Errorf("%+v encodes as\n%s\nwant it to contain %q", tc.m, got, tc.want)
		}
	}
	for _, bad := range []MeterMod{{Command: MeterAdd, ID: 0, Flags: MeterFlagPktps, Rate: 1},
		{Command: MeterAdd, ID: 1, Flags: MeterFlagPktps}, {Command: MeterAdd, ID: 1, Rate: 1}} {
		if _, err := encodeMeterMod(bad, 1); err == nil {
			t.Errorf("%+v encoded, want an error", bad)
		}
	}
}

// packetOut returns an OFPT_PACKET_OUT (OpenFlow 1.3.5 §7.3.7) of frame from
// OFPP_CONTROLLER with actions=output:OFPP_TABLE: the packet goes through table 0.
func packetOut(xid uint32, frame []byte) []byte {
	b := make([]byte, 24+16+len(frame))
	b[0], b[1] = ofpVersion13, 13
	binary.BigEndian.PutUint16(b[2:], uint16(len(b)))
	binary.BigEndian.PutUint32(b[4:], xid)
	binary.BigEndian.PutUint32(b[8:], 0xffffffff)  // OFP_NO_BUFFER
	binary.BigEndian.PutUint32(b[12:], 0xfffffffd) // in_port OFPP_CONTROLLER
	binary.BigEndian.PutUint16(b[16:], 16)         // actions_len
	binary.BigEndian.PutUint16(b[24:], 0)          // OFPAT_OUTPUT
	binary.BigEndian.PutUint16(b[26:], 16)
	binary.BigEndian.PutUint32(b[28:], 0xfffffff9) // OFPP_TABLE
	copy(b[40:], frame)
	return b
}

// testFrame is an Ethernet + IPv4 + TCP SYN frame from 10.0.0.1:40000+i to 10.0.0.2:80.
func testFrame(i int) []byte {
	f := make([]byte, 14+20+20)
	copy(f[0:], []byte{0x0a, 0x58, 0, 0, 0, 2, 0x0a, 0x58, 0, 0, 0, 1, 0x08, 0x00})
	ip := f[14:]
	ip[0], ip[8], ip[9] = 0x45, 64, 6
	binary.BigEndian.PutUint16(ip[2:], 40)
	copy(ip[12:], []byte{10, 0, 0, 1, 10, 0, 0, 2})
	tcp := ip[20:]
	binary.BigEndian.PutUint16(tcp[0:], uint16(40000+i))
	binary.BigEndian.PutUint16(tcp[2:], 80)
	tcp[12], tcp[13] = 0x50, 0x02 // data offset 5, SYN
	return f
}

func TestConnDropMeterRateLimitsPacketIns(t *testing.T) {
	q := NewPacketInQueue(1000)
	ovs, c := ofTestBridge(t, Options{PacketIns: q})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	const rate, burst, sent = 10, 10, 200

	// A flow naming a meter the switch lacks is refused.
	if out, err := exec.Command("ovs-ofctl", "-O", "OpenFlow13", "add-flow", ovs.MgmtSocket("br-int"),
		"table=0,priority=10,ip,actions=meter:1,CONTROLLER:128").CombinedOutput(); err == nil || !strings.Contains(string(out), "OFPMMFC_INVALID_METER") {
		t.Fatalf("flow with missing meter: err %v, output %s; want OFPMMFC_INVALID_METER", err, out)
	}
	// Created, then set again (modify: it exists).
	if err := c.SetDropMeter(ctx, 1, 1000, 1000); err != nil {
		t.Fatalf("SetDropMeter: %v", err)
	}
	if err := c.SetDropMeter(ctx, 1, rate, burst); err != nil {
		t.Fatalf("SetDropMeter again: %v", err)
	}
	if got := ovs.Ofctl(t, "dump-meters", ovs.MgmtSocket("br-int")); !strings.Contains(got, "meter=1 pktps burst stats bands=\ntype=drop rate=10 burst_size=10") {
		t.Fatalf("dump-meters:\n%s", got)
	}
	ovs.Ofctl(t, "add-flow", ovs.MgmtSocket("br-int"), "table=0,cookie=0x1234,priority=10,ip,actions=meter:1,CONTROLLER:128")

	// A second connection injects the packets.
	inj, err := Dial(ctx, ovs.MgmtSocket("br-int"), Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer inj.Close()
	start := time.Now()
	var bufs [][]byte
	for i := range sent {
		bufs = append(bufs, packetOut(inj.nextXid(), testFrame(i)))
	}
	if err := inj.write(ctx, bufs); err != nil {
		t.Fatal(err)
	}
	if err := inj.Barrier(ctx); err != nil {
		t.Fatal(err)
	}
	elapsed := time.Since(start)

	// Every packet has entered the meter once the switch processed the packet-outs.
	var st []MeterStats
	for {
		st, err = c.MeterStats(ctx, 1)
		if err != nil {
			t.Fatalf("MeterStats: %v", err)
		}
		if len(st) == 1 && st[0].PacketsIn >= sent || ctx.Err() != nil {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	if len(st) != 1 || st[0].ID != 1 || st[0].FlowCount != 1 || st[0].PacketsIn != sent || len(st[0].Bands) != 1 {
		t.Fatalf("meter stats %+v, want meter 1, 1 flow, %d packets in, 1 band", st, sent)
	}
	dropped := st[0].Bands[0].Packets
	// The packet-ins the meter let through reach the queue (the barrier on c orders them).
	if err := c.Barrier(ctx); err != nil {
		t.Fatal(err)
	}
	got := q.Received()
	t.Logf("sent %d in %v: meter passed %d (packet-ins received), dropped %d; rate %d/s burst %d",
		sent, elapsed, got, dropped, rate, burst)
	if got+dropped != sent {
		t.Errorf("packet-ins %d + meter drops %d = %d, want %d sent", got, dropped, got+dropped, sent)
	}
	if limit := uint64(burst + rate*elapsed.Seconds() + 2); got < 1 || got > limit {
		t.Errorf("%d packet-ins through a %d/s meter with burst %d in %v, want 1..%d", got, rate, burst, elapsed, limit)
	}
	if q.Dropped() != 0 {
		t.Errorf("queue dropped %d of %d with room for 1000", q.Dropped(), got)
	}
	p := <-q.C()
	want := testFrame(0)
	if p.TableID != 0 || p.Cookie != 0x1234 || p.Reason != 1 || p.TotalLen != uint16(len(want)) || string(p.Data[:12]) != string(want[:12]) || string(p.Data[14:34]) != string(want[14:34]) {
		t.Errorf("packet-in %+v, want table 0, cookie 0x1234, reason OFPR_ACTION, %d bytes like %x", p, len(want), want)
	}
}

func TestConnPacketInQueueFullDropsAndCounts(t *testing.T) {
	q := NewPacketInQueue(2)
	ovs, c := ofTestBridge(t, Options{PacketIns: q})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	ovs.Ofctl(t, "add-flow", ovs.MgmtSocket("br-int"), "table=0,priority=10,ip,actions=CONTROLLER:128")
	inj, err := Dial(ctx, ovs.MgmtSocket("br-int"), Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer inj.Close()
	const sent = 20
	var bufs [][]byte
	for i := range sent {
		bufs = append(bufs, packetOut(inj.nextXid(), testFrame(i)))
	}
	if err := inj.write(ctx, bufs); err != nil {
		t.Fatal(err)
	}
	if err := inj.Barrier(ctx); err != nil {
		t.Fatal(err)
	}
	for q.Received() < sent && ctx.Err() == nil {
		if err := c.Barrier(ctx); err != nil {
			t.Fatal(err)
		}
		time.Sleep(10 * time.Millisecond)
	}
	if q.Received() != sent || q.Dropped() != sent-2 || len(q.C()) != 2 {
		t.Fatalf("received %d, dropped %d, queued %d; want %d, %d, 2", q.Received(), q.Dropped(), len(q.C()), sent, sent-2)
	}
	// The reader did not block: the connection still answers.
	if _, err := c.Echo(ctx); err != nil {
		t.Fatalf("echo after a full queue: %v", err)
	}
}

func TestDecodePacketInRejectsShortMessages(t *testing.T) {
	for _, n := range []int{8, 31} {
		b := make([]byte, n)
		b[0], b[1] = ofpVersion13, 10
		if _, err := decodePacketIn(b); err == nil {
			t.Errorf("%d-byte packet-in decoded", n)
		}
	}
	b := make([]byte, 40)
	b[0], b[1] = ofpVersion13, 10
	binary.BigEndian.PutUint16(b[24:], 1)
	binary.BigEndian.PutUint16(b[26:], 200) // match longer than the message
	if _, err := decodePacketIn(b); err == nil {
		t.Error("packet-in with an overlong match decoded")
	}
}
