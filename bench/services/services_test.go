//go:build benchservices

// Package benchservices measures Services in OVS (serviceProxy: ofsdn) against
// kube-proxy v1.37.2 of the same Kubernetes build in iptables and nftables mode, on one
// real kube-apiserver holding Services and discovery.k8s.io/v1 EndpointSlices made
// directly through the API (no pods, no controllers). Per size (SVC_BENCH_SIZES, default
// "1000x10,10000x5": Services x endpoints) and per mode, one after the other over the
// same API contents and the same change sequence (only one proxy runs at a time: on 2
// cores three proxies reacting to the same change would each wait for the others):
//
//   - realize from empty: from the process start, with every object in the API, to every
//     Service port on the dataplane (ofsdn: its ofsdn_service_ports gauge, which counts
//     ports the switch confirmed, then dump-groups; kube-proxy: the first
//     kubeproxy_sync_proxy_rules_last_timestamp_seconds whose rules hold every ClusterIP,
//     counted in iptables-save or the nft service-ips map);
//   - RSS after realization (/proc/PID/status VmRSS);
//   - SVC_BENCH_CHANGES (200) EndpointSlice changes (even: one endpoint's address, odd:
//     one endpoint not ready), each with a fresh endpoints.kubernetes.io/last-change-
//     trigger-time; each change comes SVC_BENCH_GAP (1.1 s) after the bench saw the
//     previous one in the mode's own programming histogram, i.e. after the sync that
//     programmed it ended: more than every mode's 1 s minimum sync interval (kube-proxy's
//     BoundedFrequencyRunner counts it from the end of a sync, ofsdn's runner from the
//     start), so no change is coalesced with another or held back by the rate limit. Each
//     change's latency is the histogram's sum delta (the proxy's own figure, exact), and
//     the delta histogram gives histogram_quantile p50/p99 too; per change also the sync
//     duration histogram's sum delta and, for kube-proxy, the time from its
//     last_queued_timestamp to the sync (held). After the run one dump of the dataplane
//     checks every change is there (ofsdn: dump-groups; nftables: the table; iptables:
//     only KUBE-SEP chains reached from KUBE-SERVICES count, see liveIptablesEndpoints).
//
// Kube-proxy runs in a network namespace of its own per run (ip netns add), reaching the
// API over a veth pair, so the host's tables are untouched. Times are reported, never
// asserted; a mode that errors fails the test. SVC_BENCH_OUT=FILE writes the figures as
// JSON. Run it with `make bench-services` (or bench-services-quick). Results:
// bench/RESULTS.md "Services in OVS".
package benchservices

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	benchk8s "github.com/ofsdn/ofsdn/bench/k8s"
	"github.com/ofsdn/ofsdn/test/harness"
	"github.com/ofsdn/ofsdn/test/k8s"
	"github.com/ofsdn/ofsdn/test/kapi"
	"github.com/ofsdn/ofsdn/test/testenv"
)

const (
	nodeName  = "svc-node"
	podSubnet = "10.250.0.0/24"
	apiAddr   = "172.31.0.1"
	ns        = "svc"
)

// TestMain removes the binaries the test built once it is done.
func TestMain(m *testing.M) {
	testenv.PrivilegedMain(m)
	code := m.Run()
	harness.RemoveBinaries()
	os.Exit(code)
}

// epIP is endpoint j of Service i: in the cluster CIDR, outside this node's subnet.
func epIP(i, j, per int) string {
	k := i*per + j
	return fmt.Sprintf("10.250.%d.%d", 1+k/250, 1+k%250)
}

// altIP is change k's new address.
func altIP(k int) string { return fmt.Sprintf("10.250.%d.%d", 240+k/250, 1+k%250) }

// scrape reads a /metrics exposition through an HTTP client that dials in a netns.
type scraper struct {
	c   *http.Client
	url string
}

func newScraper(netnsPath, url string) *scraper {
	return &scraper{c: &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{DialContext: k8s.NetnsDialer(netnsPath)}}, url: url}
}

func (s *scraper) families() (map[string]*dto.MetricFamily, error) {
	r, err := s.c.Get(s.url)
	if err != nil {
		return nil, err
	}
	defer r.Body.Close()
	b, err := io.ReadAll(r.Body)
	if err != nil {
		return nil, err
	}
	tp := expfmt.NewTextParser(model.UTF8Validation)
	return tp.TextToMetricFamilies(strings.NewReader(string(b)))
}

