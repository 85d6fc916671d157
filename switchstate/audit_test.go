package switchstate

import (
	"context"
	"fmt"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/contiv/libOpenflow/openflow13"

	"github.com/ofsdn/ofsdn/flows"
	"github.com/ofsdn/ofsdn/openflow"
)

func auditTestConfig() flows.NodeConfig {
	_, subnet, _ := net.ParseCIDR("10.152.0.0/24")
	return flows.NodeConfig{GatewayOFPort: 1, GatewayMAC: net.HardwareAddr{0x0a, 0x58, 0x0a, 0x98, 0, 1},
		GatewayIP: net.ParseIP("10.152.0.1").To4(), PodSubnet: subnet, Generation: 7}
}

func auditTestPod(i int) flows.Pod {
	return flows.Pod{OFPort: uint32(10 + i), MAC: net.HardwareAddr{0x0a, 0x58, 0x0a, 0x98, 0, byte(i)},
		IPs: []net.IP{net.IPv4(10, 152, 0, byte(i)).To4()}, OwnerID: uint32(0x0a980000 + i)}
}

// stageTable returns the table id of the stage named name.
func stageTable(t *testing.T, name string) flows.TableID {
	t.Helper()
	id, ok := flows.StageTable(name)
	if !ok {
		t.Fatalf("no stage %s", name)
	}
	return id
}

// auditPrefix is generation 7's cookie prefix (pipeline version and generation).
func auditPrefix() (uint64, uint64) {
	mask := flows.CookieVersionMask | flows.CookieGenerationMask
	return uint64(flows.NewCookie(7, 0, 0)) & mask, mask
}

// statsOf is the flow-stats entry the switch reports for f.
func statsOf(f flows.Flow) *openflow13.FlowStats {
	s := openflow13.NewFlowStats()
	s.TableId, s.Priority, s.Cookie = uint8(f.Table), f.Priority, uint64(f.Cookie)
	s.Match = f.FlowMod(openflow13.FC_ADD).Match
	return s
}

func keyed(fs []flows.Flow) map[string]flows.Flow {
	m := map[string]flows.Flow{}
	for _, f := range fs {
		m[f.MatchKey()] = f
	}
	return m
}

// TestPlanAudit: desired flows missing from the switch are found with their owner; a flow
// with our cookie prefix that no owner wants is unexpected, one without it is foreign; the
// repair deletes unexpected flows first, strictly where a desired flow shares the cookie.
func TestPlanAudit(t *testing.T) {
	cfg := auditTestConfig()
	prefix, mask := auditPrefix()
	pipeline, pod := flows.PipelineFlows(cfg), flows.PodFlows(cfg, auditTestPod(2))
	desired := map[flows.Owner]*state{flows.PipelineOwner: {flows: keyed(pipeline)}, flows.PodOwner(auditTestPod(2)): {flows: keyed(pod)}}

	var stats []*openflow13.FlowStats
	for _, f := range pipeline[1:] { // pipeline[0] is missing
		stats = append(stats, statsOf(f))
	}
	for _, f := range pod[:len(pod)-1] { // the pod's last flow is missing
		stats = append(stats, statsOf(f))
	}
	// Ours but not wanted: a stale copy of a pod flow at another priority (same cookie
	// as a desired flow), and a flow of a pod the store does not know.
	stale := statsOf(pod[0])
	stale.Priority = 42
	gone := statsOf(flows.PodFlows(cfg, auditTestPod(9))[0])
	foreign := openflow13.NewFlowStats()
	foreign.TableId, foreign.Priority, foreign.Cookie = 0, 7, 0
	oldGen := statsOf(pod[0])
	oldGen.Cookie = uint64(flows.NewCookie(6, flows.OwnerPod, 0x0a980002))
	stats = append(stats, stale, gone, foreign, oldGen)

	p := planAudit(desired, stats, nil, nil, prefix, mask)
	if len(p.Missing) != 2 || p.Missing[0].owner != flows.PipelineOwner || p.Missing[0].flow.String() != pipeline[0].String() ||
		p.Missing[1].owner != flows.PodOwner(auditTestPod(2)) || p.Missing[1].flow.String() != pod[len(pod)-1].String() {
		t.Errorf("missing %+v, want the pipeline's first and the pod's last flow", p.Missing)
	}
	if len(p.Unexpected) != 2 || p.Unexpected[0] != stale || p.Unexpected[1] != gone {
		t.Errorf("unexpected %v, want the stale copy and the unknown pod's flow", p.Unexpected)
	}
	if len(p.Foreign) != 2 || p.Foreign[0] != foreign || p.Foreign[1] != oldGen {
		t.Errorf("foreign %v, want the cookie-0 flow and the other generation's", p.Foreign)
	}

	ops := repairOps(desired, p)
	if len(ops) != 4 {
		t.Fatalf("%d repair ops, want 4", len(ops))
	}
	if m := ops[0].Mod; m.Command != openflow13.FC_DELETE_STRICT || m.Priority != 42 || m.Cookie != stale.Cookie || m.CookieMask != ^uint64(0) {
		t.Errorf("op 0 %+v: want a strict delete of the stale copy by cookie and priority", m)
	}
	if m := ops[1].Mod; m.Command != openflow13.FC_DELETE || m.TableId != gone.TableId || m.Cookie != gone.Cookie || m.CookieMask != ^uint64(0) || len(m.Match.Fields) != 0 {
		t.Errorf("op 1 %+v: want a delete of the unknown pod's flow by exact cookie in its table", m)
	}
	for _, op := range ops[2:] {
		if op.Mod.Command != openflow13.FC_ADD {
			t.Errorf("op %q: want an add", op.Name)
		}
	}
	if p := planAudit(desired, nil, nil, nil, prefix, mask); len(p.Missing) != len(pipeline)+len(pod) {
		t.Errorf("empty switch: %d missing, want all %d", len(p.Missing), len(pipeline)+len(pod))
	}
}

