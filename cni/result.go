package cni

// Checking the daemon's ADD result before the plugin prints it.
//
// Design history (issue 20): the plugin decoded whatever the daemon answered into a CNI
// 1.1.0 result and printed it converted: a daemon reply of {"result":null} made it exit 0
// printing {"cniVersion":"1.1.0"} (at 0.3.1 {"cniVersion":"0.3.1","dns":{}}), and IP
// configurations whose interface index was 99 or -1 went through. A runtime takes exit 0
// as "the pod is wired" and a kubelet then starts a pod without an address. An ADD that
// succeeds must print a result the spec calls valid for the netconf's version (SPEC.md
// "Section 5: Result Types", "ADD Success"); anything else is the plugin's own failure,
// code 999, and the message says what is wrong.

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net"
	"strings"

	"github.com/containernetworking/cni/pkg/types"
	types020 "github.com/containernetworking/cni/pkg/types/020"
	types040 "github.com/containernetworking/cni/pkg/types/040"
	current "github.com/containernetworking/cni/pkg/types/100"
)

// ResultForVersion checks the daemon's ADD result raw (the Result of a [Response]: CNI
// 1.1.0 JSON, SPEC.md "Section 5: Result Types", "ADD Success") for the attachment
// ifName in netns (CNI_IFNAME, CNI_NETNS), converts it to cniVersion (one of
// SupportedVersions) and checks the converted result again; it returns the result to
// print.
//
// What the spec requires of every result, and ofsdn checks:
//   - "cniVersion" absent (taken as 1.1.0) or 1.0.0 / 1.1.0, the versions of the
//     types/100 result the daemon sends;
//   - interfaces: a "name" each, a "mac" that is a hardware address when set, "mtu" not
//     negative;
//   - ips: each "address" an IP address with a prefix length of its own family (a CIDR
//     such as 10.244.1.5/24), not the unspecified address; a "gateway", when set, of the
//     address's family and not the address itself; an "interface", when set, an index
//     into interfaces (0 <= index < len(interfaces));
//   - routes: each "dst" a CIDR, a "gw" of its family when set, mtu, advmss, priority
//     and table not negative, scope 0..255;
//   - dns: nameservers are IP addresses;
//   - after conversion: for 0.1.0 and 0.2.0 an "ip4" with "ip" (what those versions
//     carry of an IPv4 pod) and/or, for a dual-stack or IPv6-only pod, an "ip6" with its
//     IPv6 address (those versions carry at most one address per family: a result with
//     two of one family is refused for them, code 1, rather than losing one); for 0.3.0
//     .. 0.4.0 every address, each ip's "version" matching its address and its interface
//     index inside interfaces.
//
// What the ofsdn daemon promises and is checked as well (an ofsdn pod has one address
// per family of its node's pod subnets on its interface CNI_IFNAME: IPv4, IPv4 and IPv6,
// or IPv6 alone): interfaces hold CNI_IFNAME with "sandbox" CNI_NETNS; ips hold at least
// one address; every ip names its interface, and that interface is in the sandbox.
//
// Errors are *types.Error with code 999 (ErrInternal: the plugin's own failure, not the
// runtime's input) whose message names the ofsdn-node daemon, the field and the bad
// value; a result that cannot be converted to cniVersion is code 1
// (ErrIncompatibleCNIVersion).
func ResultForVersion(raw json.RawMessage, cniVersion, ifName, netns string) (types.Result, error) {
	trimmed := bytes.TrimSpace(raw)
	if len(trimmed) == 0 || bytes.Equal(trimmed, []byte("null")) {
		return nil, badResult("is missing (%q): a successful ADD must return the pod's interfaces and IP addresses", string(truncate(trimmed, 64)))
	}
	if trimmed[0] != '{' {
		return nil, badResult("is not a JSON object but %q", string(truncate(trimmed, 64)))
	}
	result := &current.Result{}
	if err := json.Unmarshal(trimmed, result); err != nil {
		return nil, types.NewError(types.ErrInternal,
			"the ofsdn-node daemon's ADD result cannot be decoded as a CNI 1.1.0 result: the daemon and the plugin disagree on the result format (update both to the same ofsdn version)",
			err.Error())
	}
	switch result.CNIVersion {
	case "":
		result.CNIVersion = current.ImplementedSpecVersion
	case "1.0.0", "1.1.0":
	default:
		return nil, badResult("has cniVersion %q, not 1.1.0 (the daemon and the plugin must be the same ofsdn version)", result.CNIVersion)
	}
	if err := checkResult(result, ifName, netns); err != nil {
		return nil, err
	}
	if err := checkCarried(result, cniVersion); err != nil {
		return nil, err
	}
	converted, err := result.GetAsVersion(cniVersion)
	if err != nil {
		return nil, types.NewError(types.ErrIncompatibleCNIVersion,
			fmt.Sprintf("cannot convert the ADD result from CNI %s to the netconf's cniVersion %s", result.CNIVersion, cniVersion),
			err.Error())
	}
	if err := checkConverted(converted); err != nil {
		return nil, err
	}
	if r, ok := converted.(*types020.Result); ok {
		for _, ip := range result.IPs {
			if ipFamily(ip.Address.IP) == 6 && (r.IP6 == nil || !r.IP6.IP.IP.Equal(ip.Address.IP)) {
				return nil, badResult("converted to CNI %s lost the IPv6 address %s", r.CNIVersion, ipNetString(ip.Address))
			}
		}
	}
	return converted, nil
}

