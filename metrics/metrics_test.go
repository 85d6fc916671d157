package metrics

import (
	"errors"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/ofsdn/ofsdn/flows"
)

// fakeNode plays the daemon: it drives the hooks the way one ADD and one DEL do and
// serves NodeStats like the real source.
type fakeNode struct {
	mu    sync.Mutex
	stats NodeStats
}

func (f *fakeNode) get() NodeStats {
	f.mu.Lock()
	defer f.mu.Unlock()
	s := f.stats
	s.FlowsByTable = map[uint8]int{}
	for k, v := range f.stats.FlowsByTable {
		s.FlowsByTable[k] = v
	}
	return s
}

func (f *fakeNode) update(fn func(s *NodeStats)) {
	f.mu.Lock()
	defer f.mu.Unlock()
	fn(&f.stats)
}

func newFake() *fakeNode {
	return &fakeNode{stats: NodeStats{PoolAddresses: 253, FlowsByTable: map[uint8]int{0: 2, 20: 3, 90: 2},
		OpenFlowUp: true, OVSDBUp: true, Ready: true}}
}

// cycle runs one pod ADD and DEL through the hooks, as the CNI server and the node call
// them, with the pod's state changes in between.
func cycle(m *Metrics, f *fakeNode, i int) {
	for _, s := range AddSteps {
		m.AddStep(s, time.Duration(i%7)*time.Millisecond)
	}
	m.FlowOp("flow_mod", 5, time.Millisecond, nil)
	f.update(func(s *NodeStats) {
		s.LocalPods++
		s.AllocatedAddresses++
		s.FlowsByTable[0]++
		s.FlowsByTable[20] += 2
	})
	m.ObserveCNI("ADD", 0, 3*time.Millisecond)
	m.ObserveCNI("CHECK", 0, time.Millisecond)
	m.Registry().Gather() // a scrape between ADD and DEL
	m.FlowOp("flow_mod", 1, time.Millisecond, nil)
	f.update(func(s *NodeStats) {
		s.LocalPods--
		s.AllocatedAddresses--
		s.FlowsByTable[0]--
		s.FlowsByTable[20] -= 2
	})
	m.ObserveCNI("DEL", 0, 2*time.Millisecond)
}

// series returns every sample name+labels the registry exposes (one per histogram bucket,
// _sum and _count too), as a scrape would show them.
func series(t *testing.T, m *Metrics) map[string]bool {
	t.Helper()
	mfs, err := m.Registry().Gather()
	if err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	for _, mf := range mfs {
		if _, err := expfmt.MetricFamilyToText(&b, mf); err != nil {
			t.Fatal(err)
		}
	}
	out := map[string]bool{}
	for _, line := range strings.Split(b.String(), "\n") {
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		out[line[:strings.LastIndexByte(line, ' ')]] = true
	}
	return out
}

func TestSeriesStableOverADDDELCycles(t *testing.T) {
	m := New()
	f := newFake()
	m.SetSource(f.get)
	for i := range 2 {
		cycle(m, f, i)
	}
	after2 := series(t, m)
	for i := 2; i < 200; i++ {
		cycle(m, f, i)
	}
	after200 := series(t, m)
	// The Go and process collectors' own series may come and go; only ours must be fixed.
	ours := func(s map[string]bool) map[string]bool {
		o := map[string]bool{}
		for k := range s {
			if strings.HasPrefix(k, "ofsdn_") {
				o[k] = true
			}
		}
		return o
	}
	a, b := ours(after2), ours(after200)
	if len(a) != len(b) {
		t.Errorf("ofsdn_ series: %d after 2 ADD/DEL cycles, %d after 200", len(a), len(b))
	}
	for k := range b {
		if !a[k] {
			t.Errorf("series %s appeared between cycle 2 and 200", k)
		}
	}
	t.Logf("%d ofsdn_ series after 2 and after 200 cycles (%d in all)", len(a), len(after200))

	// And the counts add up: 200 ADDs, 200 pods gone again.
	mfs, _ := m.Registry().Gather()
	if got := histCount(t, mfs, CNIRequestDuration, map[string]string{"command": "ADD", "result": "success"}); got != 200 {
		t.Errorf("ADD histogram count %d, want 200", got)
	}
	if got := gaugeValue(t, mfs, LocalPods, nil); got != 0 {
		t.Errorf("local pods %v, want 0", got)
	}
}