// TestPlanAuditLeavesSwitchState: flows the switch learned for session affinity (owner
// kind OwnerServiceAffinity, this run's prefix) are neither unexpected nor foreign: the audit must not delete them. A flow of
// that owner kind with another generation's prefix is foreign, as any other.
func TestPlanAuditLeavesSwitchState(t *testing.T) {
	cfg := auditTestConfig()
	cfg.Services = true
	prefix, mask := auditPrefix()
	pipeline := flows.PipelineFlows(cfg)
	desired := map[flows.Owner]*state{flows.PipelineOwner: {flows: keyed(pipeline)}}
	var stats []*openflow13.FlowStats
	for _, f := range pipeline {
		stats = append(stats, statsOf(f))
	}
	sp := flows.ServicePort{ID: 1, ClusterIP: net.ParseIP("10.96.0.10"), Proto: flows.IPProtoTCP, Port: 80, AffinitySeconds: 86400,
		Endpoints: []flows.ServiceEndpoint{{IP: net.ParseIP("10.152.0.5"), Port: 8080, AffinityID: 3}}}
	aff, _ := flows.StageTable(flows.StageServiceAffinity)
	learned := flows.Flow{Table: aff, Priority: flows.PriorityAffinityLearned, Cookie: flows.AffinityCookie(cfg.Generation, sp.Endpoints[0]),
		Match: flows.Match{EthType: flows.EthTypeIPv4, IPProto: flows.IPProtoTCP, IPSrc: &net.IPNet{IP: net.ParseIP("10.152.0.9").To4(), Mask: net.CIDRMask(32, 32)},
			IPDst: &net.IPNet{IP: sp.ClusterIP.To4(), Mask: net.CIDRMask(32, 32)}, TPDst: 80, TPDstMask: 0xffff},
		Actions: []flows.Action{flows.Load{Dst: flows.AffinityEndpointIPField, Value: 0x0a980005}}}
	other := learned
	other.Match.IPSrc = &net.IPNet{IP: net.ParseIP("10.152.0.10").To4(), Mask: net.CIDRMask(32, 32)}
	old := statsOf(learned)
	old.Cookie = uint64(flows.AffinityCookie(6, sp.Endpoints[0]))
	stats = append(stats, statsOf(other), statsOf(learned), old)
	p := planAudit(desired, stats, nil, nil, prefix, mask)
	if len(p.Missing) != 0 || len(p.Unexpected) != 0 {
		t.Errorf("missing %v, unexpected %v: want none (learned and remainder affinity flows are the switch's state)", p.Missing, p.Unexpected)
	}
	if len(p.Foreign) != 1 || p.Foreign[0] != old {
		t.Errorf("foreign %v, want only the other generation's learned flow", p.Foreign)
	}
	if ops := repairOps(desired, p); len(ops) != 0 {
		t.Errorf("%d repair ops, want none", len(ops))
	}
}

