// Package masq keeps the node's NAT rules in an nftables table of its own, "ip ofsdn", written
// over netlink (github.com/google/nftables; nothing is executed, no iptables binary or
// xtables lock is needed, so the daemon's image is static binaries only):
//
//	table ip ofsdn {
//	  chain postrouting {
//	    type nat hook postrouting priority srcnat; policy accept;
//	    ip saddr POD ip daddr CLUSTER ct status dnat masquerade   # service return path
//	    ip saddr POD ip daddr CLUSTER return                      # egress (Masquerade) only:
//	    ip saddr POD ip daddr 224.0.0.0/4 return                  #   pods keep their source
//	    ip saddr POD masquerade                                   #   inside the cluster
//	  }
//	}
//
// On a dual-stack node (Rules.PodSubnetIPv6) with egress masquerade on, a table of the
// ip6 family of the same name holds IPv6's egress rules (issue 23), written in the same
// transaction:
//
//	table ip6 ofsdn {
//	  chain postrouting {
//	    type nat hook postrouting priority srcnat; policy accept;
//	    ip6 saddr POD6 ip6 daddr CLUSTER6 ct status dnat masquerade   # service return path
//	    ip6 saddr POD6 ip6 daddr CLUSTER6 return
//	    ip6 saddr POD6 ip6 daddr ff00::/8 return
//	    ip6 saddr POD6 masquerade
//	  }
//	}
//
// Its first rule is IPv4's service return path (issue 23): a pod's IPv6 connection that
// the host's kube-proxy translated (DNAT) to another pod (serviceProxy: kube-proxy, where a
// pod's IPv6 for a ClusterIP leaves by the gateway as any IPv6 outside the IPv6 cluster
// CIDR) is masqueraded to the gateway's address, so the endpoint's reply comes back
// through the host. Services load-balanced in OVS never reach the host and do not need
// it. Without egress masquerade there is no ip6 table, and no such rule either.
//
// Calls act on the network namespace of the calling thread.
//
// Design history: pods reach the outside through the gateway port (the egress stage of package flows), so
// the host routes their packets; the host must also rewrite their source, or replies to a
// private pod address never come back (flannel's ipMasq rules; traffic inside the cluster
// CIDR keeps its source, multicast is left alone). Services: pods' traffic to the service
// CIDR also goes to the gateway (the service stage), where kube-proxy's DNAT on the host
// turns it into traffic to a pod, routed back out of the gateway. The endpoint's reply
// would go straight to the client pod through OVS (same node, or the tunnel), missing the
// host's conntrack, so the client would see an answer from the endpoint's address instead
// of the service's and reset the connection. Masquerading DNAT'ed pod traffic to the
// gateway address sends the reply back through the host, which undoes both translations;
// a pod reaching itself through its own service (hairpin) works the same way. The cost is
// that endpoints see the client node's gateway address as the source of service traffic
// from pods (kube-proxy's --masquerade-all does the same for every client).
//
// Why nftables and not iptables: the image carries no iptables binary and its libraries
// (whose version would have to match the host's back end), and no xtables lock is shared
// with the host. A table of its own coexists with kube-proxy's iptables-nft or nftables
// rules: NAT chains at one hook run in turn until one of them translates the packet, so
// either masquerade takes effect. Unlike flannel's iptables rules, there is no FORWARD
// accept: an accept in one nftables table cannot override a drop in another (e.g. Docker's
// FORWARD policy drop), so such a host must let the cluster CIDR through its own rules.
package masq

import (
	"errors"
	"fmt"
	"net"
	"os"

	"github.com/google/nftables"
	"github.com/google/nftables/binaryutil"
	"github.com/google/nftables/expr"
	"github.com/google/nftables/userdata"
)

// Names of what the package owns.
const (
	// Table is the nftables table (family ip) holding every rule of this package.
	Table = "ofsdn"
	// PostroutingChain is the NAT base chain (hook postrouting, priority srcnat = 100).
	PostroutingChain = "postrouting"

	commentService = "ofsdn: service return path"
	commentEgress  = "ofsdn: pod egress"
	// ipsDstNAT is the conntrack status bit IPS_DST_NAT (include/uapi/linux/netfilter/
	// nf_conntrack_common.h): the connection's destination was translated (DNAT).
	ipsDstNAT = 1 << 5
)

