package masq

// Node settings the daemon checks but does not change (the IPv4 forwarding it needs for
// masquerade is turned on by EnableIPForward, masq.go).

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
	b, err := os.ReadFile(path)
	if err != nil {
		return "", fmt.Errorf("read %s: %w", path, err)
	}
	if v := strings.TrimSpace(string(b)); v != "1" {
		return fmt.Sprintf("net.ipv4.ip_forward is %s: pods' host ports (portmap, hostPort) are not reachable from other hosts; set net.ipv4.ip_forward=1 (sysctl -w net.ipv4.ip_forward=1, and in /etc/sysctl.d to keep it)", v), nil
	}
	return "", nil
}