// TestFlowStoreAuditRepairs: against a real switch, flows deleted by hand come back, a
// flow with our cookie that nobody wants goes, foreign flows stay; a second audit finds
// nothing. Audits running in a loop while pods' flows are set and deleted never report a
// repair: a change in flight is never taken for drift.
func TestFlowStoreAuditRepairs(t *testing.T) {
	ovs, sw := ofTestBridge(t, openflow.Options{})
	cfg := auditTestConfig()
	prefix, mask := auditPrefix()
	store := New()
	store.Load(flows.PipelineOwner, flows.PipelineFlows(cfg))
	store.Load(flows.PodOwner(auditTestPod(2)), flows.PodFlows(cfg, auditTestPod(2)))
	store.Load(flows.PodOwner(auditTestPod(3)), flows.PodFlows(cfg, auditTestPod(3)))
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if err := store.Sync(ctx, sw, nil, nil); err != nil {
		t.Fatal(err)
	}
	res, err := store.Audit(ctx, prefix, mask)
	if err != nil || res.Skipped || len(res.Missing)+len(res.Unexpected)+len(res.Foreign) != 0 {
		t.Fatalf("audit of a synchronised switch: %+v, %v", res, err)
	}

	br := ovs.MgmtSocket("br-int")
	podA, podMask := flows.PodCookie(auditTestPod(2))
	ovs.Ofctl(t, "del-flows", br, fmt.Sprintf("cookie=%#x/%#x", podA, podMask))
	ovs.Ofctl(t, "del-flows", "--strict", br, fmt.Sprintf("table=%d,priority=1", stageTable(t, "output")))
	podB := uint64(flows.PodFlows(cfg, auditTestPod(3))[0].Cookie)
	ovs.Ofctl(t, "add-flow", br, fmt.Sprintf("cookie=%#x,table=0,priority=42,in_port=13,actions=drop", podB)) // shares pod b's cookie
	ghost := uint64(flows.PodFlows(cfg, auditTestPod(9))[0].Cookie)
	ovs.Ofctl(t, "add-flow", br, fmt.Sprintf("cookie=%#x,table=0,priority=100,in_port=19,actions=drop", ghost))
	ovs.Ofctl(t, "add-flow", br, "table=0,priority=7,udp,tp_dst=9,actions=drop")  // cookie 0
	ovs.Ofctl(t, "add-flow", br, "cookie=0x1234,table=1,priority=7,actions=drop") // another tool's

	res, err = store.Audit(ctx, prefix, mask)
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Missing) != len(flows.PodFlows(cfg, auditTestPod(2)))+1 || len(res.Unexpected) != 2 || len(res.Foreign) != 2 {
		t.Errorf("audit found %d missing, %d unexpected, %d foreign; want %d, 2, 2:\n%+v",
			len(res.Missing), len(res.Unexpected), len(res.Foreign), len(flows.PodFlows(cfg, auditTestPod(2)))+1, res)
	}
	want := cookieCounts(store.All())
	want[0]++
	want[0x1234]++
	if got := switchCookieCounts(t, ovs); !sameCounts(got, want) {
		t.Fatalf("after the repair the switch has\n%swant the desired flows and the two foreign ones\n%s", fmtCounts(got), fmtCounts(want))
	}
	if res, err = store.Audit(ctx, prefix, mask); err != nil || len(res.Missing)+len(res.Unexpected) != 0 || len(res.Foreign) != 2 {
		t.Errorf("second audit: %+v, %v; want only the two foreign flows", res, err)
	}

	// Changes and audits at the same time.
	stop := make(chan struct{})
	var wg sync.WaitGroup
	var repairs []string
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			select {
			case <-stop:
				return
			default:
			}
			r, err := store.Audit(ctx, prefix, mask)
			if err != nil {
				repairs = append(repairs, "error: "+err.Error())
			}
			repairs = append(repairs, r.Missing...)
			repairs = append(repairs, r.Unexpected...)
		}
	}()
	for i := 0; i < 20; i++ {
		pod := auditTestPod(20 + i)
		owner := flows.PodOwner(pod)
		if err := store.SetOwner(ctx, owner, flows.PodFlows(cfg, pod)); err != nil {
			t.Fatal(err)
		}
		if i%2 == 0 {
			if err := store.DeleteOwner(ctx, owner); err != nil {
				t.Fatal(err)
			}
		}
	}
	close(stop)
	wg.Wait()
	if len(repairs) > 0 {
		t.Errorf("audits during flow changes repaired (or failed) %d times:\n%v", len(repairs), repairs)
	}
	want = cookieCounts(store.All())
	want[0]++
	want[0x1234]++
	if got := switchCookieCounts(t, ovs); !sameCounts(got, want) {
		t.Fatalf("after the changes the switch has\n%swant\n%s", fmtCounts(got), fmtCounts(want))
	}
}

