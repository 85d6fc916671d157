package benchk8s

// The Markdown report of a run: start-up latency per burst size and mode (samples of all
// rounds pooled), the ratios issue 24 names, where the time goes at the largest burst
// (the kubelet's and ofsdn-node's histograms), and which targets were met.

import (
	"fmt"
	"sort"
	"strings"
)

// Pooled returns the samples of every burst of mode with pods pods: watch latency, SLO
// latency and the kubelet's podStartSLOduration, in milliseconds.
func (r *Results) Pooled(mode string, pods int) (watch, slo, kubelet []float64) {
	for _, b := range r.Bursts {
		if b.Mode != mode || b.Pods != pods {
			continue
		}
		for _, s := range b.Samples {
			watch = append(watch, s.WatchMs)
			slo = append(slo, s.SLOMs)
		}
		for _, k := range b.Kubelet {
			kubelet = append(kubelet, k.SLOms)
		}
	}
	return
}

// sizes returns the burst sizes run, ascending.
func (r *Results) sizes() []int {
	seen := map[int]bool{}
	var out []int
	for _, b := range r.Bursts {
		if !seen[b.Pods] {
			seen[b.Pods] = true
			out = append(out, b.Pods)
		}
	}
	sort.Ints(out)
	return out
}

// merged adds up the histograms of series key (exact SeriesKey, or every series whose key
// starts with it when prefix) over mode's bursts of pods pods.
func (r *Results) merged(mode string, pods int, kubelet bool, key string, prefix bool) Histogram {
	var out Histogram
	for _, b := range r.Bursts {
		if b.Mode != mode || b.Pods != pods {
			continue
		}
		m := b.DaemonMetrics
		if kubelet {
			m = b.KubeletMetrics
		}
		for k, h := range m {
			if k != key && !(prefix && strings.HasPrefix(k, key)) {
				continue
			}
			if out.Bounds == nil {
				out = Histogram{Bounds: h.Bounds, Cumulative: make([]float64, len(h.Cumulative))}
			}
			out.Count += h.Count
			out.Sum += h.Sum
			if len(h.Cumulative) == len(out.Cumulative) {
				for i := range h.Cumulative {
					out.Cumulative[i] += h.Cumulative[i]
				}
			}
		}
	}
	return out
}

func ratio(a, b float64) float64 {
	if b == 0 {
		return 0
	}
	return a / b
}