// Rules describes the NAT rules of one node.
type Rules struct {
	// PodSubnet is this node's IPv4 pod subnet: the sources the rules apply to. Nil on an
	// IPv6-only node (PodSubnetIPv6 alone): then no table ip ofsdn is left.
	PodSubnet *net.IPNet
	// ClusterCIDR is the IPv4 cluster CIDR: destinations inside it keep the pod's source
	// address (unless DNAT'ed: the service return path). Nil = only PodSubnet is inside.
	ClusterCIDR *net.IPNet
	// Masquerade masquerades pod traffic leaving the cluster CIDR to the node's address
	// (egress). The service return-path rule is installed either way.
	Masquerade bool
	// PodSubnetIPv6 is this node's IPv6 pod subnet on a dual-stack node, nil on an
	// IPv4-only one. With it and Masquerade, table ip6 ofsdn masquerades pods' IPv6
	// leaving the IPv6 cluster CIDR; without either, no such table is left.
	PodSubnetIPv6 *net.IPNet
	// ClusterCIDRIPv6 is the IPv6 cluster CIDR: IPv6 destinations inside it keep the
	// pod's source. Nil = only PodSubnetIPv6 is inside.
	ClusterCIDRIPv6 *net.IPNet
}

func (r Rules) inside6() *net.IPNet {
	if r.ClusterCIDRIPv6 != nil {
		return r.ClusterCIDRIPv6
	}
	return r.PodSubnetIPv6
}

// ipv6 reports whether the rules have a table ip6 ofsdn.
func (r Rules) ipv6() bool { return r.PodSubnetIPv6 != nil && r.Masquerade }

func (r Rules) inside() *net.IPNet {
	if r.ClusterCIDR != nil {
		return r.ClusterCIDR
	}
	return r.PodSubnet
}

func (r Rules) validate() error {
	if (r.PodSubnet == nil && r.PodSubnetIPv6 == nil) || (r.PodSubnet != nil && r.PodSubnet.IP.To4() == nil) {
		return errors.New("masq: pod subnet must be an IPv4 CIDR (or, on an IPv6-only node, left out beside the IPv6 one)")
	}
	if r.ClusterCIDR != nil && r.ClusterCIDR.IP.To4() == nil {
		return errors.New("masq: cluster CIDR must be an IPv4 CIDR")
	}
	for _, c := range []struct {
		what string
		n    *net.IPNet
	}{{"IPv6 pod subnet", r.PodSubnetIPv6}, {"IPv6 cluster CIDR", r.ClusterCIDRIPv6}} {
		if c.n != nil && (c.n.IP.To4() != nil || len(c.n.IP) != net.IPv6len || len(c.n.Mask) != net.IPv6len) {
			return fmt.Errorf("masq: %s %v must be an IPv6 CIDR", c.what, c.n)
		}
	}
	if r.ClusterCIDRIPv6 != nil && r.PodSubnetIPv6 == nil {
		return fmt.Errorf("masq: IPv6 cluster CIDR %v without an IPv6 pod subnet", r.ClusterCIDRIPv6)
	}
	return nil
}

// rule is one rule of the postrouting chain: expressions and a comment.
type rule struct {
	exprs   []expr.Any
	comment string
}

// postroutingRules returns the rules of PostroutingChain, in order.
func (r Rules) postroutingRules() []rule {
	pod, inside := r.PodSubnet, r.inside()
	_, multicast, _ := net.ParseCIDR("224.0.0.0/4")
	masquerade := &expr.Masq{}
	ret := &expr.Verdict{Kind: expr.VerdictReturn}
	rules := []rule{{exprs: concat(matchNet(ipSaddr, pod), matchNet(ipDaddr, inside), matchCtDNAT(), []expr.Any{masquerade}),
		comment: commentService}}
	if r.Masquerade {
		rules = append(rules,
			rule{exprs: concat(matchNet(ipSaddr, pod), matchNet(ipDaddr, inside), []expr.Any{ret}), comment: commentEgress},
			rule{exprs: concat(matchNet(ipSaddr, pod), matchNet(ipDaddr, multicast), []expr.Any{ret}), comment: commentEgress},
			rule{exprs: concat(matchNet(ipSaddr, pod), []expr.Any{masquerade}), comment: commentEgress},
		)
	}
	return rules
}

