// Package benchk8s measures pod start-up latency as the kubelet sees it (issue 24): on the
// real cluster of test/k8s, one node per mode, bursts of pods onto one node at a time
// (one Deployment scaled from 0), the modes interleaved round by round in one run so that
// the shared machine's drift hits them alike:
//
//   - ModePolicy: ofsdn with NetworkPolicy on and Config.Policies policies selecting the
//     pods (a DaemonSet of its own, with its own ConfigMap, on that node only);
//   - ModeNoPolicy: ofsdn with networkPolicy: false (another DaemonSet and ConfigMap);
//   - ModeBridge: the containernetworking reference bridge + host-local plugins (what
//     flannel delegates to; v1.10.0, built by test/k8s/build.sh), with a conflist the
//     benchmark writes on that node (no ofsdn pod there);
//   - ModeHost: hostNetwork pods, which skip CNI: the floor of what the kubelet and
//     containerd cost (the node has the bridge conflist only so that it is Ready).
//
// Every pod is the same: the test pause image (imported, never pulled), no probe, no
// port. A pod's start-up latency is taken from the benchmark's own watch: from the pod's
// creation as the watch saw it (ADDED) to the watch seeing it Ready (ms resolution), and,
// as the Kubernetes SLO defines it, from its creationTimestamp (1 s resolution: the
// truncation adds 0–1 s) to the same Ready. The kubelet's podStartSLOduration log lines,
// its /metrics (sandbox creation, runtime operations, its API client's rate limiter) and,
// for ofsdn, the daemon's ADD log lines and /metrics are collected per burst.
//
// Between bursts the Deployment is scaled to 0 and the node checked clean: no ofsdn IP
// lease and no pod port on br-int, or no host-local lease and no veth on the bridge.
// The benchmark is driven by `make bench-k8s` (bench_test.go, build tag benchk8s); this
// package holds everything but that entry point, so `go vet ./...` compiles it. Times are
// reported, never asserted.
package benchk8s

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	autoscalingv1 "k8s.io/api/autoscaling/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	"sigs.k8s.io/yaml"

	"github.com/ofsdn/ofsdn/test/k8s"
)

// The modes, each on a node of its own (see the package comment).
const (
	// ModePolicy is ofsdn with NetworkPolicy on and Config.Policies policies selecting the
	// burst's pods.
	ModePolicy = "ofsdn-policy"
	// ModeNoPolicy is ofsdn with networkPolicy: false.
	ModeNoPolicy = "ofsdn-nopolicy"
	// ModeBridge is the reference bridge + host-local plugins.
	ModeBridge = "bridge"
	// ModeHost is hostNetwork pods (no CNI).
	ModeHost = "hostnetwork"
)

// Modes lists the modes in their first round's order; node i+1 (ofsdn-nI+1) runs Modes[i].
var Modes = []string{ModePolicy, ModeNoPolicy, ModeBridge, ModeHost}

// ModeLabel is the node label naming the node's mode; the DaemonSets select on it.
const ModeLabel = "ofsdn.test/bench-mode"

// PodLabel is the label (value "burst") of every burst pod; the policies select on it.
const PodLabel = "ofsdn.test/bench"

// Bridge plugin settings: the network name (host-local's lease directory under
// /var/lib/cni/networks) and the Linux bridge.
const (
	bridgeNet = "cbr0"
	bridgeDev = "cni0"
)

// Config sizes a run.
type Config struct {
	// Bursts are the burst sizes (pods per burst), run in this order, each for Rounds
	// rounds; every one must be below MaxPods (the ofsdn nodes also run the daemon's pod).
	Bursts []int `json:"bursts"`
	// Rounds is how many times each burst size runs per mode (≥ 1); the mode order
	// rotates by one every round.
	Rounds int `json:"rounds"`
	// BurstRounds overrides Rounds for the burst sizes it names (e.g. one round of a full
	// node where time is short).
	BurstRounds map[int]int `json:"burstRounds,omitempty"`
	// MaxPods is the kubelets' maxPods (≤ 253: the node pod CIDRs are /24s).
	MaxPods int `json:"maxPods"`
	// Policies is the number of NetworkPolicies in ModePolicy's namespace, each selecting
	// every burst pod (ingress and egress from and to the burst pods, one TCP port each).
	Policies int `json:"policies"`
	// Settle is the idle pause after a burst's clean-up, before the next burst.
	Settle time.Duration `json:"settleNs"`
	// Timeout bounds one burst's wait for every pod Ready, and its clean-up (a bound
	// against hangs: a burst that exceeds it is recorded as failed).
	Timeout time.Duration `json:"timeoutNs"`
}

