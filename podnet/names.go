package podnet

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"net"
	"strings"
)

const (
	// hostVethPrefix starts every host-side veth name ofsdn creates, so that
	// `ip link` shows at a glance which links belong to pods.
	hostVethPrefix = "ofs"
	// maxIfNameLen is IFNAMSIZ-1 (linux/if.h): the longest interface name
	// in bytes; the 16th byte is the terminating NUL.
	maxIfNameLen = 15
)

// HostVethName returns the name of the host end of the veth pair of the
// attachment (containerID, ifName): "ofs" followed by the first 12 hex digits
// (48 bits) of SHA-256(containerID + "/" + ifName), exactly 15 bytes
// (IFNAMSIZ-1). It is a pure function, so CNI DEL can find the link from the
// attachment key alone (CNI spec 1.1 section "DEL": prevResult may be
// missing). Container IDs that share a long prefix (runtimes use 64 hex
// digits) still get different names because the whole key is hashed.
func HostVethName(containerID, ifName string) string {
	sum := sha256.Sum256([]byte(containerID + "/" + ifName))
	return hostVethPrefix + hex.EncodeToString(sum[:])[:maxIfNameLen-len(hostVethPrefix)]
}

// MACFromIP returns the pod MAC ofsdn derives from an IPv4 address:
// 0a:58:a.b.c.d, as ovn-kubernetes does. 0x0a has the locally administered
// bit set and the group (multicast) bit clear (IEEE 802 / RFC 7042 section
// 2.1), so it never collides with a vendor-assigned address, and a pod keeps
// its MAC across restarts of the daemon. It returns nil for a non-IPv4 ip.
func MACFromIP(ip net.IP) net.HardwareAddr {
	ip4 := ip.To4()
	if ip4 == nil {
		return nil
	}
	return net.HardwareAddr{0x0a, 0x58, ip4[0], ip4[1], ip4[2], ip4[3]}
}

// MACFromIPv6 returns the pod MAC ofsdn derives for an IPv6-only pod from its IPv6
// address: 0a:58 followed by the address's last 4 bytes (as ovn-kubernetes does), e.g.
// fd00:10:128::5 → 0a:58:00:00:00:05; locally administered, unicast, and stable across
// daemon restarts. It returns nil for an IPv4 (or IPv4-mapped) address or one that is
// not 16 bytes.
func MACFromIPv6(ip net.IP) net.HardwareAddr {
	if ip.To4() != nil || len(ip) != net.IPv6len {
		return nil
	}
	return net.HardwareAddr{0x0a, 0x58, ip[12], ip[13], ip[14], ip[15]}
}

// PodMAC returns the MAC ofsdn gives a pod interface: MACFromIP of its IPv4 address, or
// on a pod without one (IPv6-only) MACFromIPv6 of its IPv6 address; nil with neither.
// Setup uses it when the spec names no MAC, and the daemon to name the MAC in the pod's
// flows before the interface exists.
func PodMAC(addr, addr6 *net.IPNet) net.HardwareAddr {
	switch {
	case addr != nil:
		return MACFromIP(addr.IP)
	case addr6 != nil:
		return MACFromIPv6(addr6.IP)
	}
	return nil
}

// validIfName reports whether the kernel would accept name as an interface
// name (net/core/dev.c dev_valid_name): 1 to 15 bytes, not "." or "..", no
// '/', ':' or white space.
func validIfName(name string) error {
	switch {
	case name == "":
		return fmt.Errorf("interface name is empty")
	case len(name) > maxIfNameLen:
		return fmt.Errorf("interface name %q is %d bytes, longer than %d (IFNAMSIZ-1)", name, len(name), maxIfNameLen)
	case name == "." || name == "..":
		return fmt.Errorf("interface name %q is not allowed", name)
	case strings.ContainsAny(name, "/: \t\n\v\f\r"):
		return fmt.Errorf("interface name %q contains '/', ':' or white space", name)
	}
	return nil
}
