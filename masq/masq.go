// Package masq keeps the node's egress rules: pod traffic leaving the cluster CIDR is
// masqueraded to the node's address (iptables nat POSTROUTING, MASQUERADE), and the
// filter FORWARD chain accepts traffic from and to the cluster CIDR, as flannel's ipMasq
// option does. Rules live in chains of their own (OFSDN-POSTROUTING, OFSDN-FORWARD),
// jumped to from the built-in chains, so Ensure can rewrite them and Delete can remove
// every trace without touching anyone else's rules.
//
// It drives iptables through github.com/coreos/go-iptables (the library flannel, the CNI
// plugins and kube-router use; it runs the iptables binary, nft or legacy back end, with
// the xtables lock). Calls act on the network namespace of the calling thread.
//
// Design history: pods reach the outside through the gateway port (the egress stage of
// package flows), so the host routes their packets; the host must also rewrite their
// source, or replies to a private pod address never come back. Traffic inside the cluster
// CIDR keeps its source (pods see each other's real addresses), and multicast is left
// alone (flannel's rules).
package masq

import (
	"errors"
	"fmt"
	"net"
	"os"

	"github.com/coreos/go-iptables/iptables"
)

// Chain names.
const (
	// NATChain holds the masquerade rules, jumped to from nat POSTROUTING.
	NATChain = "OFSDN-POSTROUTING"
	// ForwardChain holds the forward-accept rules, jumped to from filter FORWARD.
	ForwardChain = "OFSDN-FORWARD"
	comment      = "ofsdn: pod egress"
)

// Rules describes the egress rules of one node.
type Rules struct {
	// PodSubnet is this node's IPv4 pod subnet: sources masqueraded.
	PodSubnet *net.IPNet
	// ClusterCIDR is the IPv4 cluster CIDR: destinations inside it keep the pod's source
	// address and FORWARD accepts traffic from and to it. Nil = only PodSubnet is inside.
	ClusterCIDR *net.IPNet
}

func (r Rules) inside() string {
	if r.ClusterCIDR != nil {
		return r.ClusterCIDR.String()
	}
	return r.PodSubnet.String()
}

// natRules returns the rules of NATChain, in order.
func (r Rules) natRules() [][]string {
	src := r.PodSubnet.String()
	return [][]string{
		{"-s", src, "-d", r.inside(), "-m", "comment", "--comment", comment, "-j", "RETURN"},
		{"-s", src, "-d", "224.0.0.0/4", "-m", "comment", "--comment", comment, "-j", "RETURN"},
		{"-s", src, "-m", "comment", "--comment", comment, "-j", "MASQUERADE"},
	}
}

// forwardRules returns the rules of ForwardChain, in order.
func (r Rules) forwardRules() [][]string {
	in := r.inside()
	return [][]string{
		{"-s", in, "-m", "comment", "--comment", comment, "-j", "ACCEPT"},
		{"-d", in, "-m", "comment", "--comment", comment, "-j", "ACCEPT"},
	}
}

var jumpNAT = []string{"-m", "comment", "--comment", comment, "-j", NATChain}
var jumpForward = []string{"-m", "comment", "--comment", comment, "-j", ForwardChain}

func (r Rules) validate() error {
	if r.PodSubnet == nil || r.PodSubnet.IP.To4() == nil {
		return errors.New("masq: pod subnet must be an IPv4 CIDR")
	}
	if r.ClusterCIDR != nil && r.ClusterCIDR.IP.To4() == nil {
		return errors.New("masq: cluster CIDR must be an IPv4 CIDR")
	}
	return nil
}