// RoundsOf returns the rounds burst size n runs: BurstRounds[n], else Rounds.
func (c Config) RoundsOf(n int) int {
	if r, ok := c.BurstRounds[n]; ok && r > 0 {
		return r
	}
	return c.Rounds
}

// Results is everything one run measured (the JSON written to bench/).
type Results struct {
	// Started and Finished bound the run (cluster start to teardown start), UTC.
	Started  time.Time `json:"started"`
	Finished time.Time `json:"finished"`
	// Commit is the tree's `git describe --always --dirty`.
	Commit string `json:"commit"`
	// Config is the run's configuration.
	Config Config `json:"config"`
	// CPUs is the machine's online CPU count.
	CPUs int `json:"cpus"`
	// Nodes maps each mode to its node's name.
	Nodes map[string]string `json:"nodes"`
	// Setup are the cluster's start-up steps.
	Setup []k8s.Timing `json:"setup"`
	// Bursts are the measured bursts, in run order.
	Bursts []Burst `json:"bursts"`
}

// Burst is one burst of one mode.
type Burst struct {
	// Mode is one of Modes; Pods the burst size; Round its round (0-based); Seq its place
	// in the run (0-based).
	Mode  string `json:"mode"`
	Pods  int    `json:"pods"`
	Round int    `json:"round"`
	Seq   int    `json:"seq"`
	// Node runs the burst.
	Node string `json:"node"`
	// Start is when the Deployment was scaled up.
	Start time.Time `json:"start"`
	// AllReadyMs is the scale-up call to the last pod seen Ready; 0 if not all became
	// Ready within Config.Timeout.
	AllReadyMs float64 `json:"allReadyMs"`
	// Samples are the pods, in the order the watch saw them Ready.
	Samples []PodSample `json:"samples"`
	// Kubelet are the kubelet's podStartSLOduration lines for the burst's pods.
	Kubelet []KubeletStartup `json:"kubelet"`
	// KubeletMetrics are the kubelet's histograms over the burst (scraped after minus
	// before; only series that changed), keyed by SeriesKey.
	KubeletMetrics map[string]Histogram `json:"kubeletMetrics"`
	// DaemonAdds are ofsdn-node's "ADD done" lines for the burst's pods, in log order
	// (ofsdn modes only).
	DaemonAdds []DaemonAdd `json:"daemonAdds,omitempty"`
	// DaemonMetrics are ofsdn-node's histograms over the burst (ofsdn modes only).
	DaemonMetrics map[string]Histogram `json:"daemonMetrics,omitempty"`
	// Load1Before and Load1After are /proc/loadavg's 1-minute load at the burst's start
	// and when every pod was Ready; BusyPct is the machine's non-idle CPU share over the
	// burst (all processes, other sessions' included), in percent.
	Load1Before float64 `json:"load1Before"`
	Load1After  float64 `json:"load1After"`
	BusyPct     float64 `json:"busyPct"`
	// CleanMs is the scale-down call to the node found clean (no pod left, nothing leaked).
	CleanMs float64 `json:"cleanMs"`
	// Failures says what went wrong: warning events of the burst's pods (a failed sandbox,
	// a failed ADD), pods not Ready in time, container restarts, leaks after clean-up.
	Failures []string `json:"failures,omitempty"`
}

// PodSample is one pod of a burst. Times are in milliseconds after Burst.Start.
type PodSample struct {
	// Name is the pod's name.
	Name string `json:"name"`
	// CreatedMs is when the benchmark's watch saw the pod created; ReadyMs when it saw it
	// Ready.
	CreatedMs float64 `json:"createdMs"`
	ReadyMs   float64 `json:"readyMs"`
	// WatchMs is ReadyMs - CreatedMs: start-up latency with both ends watch-observed.
	WatchMs float64 `json:"watchMs"`
	// SLOMs is the SLO's start-up latency: the watch-observed Ready less the pod's
	// creationTimestamp (whole seconds, so 0–1000 ms more than the true latency).
	SLOMs float64 `json:"sloMs"`
}

// Namespace is the namespace of mode's Deployment (and, for ModePolicy, its policies).
func Namespace(mode string) string { return "bench-" + mode }