// TestAuditUDPServicePortOnSwitch: a UDP Service port's flows (the multipath choice, slot
// flows with masked reg6 matches, with session affinity too) replayed to a real switch
// compare equal in the audit, so a synchronised switch has nothing to repair; a slot
// flow deleted by hand is re-created and the next audit is clean again.
func TestAuditUDPServicePortOnSwitch(t *testing.T) {
	ovs, sw := ofTestBridge(t, openflow.Options{})
	cfg := auditTestConfig()
	cfg.Services = true
	prefix, mask := auditPrefix()
	store := New()
	store.Load(flows.PipelineOwner, flows.PipelineFlows(cfg))
	eps := []flows.ServiceEndpoint{{IP: net.ParseIP("10.152.0.2"), Port: 53, AffinityID: 1},
		{IP: net.ParseIP("10.152.0.3"), Port: 53, AffinityID: 2}, {IP: net.ParseIP("10.152.0.4"), Port: 53, Weight: 6, AffinityID: 3}}
	var slot flows.Flow
	for _, sp := range []flows.ServicePort{{ID: 1, ClusterIP: net.ParseIP("10.96.0.10"), Proto: flows.IPProtoUDP, Port: 53, Endpoints: eps},
		{ID: 2, ClusterIP: net.ParseIP("10.96.0.10"), Proto: flows.IPProtoUDP, Port: 54, Endpoints: eps, AffinitySeconds: 60}} {
		if err := sp.Validate(); err != nil {
			t.Fatal(err)
		}
		fs, gs := flows.ServicePortFlows(cfg, sp)
		if len(gs) != 0 {
			t.Fatalf("UDP port %v has groups %v", sp, gs)
		}
		if err := store.LoadState(flows.ServicePortOwner(sp), Desired{Flows: fs}); err != nil {
			t.Fatal(err)
		}
		slot = fs[len(fs)-1]
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if err := store.Sync(ctx, sw, nil, nil); err != nil {
		t.Fatal(err)
	}
	res, err := store.Audit(ctx, prefix, mask)
	if err != nil || res.Skipped || len(res.Missing)+len(res.Unexpected)+len(res.Foreign) != 0 {
		t.Fatalf("audit of a synchronised switch with UDP Service ports: %+v, %v", res, err)
	}
	br := ovs.MgmtSocket("br-int")
	m := strings.SplitN(strings.SplitN(slot.String(), "priority=", 2)[1], " actions=", 2)[0]
	ovs.Ofctl(t, "del-flows", "--strict", br, fmt.Sprintf("table=%d,priority=%s", slot.Table, m))
	if res, err = store.Audit(ctx, prefix, mask); err != nil || len(res.Missing) != 1 || len(res.Unexpected) != 0 {
		t.Fatalf("audit after deleting %s by hand: %+v, %v; want it missing", slot, res, err)
	}
	if res, err = store.Audit(ctx, prefix, mask); err != nil || len(res.Missing)+len(res.Unexpected)+len(res.Foreign) != 0 {
		t.Errorf("audit after the repair: %+v, %v; want nothing", res, err)
	}
}