// Ensure installs the rules, idempotently: the chains are created if missing and
// rewritten only if their content differs, and the jumps from nat POSTROUTING and filter
// FORWARD are inserted first if missing. It returns an error naming the table, chain and
// the iptables failure (e.g. iptables not installed: install iptables, nft back end).
func Ensure(r Rules) error {
	if err := r.validate(); err != nil {
		return err
	}
	ipt, err := iptables.NewWithProtocol(iptables.ProtocolIPv4)
	if err != nil {
		return fmt.Errorf("masq: iptables: %w (install the iptables package)", err)
	}
	if err := ensureChain(ipt, "nat", NATChain, r.natRules()); err != nil {
		return err
	}
	if err := ensureChain(ipt, "filter", ForwardChain, r.forwardRules()); err != nil {
		return err
	}
	if err := ipt.InsertUnique("nat", "POSTROUTING", 1, jumpNAT...); err != nil {
		return fmt.Errorf("masq: nat POSTROUTING jump to %s: %w", NATChain, err)
	}
	if err := ipt.InsertUnique("filter", "FORWARD", 1, jumpForward...); err != nil {
		return fmt.Errorf("masq: filter FORWARD jump to %s: %w", ForwardChain, err)
	}
	return nil
}

// ensureChain makes chain hold exactly rules, rewriting it only when it differs.
func ensureChain(ipt *iptables.IPTables, table, chain string, rules [][]string) error {
	exists, err := ipt.ChainExists(table, chain)
	if err != nil {
		return fmt.Errorf("masq: %s %s: %w", table, chain, err)
	}
	if exists {
		listed, err := ipt.List(table, chain)
		if err != nil {
			return fmt.Errorf("masq: list %s %s: %w", table, chain, err)
		}
		same := len(listed) == len(rules)+1 // "-N CHAIN" and the rules
		for _, rule := range rules {
			if !same {
				break
			}
			ok, err := ipt.Exists(table, chain, rule...)
			if err != nil {
				return fmt.Errorf("masq: %s %s: %w", table, chain, err)
			}
			same = ok
		}
		if same {
			return nil
		}
	}
	if err := ipt.ClearChain(table, chain); err != nil { // creates it if missing
		return fmt.Errorf("masq: reset %s %s: %w", table, chain, err)
	}
	for _, rule := range rules {
		if err := ipt.Append(table, chain, rule...); err != nil {
			return fmt.Errorf("masq: %s %s append %v: %w", table, chain, rule, err)
		}
	}
	return nil
}

// Delete removes the jumps and both chains; rules that are already gone are not an error.
func Delete() error {
	ipt, err := iptables.NewWithProtocol(iptables.ProtocolIPv4)
	if err != nil {
		return fmt.Errorf("masq: iptables: %w (install the iptables package)", err)
	}
	var errs []error
	for _, c := range []struct {
		table, parent, chain string
		jump                 []string
	}{{"nat", "POSTROUTING", NATChain, jumpNAT}, {"filter", "FORWARD", ForwardChain, jumpForward}} {
		// Without the chain there can be no jump to it (and iptables -C would fail).
		exists, err := ipt.ChainExists(c.table, c.chain)
		if err == nil && exists {
			if err := ipt.DeleteIfExists(c.table, c.parent, c.jump...); err != nil {
				errs = append(errs, fmt.Errorf("masq: delete %s %s jump: %w", c.table, c.parent, err))
				continue
			}
			err = ipt.ClearAndDeleteChain(c.table, c.chain)
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("masq: delete %s %s: %w", c.table, c.chain, err))
		}
	}
	return errors.Join(errs...)
}

// EnableIPForward turns on IPv4 forwarding (net.ipv4.ip_forward=1) in the calling
// thread's network namespace, which the host needs to route pod traffic between the
// gateway and the uplink. It returns an error naming the sysctl file.
func EnableIPForward() error {
	const f = "/proc/sys/net/ipv4/ip_forward"
	if b, err := os.ReadFile(f); err == nil && len(b) > 0 && b[0] == '1' {
		return nil
	}
	if err := os.WriteFile(f, []byte("1\n"), 0o644); err != nil {
		return fmt.Errorf("masq: enable IPv4 forwarding (%s): %w", f, err)
	}
	return nil
}