// Run starts a cluster of one node per mode (maxPods cfg.MaxPods), deploys the modes and
// runs every burst of cfg, interleaved; it returns what it measured. It fails t when the
// cluster or a mode cannot be set up; a burst's failures are recorded in its Failures.
// progress, when not nil, is called with the results so far after each finished burst
// (Finished is then the time of that burst's end).
func Run(t *testing.T, cfg Config, progress func(*Results, Burst)) *Results {
	t.Helper()
	for _, n := range cfg.Bursts {
		if n < 1 || n >= cfg.MaxPods {
			t.Fatalf("burst %d: want 1 ≤ burst < maxPods %d (the ofsdn nodes also run the daemon's pod)", n, cfg.MaxPods)
		}
	}
	if cfg.Rounds < 1 {
		cfg.Rounds = 1
	}
	for _, b := range []string{"bridge", "host-local"} {
		if _, err := os.Stat(filepath.Join(k8s.CacheDir(), "cni-bin", b)); err != nil {
			t.Fatalf("the reference %s plugin is missing: run test/k8s/build.sh (make k8s-build): %v", b, err)
		}
	}
	res := &Results{Started: time.Now().UTC(), Config: cfg, CPUs: runtime.NumCPU(), Nodes: map[string]string{}}
	if out, err := exec.Command("git", "-C", k8s.RepoRoot(), "describe", "--always", "--dirty").Output(); err == nil {
		res.Commit = strings.TrimSpace(string(out))
	}
	images := t.TempDir()
	imgTime := k8s.BuildImages(t, images)
	c := k8s.StartCluster(t, k8s.ClusterConfig{Nodes: len(Modes), ImagesDir: images, MaxPods: cfg.MaxPods})
	b := &bench{t: t, c: c, cfg: cfg, ctx: context.Background(), nodes: map[string]*k8s.Node{}}
	rc := *c.CP.Rest
	rc.QPS, rc.Burst = 100, 200
	cs, err := kubernetes.NewForConfig(&rc)
	if err != nil {
		t.Fatal(err)
	}
	b.cs = cs
	for i, m := range Modes {
		b.nodes[m] = c.Nodes[i]
		res.Nodes[m] = c.Nodes[i].Name
	}
	setupStart := time.Now()
	b.setup()
	res.Setup = append([]k8s.Timing{{Step: "images built", Duration: imgTime}}, c.Timings...)
	res.Setup = append(res.Setup, k8s.Timing{Step: "modes deployed (DaemonSets, bridge conflists, policies) → every node Ready", Duration: time.Since(setupStart)})

	seq := 0
	for _, n := range cfg.Bursts {
		for r := 0; r < cfg.RoundsOf(n); r++ {
			for i := range Modes {
				m := Modes[(i+r)%len(Modes)]
				bu := b.burst(m, n, r, seq)
				seq++
				res.Bursts = append(res.Bursts, bu)
				if progress != nil {
					res.Finished = time.Now().UTC()
					progress(res, bu)
				}
			}
		}
	}
	res.Finished = time.Now().UTC()
	return res
}

type bench struct {
	t     *testing.T
	c     *k8s.Cluster
	cs    kubernetes.Interface
	cfg   Config
	ctx   context.Context
	nodes map[string]*k8s.Node
	track *tracker
}

func isOfsdn(mode string) bool { return mode == ModePolicy || mode == ModeNoPolicy }

