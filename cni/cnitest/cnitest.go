// Package cnitest holds fixtures for the CNI plugin's tests and benchmarks (no product
// code imports it).
package cnitest

import (
	"net"

	"github.com/containernetworking/cni/pkg/types"
	current "github.com/containernetworking/cni/pkg/types/100"
)

// CannedResult returns a typical ofsdn ADD result (CNI spec 1.1.0, "ADD Success"): the
// host veth, the pod's eth0 in network namespace sandbox (a path) with one IPv4 address
// from the node's pod subnet (10.244.1.5/24) and a default route via the gateway
// 10.244.1.1.
func CannedResult(sandbox string) *current.Result {
	_, dflt, _ := net.ParseCIDR("0.0.0.0/0")
	return &current.Result{
		CNIVersion: "1.1.0",
		Interfaces: []*current.Interface{
			{Name: "ofs1a2b3c4d5e6f", Mac: "5e:00:00:00:00:01"},
			{Name: "eth0", Mac: "0a:58:0a:f4:01:05", Sandbox: sandbox},
		},
		IPs: []*current.IPConfig{{
			Interface: current.Int(1),
			Address:   net.IPNet{IP: net.ParseIP("10.244.1.5").To4(), Mask: net.CIDRMask(24, 32)},
			Gateway:   net.ParseIP("10.244.1.1"),
		}},
		Routes: []*types.Route{{Dst: *dflt, GW: net.ParseIP("10.244.1.1")}},
	}
}