func hist(f map[string]*dto.MetricFamily, name string) benchk8s.Histogram {
	m := f[name]
	if m == nil || len(m.Metric) == 0 || m.Metric[0].GetHistogram() == nil {
		return benchk8s.Histogram{}
	}
	hm := m.Metric[0].GetHistogram()
	h := benchk8s.Histogram{Count: float64(hm.GetSampleCount()), Sum: hm.GetSampleSum()}
	for _, b := range hm.Bucket {
		if math.IsInf(b.GetUpperBound(), 1) {
			continue
		}
		h.Bounds = append(h.Bounds, b.GetUpperBound())
		h.Cumulative = append(h.Cumulative, float64(b.GetCumulativeCount()))
	}
	return h
}

func gauge(f map[string]*dto.MetricFamily, name string) float64 {
	m := f[name]
	if m == nil || len(m.Metric) == 0 || m.Metric[0].GetGauge() == nil {
		return 0
	}
	return m.Metric[0].GetGauge().GetValue()
}

// mode is one proxy under test.
type mode struct {
	name       string
	progMetric string // its network programming latency histogram
	syncMetric string
	sc         *scraper
	pid        int
	stop       func()
	dump       func() (string, error) // the dataplane, for the after-run check
}

// modeResult is what one mode measured in one round.
type modeResult struct {
	Mode, Size         string
	Round              int
	RealizeSeconds     float64
	RSSMiB             float64
	Own                []float64 // seconds, each change: the proxy's own histogram sum delta
	Observed           []float64 // seconds, trigger time to the bench seeing the count rise
	HistP50, HistP99   float64   // histogram_quantile of the delta histogram
	SyncP50            float64   // histogram_quantile of its sync duration over the changes
	Sync               []float64 // seconds, each change: its sync duration histogram's sum delta (the sync that programmed it)
	Received           []float64 // seconds, each change (kube-proxy): trigger time to kube-proxy queuing a sync (last_queued_timestamp)
	Held               []float64 // seconds, each change (kube-proxy): queued to sync end (last_timestamp) less the sync itself: the wait for the runner
	LoadStart, LoadEnd string
	Errors             []string
	Notes              []string // what the after-run dataplane check saw and allowed
}

func quantile(xs []float64, q float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	s := append([]float64(nil), xs...)
	sort.Float64s(s)
	return benchk8s.Percentile(s, q*100)
}

type env struct {
	t        *testing.T
	node     *harness.Node
	api      *kapi.API
	kc, kpKC string
	bin      string
	nsvc     int
	per      int
	slices   []*discoveryv1.EndpointSlice // current state, index = Service
	orig     []*discoveryv1.EndpointSlice
	expected int // Service ports in the API (ours + default/kubernetes)
}

func (e *env) ofsdnMode() (*mode, time.Time, error) {
	n := e.node
	// From empty: a fresh bridge each time.
	_ = exec.Command("ip", "netns", "exec", n.OVS.Netns, "ovs-vsctl", "--db="+n.OVS.OVSDBEndpoint(), "--if-exists", "del-br", "br-int").Run()
	start := time.Now()
	n.StartDaemon(filepath.Join(e.bin, "ofsdn-node"), 5*time.Minute,
		"--topology", "kubernetes", "--kubeconfig", e.kc, "--node-name", nodeName, "--cluster-cidr", "10.250.0.0/16",
		"--mtu", "1450", "--start-timeout", "4m", "--add-timeout", "60s", "--flow-audit-interval", "0",
		"--network-policy=false", "--service-proxy", "ofsdn", "--metrics-address", "127.0.0.1:9469")
	m := &mode{name: "ofsdn", progMetric: "ofsdn_network_programming_duration_seconds", syncMetric: "ofsdn_service_sync_duration_seconds",
		sc: newScraper(n.OVS.NetnsPath(), "http://127.0.0.1:9469/metrics"), pid: n.Daemon.Process.Pid}
	m.stop = func() {
		n.StopDaemon()
		if d := os.Getenv("SVC_BENCH_LOGS"); d != "" {
			b, _ := os.ReadFile(n.LogPath)
			_ = os.WriteFile(filepath.Join(d, fmt.Sprintf("ofsdn-node-%dx%d.log", e.nsvc, e.per)), b, 0o644)
		}
	}
	m.dump = func() (string, error) {
		cmd := exec.Command("ovs-ofctl", "-O", "OpenFlow13", "dump-groups", n.Mgmt())
		cmd.Env = append(os.Environ(), "OVS_RUNDIR="+n.Dir)
		out, err := cmd.CombinedOutput()
		return string(out), err
	}
	return m, start, nil
}