// setup labels the nodes, deploys the two ofsdn DaemonSets and the bridge conflists,
// makes the namespaces, policies and Deployments (0 replicas), starts the pod watch and
// waits for every node to be Ready.
func (b *bench) setup() {
	t := b.t
	for _, m := range Modes {
		n := b.nodes[m]
		b.c.MustKubectl(t, "label", "node", n.Name, ModeLabel+"="+m, "--overwrite")
	}
	podCIDR := map[string]string{}
	k8s.WaitFor(t, "every node has a podCIDR", 60*time.Second, func() error {
		for _, m := range Modes {
			n, err := b.cs.CoreV1().Nodes().Get(b.ctx, b.nodes[m].Name, metav1.GetOptions{})
			if err != nil {
				return err
			}
			if n.Spec.PodCIDR == "" {
				return fmt.Errorf("%s has no podCIDR yet", n.Name)
			}
			podCIDR[m] = n.Spec.PodCIDR
		}
		return nil
	})
	b.apply(b.ofsdnManifests())
	for _, m := range []string{ModeBridge, ModeHost} {
		b.installBridge(b.nodes[m], podCIDR[m])
	}
	for _, m := range Modes {
		n := b.nodes[m]
		k8s.WaitFor(t, n.Name+" Ready", 180*time.Second, func() error {
			node, err := b.cs.CoreV1().Nodes().Get(b.ctx, n.Name, metav1.GetOptions{})
			if err != nil {
				return err
			}
			if r := k8s.NodeReady(node); r == nil || r.Status != corev1.ConditionTrue {
				return fmt.Errorf("Ready condition %+v", r)
			}
			return nil
		})
	}
	b.track = newTracker(t, b.cs)
	for _, m := range Modes {
		ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: Namespace(m)}}
		if _, err := b.cs.CoreV1().Namespaces().Create(b.ctx, ns, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	for i := 0; i < b.cfg.Policies; i++ {
		if _, err := b.cs.NetworkingV1().NetworkPolicies(Namespace(ModePolicy)).Create(b.ctx, policy(i), metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	for _, m := range Modes {
		if _, err := b.cs.AppsV1().Deployments(Namespace(m)).Create(b.ctx, deployment(m), metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	// The default ServiceAccount each namespace's pods need is made asynchronously.
	for _, m := range Modes {
		k8s.WaitFor(t, Namespace(m)+"'s default ServiceAccount", 60*time.Second, func() error {
			_, err := b.cs.CoreV1().ServiceAccounts(Namespace(m)).Get(b.ctx, "default", metav1.GetOptions{})
			return err
		})
	}
	// ofsdn with policy on knows the policies before the first burst.
	k8s.WaitFor(t, "the policy-on daemon sees the policies", 60*time.Second, func() error {
		fams, err := b.daemonText(b.nodes[ModePolicy])
		if err != nil {
			return err
		}
		want := fmt.Sprintf("ofsdn_network_policies %d", b.cfg.Policies)
		if !strings.Contains(fams, "\n"+want+"\n") {
			return fmt.Errorf("no %q in the daemon's metrics", want)
		}
		return nil
	})
}

// ofsdnManifests renders test/k8s/overlay (kubectl kustomize) and returns it with its
// ConfigMap and DaemonSet replaced by one pair per ofsdn mode: ofsdn-config-MODE
// (networkPolicy on or off, logLevel info) and DaemonSet ofsdn-node-MODE selecting
// ModeLabel=MODE.
func (b *bench) ofsdnManifests() string {
	t := b.t
	out := b.c.MustKubectl(t, "kustomize", "test/k8s/overlay")
	var docs []string
	var cm *corev1.ConfigMap
	var ds *appsv1.DaemonSet
	for _, doc := range strings.Split(out, "\n---\n") {
		var tm metav1.TypeMeta
		if err := yaml.Unmarshal([]byte(doc), &tm); err != nil {
			t.Fatalf("kustomize output: %v\n%s", err, doc)
		}
		switch tm.Kind {
		case "ConfigMap":
			cm = &corev1.ConfigMap{}
			must(t, yaml.Unmarshal([]byte(doc), cm))
		case "DaemonSet":
			ds = &appsv1.DaemonSet{}
			must(t, yaml.Unmarshal([]byte(doc), ds))
		default:
			docs = append(docs, doc)
		}
	}
	if cm == nil || ds == nil {
		t.Fatalf("kustomize test/k8s/overlay has no ConfigMap or DaemonSet:\n%s", out)
	}
	for _, m := range []string{ModePolicy, ModeNoPolicy} {
		c := cm.DeepCopy()
		c.Name = "ofsdn-config-" + m
		conf := strings.TrimRight(strings.ReplaceAll(c.Data["config.yaml"], "logLevel: debug", "logLevel: "+EnvStr("BENCH_K8S_LOGLEVEL", "info")), "\n")
		c.Data["config.yaml"] = conf + fmt.Sprintf("\nnetworkPolicy: %v\n", m == ModePolicy)
		d := ds.DeepCopy()
		d.Name = "ofsdn-node-" + m
		app := map[string]string{"app": "ofsdn-node-" + m}
		d.Labels = app
		d.Spec.Selector = &metav1.LabelSelector{MatchLabels: app}
		d.Spec.Template.Labels = app
		d.Spec.Template.Spec.NodeSelector = map[string]string{ModeLabel: m}
		for i := range d.Spec.Template.Spec.Volumes {
			if v := &d.Spec.Template.Spec.Volumes[i]; v.ConfigMap != nil && v.ConfigMap.Name == cm.Name {
				v.ConfigMap.Name = c.Name
			}
		}
		for _, o := range []any{c, d} {
			y, err := yaml.Marshal(o)
			must(t, err)
			docs = append(docs, string(y))
		}
	}
	return strings.Join(docs, "\n---\n")
}

func (b *bench) apply(manifest string) {
	b.t.Helper()
	cmd := b.c.KubectlCmd("apply", "-f", "-")
	cmd.Stdin = strings.NewReader(manifest)
	if out, err := cmd.CombinedOutput(); err != nil {
		b.t.Fatalf("kubectl apply: %v\n%s\n%s", err, out, manifest)
	}
}

// installBridge puts the reference bridge and host-local plugins in n's /opt/cni/bin and
// a conflist for podCIDR in its /etc/cni/net.d: what flannel's delegate runs (bridge cni0,
// default gateway, hairpin, no masquerade: flannel masquerades itself), without portmap
// (ofsdn's conflist chains nothing either).
func (b *bench) installBridge(n *k8s.Node, podCIDR string) {
	t := b.t
	for _, p := range []string{"bridge", "host-local"} {
		src, err := os.ReadFile(filepath.Join(k8s.CacheDir(), "cni-bin", p))
		must(t, err)
		must(t, os.WriteFile(filepath.Join(n.CNIBinDir(), p), src, 0o755))
	}
	conf := map[string]any{
		"cniVersion": "1.0.0",
		"name":       bridgeNet,
		"plugins": []any{map[string]any{
			"type": "bridge", "bridge": bridgeDev, "isGateway": true, "isDefaultGateway": true,
			"hairpinMode": true, "ipMasq": false,
			"ipam": map[string]any{"type": "host-local", "ranges": [][]map[string]string{{{"subnet": podCIDR}}}},
		}},
	}
	js, err := json.MarshalIndent(conf, "", "  ")
	must(t, err)
	must(t, os.WriteFile(filepath.Join(n.CNIConfDir(), "10-bridge.conflist"), append(js, '\n'), 0o644))
}

// policy is the i-th NetworkPolicy: every burst pod isolated both ways, allowed from and
// to the burst pods on TCP port 8000+i.
func policy(i int) *networkingv1.NetworkPolicy {
	sel := metav1.LabelSelector{MatchLabels: map[string]string{PodLabel: "burst"}}
	tcp := corev1.ProtocolTCP
	port := intstr.FromInt32(int32(8000 + i))
	ports := []networkingv1.NetworkPolicyPort{{Protocol: &tcp, Port: &port}}
	peer := []networkingv1.NetworkPolicyPeer{{PodSelector: &sel}}
	return &networkingv1.NetworkPolicy{
		ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("bench-%d", i), Namespace: Namespace(ModePolicy)},
		Spec: networkingv1.NetworkPolicySpec{
			PodSelector: sel,
			PolicyTypes: []networkingv1.PolicyType{networkingv1.PolicyTypeIngress, networkingv1.PolicyTypeEgress},
			Ingress:     []networkingv1.NetworkPolicyIngressRule{{From: peer, Ports: ports}},
			Egress:      []networkingv1.NetworkPolicyEgressRule{{To: peer, Ports: ports}},
		},
	}
}

// deployment is mode's Deployment, 0 replicas: the pause image (never pulled), on the
// mode's node, hostNetwork for ModeHost, dnsPolicy Default, 1 s grace.
func deployment(mode string) *appsv1.Deployment {
	labels := map[string]string{PodLabel: "burst"}
	zero, grace := int32(0), int64(1)
	return &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: "burst", Namespace: Namespace(mode)},
		Spec: appsv1.DeploymentSpec{
			Replicas: &zero,
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec: corev1.PodSpec{
					NodeSelector: map[string]string{ModeLabel: mode},
					HostNetwork:  mode == ModeHost,
					// The test cluster runs no DNS: the node's resolv.conf, for every mode.
					DNSPolicy:                     corev1.DNSDefault,
					TerminationGracePeriodSeconds: &grace,
					EnableServiceLinks:            new(bool),
					Containers: []corev1.Container{{
						Name: "pause", Image: k8s.PauseImage, ImagePullPolicy: corev1.PullNever,
					}},
				},
			},
		},
	}
}

