package ctl

import (
	"context"
	"fmt"
	"net"
	"sort"
	"strconv"

	"github.com/ofsdn/ofsdn/controller"
)

// NodeSource answers from the node that node returns; while it returns nil (the daemon is
// still connecting to Open vSwitch) every answer is ErrNotReady.
func NodeSource(node func() *controller.Node) Source { return nodeSource{node} }

type nodeSource struct{ node func() *controller.Node }

func (s nodeSource) get() (*controller.Node, error) {
	n := s.node()
	if n == nil {
		return nil, ErrNotReady
	}
	return n, nil
}

func (s nodeSource) Pods() ([]Pod, error) {
	n, err := s.get()
	if err != nil {
		return nil, err
	}
	out := []Pod{}
	for _, a := range n.Pods() {
		p := Pod{ContainerID: a.ContainerID, IfName: a.IfName, Namespace: a.PodNamespace,
			Name: a.PodName, OFPort: a.OFPort, OwnerID: a.OwnerID, HostVeth: a.HostVeth, Netns: a.Netns}
		for _, ip := range a.IPs {
			p.IPs = append(p.IPs, ip.String())
		}
		if len(p.IPs) > 0 {
			p.IP = p.IPs[0]
		}
		if a.MAC != nil {
			p.MAC = a.MAC.String()
		}
		if iso, ok := n.PodIsolation(a.PodNamespace, a.PodName); ok {
			p.Isolation = isolationText(iso.Ingress, iso.Egress)
		}
		out = append(out, p)
	}
	sort.Slice(out, func(i, j int) bool {
		a, b := out[i], out[j]
		if a.Namespace != b.Namespace {
			return a.Namespace < b.Namespace
		}
		if a.Name != b.Name {
			return a.Name < b.Name
		}
		if a.ContainerID != b.ContainerID {
			return a.ContainerID < b.ContainerID
		}
		return a.IfName < b.IfName
	})
	return out, nil
}

func (s nodeSource) Flows(ctx context.Context) ([]Stage, error) {
	n, err := s.get()
	if err != nil {
		return nil, err
	}
	stages, err := n.InstalledFlows(ctx)
	if err != nil {
		return nil, err
	}
	out := make([]Stage, 0, len(stages))
	for _, st := range stages {
		o := Stage{Table: st.Table, Name: st.Stage, Flows: []Flow{}, Missing: st.Missing}
		for _, f := range st.Flows {
			o.Flows = append(o.Flows, Flow{Priority: f.Priority, Cookie: fmt.Sprintf("%#x", f.Cookie),
				Packets: f.Packets, Bytes: f.Bytes, DurationSeconds: f.Duration.Seconds(),
				Flow: f.Text, Desired: f.Desired})
		}
		out = append(out, o)
	}
	return out, nil
}

// Peers returns the peers whose flows the node's overlay holds (Overlay.Peers), sorted
// by node name; none on a single node.
func (s nodeSource) Peers() ([]Peer, error) {
	n, err := s.get()
	if err != nil {
		return nil, err
	}
	out := []Peer{}
	ov := n.Overlay()
	if ov == nil {
		return out, nil
	}
	port := ov.TunnelOFPort()
	for _, p := range ov.Peers() {
		q := Peer{Node: p.Name, OFPort: port, OwnerID: p.OwnerID}
		if p.NodeIP != nil {
			q.IP = p.NodeIP.String()
		}
		if p.PodSubnet != nil {
			q.PodSubnet = p.PodSubnet.String()
		}
		if p.PodSubnetIPv6 != nil {
			q.PodSubnetIPv6 = p.PodSubnetIPv6.String()
		}
		if p.NodeIPv6 != nil {
			q.IPv6 = p.NodeIPv6.String()
		}
		out = append(out, q)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Node < out[j].Node })
	return out, nil
}