// kubeProxyMode starts kube-proxy in proxy mode pm in a fresh network namespace.
func (e *env) kubeProxyMode(pm string, idx int) (*mode, time.Time, error) {
	t := e.t
	name := "ofsdn-svc-kp-" + pm
	_ = exec.Command("ip", "netns", "del", name).Run()
	run := func(args ...string) error {
		if out, err := exec.Command(args[0], args[1:]...).CombinedOutput(); err != nil {
			return fmt.Errorf("%s: %v: %s", strings.Join(args, " "), err, out)
		}
		return nil
	}
	host, peer := fmt.Sprintf("kp%d0", idx), fmt.Sprintf("kp%d1", idx)
	hostIP, peerIP := fmt.Sprintf("172.31.%d.1", 10+idx), fmt.Sprintf("172.31.%d.2", 10+idx)
	apiNS := e.node.OVS.Netns
	for _, c := range [][]string{
		{"ip", "netns", "add", name},
		{"ip", "netns", "exec", apiNS, "ip", "link", "del", host},
	} {
		_ = run(c...)
	}
	for _, c := range [][]string{
		{"ip", "netns", "exec", apiNS, "ip", "link", "add", host, "type", "veth", "peer", "name", peer, "netns", name},
		{"ip", "netns", "exec", apiNS, "ip", "addr", "add", hostIP + "/24", "dev", host},
		{"ip", "netns", "exec", apiNS, "ip", "link", "set", host, "up"},
		{"ip", "netns", "exec", name, "ip", "link", "set", "lo", "up"},
		{"ip", "netns", "exec", name, "ip", "addr", "add", peerIP + "/24", "dev", peer},
		{"ip", "netns", "exec", name, "ip", "link", "set", peer, "up"},
		{"ip", "netns", "exec", name, "ip", "route", "add", "172.31.0.0/24", "via", hostIP},
	} {
		if err := run(c...); err != nil {
			return nil, time.Time{}, err
		}
	}
	nodeObj := "kp-" + pm
	logs := filepath.Join(e.node.Dir, "kube-proxy-logs")
	_ = os.MkdirAll(logs, 0o755)
	start := time.Now()
	p, err := k8s.StartProcess(logs, nodeObj, "/var/run/netns/"+name, k8s.Bin(t, "kube-proxy"), []string{
		"--kubeconfig=" + e.kpKC, "--hostname-override=" + nodeObj, "--proxy-mode=" + pm,
		"--cluster-cidr=10.250.0.0/16", "--conntrack-max-per-core=0",
		"--conntrack-tcp-timeout-established=0", "--conntrack-tcp-timeout-close-wait=0",
		"--metrics-bind-address=127.0.0.1:10249", "--healthz-bind-address=127.0.0.1:10256"}, nil)
	if err != nil {
		return nil, start, err
	}
	m := &mode{name: "kube-proxy " + pm, progMetric: "kubeproxy_network_programming_duration_seconds",
		syncMetric: "kubeproxy_sync_proxy_rules_duration_seconds",
		sc:         newScraper("/var/run/netns/"+name, "http://127.0.0.1:10249/metrics"), pid: p.Cmd.Process.Pid}
	m.stop = func() {
		p.Stop(10 * time.Second)
		if d := os.Getenv("SVC_BENCH_LOGS"); d != "" {
			b, _ := os.ReadFile(p.LogPath)
			_ = os.WriteFile(filepath.Join(d, nodeObj+".log"), b, 0o644)
		}
		_ = exec.Command("ip", "netns", "del", name).Run()
	}
	m.dump = func() (string, error) {
		var cmd *exec.Cmd
		if pm == "iptables" {
			cmd = exec.Command("ip", "netns", "exec", name, "iptables-save", "-t", "nat")
		} else {
			cmd = exec.Command("ip", "netns", "exec", name, "nft", "list", "table", "ip", "kube-proxy")
		}
		out, err := cmd.CombinedOutput()
		return string(out), err
	}
	return m, start, nil
}

var (
	iptSvcRE = regexp.MustCompile(`(?m)^-A KUBE-SERVICES .*-j KUBE-SVC-`)
	nftSvcRE = regexp.MustCompile(`goto service-`)
)