// checkCarried refuses a conversion that would drop addresses: CNI 0.1.0 and 0.2.0
// results carry one "ip4" and one "ip6" (SPEC.md of those versions), so a result with
// two addresses of one family cannot be said in them. Error: code 1
// (ErrIncompatibleCNIVersion), naming the addresses and the fix (cniVersion 0.3.0 or
// later, which carry a list).
func checkCarried(r *current.Result, cniVersion string) error {
	if cniVersion != "0.1.0" && cniVersion != "0.2.0" {
		return nil
	}
	var n4, n6 int
	for _, ip := range r.IPs {
		if ipFamily(ip.Address.IP) == 4 {
			n4++
		} else {
			n6++
		}
	}
	if n4 > 1 || n6 > 1 {
		return types.NewError(types.ErrIncompatibleCNIVersion,
			fmt.Sprintf("the pod has %d IPv4 and %d IPv6 addresses, but a CNI %s result carries at most one of each (ip4, ip6): set cniVersion 0.3.0 or later in the network configuration", n4, n6, cniVersion), "")
	}
	return nil
}

// badResult is the code-999 error for a result that breaks the rules of ResultForVersion.
func badResult(format string, args ...any) *types.Error {
	return types.NewError(types.ErrInternal,
		"the ofsdn-node daemon's ADD result "+fmt.Sprintf(format, args...)+"; the ADD is refused (the pod must not start without its network): see the daemon's log", "")
}

// checkResult checks a types/100 result (see ResultForVersion).
func checkResult(r *current.Result, ifName, netns string) error {
	if len(r.Interfaces) == 0 {
		return badResult("lists no interfaces (want the host veth and %s in the pod's netns)", ifName)
	}
	pod := -1
	for i, in := range r.Interfaces {
		if in == nil {
			return badResult("interfaces[%d] is null", i)
		}
		if in.Name == "" {
			return badResult("interfaces[%d] has no name", i)
		}
		if in.Mac != "" {
			if _, err := net.ParseMAC(in.Mac); err != nil {
				return badResult("interfaces[%d] (%s) has mac %q, not a hardware address", i, in.Name, in.Mac)
			}
		}
		if in.Mtu < 0 {
			return badResult("interfaces[%d] (%s) has mtu %d (bytes, want > 0 or absent)", i, in.Name, in.Mtu)
		}
		if in.Name == ifName && in.Sandbox != "" && pod < 0 {
			pod = i
		}
	}
	if pod < 0 {
		return badResult("has no interface %s with sandbox %s (CNI_IFNAME in CNI_NETNS)", ifName, netns)
	}
	if r.Interfaces[pod].Sandbox != netns {
		return badResult("puts interface %s in sandbox %s, not in CNI_NETNS %s", ifName, r.Interfaces[pod].Sandbox, netns)
	}
	if len(r.IPs) == 0 {
		return badResult("has no IP address (ips is empty; an ofsdn pod gets one address per family of its node's pod subnets)")
	}
	for i, ip := range r.IPs {
		if ip == nil {
			return badResult("ips[%d] is null", i)
		}
		fam, err := cidrFamily(ip.Address)
		if err != nil {
			return badResult("ips[%d] has address %s: %v", i, ipNetString(ip.Address), err)
		}
		if ip.Address.IP.IsUnspecified() {
			return badResult("ips[%d] has the unspecified address %s", i, ipNetString(ip.Address))
		}
		if ip.Gateway != nil {
			if ipFamily(ip.Gateway) != fam {
				return badResult("ips[%d] (%s) has gateway %q of another address family", i, ipNetString(ip.Address), ip.Gateway.String())
			}
			if ip.Gateway.IsUnspecified() || ip.Gateway.Equal(ip.Address.IP) {
				return badResult("ips[%d] (%s) has gateway %s (want the gateway's own address)", i, ipNetString(ip.Address), ip.Gateway)
			}
		}
		if ip.Interface == nil {
			return badResult("ips[%d] (%s) names no interface (want the index of %s in interfaces)", i, ipNetString(ip.Address), ifName)
		}
		if idx := *ip.Interface; idx < 0 || idx >= len(r.Interfaces) {
			return badResult("ips[%d] (%s) has interface index %d, outside interfaces (0..%d)", i, ipNetString(ip.Address), idx, len(r.Interfaces)-1)
		}
		if in := r.Interfaces[*ip.Interface]; in.Sandbox == "" {
			return badResult("ips[%d] (%s) is on interface %d (%s), which is not in the pod's sandbox", i, ipNetString(ip.Address), *ip.Interface, in.Name)
		}
	}
	for i, rt := range r.Routes {
		if rt == nil {
			return badResult("routes[%d] is null", i)
		}
		fam, err := cidrFamily(rt.Dst)
		if err != nil {
			return badResult("routes[%d] has dst %s: %v", i, ipNetString(rt.Dst), err)
		}
		if rt.GW != nil && ipFamily(rt.GW) != fam {
			return badResult("routes[%d] (%s) has gw %q of another address family", i, ipNetString(rt.Dst), rt.GW.String())
		}
		if rt.MTU < 0 || rt.AdvMSS < 0 || rt.Priority < 0 || (rt.Table != nil && *rt.Table < 0) {
			return badResult("routes[%d] (%s) has a negative mtu, advmss, priority or table", i, ipNetString(rt.Dst))
		}
		if rt.Scope != nil && (*rt.Scope < 0 || *rt.Scope > 255) {
			return badResult("routes[%d] (%s) has scope %d (want 0..255)", i, ipNetString(rt.Dst), *rt.Scope)
		}
	}
	for i, s := range r.DNS.Nameservers {
		if net.ParseIP(s) == nil {
			return badResult("dns.nameservers[%d] is %q, not an IP address", i, s)
		}
	}
	return nil
}

