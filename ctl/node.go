package ctl

import (
	"context"
	"fmt"
	"sort"

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
			Name: a.PodName, OFPort: a.OFPort, HostVeth: a.HostVeth, Netns: a.Netns}
		if a.IP != nil {
			p.IP = a.IP.String()
		}
		if a.MAC != nil {
			p.MAC = a.MAC.String()
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
		q := Peer{Node: p.Name, OFPort: port}
		if p.NodeIP != nil {
			q.IP = p.NodeIP.String()
		}
		if p.PodSubnet != nil {
			q.PodSubnet = p.PodSubnet.String()
		}
		out = append(out, q)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Node < out[j].Node })
	return out, nil
}
