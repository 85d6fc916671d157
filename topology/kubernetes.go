package topology

// The Kubernetes source: a Node informer. This node's pod subnet comes from its
// spec.podCIDRs (allocated by kube-controller-manager's node IPAM, possibly after the node
// registered); peers are the other nodes with an IPv4 podCIDR and an InternalIP.

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
)

// Kubernetes is the Source backed by the API server's Node objects (get, list and watch
// on nodes are the only permissions it needs). Each Node add, update or delete changes at
// most that node's peer (or this node's settings); status-only updates (heartbeats,
// conditions) produce no event.
type Kubernetes struct {
	// Client talks to the API server.
	Client kubernetes.Interface
	// NodeName is this node's name (the NODE_NAME environment variable, from the
	// DaemonSet's spec.nodeName field reference).
	NodeName string
	// ClusterCIDR is reported in Local (the API has no field for it); nil = unset.
	ClusterCIDR *net.IPNet
	// Resync is the informer's resync period; 0 = none (watch events only).
	Resync time.Duration
	// Logger gets skipped nodes; nil = slog.Default().
	Logger *slog.Logger

	t      *tracker
	synced chan struct{}
}

// NewKubernetes returns a Kubernetes source for nodeName.
func NewKubernetes(client kubernetes.Interface, nodeName string, clusterCIDR *net.IPNet) *Kubernetes {
	return &Kubernetes{Client: client, NodeName: nodeName, ClusterCIDR: clusterCIDR, t: newTracker(),
		synced: make(chan struct{})}
}

// Synced returns a channel closed once every Node of the informer's initial list has been
// reported on Events (the event handler's registration has synced, client-go
// ResourceEventHandlerRegistration.HasSynced): the peers known at start are then all in
// the channel or already read. It is never closed if Run fails before.
func (k *Kubernetes) Synced() <-chan struct{} { return k.synced }

// Events returns the event channel (Source).
func (k *Kubernetes) Events() <-chan Event { return k.t.out }

// Run starts the Node informer and reports changes until ctx ends (Source). It returns
// an error if the informer cache does not sync (API server unreachable or RBAC missing
// "list/watch nodes") before ctx ends, else ctx.Err().
func (k *Kubernetes) Run(ctx context.Context) error {
	defer close(k.t.out)
	if k.NodeName == "" {
		return fmt.Errorf("topology: Kubernetes source needs this node's name: set NODE_NAME (fieldRef spec.nodeName)")
	}
	log := k.Logger
	if log == nil {
		log = slog.Default()
	}
	ictx, cancel := context.WithCancel(ctx)
	defer cancel()
	factory := informers.NewSharedInformerFactory(k.Client, k.Resync)
	inf := factory.Core().V1().Nodes().Informer()
	reg, err := inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { k.onNode(ictx, log, obj) },
		UpdateFunc: func(_, obj any) { k.onNode(ictx, log, obj) },
		DeleteFunc: func(obj any) {
			if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
				obj = d.Obj
			}
			n, ok := obj.(*corev1.Node)
			if !ok || n.Name == k.NodeName {
				return
			}
			k.emit(ictx, k.t.deletePeer(n.Name))
		},
	})
	if err != nil {
		return fmt.Errorf("topology: Node informer: %w", err)
	}
	factory.Start(ictx.Done())
	// Stop the informer (and wait for its handlers) before the deferred close of Events.
	defer factory.Shutdown()
	defer cancel()
	if !cache.WaitForCacheSync(ictx.Done(), inf.HasSynced, reg.HasSynced) {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		return fmt.Errorf("topology: Node informer did not sync: check the API server and RBAC (get/list/watch nodes)")
	}
	close(k.synced)
	<-ctx.Done()
	return ctx.Err()
}

// onNode handles a Node add or update.
func (k *Kubernetes) onNode(ctx context.Context, log *slog.Logger, obj any) {
	n, ok := obj.(*corev1.Node)
	if !ok {
		return
	}
	subnet, subnet6, v6First := nodePodSubnets(n)
	// An IPv6-only node (no IPv4 podCIDR) is reached over its IPv6 InternalIP.
	ip := nodeInternalIP(n, subnet == nil)
	var ip6 net.IP // beside an IPv4 underlay address: where pods reach IPv6 NodePorts
	if ip.To4() != nil {
		ip6 = nodeInternalIP(n, true)
	}
	if n.Name == k.NodeName {
		if subnet == nil && subnet6 == nil {
			log.Info("this node has no podCIDR yet; waiting for kube-controller-manager to allocate one", "node", n.Name)
			return
		}
		l := Local{Name: n.Name, NodeIP: ip, NodeIPv6: ip6, PodSubnet: subnet, PodSubnetIPv6: subnet6, IPv6First: v6First, ClusterCIDR: k.ClusterCIDR}
		k.emit(ctx, k.t.diff(&l, nil, false))
		return
	}
	if (subnet == nil && subnet6 == nil) || ip == nil {
		// Not (or no longer) reachable as a peer: no subnet yet, or no InternalIP.
		log.Debug("node is not a peer yet", "node", n.Name, "pod_subnet", subnet, "internal_ip", ip)
		k.emit(ctx, k.t.deletePeer(n.Name))
		return
	}
	k.emit(ctx, k.t.diff(nil, map[string]Peer{n.Name: {Name: n.Name, NodeIP: ip, NodeIPv6: ip6, PodSubnet: subnet, PodSubnetIPv6: subnet6}}, false))
}

func (k *Kubernetes) emit(ctx context.Context, evs []Event) {
	for _, e := range evs {
		if !k.t.send(ctx, e) {
			return
		}
	}
}

// nodePodSubnet returns the node's first IPv4 pod CIDR (spec.podCIDRs, else
// spec.podCIDR), or nil.
func nodePodSubnet(n *corev1.Node) *net.IPNet {
	v4, _, _ := nodePodSubnets(n)
	return v4
}

// nodePodSubnets returns the node's first IPv4 and first IPv6 pod CIDR (spec.podCIDRs,
// one per family on a dual-stack cluster, else spec.podCIDR), each nil if it has none
// (an IPv6-only node has no IPv4 one); v6First reports that the IPv6 one is listed first
// beside an IPv4 one (an IPv6-first cluster).
func nodePodSubnets(n *corev1.Node) (v4, v6 *net.IPNet, v6First bool) {
	cidrs := n.Spec.PodCIDRs
	if len(cidrs) == 0 && n.Spec.PodCIDR != "" {
		cidrs = []string{n.Spec.PodCIDR}
	}
	for _, c := range cidrs {
		if s, err := parseIPv4Net(c); err == nil && v4 == nil {
			v4 = s
		} else if s, err := parseIPv6Net(c); err == nil && v6 == nil {
			v6, v6First = s, v4 == nil
		}
	}
	return v4, v6, v6First && v4 != nil
}

// nodeInternalIP returns the node's first IPv4 InternalIP address; with wantIPv6 its
// first IPv6 InternalIP address (an IPv6-only node's: the underlay of an IPv6-only
// cluster; a dual-stack node's beside its IPv4 one: where pods reach IPv6 NodePorts);
// nil if it has none.
func nodeInternalIP(n *corev1.Node, wantIPv6 bool) net.IP {
	for _, a := range n.Status.Addresses {
		if a.Type != corev1.NodeInternalIP {
			continue
		}
		if ip, err := parseIPv4(a.Address); err == nil && !wantIPv6 {
			return ip
		}
		if ip, err := parseNodeIP(a.Address); err == nil && wantIPv6 && ip.To4() == nil {
			return ip
		}
	}
	return nil
}