// liveIptablesEndpoints reads `iptables-save -t nat` of kube-proxy in iptables mode and
// returns the endpoints (IP:port) a ClusterIP actually reaches: the DNAT target of a
// KUBE-SEP chain that a KUBE-SVC chain jumps to, itself jumped to from KUBE-SERVICES;
// and, apart, those that only an unreferenced (stale) KUBE-SEP chain still holds. Stale
// chains are normal: with more than 1,000 endpoints (largeClusterMode) kube-proxy v1.37
// deletes them at most once per --iptables-sync-period (30 s), as they send nothing
// anywhere (pkg/proxy/iptables/proxier.go, "Delete chains no longer in use").
func liveIptablesEndpoints(save string) (live, stale map[string]bool) {
	jumps := map[string][]string{} // chain -> chains its rules jump to
	dnat := map[string]string{}    // KUBE-SEP chain -> its DNAT destination
	for _, l := range strings.Split(save, "\n") {
		f := strings.Fields(l)
		if len(f) < 2 || f[0] != "-A" {
			continue
		}
		for i := 2; i+1 < len(f); i++ {
			switch f[i] {
			case "-j":
				jumps[f[1]] = append(jumps[f[1]], f[i+1])
			case "--to-destination":
				dnat[f[1]] = f[i+1]
			}
		}
	}
	reached := map[string]bool{}
	for _, svc := range jumps["KUBE-SERVICES"] {
		if !strings.HasPrefix(svc, "KUBE-SVC-") {
			continue
		}
		for _, sep := range jumps[svc] {
			if strings.HasPrefix(sep, "KUBE-SEP-") {
				reached[sep] = true
			}
		}
	}
	live, stale = map[string]bool{}, map[string]bool{}
	for sep, dst := range dnat {
		if reached[sep] {
			live[dst] = true
		} else {
			stale[dst] = true
		}
	}
	return live, stale
}

// realized counts the Service ports on m's dataplane.
func realizedPorts(m *mode, fams map[string]*dto.MetricFamily) (int, error) {
	if m.name == "ofsdn" {
		return int(gauge(fams, "ofsdn_service_ports")), nil
	}
	if strings.HasSuffix(m.name, "iptables") {
		out, err := m.dump()
		return len(iptSvcRE.FindAllString(out, -1)), err
	}
	// nft: the service-ips map's elements (the whole table, as the map holds them).
	out, err := m.dump()
	return len(nftSvcRE.FindAllString(out, -1)), err
}

// waitRealized polls until every Service port is on m's dataplane and returns the time
// from start (ofsdn: when the bench saw the gauge complete; kube-proxy: its own sync
// timestamp of the sync that completed them).
func (e *env) waitRealized(m *mode, start time.Time) (time.Duration, error) {
	deadline := time.Now().Add(15 * time.Minute)
	lastTS := 0.0
	for time.Now().Before(deadline) {
		fams, err := m.sc.families()
		if err != nil {
			time.Sleep(50 * time.Millisecond)
			continue
		}
		if m.name == "ofsdn" {
			if n, _ := realizedPorts(m, fams); n >= e.expected {
				d := time.Since(start)
				out, err := m.dump()
				if err != nil {
					return d, err
				}
				if g := strings.Count(out, "group_id="); g < e.expected {
					return d, fmt.Errorf("ofsdn: %d Service ports confirmed but %d groups on the switch, want %d", n, g, e.expected)
				}
				return d, nil
			}
			time.Sleep(50 * time.Millisecond)
			continue
		}
		ts := gauge(fams, "kubeproxy_sync_proxy_rules_last_timestamp_seconds")
		if ts > 0 && ts != lastTS {
			lastTS = ts
			n, err := realizedPorts(m, fams)
			if err != nil {
				return 0, err
			}
			if n >= e.expected {
				return time.Unix(0, int64(ts*1e9)).Sub(start), nil
			}
		}
		time.Sleep(100 * time.Millisecond)
	}
	return 0, fmt.Errorf("%s: not realized within 15 minutes", m.name)
}

// change applies change k to the current slices and returns the Service index, the
// endpoint address that must now be present (want) or absent (gone), and the trigger time.
func (e *env) change(ctx context.Context, k int) (int, string, bool, time.Time, error) {
	i := (k * 7919) % e.nsvc
	s := e.slices[i].DeepCopy()
	var ip string
	present := true
	if k%2 == 0 {
		ip = altIP(k)
		s.Endpoints[0].Addresses = []string{ip}
	} else {
		j := min(1, len(s.Endpoints)-1)
		f := false
		s.Endpoints[j].Conditions.Ready = &f
		ip, present = s.Endpoints[j].Addresses[0], false
	}
	trig := time.Now()
	s.Annotations[corev1.EndpointsLastChangeTriggerTime] = trig.UTC().Format(time.RFC3339Nano)
	o, err := e.api.Admin.DiscoveryV1().EndpointSlices(ns).Update(ctx, s, metav1.UpdateOptions{})
	if err != nil {
		return i, ip, present, trig, err
	}
	e.slices[i] = o
	return i, ip, present, trig, nil
}

