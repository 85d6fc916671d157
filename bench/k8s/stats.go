package benchk8s

// Statistics over samples, and what the benchmark reads from Prometheus text expositions
// (the kubelet's /metrics through the API server, ofsdn-node's /metrics) and from the
// kubelet's and the daemon's logs.

import (
	"bufio"
	"fmt"
	"io"
	"math"
	"sort"
	"strconv"
	"strings"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// Summary describes a set of samples, in milliseconds.
type Summary struct {
	// N is the number of samples.
	N int `json:"n"`
	// P50, P90, P99 are nearest-rank percentiles; Max the largest sample and Mean the
	// average (all 0 without samples).
	P50  float64 `json:"p50"`
	P90  float64 `json:"p90"`
	P99  float64 `json:"p99"`
	Max  float64 `json:"max"`
	Mean float64 `json:"mean"`
}

// Summarize returns the summary of samples (milliseconds); samples is not changed.
func Summarize(samples []float64) Summary {
	if len(samples) == 0 {
		return Summary{}
	}
	s := append([]float64(nil), samples...)
	sort.Float64s(s)
	sum := 0.0
	for _, v := range s {
		sum += v
	}
	return Summary{N: len(s), P50: Percentile(s, 50), P90: Percentile(s, 90), P99: Percentile(s, 99),
		Max: s[len(s)-1], Mean: sum / float64(len(s))}
}

// Percentile returns the nearest-rank p-th percentile (0 < p ≤ 100) of sorted, 0 if it is
// empty.
func Percentile(sorted []float64, p float64) float64 {
	if len(sorted) == 0 {
		return 0
	}
	k := int(math.Ceil(p / 100 * float64(len(sorted))))
	if k < 1 {
		k = 1
	}
	if k > len(sorted) {
		k = len(sorted)
	}
	return sorted[k-1]
}

// Histogram is one Prometheus histogram series (cumulative buckets), or the difference of
// two scrapes of it.
type Histogram struct {
	// Count is the number of observations; Sum their total, in the metric's unit
	// (seconds for every metric this benchmark reads).
	Count float64 `json:"count"`
	Sum   float64 `json:"sum"`
	// Bounds are the buckets' upper bounds, ascending (+Inf left out); Cumulative[i] the
	// observations ≤ Bounds[i].
	Bounds     []float64 `json:"bounds"`
	Cumulative []float64 `json:"cumulative"`
}

// Sub returns h minus an earlier scrape of the same series (before may be the zero
// Histogram: the series did not exist yet).
func (h Histogram) Sub(before Histogram) Histogram {
	out := Histogram{Count: h.Count - before.Count, Sum: h.Sum - before.Sum, Bounds: h.Bounds,
		Cumulative: make([]float64, len(h.Cumulative))}
	for i := range h.Cumulative {
		out.Cumulative[i] = h.Cumulative[i]
		if i < len(before.Cumulative) && len(before.Bounds) == len(h.Bounds) {
			out.Cumulative[i] -= before.Cumulative[i]
		}
	}
	return out
}

// Quantile estimates the q-th quantile (0 < q < 1) as Prometheus's histogram_quantile
// does: linear within the bucket holding it (from 0 for the first bucket), the largest
// finite bound when it falls into +Inf. It returns 0 without observations.
func (h Histogram) Quantile(q float64) float64 {
	if h.Count <= 0 || len(h.Bounds) == 0 {
		return 0
	}
	rank := q * h.Count
	lower, prev := 0.0, 0.0
	for i, b := range h.Bounds {
		if h.Cumulative[i] >= rank {
			in := h.Cumulative[i] - prev
			if in <= 0 {
				return b
			}
			return lower + (b-lower)*(rank-prev)/in
		}
		lower, prev = b, h.Cumulative[i]
	}
	return h.Bounds[len(h.Bounds)-1]
}

// Mean is Sum/Count, 0 without observations.
func (h Histogram) Mean() float64 {
	if h.Count <= 0 {
		return 0
	}
	return h.Sum / h.Count
}

// Histograms parses a Prometheus text exposition and returns every histogram series, keyed
// by SeriesKey (name{label="value",...}, labels sorted).
func Histograms(r io.Reader) (map[string]Histogram, error) {
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(r)
	if err != nil {
		return nil, err
	}
	out := map[string]Histogram{}
	for name, f := range fams {
		if f.GetType() != dto.MetricType_HISTOGRAM {
			continue
		}
		for _, m := range f.Metric {
			labels := map[string]string{}
			for _, l := range m.Label {
				labels[l.GetName()] = l.GetValue()
			}
			hm := m.GetHistogram()
			h := Histogram{Count: float64(hm.GetSampleCount()), Sum: hm.GetSampleSum()}
			for _, b := range hm.Bucket {
				if math.IsInf(b.GetUpperBound(), 1) {
					continue
				}
				h.Bounds = append(h.Bounds, b.GetUpperBound())
				h.Cumulative = append(h.Cumulative, float64(b.GetCumulativeCount()))
			}
			out[SeriesKey(name, labels)] = h
		}
	}
	return out, nil
}

// SeriesKey names a series: name{k="v",...} with the labels sorted by name; name alone
// without labels.
func SeriesKey(name string, labels map[string]string) string {
	if len(labels) == 0 {
		return name
	}
	keys := make([]string, 0, len(labels))
	for k := range labels {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var b strings.Builder
	b.WriteString(name + "{")
	for i, k := range keys {
		if i > 0 {
			b.WriteByte(',')
		}
		fmt.Fprintf(&b, "%s=%q", k, labels[k])
	}
	b.WriteByte('}')
	return b.String()
}

// KubeletStartup is one "Observed pod startup duration" line of the kubelet's log.
type KubeletStartup struct {
	// Pod is namespace/name.
	Pod string `json:"pod"`
	// SLOms is podStartSLOduration (creationTimestamp, which has 1 s resolution, to the
	// kubelet's watch-observed running, less image pulls), in milliseconds.
	SLOms float64 `json:"sloMs"`
}

// KubeletStartups parses the kubelet's klog text log for "Observed pod startup duration"
// lines of pods in namespace (all namespaces if it is "").
func KubeletStartups(r io.Reader, namespace string) []KubeletStartup {
	var out []KubeletStartup
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if !strings.Contains(line, `"Observed pod startup duration"`) {
			continue
		}
		pod := field(line, "pod=")
		pod = strings.Trim(pod, `"`)
		if namespace != "" && !strings.HasPrefix(pod, namespace+"/") {
			continue
		}
		v, err := strconv.ParseFloat(field(line, "podStartSLOduration="), 64)
		if err != nil {
			continue
		}
		out = append(out, KubeletStartup{Pod: pod, SLOms: v * 1000})
	}
	return out
}

// DaemonAdd is one successful ADD as ofsdn-node logged it ("ADD done").
type DaemonAdd struct {
	// Pod is namespace/name.
	Pod string `json:"pod"`
	// Ms is the daemon's duration_ms: request received to answered.
	Ms float64 `json:"ms"`
}

// DaemonAdds parses ofsdn-node's log (text handler, possibly behind a CRI log prefix) for
// "ADD done" lines of pods in namespace (all if ""), in log order; failed counts "ADD
// failed" lines of those pods.
func DaemonAdds(r io.Reader, namespace string) (adds []DaemonAdd, failed int) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		done := strings.Contains(line, `msg="ADD done"`)
		if !done && !strings.Contains(line, `msg="ADD failed"`) {
			continue
		}
		pod := strings.Trim(field(line, "pod="), `"`)
		if namespace != "" && !strings.HasPrefix(pod, namespace+"/") {
			continue
		}
		if !done {
			failed++
			continue
		}
		v, err := strconv.ParseFloat(field(line, "duration_ms="), 64)
		if err != nil {
			continue
		}
		adds = append(adds, DaemonAdd{Pod: pod, Ms: v})
	}
	return adds, failed
}

// field returns the value after key in a key=value log line (up to the next space, or the
// closing quote of a quoted value), "" if key is absent.
func field(line, key string) string {
	i := strings.Index(line, " "+key)
	if i < 0 {
		return ""
	}
	v := line[i+1+len(key):]
	if strings.HasPrefix(v, `"`) {
		if j := strings.Index(v[1:], `"`); j >= 0 {
			return v[:j+2]
		}
		return v
	}
	if j := strings.IndexByte(v, ' '); j >= 0 {
		return v[:j]
	}
	return v
}