// Services reports the node's Service proxy: its counters and, per Service port on the
// switch, frontend, owner and group id, verdict, endpoints and the packet count of its
// service_lb flow. The counts need the switch; while it cannot be asked they are -1 and
// the rest is still reported.
func (s nodeSource) Services(ctx context.Context) (ServiceReport, error) {
	n, err := s.get()
	if err != nil {
		return ServiceReport{}, err
	}
	st := n.ServiceStats()
	if st == nil {
		return ServiceReport{Ports: []ServicePort{}}, nil
	}
	rep := ServiceReport{Enabled: true, Rejected: st.Rejected, RejectDropped: st.RejectDropped,
		ConntrackFlushes: st.Flushed, ConntrackFlushErrors: st.FlushErrors, Ports: []ServicePort{}}
	conns, cerr := n.ServiceConnections(ctx)
	for _, sp := range n.ServicePorts() {
		p := ServicePort{Namespace: sp.Name.Namespace, Name: sp.Name.Name, Port: sp.Name.Port,
			Protocol: sp.Name.Protocol.String(), External: sp.External,
			OwnerID: sp.Port.ID, GroupID: sp.GroupID, Verdict: sp.Verdict.String(),
			Frontends: []string{}, Endpoints: []string{}, Connections: -1}
		for _, fe := range sp.Port.AllFrontends() {
			p.Frontends = append(p.Frontends, fe.String())
		}
		if len(p.Frontends) > 0 {
			p.Frontend = p.Frontends[0]
		}
		for _, ep := range sp.Port.Endpoints {
			p.Endpoints = append(p.Endpoints, net.JoinHostPort(ep.IP.String(), strconv.Itoa(int(ep.Port))))
		}
		if cerr == nil {
			p.Connections = int64(conns[sp.Port.ID])
		}
		rep.Ports = append(rep.Ports, p)
	}
	return rep, nil
}

func isolationText(ingress, egress bool) string {
	switch {
	case ingress && egress:
		return "ingress+egress"
	case ingress:
		return "ingress"
	case egress:
		return "egress"
	}
	return "none"
}

// PolicyStatus reports the node's NetworkPolicy state without the per-pod detail.
func (s nodeSource) PolicyStatus() (PolicyReport, error) {
	n, err := s.get()
	if err != nil {
		return PolicyReport{}, err
	}
	st := n.PolicyStatus()
	if st == nil {
		return PolicyReport{Enabled: false, PodPolicies: []PodPolicy{}}, nil
	}
	return PolicyReport{Enabled: true, Synced: st.Synced, Pods: st.Pods, Namespaces: st.Namespaces,
		Policies: st.Policies, Rules: st.Conjunctions, RuleFlows: st.RuleFlows, Versions: st.Versions,
		Dirty: st.Dirty, LastError: st.LastError, PodPolicies: []PodPolicy{}}, nil
}

// Policies reports the node's NetworkPolicy enforcement, with each local pod's rules and
// their flows' packet counters from one dump of the two rule stages.
func (s nodeSource) Policies(ctx context.Context) (PolicyReport, error) {
	n, err := s.get()
	if err != nil {
		return PolicyReport{}, err
	}
	rep, err := s.PolicyStatus()
	if err != nil || !rep.Enabled {
		return rep, err
	}
	counts, err := n.PolicyCounters(ctx)
	if err != nil {
		return PolicyReport{}, err
	}
	for _, pp := range n.PodPolicies() {
		o := PodPolicy{Namespace: pp.Namespace, Name: pp.Name, IngressIsolated: pp.Ingress, EgressIsolated: pp.Egress,
			IngressPolicies: []string{}, EgressPolicies: []string{}, Rules: []PolicyRule{}, Denied: map[string]uint64{}}
		for _, ref := range pp.Policies {
			if ref.Ingress {
				o.IngressPolicies = append(o.IngressPolicies, ref.Name)
			}
			if ref.Egress {
				o.EgressPolicies = append(o.EgressPolicies, ref.Name)
			}
		}
		for _, r := range pp.Rules {
			pr := PolicyRule{Rule: r.Rule, Group: r.Group, ConjID: r.ConjID, Flows: []Flow{}}
			for _, f := range r.Flows {
				text := f.String()
				pr.Flows = append(pr.Flows, Flow{Priority: f.Priority, Cookie: fmt.Sprintf("%#x", uint64(f.Cookie)),
					Packets: counts[text], Flow: text, Desired: true})
			}
			for _, text := range r.Allow {
				pr.Allowed += counts[text]
			}
			o.Rules = append(o.Rules, pr)
		}
		for dir, texts := range pp.Deny {
			for _, text := range texts {
				o.Denied[dir] += counts[text] // both IP families' deny flows
			}
		}
		rep.PodPolicies = append(rep.PodPolicies, o)
	}
	return rep, nil
}