// checkConverted checks what a version's result must carry after conversion from 1.1.0
// (see ResultForVersion).
func checkConverted(res types.Result) error {
	switch r := res.(type) {
	case *types020.Result:
		if (r.IP4 == nil || r.IP4.IP.IP == nil) && (r.IP6 == nil || r.IP6.IP.IP == nil) {
			return badResult("converted to CNI %s has neither ip4 nor ip6 (those versions carry the pod's addresses there)", r.CNIVersion)
		}
		if r.IP4 != nil && r.IP4.IP.IP != nil {
			if _, err := cidrFamily(r.IP4.IP); err != nil {
				return badResult("converted to CNI %s has ip4.ip %s: %v", r.CNIVersion, ipNetString(r.IP4.IP), err)
			}
		}
	case *types040.Result:
		for i, ip := range r.IPs {
			fam, err := cidrFamily(ip.Address)
			if err != nil || ip.Version != fmt.Sprint(fam) {
				return badResult("converted to CNI %s has ips[%d] version %q for address %s", r.CNIVersion, i, ip.Version, ipNetString(ip.Address))
			}
			if ip.Interface == nil || *ip.Interface < 0 || *ip.Interface >= len(r.Interfaces) {
				return badResult("converted to CNI %s has ips[%d] without a valid interface index", r.CNIVersion, i)
			}
		}
	case *current.Result:
	default:
		return badResult("converted to %s has an unexpected type %T", res.Version(), res)
	}
	return nil
}

// cidrFamily returns 4 or 6 for an address with a prefix length of its own family, else
// an error saying what is wrong.
func cidrFamily(n net.IPNet) (int, error) {
	if n.IP == nil {
		return 0, fmt.Errorf("no address")
	}
	fam := ipFamily(n.IP)
	if fam == 0 {
		return 0, fmt.Errorf("not an IP address")
	}
	ones, bits := n.Mask.Size()
	switch {
	case n.Mask == nil:
		return 0, fmt.Errorf("no prefix length (want a CIDR such as 10.244.1.5/24)")
	case bits == 0:
		return 0, fmt.Errorf("mask %s is not a prefix length", n.Mask.String())
	case (fam == 4) != (bits == 32):
		return 0, fmt.Errorf("a /%d prefix of another address family", ones)
	}
	return fam, nil
}

// ipFamily is 4 for an IPv4 address, 6 for IPv6, 0 for neither.
func ipFamily(ip net.IP) int {
	switch {
	case ip.To4() != nil:
		return 4
	case len(ip) == net.IPv6len:
		return 6
	}
	return 0
}

// ipNetString prints n as the result's JSON would, without net.IPNet's "<nil>".
func ipNetString(n net.IPNet) string {
	if n.IP == nil {
		return `""`
	}
	if n.Mask == nil {
		return n.IP.String()
	}
	return strings.TrimSpace(n.String())
}