// burst runs one burst of n pods of mode and cleans up after it.
func (b *bench) burst(mode string, n, round, seq int) Burst {
	t := b.t
	node := b.nodes[mode]
	ns := Namespace(mode)
	bu := Burst{Mode: mode, Pods: n, Round: round, Seq: seq, Node: node.Name}
	fail := func(format string, args ...any) { bu.Failures = append(bu.Failures, fmt.Sprintf(format, args...)) }

	kubeletBefore := b.kubeletHist(node)
	var daemonBefore map[string]Histogram
	var daemonLog string
	var daemonOff int64
	if isOfsdn(mode) {
		daemonBefore = b.daemonHist(node)
		daemonLog = b.daemonLogPath(node, mode)
		daemonOff = fileSize(daemonLog)
	}
	kubeletLog := filepath.Join(node.Dir, "logs", "kubelet.log")
	kubeletOff := fileSize(kubeletLog)
	b.track.reset(ns)
	bu.Load1Before = load1()
	cpu0 := cpuTimes()

	bu.Start = time.Now()
	b.scale(ns, n)
	var ready []*podTrack
	deadline := bu.Start.Add(b.cfg.Timeout)
	for {
		ready = b.track.ready(ns)
		if len(ready) >= n || time.Now().After(deadline) {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	bu.Load1After = load1()
	bu.BusyPct = busyPct(cpu0, cpuTimes())
	if len(ready) < n {
		fail("%d of %d pods Ready after %v", len(ready), n, b.cfg.Timeout)
	}
	for _, p := range ready {
		s := PodSample{Name: p.name, CreatedMs: ms(p.added.Sub(bu.Start)), ReadyMs: ms(p.ready.Sub(bu.Start)),
			WatchMs: ms(p.ready.Sub(p.added)), SLOMs: ms(p.ready.Sub(p.created))}
		bu.Samples = append(bu.Samples, s)
		if s.ReadyMs > bu.AllReadyMs && len(ready) >= n {
			bu.AllReadyMs = s.ReadyMs
		}
	}
	// The kubelet logs and counts a pod's start-up when its own watch sees the pod running,
	// which may come after the benchmark's watch saw it Ready: wait for its lines (10 s at
	// most), then scrape.
	for end := time.Now().Add(10 * time.Second); ; time.Sleep(250 * time.Millisecond) {
		bu.Kubelet = KubeletStartups(readFrom(kubeletLog, kubeletOff), ns)
		if len(bu.Kubelet) >= len(ready) || time.Now().After(end) {
			break
		}
	}
	bu.KubeletMetrics = delta(b.kubeletHist(node), kubeletBefore)
	if isOfsdn(mode) {
		bu.DaemonMetrics = delta(b.daemonHist(node), daemonBefore)
		var failed int
		bu.DaemonAdds, failed = DaemonAdds(readFrom(daemonLog, daemonOff), ns)
		if dir := os.Getenv("BENCH_K8S_KEEP_LOGS"); dir != "" {
			// The daemon's log of this burst, for reading where its time went.
			_ = os.MkdirAll(dir, 0o755)
			if f, err := os.Create(filepath.Join(dir, fmt.Sprintf("ofsdn-node-%s-%d-r%d.log", mode, n, round))); err == nil {
				_, _ = readFrom(daemonLog, daemonOff).WriteTo(f)
				_ = f.Close()
			}
		}
		if failed > 0 {
			fail("%d ADDs failed in the daemon's log", failed)
		}
	}
	pods, err := b.cs.CoreV1().Pods(ns).List(b.ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range pods.Items {
		for _, s := range p.Status.ContainerStatuses {
			if s.RestartCount > 0 {
				fail("%s restarted %d times", p.Name, s.RestartCount)
			}
		}
	}
	bu.Failures = append(bu.Failures, b.warnings(ns, bu.Start)...)

	cleanStart := time.Now()
	b.scale(ns, 0)
	if err := b.waitClean(mode, node, ns, cleanStart.Add(b.cfg.Timeout)); err != nil {
		fail("clean-up: %v", err)
	}
	bu.CleanMs = ms(time.Since(cleanStart))
	// Events are kept; the namespace's warnings of this burst are told apart by time.
	time.Sleep(b.cfg.Settle)
	return bu
}

func (b *bench) scale(ns string, n int) {
	b.t.Helper()
	_, err := b.cs.AppsV1().Deployments(ns).UpdateScale(b.ctx, "burst", &autoscalingv1.Scale{
		ObjectMeta: metav1.ObjectMeta{Name: "burst", Namespace: ns},
		Spec:       autoscalingv1.ScaleSpec{Replicas: int32(n)}}, metav1.UpdateOptions{})
	if err != nil {
		b.t.Fatalf("scale %s/burst to %d: %v", ns, n, err)
	}
}

// warnings returns the Warning events in ns since since (their reason and message, with a
// count), e.g. FailedCreatePodSandBox.
func (b *bench) warnings(ns string, since time.Time) []string {
	l, err := b.cs.CoreV1().Events(ns).List(b.ctx, metav1.ListOptions{FieldSelector: "type=Warning"})
	if err != nil {
		return []string{"list events: " + err.Error()}
	}
	var out []string
	for _, ev := range l.Items {
		last := ev.LastTimestamp.Time
		if last.IsZero() {
			last = ev.EventTime.Time
		}
		if last.Before(since.Truncate(time.Second)) {
			continue
		}
		msg := ev.Message
		if len(msg) > 300 {
			msg = msg[:300] + "…"
		}
		out = append(out, fmt.Sprintf("event %s %s ×%d: %s", ev.Reason, ev.InvolvedObject.Name, max(ev.Count, 1), msg))
	}
	return out
}

// waitClean waits until ns has no pod and mode's node holds nothing of them: for ofsdn no
// IP lease and only the gateway and tunnel ports on br-int; for the bridge plugin no
// host-local lease and no veth on the bridge.
func (b *bench) waitClean(mode string, node *k8s.Node, ns string, deadline time.Time) error {
	var last error
	for {
		last = b.clean(mode, node, ns)
		if last == nil || time.Now().After(deadline) {
			return last
		}
		time.Sleep(200 * time.Millisecond)
	}
}

func (b *bench) clean(mode string, node *k8s.Node, ns string) error {
	pods, err := b.cs.CoreV1().Pods(ns).List(b.ctx, metav1.ListOptions{})
	if err != nil {
		return err
	}
	if len(pods.Items) > 0 {
		return fmt.Errorf("%d pods left in %s", len(pods.Items), ns)
	}
	switch {
	case isOfsdn(mode):
		if l := node.Leases(b.t); len(l) > 0 {
			return fmt.Errorf("%d ofsdn IP leases left on %s", len(l), node.Name)
		}
		out, err := exec.Command("ovs-vsctl", "--db="+node.OVS.OVSDBEndpoint(), "list-ports", "br-int").CombinedOutput()
		if err != nil {
			return fmt.Errorf("ovs-vsctl list-ports br-int: %v: %s", err, out)
		}
		ports := strings.Fields(string(out))
		sort.Strings(ports)
		if strings.Join(ports, " ") != "ofsdn-gw0 vxlan0" {
			return fmt.Errorf("br-int ports on %s: %d (%v), want only ofsdn-gw0 and vxlan0", node.Name, len(ports), ports)
		}
	case mode == ModeBridge:
		dir := filepath.Join(node.Dir, "ovl", "var-lib", "up", "cni", "networks", bridgeNet)
		ents, _ := os.ReadDir(dir)
		var leases []string
		for _, e := range ents {
			if n := e.Name(); n != "lock" && !strings.HasPrefix(n, "last_reserved_ip") {
				leases = append(leases, n)
			}
		}
		if len(leases) > 0 {
			return fmt.Errorf("%d host-local leases left on %s", len(leases), node.Name)
		}
		out, err := exec.Command("ip", "-n", node.OVS.Netns, "-o", "link", "show", "master", bridgeDev).CombinedOutput()
		if err != nil {
			return fmt.Errorf("ip link show master %s: %v: %s", bridgeDev, err, out)
		}
		if s := strings.TrimSpace(string(out)); s != "" {
			return fmt.Errorf("%d veths left on %s of %s", len(strings.Split(s, "\n")), bridgeDev, node.Name)
		}
	}
	return nil
}

// kubeletHist scrapes the node's kubelet /metrics through the API server's node proxy and
// returns its kubelet_* and rest_client_* histograms (empty, logged, on an error).
func (b *bench) kubeletHist(n *k8s.Node) map[string]Histogram {
	ctx, cancel := context.WithTimeout(b.ctx, 20*time.Second)
	defer cancel()
	raw, err := b.cs.CoreV1().RESTClient().Get().AbsPath("/api/v1/nodes", n.Name, "proxy", "metrics").DoRaw(ctx)
	if err != nil {
		b.t.Logf("%s: kubelet /metrics: %v", n.Name, err)
		return map[string]Histogram{}
	}
	h, err := Histograms(bytes.NewReader(raw))
	if err != nil {
		b.t.Logf("%s: kubelet /metrics: %v", n.Name, err)
		return map[string]Histogram{}
	}
	for k := range h {
		if !strings.HasPrefix(k, "kubelet_") && !strings.HasPrefix(k, "rest_client_rate_limiter") && !strings.HasPrefix(k, "rest_client_request_duration") {
			delete(h, k)
		}
	}
	return h
}

// daemonText returns ofsdn-node's /metrics (127.0.0.1:9469 in the node's namespace).
func (b *bench) daemonText(n *k8s.Node) (string, error) {
	hc := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{DialContext: k8s.NetnsDialer(n.NetnsPath())}}
	r, err := hc.Get("http://127.0.0.1:9469/metrics")
	if err != nil {
		return "", err
	}
	defer r.Body.Close()
	var buf bytes.Buffer
	if _, err := buf.ReadFrom(r.Body); err != nil {
		return "", err
	}
	return buf.String(), nil
}

// daemonHist returns ofsdn-node's ofsdn_* histograms.
func (b *bench) daemonHist(n *k8s.Node) map[string]Histogram {
	s, err := b.daemonText(n)
	if err == nil {
		var h map[string]Histogram
		if h, err = Histograms(strings.NewReader(s)); err == nil {
			for k := range h {
				if !strings.HasPrefix(k, "ofsdn_") {
					delete(h, k)
				}
			}
			return h
		}
	}
	b.t.Logf("%s: ofsdn-node /metrics: %v", n.Name, err)
	return map[string]Histogram{}
}

// daemonLogPath is the current log file of mode's ofsdn-node container on n (the
// kubelet's pod log directory), "" if there is none.
func (b *bench) daemonLogPath(n *k8s.Node, mode string) string {
	m, _ := filepath.Glob(filepath.Join(n.Dir, "pod-logs", "kube-system_ofsdn-node-"+mode+"-*", "ofsdn-node", "*.log"))
	sort.Strings(m)
	if len(m) == 0 {
		b.t.Logf("%s: no ofsdn-node log found", n.Name)
		return ""
	}
	return m[len(m)-1]
}

func delta(after, before map[string]Histogram) map[string]Histogram {
	out := map[string]Histogram{}
	for k, h := range after {
		d := h.Sub(before[k])
		if d.Count > 0 {
			out[k] = d
		}
	}
	return out
}

// ---- the pod watch ----------------------------------------------------------------------

type podTrack struct {
	ns, name string
	created  time.Time // creationTimestamp (whole seconds)
	added    time.Time // the watch saw it first
	ready    time.Time // the watch saw it Ready first (zero: not yet)
}

// tracker follows every burst pod (PodLabel=burst, all namespaces) through one informer,
// stamping when each was first seen and first seen Ready.
type tracker struct {
	mu   sync.Mutex
	pods map[string]*podTrack // by UID
}

func newTracker(t *testing.T, cs kubernetes.Interface) *tracker {
	tr := &tracker{pods: map[string]*podTrack{}}
	f := informers.NewSharedInformerFactoryWithOptions(cs, 0,
		informers.WithTweakListOptions(func(o *metav1.ListOptions) { o.LabelSelector = PodLabel + "=burst" }))
	inf := f.Core().V1().Pods().Informer()
	_, err := inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { tr.see(obj) },
		UpdateFunc: func(_, obj any) { tr.see(obj) },
	})
	if err != nil {
		t.Fatal(err)
	}
	stop := make(chan struct{})
	t.Cleanup(func() { close(stop) })
	f.Start(stop)
	if !cache.WaitForCacheSync(stop, inf.HasSynced) {
		t.Fatal("the pod informer did not sync")
	}
	return tr
}

