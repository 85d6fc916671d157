package openflow

import (
	"context"
	"net"
	"testing"
	"time"

	"github.com/contiv/libOpenflow/openflow13"
)

// TestConnFlowRemovedOnSwitch: a real switch sends OFPT_FLOW_REMOVED to a connection with
// a flow-removed queue (and nothing else: no packet-in queue), with the default
// asynchronous configuration: a flow with send_flow_rem that idles out arrives with reason
// idle timeout, its cookie, priority, table, timeouts and its match field by field; a
// deleted one with reason delete; a flow without send_flow_rem sends nothing. Fails
// without the SET_CONFIG for the flow-removed queue (the switch sends nothing to a .mgmt
// connection without a miss_send_len). A second connection's FlowRemovedFilter keeps only
// the idle timeout's message.
func TestConnFlowRemovedOnSwitch(t *testing.T) {
	q := NewFlowRemovedQueue(16)
	ovs, _ := ofTestBridge(t, Options{FlowRemoved: q})
	br := ovs.MgmtSocket("br-int")
	// A second connection whose filter keeps only idle timeouts.
	qIdle := NewFlowRemovedQueue(16)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c2, err := Dial(ctx, br, Options{FlowRemoved: qIdle, FlowRemovedFilter: func(f FlowRemoved) bool { return f.Reason == FlowRemovedIdleTimeout }})
	if err != nil {
		t.Fatal(err)
	}
	defer c2.Close()
	ovs.Ofctl(t, "add-flow", br, "table=7,cookie=0x600000002,priority=200,idle_timeout=1,send_flow_rem,tcp,nw_src=10.244.1.5,nw_dst=10.96.0.10,tp_dst=81,actions=load:0x1->NXM_NX_REG3[]")
	ovs.Ofctl(t, "add-flow", br, "table=7,cookie=0x600000003,priority=100,send_flow_rem,udp,nw_src=10.244.1.6,actions=drop")
	ovs.Ofctl(t, "add-flow", br, "table=7,cookie=0x600000004,priority=100,idle_timeout=1,tcp,nw_src=10.244.1.7,actions=drop")
	ovs.Ofctl(t, "del-flows", br, "table=7,udp")
	got := map[uint64]FlowRemoved{}
	deadline := time.After(10 * time.Second)
	for len(got) < 2 {
		select {
		case f := <-q.C():
			got[f.Cookie] = f
		case <-deadline:
			t.Fatalf("flow-removed messages after 10 s: %+v, want the deleted flow and the one idle for 1 s", got)
		}
	}
	if d := got[0x600000003]; d.Reason != FlowRemovedDelete || d.TableID != 7 || d.Priority != 100 {
		t.Errorf("deleted flow: %+v, want reason delete, table 7, priority 100", d)
	}
	f, ok := got[0x600000002]
	if !ok || f.Reason != FlowRemovedIdleTimeout || f.TableID != 7 || f.Priority != 200 || f.IdleTimeout != 1 || f.HardTimeout != 0 {
		t.Fatalf("idle flow: %+v (present %v), want reason idle timeout, table 7, priority 200, idle_timeout 1", f, ok)
	}
	for _, c := range []struct {
		field uint8
		want  []byte
	}{
		{openflow13.OXM_FIELD_ETH_TYPE, []byte{0x08, 0x00}},
		{openflow13.OXM_FIELD_IP_PROTO, []byte{6}},
		{openflow13.OXM_FIELD_IPV4_SRC, net.ParseIP("10.244.1.5").To4()},
		{openflow13.OXM_FIELD_IPV4_DST, net.ParseIP("10.96.0.10").To4()},
		{openflow13.OXM_FIELD_TCP_DST, []byte{0, 81}},
	} {
		if v, ok := f.Field(openflow13.OXM_CLASS_OPENFLOW_BASIC, c.field); !ok || string(v) != string(c.want) {
			t.Errorf("match field %d: %x (present %v), want %x; match %+v", c.field, v, ok, c.want, f.Match)
		}
	}
	select {
	case f := <-q.C():
		t.Errorf("flow-removed for a flow without send_flow_rem or a third one: %+v", f)
	case <-time.After(2 * time.Second):
	}
	// The filtered connection got the idle one only, and counted nothing dropped.
	if n := len(qIdle.C()); n != 1 || qIdle.Received() != 1 || qIdle.Dropped() != 0 {
		t.Errorf("filtered queue: %d queued, %d received, %d dropped; want the idle flow's message only", n, qIdle.Received(), qIdle.Dropped())
	} else if f := <-qIdle.C(); f.Cookie != 0x600000002 {
		t.Errorf("filtered queue holds %+v, want the idle flow's", f)
	}
}