// postroutingRules6 returns the rules of table ip6 ofsdn's PostroutingChain, in order.
func (r Rules) postroutingRules6() []rule {
	pod, inside := r.PodSubnetIPv6, r.inside6()
	_, multicast, _ := net.ParseCIDR("ff00::/8")
	ret := &expr.Verdict{Kind: expr.VerdictReturn}
	return []rule{
		{exprs: concat(matchNet6(ip6Saddr, pod), matchNet6(ip6Daddr, inside), matchCtDNAT(), []expr.Any{&expr.Masq{}}), comment: commentService},
		{exprs: concat(matchNet6(ip6Saddr, pod), matchNet6(ip6Daddr, inside), []expr.Any{ret}), comment: commentEgress},
		{exprs: concat(matchNet6(ip6Saddr, pod), matchNet6(ip6Daddr, multicast), []expr.Any{ret}), comment: commentEgress},
		{exprs: concat(matchNet6(ip6Saddr, pod), []expr.Any{&expr.Masq{}}), comment: commentEgress},
	}
}

// IPv6 header offsets of the source and destination address (RFC 8200 §3).
const (
	ip6Saddr = 8
	ip6Daddr = 24
)

// matchNet6 matches the IPv6 address at offset (ip6Saddr, ip6Daddr) against n: nft's
// "ip6 saddr fd00:10:244:1::/64".
func matchNet6(offset uint32, n *net.IPNet) []expr.Any {
	return []expr.Any{
		&expr.Payload{DestRegister: 1, Base: expr.PayloadBaseNetworkHeader, Offset: offset, Len: net.IPv6len},
		&expr.Bitwise{SourceRegister: 1, DestRegister: 1, Len: net.IPv6len, Mask: []byte(n.Mask), Xor: make([]byte, net.IPv6len)},
		&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: []byte(n.IP.Mask(n.Mask).To16())},
	}
}

// IPv4 header offsets of the source and destination address.
const (
	ipSaddr = 12
	ipDaddr = 16
)

// matchNet matches the IPv4 address at offset (ipSaddr, ipDaddr) against n: nft's
// "ip saddr 10.244.1.0/24".
func matchNet(offset uint32, n *net.IPNet) []expr.Any {
	return []expr.Any{
		&expr.Payload{DestRegister: 1, Base: expr.PayloadBaseNetworkHeader, Offset: offset, Len: 4},
		&expr.Bitwise{SourceRegister: 1, DestRegister: 1, Len: 4, Mask: []byte(net.IP(n.Mask).To4()), Xor: []byte{0, 0, 0, 0}},
		&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: []byte(n.IP.Mask(n.Mask).To4())},
	}
}

// matchCtDNAT matches connections whose destination was translated: nft's "ct status dnat".
func matchCtDNAT() []expr.Any {
	return []expr.Any{
		&expr.Ct{Register: 1, Key: expr.CtKeySTATUS},
		&expr.Bitwise{SourceRegister: 1, DestRegister: 1, Len: 4,
			Mask: binaryutil.NativeEndian.PutUint32(ipsDstNAT), Xor: binaryutil.NativeEndian.PutUint32(0)},
		&expr.Cmp{Op: expr.CmpOpNeq, Register: 1, Data: binaryutil.NativeEndian.PutUint32(0)},
	}
}

func concat(parts ...[]expr.Any) []expr.Any {
	var out []expr.Any
	for _, p := range parts {
		out = append(out, p...)
	}
	return out
}

func table() *nftables.Table { return &nftables.Table{Name: Table, Family: nftables.TableFamilyIPv4} }

func table6() *nftables.Table { return &nftables.Table{Name: Table, Family: nftables.TableFamilyIPv6} }

// tableExists reports whether the calling thread's network namespace has the table of
// the IPv4 family.
func tableExists(c *nftables.Conn) (bool, error) {
	return familyTableExists(c, nftables.TableFamilyIPv4)
}

// familyTableExists reports whether the calling thread's network namespace has the
// table of family f.
func familyTableExists(c *nftables.Conn, f nftables.TableFamily) (bool, error) {
	tables, err := c.ListTablesOfFamily(f)
	if err != nil {
		return false, err
	}
	for _, t := range tables {
		if t.Name == Table {
			return true, nil
		}
	}
	return false, nil
}

// addTable adds t with its postrouting chain and rules to c's transaction.
func addTable(c *nftables.Conn, t *nftables.Table, rules []rule) {
	c.AddTable(t)
	ch := c.AddChain(&nftables.Chain{Name: PostroutingChain, Table: t, Type: nftables.ChainTypeNAT,
		Hooknum: nftables.ChainHookPostrouting, Priority: nftables.ChainPriorityNATSource})
	for _, ru := range rules {
		c.AddRule(&nftables.Rule{Table: t, Chain: ch, Exprs: ru.exprs,
			UserData: userdata.AppendString(nil, userdata.TypeComment, ru.comment)})
	}
}