func (tr *tracker) see(obj any) {
	now := time.Now()
	p, ok := obj.(*corev1.Pod)
	if !ok {
		return
	}
	tr.mu.Lock()
	defer tr.mu.Unlock()
	pt := tr.pods[string(p.UID)]
	if pt == nil {
		pt = &podTrack{ns: p.Namespace, name: p.Name, created: p.CreationTimestamp.Time, added: now}
		tr.pods[string(p.UID)] = pt
	}
	if pt.ready.IsZero() && podReady(p) {
		pt.ready = now
	}
}

// reset forgets ns's pods (the previous burst's).
func (tr *tracker) reset(ns string) {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	for uid, p := range tr.pods {
		if p.ns == ns {
			delete(tr.pods, uid)
		}
	}
}

// ready returns ns's pods seen Ready, in the order they became so.
func (tr *tracker) ready(ns string) []*podTrack {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	var out []*podTrack
	for _, p := range tr.pods {
		if p.ns == ns && !p.ready.IsZero() {
			c := *p
			out = append(out, &c)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].ready.Before(out[j].ready) })
	return out
}

func podReady(p *corev1.Pod) bool {
	if p.DeletionTimestamp != nil || p.Status.Phase != corev1.PodRunning {
		return false
	}
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// ---- small helpers ----------------------------------------------------------------------

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

func must(t testing.TB, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

func fileSize(path string) int64 {
	if path == "" {
		return 0
	}
	st, err := os.Stat(path)
	if err != nil {
		return 0
	}
	return st.Size()
}

// readFrom returns path's contents from off on (empty if it cannot be read).
func readFrom(path string, off int64) *bytes.Reader {
	b, err := os.ReadFile(path)
	if err != nil || off > int64(len(b)) {
		return bytes.NewReader(nil)
	}
	return bytes.NewReader(b[off:])
}

func load1() float64 {
	b, _ := os.ReadFile("/proc/loadavg")
	v, _ := strconv.ParseFloat(strings.Fields(string(b) + " 0")[0], 64)
	return v
}

// cpuTimes returns /proc/stat's aggregate cpu line: total and idle (idle + iowait) jiffies.
func cpuTimes() [2]uint64 {
	b, _ := os.ReadFile("/proc/stat")
	line := strings.SplitN(string(b), "\n", 2)[0]
	f := strings.Fields(line)
	var total, idle uint64
	for i, s := range f[1:] {
		v, _ := strconv.ParseUint(s, 10, 64)
		total += v
		if i == 3 || i == 4 {
			idle += v
		}
	}
	return [2]uint64{total, idle}
}

func busyPct(a, b [2]uint64) float64 {
	dt := float64(b[0] - a[0])
	if dt <= 0 {
		return 0
	}
	return 100 * (dt - float64(b[1]-a[1])) / dt
}