func TestNoUnboundedLabels(t *testing.T) {
	m := New()
	f := newFake()
	m.SetSource(f.get)
	cycle(m, f, 1)
	m.ObserveCNI("ADD", 11, time.Second)
	m.ObserveCNI("some-new-verb", 0, time.Second)
	m.AddStep("new-step", time.Second)
	m.FlowOp("something", 1, time.Second, errors.New("boom"))
	m.FlowRepair("missing", 3)
	m.FlowRepair("a-new-kind", 1)
	mfs, err := m.Registry().Gather()
	if err != nil {
		t.Fatal(err)
	}
	allowed := map[string]bool{"command": true, "result": true, "step": true, "stage": true, "kind": true,
		"version": true, "revision": true, "goversion": true}
	for _, mf := range mfs {
		if !strings.HasPrefix(mf.GetName(), "ofsdn_") {
			continue
		}
		for _, met := range mf.GetMetric() {
			for _, l := range met.GetLabel() {
				if !allowed[l.GetName()] {
					t.Errorf("%s has label %s=%q: not a bounded label", mf.GetName(), l.GetName(), l.GetValue())
				}
			}
		}
	}
	// Unknown values fold into "other" rather than making new series.
	if got := histCount(t, mfs, CNIRequestDuration, map[string]string{"command": "other", "result": "success"}); got != 1 {
		t.Errorf("unknown CNI command counted %d times as other, want 1", got)
	}
	if got := counterValue(t, mfs, OpenFlowRepairs, map[string]string{"kind": "missing"}); got != 3 {
		t.Errorf("%s{kind=missing} = %v, want 3", OpenFlowRepairs, got)
	}
	if got := counterValue(t, mfs, OpenFlowRepairs, map[string]string{"kind": "unexpected"}); got != 0 {
		t.Errorf("%s{kind=unexpected} = %v, want 0 (pre-created)", OpenFlowRepairs, got)
	}
	if got := histCount(t, mfs, CNIRequestDuration, map[string]string{"command": "ADD", "result": "error_11"}); got != 1 {
		t.Errorf("ADD with CNI error 11 counted %d times, want 1", got)
	}
	if got := counterValue(t, mfs, OpenFlowBatchErrors, map[string]string{"kind": "other"}); got != 1 {
		t.Errorf("failed batch of unknown kind counted %v, want 1", got)
	}
}

func TestLint(t *testing.T) {
	m := New()
	f := newFake()
	m.SetSource(f.get)
	cycle(m, f, 1)
	problems, err := testutil.GatherAndLint(m.Registry())
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range problems {
		t.Errorf("promlint: %s: %s", p.Metric, p.Text)
	}
	// Every ofsdn collector on its own too (CollectAndLint), as the issue asks.
	problems, err = testutil.CollectAndLint(nodeCollector{m})
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range problems {
		t.Errorf("promlint (node collector): %s: %s", p.Metric, p.Text)
	}
}

func TestStateGaugesFollowSource(t *testing.T) {
	m := New()
	f := newFake()
	m.SetSource(f.get)
	f.update(func(s *NodeStats) { s.LocalPods = 2; s.AllocatedAddresses = 2; s.FlowsByTable[200] = 1 })
	mfs, _ := m.Registry().Gather()
	if got := gaugeValue(t, mfs, LocalPods, nil); got != 2 {
		t.Errorf("local pods %v, want 2", got)
	}
	if got := gaugeValue(t, mfs, IPAMPoolAddresses, nil); got != 253 {
		t.Errorf("pool %v, want 253", got)
	}
	for _, st := range flows.Tables() {
		want := map[uint8]float64{0: 2, 20: 3, 90: 2}[st.ID]
		if got := gaugeValue(t, mfs, OpenFlowFlows, map[string]string{"stage": st.Name}); got != want {
			t.Errorf("flows of stage %s: %v, want %v", st.Name, got, want)
		}
	}
	if got := gaugeValue(t, mfs, OpenFlowFlows, map[string]string{"stage": "table_200"}); got != 1 {
		t.Errorf("flows of table 200: %v, want 1", got)
	}
	for _, n := range []string{OpenFlowConnected, OVSDBConnected, Ready} {
		if got := gaugeValue(t, mfs, n, nil); got != 1 {
			t.Errorf("%s = %v, want 1", n, got)
		}
	}
	// Without a source (daemon starting): everything 0, every stage still present.
	m2 := New()
	mfs, _ = m2.Registry().Gather()
	if got := gaugeValue(t, mfs, OpenFlowConnected, nil); got != 0 {
		t.Errorf("openflow connected %v before the node exists", got)
	}
	if got := gaugeValue(t, mfs, OpenFlowFlows, map[string]string{"stage": "classifier"}); got != 0 {
		t.Errorf("classifier flows %v before the node exists", got)
	}
}