// restore puts the touched slices back as they were created.
func (e *env) restore(ctx context.Context, touched map[int]bool) error {
	for i := range touched {
		s := e.slices[i].DeepCopy()
		s.Endpoints = e.orig[i].DeepCopy().Endpoints
		s.Annotations[corev1.EndpointsLastChangeTriggerTime] = time.Now().UTC().Format(time.RFC3339Nano)
		o, err := e.api.Admin.DiscoveryV1().EndpointSlices(ns).Update(ctx, s, metav1.UpdateOptions{})
		if err != nil {
			return err
		}
		e.slices[i] = o
	}
	return nil
}

func (e *env) runMode(ctx context.Context, which string, idx, round, changes int, gap time.Duration) modeResult {
	r := modeResult{Mode: which, Size: fmt.Sprintf("%dx%d", e.nsvc, e.per), Round: round, LoadStart: benchk8s.LoadAvg()}
	var m *mode
	var start time.Time
	var err error
	if which == "ofsdn" {
		m, start, err = e.ofsdnMode()
	} else {
		m, start, err = e.kubeProxyMode(strings.TrimPrefix(which, "kube-proxy "), idx)
		r.Mode = which
	}
	if err != nil {
		r.Errors = append(r.Errors, err.Error())
		return r
	}
	defer m.stop()
	d, err := e.waitRealized(m, start)
	r.RealizeSeconds = d.Seconds()
	if err != nil {
		r.Errors = append(r.Errors, err.Error())
		return r
	}
	time.Sleep(2 * time.Second) // settle: the first sync's aftermath (purge, GC)
	r.RSSMiB = benchk8s.RSSMiB(m.pid)
	fams, err := m.sc.families()
	if err != nil {
		r.Errors = append(r.Errors, err.Error())
		return r
	}
	h0, s0 := hist(fams, m.progMetric), hist(fams, m.syncMetric)
	prev, prevSync := h0, s0
	touched := map[int]bool{}
	type check struct {
		ip      string
		present bool
	}
	final := map[int]check{}
	for k := 0; k < changes; k++ {
		i, ip, present, trig, err := e.change(ctx, k)
		touched[i] = true
		if err != nil {
			r.Errors = append(r.Errors, err.Error())
			break
		}
		if c, ok := final[i]; ok && c.present && !present {
			delete(final, i)
		}
		final[i] = check{ip, present}
		deadline := trig.Add(2 * time.Minute)
		seen, seenAt := false, time.Time{}
		for time.Now().Before(deadline) {
			f, err := m.sc.families()
			if err == nil {
				if h := hist(f, m.progMetric); h.Count > prev.Count {
					seenAt = time.Now()
					r.Observed = append(r.Observed, seenAt.Sub(trig).Seconds())
					r.Own = append(r.Own, (h.Sum-prev.Sum)/(h.Count-prev.Count))
					if h.Count-prev.Count > 1 {
						r.Errors = append(r.Errors, fmt.Sprintf("change %d: %v observations in one sync", k, h.Count-prev.Count))
					}
					prev, seen = h, true
					break
				}
			}
			time.Sleep(20 * time.Millisecond)
		}
		if !seen {
			r.Errors = append(r.Errors, fmt.Sprintf("change %d (Service %d, %s): not in %s's programming histogram within 2 minutes", k, i, ip, m.progMetric))
			break
		}
		// The sync that programmed it: kube-proxy observes its sync duration after the
		// programming latency (a deferred Observe), so wait for that count too.
		for end := time.Now().Add(5 * time.Second); time.Now().Before(end); time.Sleep(10 * time.Millisecond) {
			f, err := m.sc.families()
			if err != nil {
				continue
			}
			if sh := hist(f, m.syncMetric); sh.Count > prevSync.Count {
				r.Sync = append(r.Sync, sh.Sum-prevSync.Sum)
				prevSync = sh
				if m.name != "ofsdn" {
					queued := gauge(f, "kubeproxy_sync_proxy_rules_last_queued_timestamp_seconds")
					last := gauge(f, "kubeproxy_sync_proxy_rules_last_timestamp_seconds")
					r.Received = append(r.Received, queued-float64(trig.UnixNano())/1e9)
					r.Held = append(r.Held, last-queued-r.Sync[len(r.Sync)-1])
				}
				break
			}
		}
		// The next change comes gap after this one was programmed (seen), not after its
		// trigger: kube-proxy's BoundedFrequencyRunner starts its minSyncPeriod (1 s) when
		// a sync ends, so a change sooner than that after the previous sync's end is held.
		time.Sleep(time.Until(seenAt.Add(gap)))
	}
	fams, err = m.sc.families()
	if err == nil {
		dh := hist(fams, m.progMetric).Sub(h0)
		r.HistP50, r.HistP99 = dh.Quantile(.5), dh.Quantile(.99)
		r.SyncP50 = hist(fams, m.syncMetric).Sub(s0).Quantile(.5)
	}
	// Every change on the dataplane: the new address there, the not-ready one gone.
	if out, err := m.dump(); err != nil {
		r.Errors = append(r.Errors, err.Error())
	} else {
		if d := os.Getenv("SVC_BENCH_LOGS"); d != "" {
			_ = os.WriteFile(filepath.Join(d, fmt.Sprintf("dataplane-%s-%s-%d.txt", r.Size, strings.ReplaceAll(m.name, " ", "-"), round)), []byte(out), 0o644)
		}
		iptables := strings.HasSuffix(m.name, "iptables")
		var live, stale map[string]bool
		if iptables {
			live, stale = liveIptablesEndpoints(out)
		}
		var bad []string
		staleOnly := 0
		for i, c := range final {
			var in bool
			if iptables {
				// Only what a ClusterIP reaches counts: KUBE-SERVICES -> KUBE-SVC -> KUBE-SEP DNAT.
				in = live[c.ip+":8080"]
				if !in && stale[c.ip+":8080"] {
					staleOnly++
				}
			} else {
				// ofsdn: dump-groups "nat(dst=IP:8080)"; nft: "dnat to IP:8080" (one endpoint) or
				// the service chain's "IP . 8080" dnat map elements (kube-proxy v1.37).
				in = regexp.MustCompile(`[^0-9.]` + regexp.QuoteMeta(c.ip) + `(:| \. )8080([^0-9]|$)`).MatchString(out)
			}
			if in != c.present {
				bad = append(bad, fmt.Sprintf("Service %d endpoint %s: want present=%v", i, c.ip, c.present))
			}
		}
		if iptables && staleOnly > 0 {
			r.Notes = append(r.Notes, fmt.Sprintf("%d not-ready endpoints still in an unreferenced (stale) KUBE-SEP chain, not reachable", staleOnly))
		}
		if len(bad) > 0 {
			sort.Strings(bad)
			r.Errors = append(r.Errors, fmt.Sprintf("%d of %d changed endpoints not as expected on the dataplane: %s", len(bad), len(final), strings.Join(bad[:min(5, len(bad))], "; ")))
		}
	}
	r.LoadEnd = benchk8s.LoadAvg()
	m.stop()
	m.stop = func() {}
	if err := e.restore(ctx, touched); err != nil {
		r.Errors = append(r.Errors, "restore: "+err.Error())
	}
	return r
}

