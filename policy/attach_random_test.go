package policy

import (
	"fmt"
	"math/rand"
	"net/netip"
	"sort"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// TestAttachBurstsEqualFromScratch drives an engine of node n1 the way a busy node does:
// many pods per namespace (three share each "pod" label value), pods scheduled to n1
// before their ADD, ADD and DEL bursts batched under Defer mixed with Pod updates (ports,
// labels, addresses, scheduling), API deletions and policy changes, pods re-added with
// another address and ofport, and checks after each step that the engine equals one
// built from scratch on the same objects and that the changes it reported describe
// exactly its state before and after.
func TestAttachBurstsEqualFromScratch(t *testing.T) {
	for seed := int64(1); seed <= 6; seed++ {
		t.Run(fmt.Sprint(seed), func(t *testing.T) { attachBursts(t, seed) })
	}
}

func attachBursts(t *testing.T, seed int64) {
	r := rand.New(rand.NewSource(seed))
	steps := 600
	if raceEnabled || testing.Short() {
		steps = 150
	}
	type podRec struct {
		p       *corev1.Pod
		present bool
	}
	var pods []*podRec
	for _, ns := range nsNames {
		for i := 0; i < 9; i++ {
			node := "n1"
			if i%3 == 2 {
				node = "n2"
			}
			p := &corev1.Pod{
				ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: fmt.Sprintf("p%d", i), Labels: map[string]string{"pod": podNames[i%3]}},
				Spec:       corev1.PodSpec{NodeName: node, Containers: []corev1.Container{{Name: "c", Ports: servePorts()}}},
				Status:     corev1.PodStatus{Phase: corev1.PodRunning},
			}
			if node == "n2" {
				p.Status.PodIPs = []corev1.PodIP{{IP: fmt.Sprintf("10.244.2.%d", 10+10*strings.Index("xyz", ns)+i)}}
			}
			pods = append(pods, &podRec{p: p, present: true})
		}
	}
	w := newWorld()
	w.pods = nil
	local := map[string]LocalPod{}
	addr := func() []netip.Addr {
		a := netip.AddrFrom4([4]byte{10, 244, 1, byte(1 + r.Intn(60))})
		if r.Intn(4) == 0 {
			return []netip.Addr{a, netip.MustParseAddr(fmt.Sprintf("fd00:10:244:1::%x", 1+r.Intn(60)))}
		}
		return []netip.Addr{a}
	}
	newEngine := func() *Engine {
		e := NewEngine(nil)
		e.SetNode("n1")
		for _, n := range w.namespaces {
			e.UpsertNamespace(ConvertNamespace(n))
		}
		return e
	}
	e := newEngine()
	for _, pr := range pods {
		e.UpsertPod(ConvertPod(pr.p))
	}
	// event applies one random event to e and the world; it returns its description.
	event := func(batch bool) (string, Changes) {
		pr := pods[r.Intn(len(pods))]
		p := pr.p
		k := p.Namespace + "/" + p.Name
		op := r.Intn(12)
		if batch && op >= 8 {
			op = r.Intn(8) // mostly attaches and detaches
		}
		switch op {
		case 0, 1, 2: // ADD (again, maybe with another address and ofport)
			if p.Spec.NodeName != "n1" || !pr.present {
				return "", Changes{}
			}
			lp := LocalPod{Namespace: p.Namespace, Name: p.Name, IPs: addr(), OFPort: uint32(3 + r.Intn(40))}
			if o, ok := local[k]; ok && r.Intn(2) == 0 {
				lp.IPs = o.IPs // the same address, maybe another ofport
			}
			local[k] = lp
			return "attach " + k + " " + fmt.Sprint(lp.IPs, lp.OFPort), e.SetLocalPod(lp)
		case 3, 4: // DEL
			delete(local, k)
			return "detach " + k, e.DeleteLocalPod(p.Namespace, p.Name)
		case 5: // container ports change
			ports := servePorts()
			r.Shuffle(len(ports), func(i, j int) { ports[i], ports[j] = ports[j], ports[i] })
			ports = ports[:r.Intn(len(ports)+1)]
			if r.Intn(2) == 0 && len(ports) > 0 {
				ports[0].ContainerPort = 82
			}
			p.Spec.Containers[0].Ports = ports
			if !pr.present {
				return "", Changes{}
			}
			return "ports " + k, e.UpsertPod(ConvertPod(p))
		case 6: // status address as the kubelet reports it
			if lp, ok := local[k]; ok && r.Intn(2) == 0 {
				p.Status.PodIPs = nil
				for _, ip := range lp.IPs {
					p.Status.PodIPs = append(p.Status.PodIPs, corev1.PodIP{IP: ip.String()})
				}
			} else {
				p.Status.PodIPs = nil
			}
			if !pr.present {
				return "", Changes{}
			}
			return "status " + k, e.UpsertPod(ConvertPod(p))
		case 7: // labels
			p.Labels = map[string]string{"pod": podNames[r.Intn(3)]}
			if r.Intn(2) == 0 {
				p.Labels["extra"] = "1"
			}
			if !pr.present {
				return "", Changes{}
			}
			return "relabel " + k, e.UpsertPod(ConvertPod(p))
		case 8: // deleted from the API, or back
			if pr.present {
				pr.present = false
				return "api delete " + k, e.DeletePod(p.Namespace, p.Name)
			}
			pr.present = true
			return "api create " + k, e.UpsertPod(ConvertPod(p))
		case 9, 10: // policy add/update
			np := randomPolicy(r, fmt.Sprintf("p%d", r.Intn(5)))
			for i, o := range w.policies {
				if o.Name == np.Name && o.Namespace == np.Namespace {
					w.policies = append(w.policies[:i], w.policies[i+1:]...)
					break
				}
			}
			w.policies = append(w.policies, np)
			return "upsert policy " + np.Namespace + "/" + np.Name, e.UpsertPolicy(ConvertPolicy(np))
		default:
			if len(w.policies) == 0 {
				return "", Changes{}
			}
			i := r.Intn(len(w.policies))
			np := w.policies[i]
			w.policies = append(w.policies[:i], w.policies[i+1:]...)
			return "delete policy " + np.Namespace + "/" + np.Name, e.DeletePolicy(np.Namespace, np.Name)
		}
	}
	for step := 0; step < steps; step++ {
		before := snapshot(e)
		var ch Changes
		var what string
		if r.Intn(2) == 0 {
			what, ch = event(false)
		} else {
			e.Defer()
			what = "batch:"
			for n := 1 + r.Intn(12); n > 0; n-- {
				d, _ := event(true)
				what += " [" + d + "]"
			}
			ch.Conjunctions = e.Flush().Conjunctions
		}
		after := snapshot(e)
		checkReported(t, fmt.Sprintf("step %d (%s)", step, what), before, after, ch.Conjunctions)
		fresh := newEngine()
		for _, pr := range pods {
			if pr.present {
				fresh.UpsertPod(ConvertPod(pr.p))
			}
		}
		for _, np := range w.policies {
			fresh.UpsertPolicy(ConvertPolicy(np))
		}
		lks := make([]string, 0, len(local))
		for k := range local {
			lks = append(lks, k)
		}
		sort.Strings(lks)
		for _, k := range lks {
			fresh.SetLocalPod(local[k])
		}
		if d := diffSnapshots(withoutIDs(fresh.Conjunctions2Map()), withoutIDs(after)); len(d) > 0 {
			t.Fatalf("step %d (%s): incremental state differs from scratch:\n%s", step, what, strings.Join(d, "\n"))
		}
		for k, lp := range local {
			if a, b := e.Isolation(lp.Namespace, lp.Name), fresh.Isolation(lp.Namespace, lp.Name); a != b {
				t.Fatalf("step %d (%s): local pod %s isolation %v, from scratch %v", step, what, k, a, b)
			}
		}
	}
}
