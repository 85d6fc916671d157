// Command ofsdnctl inspects a running ofsdn-node daemon through its inspection socket
// (package ctl), without Open vSwitch's own tools:
//
//	ofsdnctl [-socket PATH] [-o table|json] pods    local pods: container ID, namespace/name, IP, MAC, ofport, host veth
//	ofsdnctl [-socket PATH] [-o table|json] flows   installed flows by pipeline stage, with packet and byte counts
//	ofsdnctl [-socket PATH] [-o table|json] peers   peer nodes known to this node
//	ofsdnctl [-socket PATH] [-o table|json] policies  NetworkPolicy per local pod
//	ofsdnctl [-socket PATH] [-o table|json] services  Service ports load-balanced in the switch
//
// Flags may come before or after the command. flows also takes -stage NAME to show one
// stage. The socket is root-only, so run it as root. Exit status: 0 on success, 1 when the
// daemon cannot be asked or answers an error, 2 on a usage error.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/ofsdn/ofsdn/ctl"
)

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

const usage = `usage: ofsdnctl [-socket PATH] [-o table|json] COMMAND

commands:
  pods    list the node's pods: container ID, namespace/name, IP, MAC, ofport, host veth
  flows   dump the installed flows grouped by pipeline stage, with packet and byte counts
          (-stage NAME: only that stage)
  peers   list the peer nodes this node knows
  policies  NetworkPolicy per local pod: the policies isolating it per direction, each
          rule's flows with packet counts, and the packets its default deny refused
  services  the Service ports the switch load-balances (serviceProxy: ofsdn): frontend,
          verdict, endpoints, group id and the new connections each has taken

flags (before or after the command):
`

type options struct {
	socket  string
	output  string
	stage   string
	timeout time.Duration
}

func run(args []string, stdout, stderr io.Writer) int {
	var o options
	fs := flag.NewFlagSet("ofsdnctl", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.StringVar(&o.socket, "socket", ctl.DefaultSocketPath, "ofsdn-node inspection socket (ctlSocket in the daemon's config)")
	fs.StringVar(&o.output, "o", "table", "output format: table or json")
	fs.StringVar(&o.stage, "stage", "", "flows: show only this stage (e.g. l3_forwarding)")
	fs.DurationVar(&o.timeout, "timeout", ctl.DefaultClientTimeout, "bound on the request")
	fs.Usage = func() {
		fmt.Fprint(stderr, usage)
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	if fs.NArg() == 0 {
		fs.Usage()
		return 2
	}
	cmd := fs.Arg(0)
	if err := fs.Parse(fs.Args()[1:]); err != nil {
		return 2
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "ofsdnctl %s: unexpected arguments %q\n", cmd, fs.Args())
		return 2
	}
	if o.output != "table" && o.output != "json" {
		fmt.Fprintf(stderr, "ofsdnctl: -o %q: want table or json\n", o.output)
		return 2
	}
	ctx, cancel := context.WithTimeout(context.Background(), o.timeout)
	defer cancel()
	c := ctl.NewClient(o.socket, o.timeout)

	var v any
	var err error
	var table func(w *tabwriter.Writer)
	switch cmd {
	case "pods":
		var pods []ctl.Pod
		pods, err = c.Pods(ctx)
		v, table = pods, func(w *tabwriter.Writer) { podTable(w, pods) }
	case "flows":
		var stages []ctl.Stage
		stages, err = c.Flows(ctx)
		if err == nil && o.stage != "" {
			stages, err = filterStage(stages, o.stage)
		}
		v, table = stages, func(w *tabwriter.Writer) { flowTable(w, stages) }
	case "peers":
		var peers []ctl.Peer
		peers, err = c.Peers(ctx)
		v, table = peers, func(w *tabwriter.Writer) { peerTable(w, peers) }
	case "policies":
		var rep ctl.PolicyReport
		rep, err = c.Policies(ctx)
		v, table = rep, func(w *tabwriter.Writer) { policyTable(w, rep) }
	case "services":
		var rep ctl.ServiceReport
		rep, err = c.Services(ctx)
		v, table = rep, func(w *tabwriter.Writer) { serviceTable(w, rep) }
	default:
		fmt.Fprintf(stderr, "ofsdnctl: unknown command %q: want pods, flows, peers, policies or services\n", cmd)
		return 2
	}
	if err != nil {
		fmt.Fprintf(stderr, "ofsdnctl %s: %v\n", cmd, err)
		return 1
	}
	if o.output == "json" {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		if err := enc.Encode(v); err != nil {
			fmt.Fprintf(stderr, "ofsdnctl: %v\n", err)
			return 1
		}
		return 0
	}
	w := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
	table(w)
	if err := w.Flush(); err != nil {
		fmt.Fprintf(stderr, "ofsdnctl: %v\n", err)
		return 1
	}
	return 0
}

func filterStage(stages []ctl.Stage, name string) ([]ctl.Stage, error) {
	var names []string
	for _, s := range stages {
		if s.Name == name {
			return []ctl.Stage{s}, nil
		}
		names = append(names, s.Name)
	}
	return nil, fmt.Errorf("no stage %q; stages are: %s", name, strings.Join(names, ", "))
}

func podTable(w io.Writer, pods []ctl.Pod) {
	fmt.Fprintln(w, "NAMESPACE/NAME\tCONTAINER ID\tIFNAME\tIPS\tMAC\tOFPORT\tOWNER ID\tHOST VETH\tISOLATION")
	for _, p := range pods {
		ips := strings.Join(p.IPs, ",")
		if ips == "" {
			ips = p.IP // a daemon of an older build
		}
		fmt.Fprintf(w, "%s/%s\t%s\t%s\t%s\t%s\t%d\t%d\t%s\t%s\n", dash(p.Namespace), dash(p.Name), p.ContainerID,
			p.IfName, dash(ips), p.MAC, p.OFPort, p.OwnerID, p.HostVeth, dash(p.Isolation))
	}
}

// serviceTable prints the Service proxy's counters, then one line per Service port.
func serviceTable(w io.Writer, r ctl.ServiceReport) {
	if !r.Enabled {
		fmt.Fprintln(w, "Services are not load-balanced in the switch on this node (serviceProxy: kube-proxy): kube-proxy on the host does it")
		return
	}
	fmt.Fprintf(w, "Services in OVS: %d ports; rejected %d (not answered %d); stale UDP/SCTP conntrack flushes %d (failed %d)\n",
		len(r.Ports), r.Rejected, r.RejectDropped, r.ConntrackFlushes, r.ConntrackFlushErrors)
	fmt.Fprintln(w, "SERVICE PORT\tFRONTENDS\tVERDICT\tENDPOINTS\tGROUP\tOWNER ID\tCONNECTIONS")
	for _, p := range r.Ports {
		conns := fmt.Sprint(p.Connections)
		if p.Connections < 0 {
			conns = "?"
		}
		fes := p.Frontend
		if len(p.Frontends) > 0 {
			fes = strings.Join(p.Frontends, ",")
		}
		name := fmt.Sprintf("%s/%s:%s/%s", p.Namespace, p.Name, p.Port, p.Protocol)
		if p.External {
			name += " (external)"
		}
		fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%d\t%d\t%s\n", name, fes,
			p.Verdict, dash(strings.Join(p.Endpoints, ",")), p.GroupID, p.OwnerID, conns)
	}
}