func TestReconnectCounters(t *testing.T) {
	m := New()
	f := newFake()
	m.SetSource(f.get)
	f.update(func(s *NodeStats) { s.OpenFlowReconnects, s.OVSDBReconnects = 3, 1 })
	mfs, _ := m.Registry().Gather()
	if got := counterValue(t, mfs, OVSDBReconnects, nil); got != 1 {
		t.Errorf("ovsdb reconnects %v, want 1", got)
	}
	if got := counterValue(t, mfs, OpenFlowReconnects, nil); got != 3 {
		t.Errorf("openflow reconnects %v, want 3", got)
	}
}

func TestServerEndpoints(t *testing.T) {
	m := New()
	f := newFake()
	m.SetSource(f.get)
	s := NewServer("127.0.0.1:0", m.Registry(), nil)
	if err := s.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Shutdown(t.Context()) })
	base := "http://" + s.Addr().String()
	get := func(path string) (int, string) {
		t.Helper()
		resp, err := http.Get(base + path)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	if code, _ := get(PathHealthz); code != 200 {
		t.Errorf("/healthz %d, want 200", code)
	}
	if code, body := get(PathReadyz); code != 503 || !strings.Contains(body, "starting") {
		t.Errorf("/readyz before a check: %d %q, want 503 starting", code, body)
	}
	s.SetReadiness(func() error { return errors.New("OVSDB at unix:/x not connected") })
	if code, body := get(PathReadyz); code != 503 || !strings.Contains(body, "OVSDB") {
		t.Errorf("/readyz with a failing check: %d %q, want 503 naming OVSDB", code, body)
	}
	s.SetReadiness(func() error { return nil })
	if code, _ := get(PathReadyz); code != 200 {
		t.Errorf("/readyz with a passing check: %d, want 200", code)
	}
	code, body := get(PathMetrics)
	if code != 200 {
		t.Fatalf("/metrics %d", code)
	}
	p := expfmt.NewTextParser(model.UTF8Validation)
	mfs, err := p.TextToMetricFamilies(strings.NewReader(body))
	if err != nil {
		t.Fatalf("parse /metrics: %v", err)
	}
	for _, n := range []string{BuildInfo, LocalPods, OpenFlowFlows, "go_goroutines", "process_cpu_seconds_total"} {
		if mfs[n] == nil {
			t.Errorf("/metrics lacks %s", n)
		}
	}
	if code, _ := get("/nope"); code != 404 {
		t.Errorf("/nope %d, want 404", code)
	}
	// A second listener on the same address fails and names it.
	s2 := NewServer(s.Addr().String(), m.Registry(), nil)
	if err := s2.Start(); err == nil || !strings.Contains(err.Error(), s.Addr().String()) {
		t.Errorf("second listener on %s: %v, want an error naming the address", s.Addr(), err)
	}
}

func find(t *testing.T, mfs []*dto.MetricFamily, name string, labels map[string]string) *dto.Metric {
	t.Helper()
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
	next:
		for _, met := range mf.GetMetric() {
			have := map[string]string{}
			for _, l := range met.GetLabel() {
				have[l.GetName()] = l.GetValue()
			}
			for k, v := range labels {
				if have[k] != v {
					continue next
				}
			}
			return met
		}
	}
	t.Fatalf("no %s%v", name, labels)
	return nil
}

func histCount(t *testing.T, mfs []*dto.MetricFamily, name string, labels map[string]string) uint64 {
	return find(t, mfs, name, labels).GetHistogram().GetSampleCount()
}

func gaugeValue(t *testing.T, mfs []*dto.MetricFamily, name string, labels map[string]string) float64 {
	return find(t, mfs, name, labels).GetGauge().GetValue()
}

func counterValue(t *testing.T, mfs []*dto.MetricFamily, name string, labels map[string]string) float64 {
	return find(t, mfs, name, labels).GetCounter().GetValue()
}

func TestDenyLogCounters(t *testing.T) {
	m := New()
	f := newFake()
	m.SetSource(f.get)
	f.update(func(s *NodeStats) { s.Policy = &PolicyStats{Denied: map[string]uint64{"ingress": 200}} })
	mfs, _ := m.Registry().Gather()
	for _, mf := range mfs {
		if n := mf.GetName(); n == NetworkPolicyDenyLogEntries || n == NetworkPolicyDenyLogDropped {
			t.Errorf("%s exported with the deny log off", n)
		}
	}
	f.update(func(s *NodeStats) {
		s.Policy.DenyLog = &DenyLogStats{Logged: 11, Dropped: map[string]uint64{"meter": 189}}
	})
	mfs, _ = m.Registry().Gather()
	if got := counterValue(t, mfs, NetworkPolicyDenyLogEntries, nil); got != 11 {
		t.Errorf("%s = %v, want 11", NetworkPolicyDenyLogEntries, got)
	}
	for r, want := range map[string]float64{"meter": 189, "queue": 0, "undecodable": 0} {
		if got := counterValue(t, mfs, NetworkPolicyDenyLogDropped, map[string]string{"reason": r}); got != want {
			t.Errorf("%s{reason=%s} = %v, want %v", NetworkPolicyDenyLogDropped, r, got, want)
		}
	}
}