// Ensure installs the rules, idempotently: the table is replaced (deleted, if there, and
// written anew) in one nftables transaction, so there is no moment without rules and a
// changed pod subnet leaves nothing of the old one. The IPv6 table (r.PodSubnetIPv6 with
// r.Masquerade) is replaced in the same transaction, or deleted there when the rules
// have none. Connections already translated keep
// their conntrack entries. It returns an error naming the table and the netlink failure
// (e.g. no nf_tables in the kernel, or no CAP_NET_ADMIN: run the daemon privileged).
func Ensure(r Rules) error {
	if err := r.validate(); err != nil {
		return err
	}
	c, err := nftables.New()
	if err != nil {
		return fmt.Errorf("masq: nftables: %w", err)
	}
	exists, err := tableExists(c)
	if err != nil {
		return fmt.Errorf("masq: list nftables tables: %w (the daemon needs CAP_NET_ADMIN and nf_tables)", err)
	}
	exists6, err := familyTableExists(c, nftables.TableFamilyIPv6)
	if err != nil {
		return fmt.Errorf("masq: list nftables tables: %w (the daemon needs CAP_NET_ADMIN and nf_tables)", err)
	}
	t := table()
	if exists {
		c.DelTable(t)
	}
	if r.PodSubnet != nil {
		addTable(c, t, r.postroutingRules())
	}
	if exists6 {
		c.DelTable(table6())
	}
	if r.ipv6() {
		addTable(c, table6(), r.postroutingRules6())
	}
	if err := c.Flush(); err != nil {
		if r.ipv6() {
			return fmt.Errorf("masq: write nftables tables ip %s and ip6 %s: %w", Table, Table, err)
		}
		return fmt.Errorf("masq: write nftables table ip %s: %w", Table, err)
	}
	return nil
}

// Delete removes the tables (ip ofsdn and ip6 ofsdn); a missing table is not an error.
func Delete() error {
	c, err := nftables.New()
	if err != nil {
		return fmt.Errorf("masq: nftables: %w", err)
	}
	exists, err := tableExists(c)
	if err != nil {
		return fmt.Errorf("masq: list nftables tables: %w", err)
	}
	exists6, err := familyTableExists(c, nftables.TableFamilyIPv6)
	if err != nil {
		return fmt.Errorf("masq: list nftables tables: %w", err)
	}
	if !exists && !exists6 {
		return nil
	}
	if exists {
		c.DelTable(table())
	}
	if exists6 {
		c.DelTable(table6())
	}
	if err := c.Flush(); err != nil {
		return fmt.Errorf("masq: delete nftables tables ip %s and ip6 %s: %w", Table, Table, err)
	}
	return nil
}

// EnableIPForward turns on IPv4 forwarding (net.ipv4.ip_forward=1) in the calling
// thread's network namespace, which the host needs to route pod traffic between the
// gateway and the uplink, and service traffic from the gateway back to the gateway. It
// returns an error naming the sysctl file.
func EnableIPForward() error {
	const f = IPForwardSysctl
	if b, err := os.ReadFile(f); err == nil && len(b) > 0 && b[0] == '1' {
		return nil
	}
	if err := os.WriteFile(f, []byte("1\n"), 0o644); err != nil {
		return fmt.Errorf("masq: enable IPv4 forwarding (%s): %w", f, err)
	}
	return nil
}

// IPv6ForwardSysctl is the file of net.ipv6.conf.all.forwarding (proc(5),
// /proc/sys/net/ipv6/conf): "1" when the node routes IPv6 between interfaces.
const IPv6ForwardSysctl = "/proc/sys/net/ipv6/conf/all/forwarding"

// EnableIPv6Forward turns on IPv6 forwarding (net.ipv6.conf.all.forwarding=1) in the
// calling thread's network namespace, which a dual-stack node needs to route its pods'
// IPv6 egress from the gateway to the uplink. Linux then ignores Router Advertisements on
// every interface whose accept_ra is 1 (the default; 2 accepts them while forwarding), so
// a host that takes its own IPv6 address or default route from RAs must set accept_ra=2
// on its uplink. It returns an error naming the sysctl file.
func EnableIPv6Forward() error {
	const f = IPv6ForwardSysctl
	if b, err := os.ReadFile(f); err == nil && len(b) > 0 && b[0] == '1' {
		return nil
	}
	if err := os.WriteFile(f, []byte("1\n"), 0o644); err != nil {
		return fmt.Errorf("masq: enable IPv6 forwarding (%s): %w", f, err)
	}
	return nil
}
