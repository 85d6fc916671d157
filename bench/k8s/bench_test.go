//go:build benchk8s

// TestBenchK8s is `make bench-k8s`: the interleaved pod start-up benchmark of package
// benchk8s on a real cluster (test/k8s). Behind the build tag benchk8s so that `go test
// ./...` (make test) neither builds nor runs it; the package itself is compiled by `go vet
// ./...`. Env:
//
//	BENCH_K8S_BURSTS   burst sizes, comma-separated, each N or N:ROUNDS (default 30,100;
//	                   249 fills a node of maxPods 250 that also runs the daemon's pod;
//	                   30,100,249:1 runs the full node once)
//	BENCH_K8S_ROUNDS   rounds per burst size (default 2)
//	BENCH_K8S_OUT      the raw samples as JSON, rewritten after every burst (default
//	                   /tmp/ofsdn-bench-k8s/results.json);
//	                   the Markdown report is written beside it (.md)
//	BENCH_K8S_SETTLE   idle pause after each burst's clean-up (default 5s)
//	BENCH_K8S_STRICT   when 1, a burst's failure (a pod not Ready, a failed sandbox or ADD,
//	                   a leak after clean-up) fails the test; timings never do
package benchk8s

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/ofsdn/ofsdn/test/testenv"
)

func TestBenchK8s(t *testing.T) {
	testenv.Privileged(t)
	cfg := Config{Rounds: 2, MaxPods: 250, Policies: 10, Settle: 5 * time.Second, Timeout: 10 * time.Minute}
	cfg.BurstRounds = map[int]int{}
	for _, s := range strings.Split(EnvStr("BENCH_K8S_BURSTS", "30,100"), ",") {
		size, rounds, hasRounds := strings.Cut(strings.TrimSpace(s), ":")
		n, err := strconv.Atoi(size)
		if err != nil {
			t.Fatalf("BENCH_K8S_BURSTS: %v", err)
		}
		cfg.Bursts = append(cfg.Bursts, n)
		if hasRounds {
			if cfg.BurstRounds[n], err = strconv.Atoi(rounds); err != nil {
				t.Fatalf("BENCH_K8S_BURSTS: %v", err)
			}
		}
	}
	var err error
	if cfg.Rounds, err = strconv.Atoi(EnvStr("BENCH_K8S_ROUNDS", "2")); err != nil {
		t.Fatalf("BENCH_K8S_ROUNDS: %v", err)
	}
	if cfg.Settle, err = time.ParseDuration(EnvStr("BENCH_K8S_SETTLE", "5s")); err != nil {
		t.Fatalf("BENCH_K8S_SETTLE: %v", err)
	}
	out := EnvStr("BENCH_K8S_OUT", "/tmp/ofsdn-bench-k8s/results.json")
	if err := os.MkdirAll(filepath.Dir(out), 0o755); err != nil {
		t.Fatal(err)
	}
	res := Run(t, cfg, func(sofar *Results, b Burst) {
		// The samples so far, so that a run stopped midway keeps what it measured.
		if js, err := json.MarshalIndent(sofar, "", " "); err == nil {
			_ = os.WriteFile(out, js, 0o644)
		}
		w, _, _ := func() ([]float64, []float64, []float64) {
			r := &Results{Bursts: []Burst{b}}
			return r.Pooled(b.Mode, b.Pods)
		}()
		s := Summarize(w)
		t.Logf("burst %3d %-15s round %d: %d Ready, p50 %.0f p99 %.0f ms, all Ready %.1f s, clean %.1f s, load1 %.1f–%.1f, busy %.0f%%, failures %v",
			b.Pods, b.Mode, b.Round, s.N, s.P50, s.P99, b.AllReadyMs/1000, b.CleanMs/1000, b.Load1Before, b.Load1After, b.BusyPct, b.Failures)
	})
	js, err := json.MarshalIndent(res, "", " ")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(out, js, 0o644); err != nil {
		t.Fatal(err)
	}
	rep := Report(res)
	md := strings.TrimSuffix(out, ".json") + ".md"
	if err := os.WriteFile(md, []byte(rep), 0o644); err != nil {
		t.Fatal(err)
	}
	t.Logf("samples in %s, report in %s:\n%s", out, md, rep)
	if os.Getenv("BENCH_K8S_STRICT") == "1" {
		for _, b := range res.Bursts {
			for _, f := range b.Failures {
				t.Errorf("%s, burst %d, round %d: %s", b.Mode, b.Pods, b.Round, f)
			}
		}
	}
}

func TestHistogramQuantile(t *testing.T) {
	h := Histogram{Count: 10, Sum: 5, Bounds: []float64{0.1, 1, 10}, Cumulative: []float64{5, 9, 10}}
	if q := h.Quantile(0.5); q != 0.1 {
		t.Errorf("p50 = %v, want 0.1", q)
	}
	if q := h.Quantile(0.9); q != 1 {
		t.Errorf("p90 = %v, want 1", q)
	}
	if q := h.Quantile(0.7); q < 0.5 || q > 0.6 {
		t.Errorf("p70 = %v, want 0.55", q)
	}
}

func TestLogParsers(t *testing.T) {
	kl := `I1203 11:40:00.123456    1234 pod_startup_latency_tracker.go:144] "Observed pod startup duration" pod="bench-bridge/burst-abc" podStartSLOduration=1.234 podStartE2EDuration="1.234s"` + "\n" +
		`I1203 11:40:00.123456    1234 pod_startup_latency_tracker.go:144] "Observed pod startup duration" pod="kube-system/x" podStartSLOduration=9 podStartE2EDuration="9s"` + "\n"
	ks := KubeletStartups(strings.NewReader(kl), "bench-bridge")
	if len(ks) != 1 || ks[0].Pod != "bench-bridge/burst-abc" || ks[0].SLOms != 1234 {
		t.Errorf("KubeletStartups = %+v", ks)
	}
	dl := `2026-12-03T11:40:00.1Z stderr F time=2026-12-03T11:40:00.1Z level=INFO msg="ADD done" container_id=abc pod=bench-ofsdn-policy/burst-1 ifname=eth0 duration_ms=12.5` + "\n" +
		`2026-12-03T11:40:00.1Z stderr F time=2026-12-03T11:40:00.1Z level=WARN msg="ADD failed" container_id=abc pod=bench-ofsdn-policy/burst-2 ifname=eth0` + "\n"
	adds, failed := DaemonAdds(strings.NewReader(dl), "bench-ofsdn-policy")
	if len(adds) != 1 || adds[0].Ms != 12.5 || failed != 1 {
		t.Errorf("DaemonAdds = %+v, %d failed", adds, failed)
	}
}