// Report renders r as Markdown.
func Report(r *Results) string {
	var w strings.Builder
	p := func(format string, args ...any) { fmt.Fprintf(&w, format, args...) }
	var rounds []string
	for _, n := range r.Config.Bursts {
		rounds = append(rounds, fmt.Sprintf("%d pods × %d", n, r.Config.RoundsOf(n)))
	}
	p("Run at `%s`, %s – %s UTC, %d CPUs; rounds per burst size: %s, the mode order rotated every round; kubelet maxPods %d; %d NetworkPolicies on the policy-on node.\n\n",
		r.Commit, r.Started.Format("2006-01-02 15:04"), r.Finished.Format("15:04"), r.CPUs, strings.Join(rounds, ", "), r.Config.MaxPods, r.Config.Policies)
	p("Nodes: ")
	for i, m := range Modes {
		if i > 0 {
			p(", ")
		}
		p("%s `%s`", r.Nodes[m], m)
	}
	p(".\n\n")

	p("### Start-up latency per pod (ms; all rounds pooled)\n\n")
	p("watch = the benchmark's watch saw the pod created → saw it Ready; SLO = creationTimestamp (whole seconds) → watch saw it Ready; kubelet = the kubelet's podStartSLOduration (also from creationTimestamp). All Ready = scale-up call → last pod Ready, per round.\n\n")
	p("| burst | mode | pods | watch p50 | p90 | p99 | max | SLO p50 | SLO p99 | kubelet p50 | kubelet p99 | all Ready (s, per round) | load1 (start–end) | CPU busy %% | failures |\n")
	p("| ---: | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- | --- | --- | ---: |\n")
	for _, n := range r.sizes() {
		for _, m := range Modes {
			watch, slo, kub := r.Pooled(m, n)
			ws, ss, ks := Summarize(watch), Summarize(slo), Summarize(kub)
			var all, load, busy []string
			fails := 0
			for _, b := range r.Bursts {
				if b.Mode == m && b.Pods == n {
					all = append(all, fmt.Sprintf("%.1f", b.AllReadyMs/1000))
					load = append(load, fmt.Sprintf("%.1f–%.1f", b.Load1Before, b.Load1After))
					busy = append(busy, fmt.Sprintf("%.0f", b.BusyPct))
					fails += len(b.Failures)
				}
			}
			p("| %d | %s | %d | %.0f | %.0f | %.0f | %.0f | %.0f | %.0f | %.0f | %.0f | %s | %s | %s | %d |\n", n, m, ws.N,
				ws.P50, ws.P90, ws.P99, ws.Max, ss.P50, ss.P99, ks.P50, ks.P99,
				strings.Join(all, ", "), strings.Join(load, ", "), strings.Join(busy, ", "), fails)
		}
	}

	p("\n### Ratios (same run; watch latency, SLO latency in brackets)\n\n")
	p("| burst | policy-on p99 / bridge p99 | policy-on p50 / hostNetwork p50 | policy-off p99 / bridge p99 | policy-off p50 / hostNetwork p50 | bridge p50 / hostNetwork p50 | policy-on all Ready / bridge all Ready | policy-on p99 / bridge p99 per round |\n")
	p("| ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- |\n")
	for _, n := range r.sizes() {
		s := map[string][2]Summary{}
		for _, m := range Modes {
			w, sl, _ := r.Pooled(m, n)
			s[m] = [2]Summary{Summarize(w), Summarize(sl)}
		}
		f := func(a, b string, p99 bool) string {
			g := func(i int) float64 {
				if p99 {
					return ratio(s[a][i].P99, s[b][i].P99)
				}
				return ratio(s[a][i].P50, s[b][i].P50)
			}
			return fmt.Sprintf("%.2f× (%.2f×)", g(0), g(1))
		}
		var perRound []string
		allPol, allBr := 0.0, 0.0
		for round := 0; round < r.Config.RoundsOf(n); round++ {
			var pol, br []float64
			for _, b := range r.Bursts {
				if b.Pods != n || b.Round != round {
					continue
				}
				for _, x := range b.Samples {
					switch b.Mode {
					case ModePolicy:
						pol = append(pol, x.WatchMs)
					case ModeBridge:
						br = append(br, x.WatchMs)
					}
				}
				switch b.Mode {
				case ModePolicy:
					allPol += b.AllReadyMs
				case ModeBridge:
					allBr += b.AllReadyMs
				}
			}
			perRound = append(perRound, fmt.Sprintf("%.2f×", ratio(Summarize(pol).P99, Summarize(br).P99)))
		}
		p("| %d | %s | %s | %s | %s | %s | %.2f× | %s |\n", n, f(ModePolicy, ModeBridge, true), f(ModePolicy, ModeHost, false),
			f(ModeNoPolicy, ModeBridge, true), f(ModeNoPolicy, ModeHost, false), f(ModeBridge, ModeHost, false),
			ratio(allPol, allBr), strings.Join(perRound, ", "))
	}

	sizes := r.sizes()
	if len(sizes) > 0 {
		n := sizes[len(sizes)-1]
		p("\n### Where the time goes at burst %d (histogram deltas over the bursts, all rounds; ms: mean, and p50 / p99 estimated from the buckets)\n\n", n)
		type row struct {
			what, key string
			kubelet   bool
			prefix    bool
		}
		rows := []row{
			{"kubelet_pod_start_sli_duration_seconds", "kubelet_pod_start_sli_duration_seconds", true, false},
			{"kubelet_pod_start_duration_seconds (kubelet first saw the pod → running)", "kubelet_pod_start_duration_seconds", true, false},
			{"kubelet_pod_worker_duration_seconds, create", `kubelet_pod_worker_duration_seconds{operation_type="create"}`, true, false},
			{"kubelet_run_podsandbox_duration_seconds", "kubelet_run_podsandbox_duration_seconds", true, true},
			{"kubelet_runtime_operations_duration_seconds, run_podsandbox", `kubelet_runtime_operations_duration_seconds{operation_type="run_podsandbox"}`, true, false},
			{"kubelet_runtime_operations_duration_seconds, create_container", `kubelet_runtime_operations_duration_seconds{operation_type="create_container"}`, true, false},
			{"kubelet_runtime_operations_duration_seconds, start_container", `kubelet_runtime_operations_duration_seconds{operation_type="start_container"}`, true, false},
			{"kubelet rest_client_rate_limiter_duration_seconds (all verbs)", "rest_client_rate_limiter_duration_seconds", true, true},
			{"kubelet rest_client_request_duration_seconds (all verbs)", "rest_client_request_duration_seconds", true, true},
			{"ofsdn_cni_request_duration_seconds, ADD", `ofsdn_cni_request_duration_seconds{command="ADD",result="success"}`, false, false},
		}
		for _, step := range []string{"policy", "ipam", "veth", "ovsdb", "openflow"} {
			rows = append(rows, row{"ofsdn_pod_add_step_duration_seconds, " + step, fmt.Sprintf(`ofsdn_pod_add_step_duration_seconds{step=%q}`, step), false, false})
		}
		p("| metric | ")
		for _, m := range Modes {
			p("%s | ", m)
		}
		p("\n| --- |%s\n", strings.Repeat(" --- |", len(Modes)))
		for _, rw := range rows {
			p("| %s |", rw.what)
			for _, m := range Modes {
				if !rw.kubelet && !isOfsdn(m) {
					p(" |")
					continue
				}
				h := r.merged(m, n, rw.kubelet, rw.key, rw.prefix)
				if h.Count == 0 {
					p(" – |")
					continue
				}
				p(" n=%.0f: %.1f (%.1f / %.1f) |", h.Count, h.Mean()*1000, h.Quantile(0.5)*1000, h.Quantile(0.99)*1000)
			}
			p("\n")
		}
		p("\nofsdn-node's own ADD time (its \"ADD done\" log lines, exact), by the ADD's place in the burst (log order):\n\n")
		p("| mode | ADDs | all p50 / p99 | ADDs 1–10 p50 / max | last 10 p50 / max | last-10 max / first-10 max |\n| --- | ---: | --- | --- | --- | ---: |\n")
		for _, m := range []string{ModePolicy, ModeNoPolicy} {
			var all []float64
			for _, b := range r.Bursts {
				if b.Mode == m && b.Pods == n {
					for _, a := range b.DaemonAdds {
						all = append(all, a.Ms)
					}
				}
			}
			first, last := addWindows(r, m, n)
			a, f, l := Summarize(all), Summarize(first), Summarize(last)
			p("| %s | %d | %.1f / %.1f | %.1f / %.1f | %.1f / %.1f | %.2f× |\n", m, a.N, a.P50, a.P99, f.P50, f.Max, l.P50, l.Max, ratio(l.Max, f.Max))
		}
	}

	p("\n### Targets of issue 24 (watch latency; reported, never asserted)\n\n")
	target := func(what string, got, limit float64, have bool) {
		if !have {
			p("- %s: not measured in this run\n", what)
			return
		}
		verdict := "**met**"
		if got > limit {
			verdict = "**not met**"
		}
		p("- %s: %.2f× (target ≤ %.2f×) %s\n", what, got, limit, verdict)
	}
	has := func(n int) bool {
		for _, s := range sizes {
			if s == n {
				return true
			}
		}
		return false
	}
	pol, br, host := sum(r, ModePolicy, 100), sum(r, ModeBridge, 100), sum(r, ModeHost, 100)
	target("burst 100, ofsdn policy on: start-up p99 vs the bridge plugin's", ratio(pol.P99, br.P99), 1.15, has(100))
	target("burst 100, ofsdn policy on: start-up p50 vs the hostNetwork floor's", ratio(pol.P50, host.P50), 1.3, has(100))
	big := 0
	for _, s := range sizes {
		if s >= 240 {
			big = s
		}
	}
	pb, bb := sum(r, ModePolicy, big), sum(r, ModeBridge, big)
	what := "burst 250, ofsdn policy on: p99 vs the bridge plugin's"
	if big > 0 {
		what = fmt.Sprintf("burst %d (a node of maxPods %d full, with the daemon's pod), ofsdn policy on: p99 vs the bridge plugin's", big, r.Config.MaxPods)
	}
	target(what, ratio(pb.P99, bb.P99), 1.2, big > 0)
	first, last := addWindows(r, ModePolicy, big)
	target("at that burst, ofsdn policy on: the daemon's own ADD p99 at the last 10 pods vs at the first 10 (max of each window, rounds pooled)",
		ratio(Summarize(last).P99, Summarize(first).P99), 1.5, big > 0 && len(first) > 0)
	fails := 0
	for _, b := range r.Bursts {
		fails += len(b.Failures)
		for _, f := range b.Failures {
			p("- failure: %s burst %d round %d: %s\n", b.Mode, b.Pods, b.Round, f)
		}
	}
	if fails == 0 {
		p("- no failure, and after every burst scaled back to 0: no pod, no ofsdn lease or br-int pod port, no host-local lease or bridge veth left: **met**\n")
	}
	return w.String()
}

func sum(r *Results, mode string, pods int) Summary {
	w, _, _ := r.Pooled(mode, pods)
	return Summarize(w)
}

// addWindows returns the daemon's ADD times of the first 10 and the last 10 ADDs (log
// order) of each of mode's bursts of pods pods, rounds pooled.
func addWindows(r *Results, mode string, pods int) (first, last []float64) {
	for _, b := range r.Bursts {
		if b.Mode != mode || b.Pods != pods {
			continue
		}
		for i, a := range b.DaemonAdds {
			if i < 10 {
				first = append(first, a.Ms)
			}
			if i >= len(b.DaemonAdds)-10 {
				last = append(last, a.Ms)
			}
		}
	}
	return first, last
}