func TestServices(t *testing.T) {
	for _, tool := range []string{"iptables", "iptables-save", "nft"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Fatalf("%s is missing: make bench-services installs iptables and nftables (apt-get)", tool)
		}
	}
	changes := benchk8s.EnvInt("SVC_BENCH_CHANGES", 200)
	rounds := benchk8s.EnvInt("SVC_BENCH_ROUNDS", 1)
	gap, err := time.ParseDuration(benchk8s.EnvStr("SVC_BENCH_GAP", "1100ms"))
	if err != nil {
		t.Fatal(err)
	}
	modes := strings.Split(benchk8s.EnvStr("SVC_BENCH_MODES", "ofsdn,kube-proxy iptables,kube-proxy nftables"), ",")
	var all []modeResult
	for _, sz := range strings.Split(benchk8s.EnvStr("SVC_BENCH_SIZES", "1000x10,10000x5"), ",") {
		var nsvc, per int
		if _, err := fmt.Sscanf(sz, "%dx%d", &nsvc, &per); err != nil {
			t.Fatalf("SVC_BENCH_SIZES entry %q: want SERVICESxENDPOINTS", sz)
		}
		t.Run(sz, func(t *testing.T) {
			all = append(all, runSize(t, nsvc, per, changes, rounds, gap, modes)...)
		})
	}
	report(t, all)
	for _, r := range all {
		if len(r.Errors) > 0 {
			t.Errorf("%s %s round %d: %d errors: %v", r.Size, r.Mode, r.Round, len(r.Errors), r.Errors[:min(3, len(r.Errors))])
		}
	}
}

