package flows

// The nat part of the ct action: its checks, its ovs-ofctl text (OVS 3.1 format_NAT,
// lib/ofp-actions.c) and its encoding (nx_action_nat, NXAST_NAT, with libOpenflow's
// NXActionCTNAT inside the NXAST_CT action's nested actions).
// TestCTNATOnSwitch checks text and bytes against a real OVS.

import (
	"bytes"
	"fmt"
	"strings"

	"github.com/contiv/libOpenflow/openflow13"
)

// check returns what is wrong with the nat part of a ct action in a flow matching
// ethType, or "".
func (n CTNAT) check(ethType uint16, commit bool) string {
	if n.SNAT && n.DNAT {
		return "ct nat: SNAT and DNAT both set: one ct action translates one side"
	}
	if n.MinIP == nil {
		if n.MaxIP != nil || n.MinPort != 0 || n.MaxPort != 0 {
			return "ct nat: a MaxIP or port range needs MinIP"
		}
		return ""
	}
	if !n.SNAT && !n.DNAT {
		return "ct nat: an address range needs SNAT or DNAT"
	}
	if !commit {
		return "ct nat: a translation with an address range needs Commit (it is set up when the connection is committed)"
	}
	v4 := n.MinIP.To4() != nil
	if n.MaxIP != nil && (n.MaxIP.To4() != nil) != v4 {
		return fmt.Sprintf("ct nat: range %s-%s mixes IPv4 and IPv6", n.MinIP, n.MaxIP)
	}
	switch {
	case v4 && ethType != EthTypeIPv4:
		return fmt.Sprintf("ct nat: IPv4 range %s needs a match on EthType %#04x (ip)", n.MinIP, EthTypeIPv4)
	case !v4 && ethType != EthTypeIPv6:
		return fmt.Sprintf("ct nat: IPv6 range %s needs a match on EthType %#04x (ipv6)", n.MinIP, EthTypeIPv6)
	}
	if n.MaxIP != nil && bytes.Compare(n.MaxIP.To16(), n.MinIP.To16()) < 0 {
		return fmt.Sprintf("ct nat: range %s-%s ends below its start", n.MinIP, n.MaxIP)
	}
	if n.MaxPort != 0 && (n.MinPort == 0 || n.MaxPort < n.MinPort) {
		return fmt.Sprintf("ct nat: port range %d-%d: MinPort 1.. and MaxPort not below it", n.MinPort, n.MaxPort)
	}
	return ""
}

// format appends the nat part as OVS prints it.
func (n CTNAT) format(b *strings.Builder) {
	b.WriteString("nat")
	if !n.SNAT && !n.DNAT {
		return
	}
	b.WriteString("(")
	if n.SNAT {
		b.WriteString("src")
	} else {
		b.WriteString("dst")
	}
	if n.MinIP != nil {
		b.WriteByte('=')
		bracket := n.MinIP.To4() == nil && n.MinPort != 0
		addr := func(ip string) {
			if bracket {
				ip = "[" + ip + "]"
			}
			b.WriteString(ip)
		}
		if v4 := n.MinIP.To4(); v4 != nil {
			addr(v4.String())
		} else {
			addr(n.MinIP.String())
		}
		if n.MaxIP != nil && !n.MaxIP.Equal(n.MinIP) {
			b.WriteByte('-')
			addr(n.MaxIP.String())
		}
		if n.MinPort != 0 {
			fmt.Fprintf(b, ":%d", n.MinPort)
			if n.MaxPort != 0 && n.MaxPort != n.MinPort {
				fmt.Fprintf(b, "-%d", n.MaxPort)
			}
		}
	}
	b.WriteString(")")
}

// ofAction returns the NXAST_NAT action. Ranges go as OVS's nx_action_nat wants them: the
// address range's min and max (max = min for one address) and, with ports, min and max.
func (n CTNAT) ofAction() openflow13.Action {
	a := openflow13.NewNXActionCTNAT()
	if n.SNAT {
		_ = a.SetSNAT()
	}
	if n.DNAT {
		_ = a.SetDNAT()
	}
	if n.MinIP != nil {
		maxIP := n.MaxIP
		if maxIP == nil {
			maxIP = n.MinIP
		}
		if n.MinIP.To4() != nil {
			a.SetRangeIPv4Min(n.MinIP.To4())
			a.SetRangeIPv4Max(maxIP.To4())
		} else {
			a.SetRangeIPv6Min(n.MinIP.To16())
			a.SetRangeIPv6Max(maxIP.To16())
		}
	}
	if n.MinPort != 0 {
		// libOpenflow writes the max port whenever a min port is set: set both.
		minPort, maxPort := n.MinPort, n.MaxPort
		if maxPort == 0 {
			maxPort = minPort
		}
		a.SetRangeProtoMin(&minPort)
		a.SetRangeProtoMax(&maxPort)
	}
	return a
}