// TestServiceMetrics: the Service proxy's series exist only with it on, and carry the
// sample's values under the fixed result labels.
func TestServiceMetrics(t *testing.T) {
	m := New()
	f := newFake()
	m.SetSource(f.get)
	mfs, _ := m.Registry().Gather()
	for _, mf := range mfs {
		if n := mf.GetName(); strings.HasPrefix(n, "ofsdn_service_") {
			t.Errorf("%s exported with serviceProxy kube-proxy", n)
		}
	}
	f.update(func(s *NodeStats) {
		s.Services = &ServiceStats{Ports: 3, Endpoints: 5, Rejected: 7, RejectDropped: 2, Flushed: 4, FlushErrors: 1, AffinityRemainders: 6, AffinityRemainderErrors: 3}
	})
	mfs, _ = m.Registry().Gather()
	if got := gaugeValue(t, mfs, ServicePorts, nil); got != 3 {
		t.Errorf("%s = %v, want 3", ServicePorts, got)
	}
	if got := gaugeValue(t, mfs, ServiceEndpoints, nil); got != 5 {
		t.Errorf("%s = %v, want 5", ServiceEndpoints, got)
	}
	for _, c := range []struct {
		name, result string
		want         float64
	}{{ServiceRejected, "answered", 7}, {ServiceRejected, "dropped", 2}, {ServiceConntrackFlushes, "ok", 4}, {ServiceConntrackFlushes, "error", 1},
		{ServiceAffinityRemainders, "added", 6}, {ServiceAffinityRemainders, "error", 3}} {
		if got := counterValue(t, mfs, c.name, map[string]string{"result": c.result}); got != c.want {
			t.Errorf("%s{result=%s} = %v, want %v", c.name, c.result, got, c.want)
		}
	}
}

// TestServiceSyncMetrics: the sync and network programming histograms exist only once
// the node proxies Services; a sync that succeeded records its duration and one
// programming latency per trigger time (time since it); a failed one counts an error and
// records no latency (its changes come again).
func TestServiceSyncMetrics(t *testing.T) {
	m := New()
	m.ServiceSync(time.Millisecond, nil, []time.Time{time.Now()}) // before EnableServices: nothing
	find := func(name string) *dto.MetricFamily {
		mfs, err := m.Registry().Gather()
		if err != nil {
			t.Fatal(err)
		}
		for _, mf := range mfs {
			if mf.GetName() == name {
				return mf
			}
		}
		return nil
	}
	for _, n := range []string{ServiceSyncDuration, ServiceSyncErrors, NetworkProgrammingDuration} {
		if find(n) != nil {
			t.Errorf("%s exported before the node proxies Services", n)
		}
	}
	m.EnableServices()
	m.EnableServices()
	now := time.Now()
	m.ServiceSync(20*time.Millisecond, nil, []time.Time{now.Add(-3 * time.Second), now.Add(-700 * time.Millisecond)})
	m.ServiceSync(5*time.Millisecond, errors.New("switch gone"), []time.Time{now.Add(-time.Hour)})
	sync := find(ServiceSyncDuration).GetMetric()[0].GetHistogram()
	if sync.GetSampleCount() != 2 {
		t.Errorf("%s count %d, want 2 syncs", ServiceSyncDuration, sync.GetSampleCount())
	}
	if got := find(ServiceSyncErrors).GetMetric()[0].GetCounter().GetValue(); got != 1 {
		t.Errorf("%s = %v, want 1", ServiceSyncErrors, got)
	}
	np := find(NetworkProgrammingDuration).GetMetric()[0].GetHistogram()
	if np.GetSampleCount() != 2 || np.GetSampleSum() < 3.7 || np.GetSampleSum() > 60 {
		t.Errorf("%s count %d sum %v s, want the 2 trigger times of the good sync (about 3.7 s)", NetworkProgrammingDuration, np.GetSampleCount(), np.GetSampleSum())
	}
	// kube-proxy's buckets: 0.25 s, 0.5 s, then 1 s steps.
	if b := np.GetBucket(); len(b) != len(NetworkProgrammingBuckets) || b[0].GetUpperBound() != 0.25 || b[2].GetUpperBound() != 1 || b[1].GetCumulativeCount() != 0 || b[3].GetCumulativeCount() != 1 {
		t.Errorf("%s buckets %v, want kube-proxy's with the 0.7 s sample in le=1", NetworkProgrammingDuration, b[:4])
	}
}
