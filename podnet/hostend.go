package podnet

import (
	"errors"
	"fmt"
	"io/fs"

	"github.com/containernetworking/plugins/pkg/utils/sysctl"
	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netlink/nl"
	"golang.org/x/sys/unix"
)

// The host end's settings keep the host's own IP stack off a pod's host veth end. With the
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
//
// The three IPv4 settings go in ONE RTM_SETLINK (IFLA_AF_SPEC → AF_INET →
// IFLA_INET_CONF, include/uapi/linux/if_link.h; the kernel's inet_set_link_af sets them
// as the sysctls would). Written as sysctls they cost a /proc/sys open, write and
// read-back each, and the forwarding one retries its syscall until it gets the rtnl lock
// (devinet_sysctl_forward: rtnl_trylock, restart_syscall): with 32 concurrent ADDs the
// four sysctls were 14% of the daemon's CPU (perf record, bench/RESULTS.md). IPv6 has no
// netlink form of disable_ipv6, so that one stays a sysctl.

// IPv4 devconf indices (include/uapi/linux/ip.h, enum IPV4_DEVCONF_*), the attribute
// types inside IFLA_INET_CONF.
const (
	ipv4DevconfForwarding = 1
	ipv4DevconfRPFilter   = 8
	ipv4DevconfARPIgnore  = 19
)

// hostEndIPv4Conf is the IPv4 part: devconf index → value.
var hostEndIPv4Conf = []struct {
	index int
	value uint32
}{
	{ipv4DevconfARPIgnore, 8},
	{ipv4DevconfForwarding, 0},
	{ipv4DevconfRPFilter, 1},
}

// hostEndIPv6Sysctl is the IPv6 part, a sysctl.
const hostEndIPv6Sysctl = "net/ipv6/conf/%s/disable_ipv6"

// IsolateHostEnd keeps the host's IP stack off the host end name (arp_ignore 8,
// forwarding 0, rp_filter 1, disable_ipv6 1), in the calling thread's network namespace
// (Setup does it before the link is up; the daemon again for pods it restores at start,
// as one wired by an older ofsdn lacks them). Idempotent. Errors name the link, the
// setting and the fix (the daemon needs CAP_NET_ADMIN and a writable /proc/sys in its
// network namespace: a privileged container).
func IsolateHostEnd(name string) error {
	link, err := netlink.LinkByName(name)
	if err != nil {
		return fmt.Errorf("podnet: host veth %s: %w", name, err)
	}
	return isolateHostLink(link.Attrs().Index, name)
}

// isolateHostLink is IsolateHostEnd for the link with ifindex index.
func isolateHostLink(index int, name string) error {
	req := nl.NewNetlinkRequest(unix.RTM_SETLINK, unix.NLM_F_ACK)
	msg := nl.NewIfInfomsg(unix.AF_UNSPEC)
	msg.Index = int32(index)
	req.AddData(msg)
	afSpec := nl.NewRtAttr(unix.IFLA_AF_SPEC, nil)
	conf := afSpec.AddRtAttr(unix.AF_INET, nil).AddRtAttr(unix.IFLA_INET_CONF, nil)
	for _, c := range hostEndIPv4Conf {
		conf.AddRtAttr(c.index, nl.Uint32Attr(c.value))
	}
	req.AddData(afSpec)
	if _, err := req.Execute(unix.NETLINK_ROUTE, 0); err != nil {
		return fmt.Errorf("podnet: host veth %s: set IPv4 arp_ignore 8, forwarding 0, rp_filter 1 (IFLA_INET_CONF; keeps the host's IP stack off the pod's link; the daemon needs CAP_NET_ADMIN, e.g. a privileged container): %w", name, err)
	}
	key := fmt.Sprintf(hostEndIPv6Sysctl, name)
	if _, err := sysctl.Sysctl(key, "1"); err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			// The link has no IPv6 at all, so the host's IPv6 stack cannot touch it: its
			// MTU is below IPv6's minimum of 1280 (RFC 8200 §5; Linux keeps no IPv6 on
			// such a link, and ofsdn never changes a host end's MTU), or IPv6 is off in
			// the kernel.
			return nil
		}
		return fmt.Errorf("podnet: host veth %s: set %s to 1 (keeps the host's IPv6 stack off the pod's link; the daemon needs a writable /proc/sys, e.g. a privileged container): %w", name, key, err)
	}
	return nil
}

// setHostEndUp brings the host end with ifindex index up and promiscuous in ONE
// RTM_NEWLINK (ifinfomsg flags and change mask IFF_UP|IFF_PROMISC; the kernel's
// dev_change_flags sets the user promiscuity flag as `ip link set NAME up promisc on`
// does, and sends one notification).
//
// Why promiscuous: ovs-vswitchd turns promiscuous mode on when it opens a port's
// network device (netdev_linux, the userspace datapath; the kernel datapath's vport
// does the same) and off again when the port goes. Each flip is a link change in the
// node's network namespace, and ovs-vswitchd 3.1 reconfigures every bridge on every
// link change it is notified of (its if_notifier), at a cost that grows with the ports
// on the bridge. With the flag already set, opening and closing the port change
// nothing on the link: an ADD costs one reconfiguration fewer, a DEL another (measured
// with `ovs-appctl coverage/show`, bridge_reconfigure, in bench/RESULTS.md "Density").
// The end state is the one ovs-vswitchd makes anyway: promiscuous while on the
// bridge; the host's IP stack stays off the link (IsolateHostEnd) and drops frames for
// other MACs (PACKET_OTHERHOST) as before.
func setHostEndUp(index int, name string) error {
	req := nl.NewNetlinkRequest(unix.RTM_NEWLINK, unix.NLM_F_ACK)
	msg := nl.NewIfInfomsg(unix.AF_UNSPEC)
	msg.Index = int32(index)
	msg.Flags = unix.IFF_UP | unix.IFF_PROMISC
	msg.Change = unix.IFF_UP | unix.IFF_PROMISC
	req.AddData(msg)
	if _, err := req.Execute(unix.NETLINK_ROUTE, 0); err != nil {
		return fmt.Errorf("podnet: set host veth %s up and promiscuous (the daemon needs CAP_NET_ADMIN, e.g. a privileged container): %w", name, err)
	}
	return nil
}