func runSize(t *testing.T, nsvc, per, changes, rounds int, gap time.Duration, modes []string) []modeResult {
	ctx := context.Background()
	n := harness.NewNode(t, podSubnet, "ofsdn-svc")
	n.Name = "svc ofsdn-node"
	n.OVS.Exec(t, "ip", "link", "add", "ul0", "type", "veth", "peer", "name", "ul1")
	n.OVS.Exec(t, "ip", "addr", "add", apiAddr+"/24", "dev", "ul0")
	n.OVS.Exec(t, "ip", "link", "set", "ul0", "up")
	n.OVS.Exec(t, "ip", "link", "set", "ul1", "up")
	api := kapi.Start(t, n.OVS.NetnsPath(), apiAddr, "../../deploy/ofsdn.yaml")
	e := &env{t: t, node: n, api: api, kc: api.Kubeconfig(t), bin: harness.BuildBinaries(t), nsvc: nsvc, per: per}
	if err := api.CP.PKI.Cert("kube-proxy", "system:kube-proxy", nil, nil, nil); err != nil {
		t.Fatal(err)
	}
	kpKC, err := api.CP.PKI.Kubeconfig("kube-proxy", api.Server)
	if err != nil {
		t.Fatal(err)
	}
	e.kpKC = kpKC
	admin := api.Admin
	for i, nd := range []struct{ name, ip string }{{nodeName, apiAddr}, {"kp-iptables", "172.31.11.2"}, {"kp-nftables", "172.31.12.2"}} {
		obj := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: nd.name}}
		if i == 0 {
			obj.Spec = corev1.NodeSpec{PodCIDR: podSubnet, PodCIDRs: []string{podSubnet}}
		}
		c, err := admin.CoreV1().Nodes().Create(ctx, obj, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		c.Status.Addresses = []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: nd.ip}}
		if _, err := admin.CoreV1().Nodes().UpdateStatus(ctx, c, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	if err := api.CreateNamespace(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	e.slices, e.orig = make([]*discoveryv1.EndpointSlice, nsvc), make([]*discoveryv1.EndpointSlice, nsvc)
	tcp, port, pname := corev1.ProtocolTCP, int32(8080), "http"
	if err := benchk8s.Parallel(nsvc, 16, func(i int) error {
		name := fmt.Sprintf("s-%05d", i)
		if _, err := admin.CoreV1().Services(ns).Create(ctx, &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: name},
			Spec: corev1.ServiceSpec{Ports: []corev1.ServicePort{{Name: pname, Protocol: tcp, Port: 80, TargetPort: intstr.FromInt32(port)}}}},
			metav1.CreateOptions{}); err != nil {
			return err
		}
		s := &discoveryv1.EndpointSlice{ObjectMeta: metav1.ObjectMeta{Name: name + "-1",
			Labels:      map[string]string{discoveryv1.LabelServiceName: name, discoveryv1.LabelManagedBy: "ofsdn-bench"},
			Annotations: map[string]string{corev1.EndpointsLastChangeTriggerTime: time.Now().UTC().Format(time.RFC3339Nano)}},
			AddressType: discoveryv1.AddressTypeIPv4,
			Ports:       []discoveryv1.EndpointPort{{Name: &pname, Protocol: &tcp, Port: &port}}}
		for j := 0; j < per; j++ {
			tr := true
			s.Endpoints = append(s.Endpoints, discoveryv1.Endpoint{Addresses: []string{epIP(i, j, per)}, Conditions: discoveryv1.EndpointConditions{Ready: &tr}})
		}
		o, err := admin.DiscoveryV1().EndpointSlices(ns).Create(ctx, s, metav1.CreateOptions{})
		if err != nil {
			return err
		}
		e.slices[i], e.orig[i] = o, o.DeepCopy()
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	svcs, err := admin.CoreV1().Services(metav1.NamespaceAll).List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range svcs.Items {
		e.expected += len(s.Spec.Ports)
	}
	t.Logf("API filled: %d Services x %d endpoints (%d EndpointSlices) in %s; %d Service ports in all",
		nsvc, per, nsvc, time.Since(start).Round(time.Second), e.expected)
	var out []modeResult
	for r := 0; r < rounds; r++ {
		order := append([]string(nil), modes...)
		for k := 0; k < r%len(order); k++ { // rotate per round
			order = append(order[1:], order[0])
		}
		for _, m := range order {
			idx := 1
			if strings.HasSuffix(m, "nftables") {
				idx = 2
			}
			res := e.runMode(ctx, m, idx, r, changes, gap)
			t.Logf("%dx%d round %d %s: realized from empty in %.2f s, RSS %.1f MiB; %d changes: own p50 %.1f ms p99 %.1f ms (histogram_quantile p50 %.0f ms p99 %.0f ms), observed p50 %.1f ms; sync p50 %.1f ms (histogram_quantile %.1f ms); received p50 %.1f ms, held p50 %.1f ms p99 %.1f ms; load %s -> %s; notes %v; errors %v",
				nsvc, per, r, res.Mode, res.RealizeSeconds, res.RSSMiB, len(res.Own), 1000*quantile(res.Own, .5), 1000*quantile(res.Own, .99),
				1000*res.HistP50, 1000*res.HistP99, 1000*quantile(res.Observed, .5), 1000*quantile(res.Sync, .5), 1000*res.SyncP50,
				1000*quantile(res.Received, .5), 1000*quantile(res.Held, .5), 1000*quantile(res.Held, .99), res.LoadStart, res.LoadEnd, res.Notes, res.Errors)
			out = append(out, res)
		}
	}
	return out
}

// report logs the Markdown tables and ratios and writes SVC_BENCH_OUT.
func report(t *testing.T, all []modeResult) {
	type agg struct {
		own, obs, realize, rss, hp50, hp99, sync, held []float64
		load                                           []string
	}
	by := map[string]*agg{}
	var keys []string
	for _, r := range all {
		k := r.Size + "|" + r.Mode
		if by[k] == nil {
			by[k] = &agg{}
			keys = append(keys, k)
		}
		a := by[k]
		a.own, a.obs = append(a.own, r.Own...), append(a.obs, r.Observed...)
		a.realize, a.rss = append(a.realize, r.RealizeSeconds), append(a.rss, r.RSSMiB)
		a.hp50, a.hp99 = append(a.hp50, r.HistP50), append(a.hp99, r.HistP99)
		a.sync, a.held = append(a.sync, r.Sync...), append(a.held, r.Held...)
		a.load = append(a.load, r.LoadStart+" -> "+r.LoadEnd)
	}
	tab := []string{"| size | mode | realize from empty s | RSS MiB | changes | own p50 ms | own p99 ms | histogram_quantile p50 / p99 ms | observed p50 / p99 ms | sync p50 ms | held p50 ms | load average |",
		"|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|"}
	for _, k := range keys {
		a := by[k]
		p := strings.Split(k, "|")
		held := "–"
		if len(a.held) > 0 {
			held = fmt.Sprintf("%.1f", 1000*quantile(a.held, .5))
		}
		tab = append(tab, fmt.Sprintf("| %s | %s | %.2f | %.1f | %d | %.1f | %.1f | %.0f / %.0f | %.1f / %.1f | %.1f | %s | %s |", p[0], p[1],
			quantile(a.realize, .5), quantile(a.rss, .5), len(a.own), 1000*quantile(a.own, .5), 1000*quantile(a.own, .99),
			1000*quantile(a.hp50, .5), 1000*quantile(a.hp99, .5), 1000*quantile(a.obs, .5), 1000*quantile(a.obs, .99),
			1000*quantile(a.sync, .5), held, strings.Join(a.load, ", ")))
	}
	var ratios []string
	for _, k := range keys {
		p := strings.Split(k, "|")
		if p[1] != "ofsdn" {
			continue
		}
		o := by[k]
		for _, kp := range []string{"kube-proxy iptables", "kube-proxy nftables"} {
			b := by[p[0]+"|"+kp]
			if b == nil {
				continue
			}
			ratios = append(ratios, fmt.Sprintf("%s ofsdn / %s: realize %.2f, RSS %.2f, own p50 %.2f, own p99 %.2f", p[0], kp,
				quantile(o.realize, .5)/quantile(b.realize, .5), quantile(o.rss, .5)/quantile(b.rss, .5),
				quantile(o.own, .5)/quantile(b.own, .5), quantile(o.own, .99)/quantile(b.own, .99)))
		}
	}
	t.Logf("Services in OVS:\n%s\n\n%s", strings.Join(tab, "\n"), strings.Join(ratios, "\n"))
	if f := os.Getenv("SVC_BENCH_OUT"); f != "" {
		b, _ := json.MarshalIndent(all, "", " ")
		_ = os.WriteFile(f, b, 0o644)
	}
}