// policyTable prints the policy state, then per pod its isolation and policies, its
// rules with the packets they allowed and their flows, and the packets denied.
func policyTable(w io.Writer, r ctl.PolicyReport) {
	if !r.Enabled {
		fmt.Fprintln(w, "NetworkPolicy is not enforced on this node (networkPolicy: false, or no Kubernetes topology)")
		return
	}
	state := "synced"
	if !r.Synced {
		state = "NOT SYNCED"
	}
	fmt.Fprintf(w, "NetworkPolicy: informers %s; %d policies, %d pods, %d namespaces in the model; %d rules on this node (%d ingress, %d egress flows)\n",
		state, r.Policies, r.Pods, r.Namespaces, r.Rules, r.RuleFlows["ingress"], r.RuleFlows["egress"])
	if r.Dirty {
		fmt.Fprintf(w, "WARNING: the switch lags a change being retried: %s\n", r.LastError)
	}
	fmt.Fprintln(w, "POD\tISOLATED\tINGRESS POLICIES\tEGRESS POLICIES\tDENIED IN\tDENIED OUT")
	for _, p := range r.PodPolicies {
		iso := "none"
		switch {
		case p.IngressIsolated && p.EgressIsolated:
			iso = "ingress+egress"
		case p.IngressIsolated:
			iso = "ingress"
		case p.EgressIsolated:
			iso = "egress"
		}
		fmt.Fprintf(w, "%s/%s\t%s\t%s\t%s\t%d\t%d\n", p.Namespace, p.Name, iso, dash(strings.Join(p.IngressPolicies, ",")),
			dash(strings.Join(p.EgressPolicies, ",")), p.Denied["ingress"], p.Denied["egress"])
		for _, rule := range p.Rules {
			fmt.Fprintf(w, "  rule %s\tports %s\tconj %d\tallowed %d\t\t\n", rule.Rule, rule.Group, rule.ConjID, rule.Allowed)
			for _, f := range rule.Flows {
				fmt.Fprintf(w, "    %d packets\t%s\t\t\t\t\n", f.Packets, stripPrefix(f.Flow))
			}
		}
	}
}

func flowTable(w io.Writer, stages []ctl.Stage) {
	fmt.Fprintln(w, "TABLE\tSTAGE\tPRIORITY\tPACKETS\tBYTES\tFLOW")
	for _, s := range stages {
		for _, f := range s.Flows {
			text := stripPrefix(f.Flow)
			if !f.Desired {
				text = "(not ofsdn's) " + text
			}
			fmt.Fprintf(w, "%d\t%s\t%d\t%d\t%d\t%s\n", s.Table, s.Name, f.Priority, f.Packets, f.Bytes, text)
		}
		for _, m := range s.Missing {
			fmt.Fprintf(w, "%d\t%s\t-\t-\t-\tMISSING on the switch: %s\n", s.Table, s.Name, stripPrefix(m))
		}
	}
}

func peerTable(w io.Writer, peers []ctl.Peer) {
	fmt.Fprintln(w, "NODE\tIP\tPOD SUBNET\tOFPORT")
	for _, p := range peers {
		subnets := p.PodSubnet
		switch {
		case p.PodSubnetIPv6 != "" && subnets == "": // an IPv6-only node's peer
			subnets = p.PodSubnetIPv6
		case p.PodSubnetIPv6 != "": // a dual-stack peer of a dual-stack node: both, IPv4 first
			subnets += "," + p.PodSubnetIPv6
		}
		ips := p.IP
		if p.IPv6 != "" {
			ips += "," + p.IPv6
		}
		fmt.Fprintf(w, "%s\t%s\t%s\t%d\n", p.Node, ips, subnets, p.OFPort)
	}
}

// stripPrefix drops the "cookie=..., table=..., " head of a flow's text: the table has
// columns for them.
func stripPrefix(s string) string {
	for _, p := range []string{"cookie=", "table="} {
		if strings.HasPrefix(s, p) {
			if i := strings.Index(s, ", "); i >= 0 {
				s = s[i+2:]
			}
		}
	}
	return s
}

func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}
