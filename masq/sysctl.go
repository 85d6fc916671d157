package masq

// Node settings the daemon checks but does not change (the IPv4 and IPv6 forwarding it
// needs as a cluster member is turned on by EnableIPForward and EnableIPv6Forward, masq.go).

import (
	"fmt"
	"os"
	"strings"
)

// IPForwardSysctl is the file of net.ipv4.ip_forward (proc(5), /proc/sys/net/ipv4): "1" when
// the node routes IPv4 between interfaces.
const IPForwardSysctl = "/proc/sys/net/ipv4/ip_forward"

// CheckIPForward reads the net.ipv4.ip_forward file at path and returns a warning naming
// the sysctl when it is not 1: without forwarding, a pod's host port mapped by the portmap
// meta plugin (hostPort) is not reachable from other hosts, since the DNAT'ed packet must
// be routed from the node's NIC to the gateway port. The daemon turns forwarding on only
// as a cluster member (EnableIPForward, from controller.Node.JoinCluster); this function
// never writes the file. It returns "" when forwarding is on, and an error naming the
// file when it cannot be read.
func CheckIPForward(path string) (string, error) {
	return checkForward(path, "net.ipv4.ip_forward", "pods' host ports (portmap, hostPort) are not reachable from other hosts", "")
}

// CheckIPv6Forward reads the net.ipv6.conf.all.forwarding file at path (IPv6ForwardSysctl
// on the node) and returns a warning naming the sysctl when it is not 1: an IPv6-only
// node's pods then reach nothing the host must route for them (their host ports, portmap
// and hostPort, from other hosts; the outside; with serviceProxy kube-proxy, ClusterIPs).
// The daemon turns IPv6 forwarding on only as a cluster member with an IPv6 cluster CIDR
// (EnableIPv6Forward, from controller.Node.JoinCluster); this function never writes the
// file. It returns "" when forwarding is on, and an error naming the file when it cannot
// be read.
func CheckIPv6Forward(path string) (string, error) {
	return checkForward(path, "net.ipv6.conf.all.forwarding", "the IPv6-only node's pods' host ports (portmap, hostPort) are not reachable from other hosts and their IPv6 is not routed beyond the node",
		"; with it on, interfaces whose accept_ra is 1 ignore Router Advertisements: set accept_ra=2 on an uplink configured by SLAAC")
}

// checkForward reads the forwarding sysctl file at path and returns the warning for
// sysctl name when its value is not 1: what does not work (effect), the fix and note.
func checkForward(path, name, effect, note string) (string, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return "", fmt.Errorf("read %s: %w", path, err)
	}
	if v := strings.TrimSpace(string(b)); v != "1" {
		return fmt.Sprintf("%s is %s: %s; set %s=1 (sysctl -w %s=1, and in /etc/sysctl.d to keep it)%s", name, v, effect, name, name, note), nil
	}
	return "", nil
}
