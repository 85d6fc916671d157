package podnet

import (
	"fmt"

	"github.com/containernetworking/plugins/pkg/utils/sysctl"
)

// hostEndSysctls keep the host's own IP stack off a pod's host veth end. With the
// userspace datapath (datapathType netdev) ovs-vswitchd reads the host end through a
// packet socket and the kernel still sees every frame on it; left to itself the kernel
// answers the pod's ARP for the gateway address (a local address of the host, on the
// gateway port) with the host end's MAC, and then routes what the pod sends to that MAC
// back into the bridge through the gateway port, so the packets enter OVS as the host's
// and skip the pod's spoof guard and its NetworkPolicy (seen: egress-isolated pods
// reached other nodes' pods). With the kernel datapath OVS takes the frames before the
// IP stack and these settings change nothing. Linux ip-sysctl.rst:
//   - arp_ignore 8: never answer ARP on the host end;
//   - forwarding 0: never route what arrives on it;
//   - rp_filter 1: drop what arrives on it from a source not routed through it (every
//     pod address is routed through the gateway port), which also refuses frames a pod
//     sends to the host end's MAC for the host itself;
//   - IPv6 off: no link-local address, no neighbour discovery.
var hostEndSysctls = []struct{ key, value string }{
	{"net/ipv4/conf/%s/arp_ignore", "8"},
	{"net/ipv4/conf/%s/forwarding", "0"},
	{"net/ipv4/conf/%s/rp_filter", "1"},
	{"net/ipv6/conf/%s/disable_ipv6", "1"},
}

// IsolateHostEnd applies hostEndSysctls to the host end name, in the calling thread's
// network namespace (Setup does it before the link is up; the daemon again for pods it
// restores at start, as one wired by an older ofsdn lacks them). Idempotent. Errors
// name the sysctl and the fix (the daemon needs a writable /proc/sys in its network
// namespace: a privileged container).
func IsolateHostEnd(name string) error {
	for _, s := range hostEndSysctls {
		key := fmt.Sprintf(s.key, name)
		if _, err := sysctl.Sysctl(key, s.value); err != nil {
			return fmt.Errorf("podnet: host veth %s: set %s to %s (keeps the host's IP stack off the pod's link; the daemon needs a writable /proc/sys, e.g. a privileged container): %w", name, key, s.value, err)
		}
	}
	return nil
}
