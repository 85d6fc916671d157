package policy

// An independent reading of networking.k8s.io/v1, straight from the API objects, against
// which the engine's compiled conjunctions are checked (the way the flows will use them).
// It shares no code with the engine: selectors, CIDRs and ports are evaluated here with
// the apimachinery and net/netip primitives directly.

import (
	"net/netip"
	"slices"
	"testing"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/intstr"
)

// world is a cluster as API objects.
type world struct {
	namespaces []*corev1.Namespace
	pods       []*corev1.Pod
	policies   []*networkingv1.NetworkPolicy
}

// endpoint is a traffic end: a pod, or a bare address (outside the cluster).
type endpoint struct {
	pod *corev1.Pod
	ip  netip.Addr
}

func (w *world) ns(name string) *corev1.Namespace {
	for _, n := range w.namespaces {
		if n.Name == name {
			return n
		}
	}
	return nil
}

func sel(t *testing.T, s *metav1.LabelSelector) labels.Selector {
	t.Helper()
	x, err := metav1.LabelSelectorAsSelector(s)
	if err != nil {
		t.Fatalf("selector %v: %v", s, err)
	}
	return x
}

// oracleTypes returns the defaulted policy types.
func oracleTypes(np *networkingv1.NetworkPolicy) (ing, eg bool) {
	if len(np.Spec.PolicyTypes) == 0 {
		return true, len(np.Spec.Egress) > 0
	}
	for _, t := range np.Spec.PolicyTypes {
		if t == networkingv1.PolicyTypeIngress {
			ing = true
		}
		if t == networkingv1.PolicyTypeEgress {
			eg = true
		}
	}
	return
}

// oracleAllowed says whether a connection from src to dst on proto/port is allowed.
func (w *world) oracleAllowed(t *testing.T, src, dst endpoint, proto corev1.Protocol, port int32) bool {
	return w.oracleDir(t, true, src, dst, proto, port) && w.oracleDir(t, false, dst, src, proto, port)
}

// oracleDir checks one side: egress of self to other (egress=true) or ingress of self
// from other. A bare address has no policy. The destination (for named ports) is other
// for egress, self for ingress.
func (w *world) oracleDir(t *testing.T, egress bool, self, other endpoint, proto corev1.Protocol, port int32) bool {
	if self.pod == nil {
		return true
	}
	isolated, allowed := false, false
	dst := other
	if !egress {
		dst = self
	}
	for _, np := range w.policies {
		if np.Namespace != self.pod.Namespace || !sel(t, &np.Spec.PodSelector).Matches(labels.Set(self.pod.Labels)) {
			continue
		}
		ing, eg := oracleTypes(np)
		if egress && !eg || !egress && !ing {
			continue
		}
		isolated = true
		type rule struct {
			peers []networkingv1.NetworkPolicyPeer
			ports []networkingv1.NetworkPolicyPort
		}
		var rules []rule
		if egress {
			for _, r := range np.Spec.Egress {
				rules = append(rules, rule{r.To, r.Ports})
			}
		} else {
			for _, r := range np.Spec.Ingress {
				rules = append(rules, rule{r.From, r.Ports})
			}
		}
		for _, r := range rules {
			if w.oraclePeers(t, np, r.peers, other) && oraclePorts(r.ports, dst, proto, port) {
				allowed = true
			}
		}
	}
	return !isolated || allowed
}

func (w *world) oraclePeers(t *testing.T, np *networkingv1.NetworkPolicy, peers []networkingv1.NetworkPolicyPeer, other endpoint) bool {
	if len(peers) == 0 {
		return true
	}
	for _, p := range peers {
		if p.IPBlock != nil {
			c := netip.MustParsePrefix(p.IPBlock.CIDR)
			if !c.Contains(other.ip) {
				continue
			}
			excepted := false
			for _, e := range p.IPBlock.Except {
				if netip.MustParsePrefix(e).Contains(other.ip) {
					excepted = true
				}
			}
			if !excepted {
				return true
			}
			continue
		}
		op := other.pod
		if op == nil || op.Spec.HostNetwork || op.Status.Phase == corev1.PodSucceeded || op.Status.Phase == corev1.PodFailed {
			continue
		}
		if p.NamespaceSelector == nil {
			if op.Namespace != np.Namespace {
				continue
			}
		} else {
			n := w.ns(op.Namespace)
			if n == nil || !sel(t, p.NamespaceSelector).Matches(labels.Set(n.Labels)) {
				continue
			}
		}
		if p.PodSelector != nil && !sel(t, p.PodSelector).Matches(labels.Set(op.Labels)) {
			continue
		}
		return true
	}
	return false
}

func oraclePorts(ports []networkingv1.NetworkPolicyPort, dst endpoint, proto corev1.Protocol, port int32) bool {
	if len(ports) == 0 {
		return true
	}
	for _, p := range ports {
		pp := corev1.ProtocolTCP
		if p.Protocol != nil {
			pp = *p.Protocol
		}
		if pp != proto {
			continue
		}
		if p.Port == nil {
			return true
		}
		if p.Port.Type == intstr.String {
			if dst.pod == nil {
				continue
			}
			for _, c := range dst.pod.Spec.Containers {
				for _, cp := range c.Ports {
					cpp := cp.Protocol
					if cpp == "" {
						cpp = corev1.ProtocolTCP
					}
					if cp.Name == p.Port.StrVal && cpp == proto && cp.ContainerPort == port {
						return true
					}
				}
			}
			continue
		}
		end := p.Port.IntVal
		if p.EndPort != nil {
			end = *p.EndPort
		}
		if port >= p.Port.IntVal && port <= end {
			return true
		}
	}
	return false
}

// engineAllows evaluates the compiled conjunctions as the pipeline will: egress on the
// source's node engine, ingress on the destination's, each side allowed when its pod is
// not isolated for the direction or a conjunction of that direction matches (pod, peer,
// port).
func engineAllows(src, dst endpoint, srcEng, dstEng *Engine, proto Protocol, port uint16) bool {
	side := func(e *Engine, self endpoint, peer netip.Addr, dir Direction) bool {
		if self.pod == nil || e == nil {
			return true
		}
		iso := e.Isolation(self.pod.Namespace, self.pod.Name)
		if dir == Egress && !iso.Egress || dir == Ingress && !iso.Ingress {
			return true
		}
		for _, c := range e.Conjunctions() {
			if c.Key.Direction != dir {
				continue
			}
			podOK := false
			for _, p := range c.Pods {
				podOK = podOK || slices.Contains(p.IPs, self.ip)
			}
			peerOK := c.AnyPeer
			for _, pr := range c.Peers {
				peerOK = peerOK || pr.Contains(peer)
			}
			portOK := c.AnyPort
			for _, pm := range c.Ports {
				portOK = portOK || pm.Protocol == proto && pm.Matches(port)
			}
			if podOK && peerOK && portOK {
				return true
			}
		}
		return false
	}
	return side(srcEng, src, dst.ip, Egress) && side(dstEng, dst, src.ip, Ingress)
}
