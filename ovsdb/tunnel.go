package ovsdb

import (
	"context"
	"fmt"
	"strconv"
)

// Tunnel interface types (vswitchd.conf.db(5), Interface "type").
const (
	// TypeVXLAN is a VXLAN tunnel (RFC 7348; UDP port 4789 unless options:dst_port).
	TypeVXLAN = "vxlan"
	// TypeGeneve is a Geneve tunnel (RFC 8926; UDP port 6081 unless options:dst_port).
	TypeGeneve = "geneve"
)

// TunnelSpec is the node's flow-based tunnel port: one port serves every peer, the
// destination and key being set per flow (OpenShift SDN's vxlan0).
type TunnelSpec struct {
	// Bridge holds the port; it must exist (EnsureBridge).
	Bridge string
	// Name of the port and its interface, e.g. "vxlan0" (not a network device: any length).
	Name string
	// Type is TypeVXLAN or TypeGeneve.
	Type string
	// DstPort is the UDP destination port, 1..65535; 0 = the type's IANA port (4789 for
	// VXLAN, 6081 for Geneve).
	DstPort int
}

// EnsureTunnelPort makes sure spec.Bridge has the tunnel port with options remote_ip=flow
// and key=flow (tun_dst and tun_id come from the flows: set_field:IP->tun_dst), plus
// dst_port when set, and returns its ofport (1..65279). An existing port with other
// options is updated in place (same ofport). Errors: an unknown type or port number, and
// those of EnsurePort (missing bridge, failed transaction, *InterfaceError when
// ovs-vswitchd cannot create the tunnel, e.g. another tunnel port already uses the UDP
// port).
func (c *Client) EnsureTunnelPort(ctx context.Context, spec TunnelSpec) (int, error) {
	if spec.Type != TypeVXLAN && spec.Type != TypeGeneve {
		return 0, fmt.Errorf("ovsdb: tunnel port %s: type %q: want %s or %s", spec.Name, spec.Type, TypeVXLAN, TypeGeneve)
	}
	if spec.DstPort < 0 || spec.DstPort > 65535 {
		return 0, fmt.Errorf("ovsdb: tunnel port %s: dst_port %d: want 1..65535, or 0 for the default", spec.Name, spec.DstPort)
	}
	opts := map[string]string{"remote_ip": "flow", "key": "flow"}
	if spec.DstPort != 0 {
		opts["dst_port"] = strconv.Itoa(spec.DstPort)
	}
	return c.EnsurePort(ctx, PortSpec{Bridge: spec.Bridge, Name: spec.Name, Type: spec.Type, Options: opts})
}
