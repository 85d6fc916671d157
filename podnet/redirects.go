package podnet

// ICMP redirects off on the gateway.
//
// Design history (issue 20): the node routes pods' service traffic in and out of the
// gateway port (pod → gateway → kube-proxy's DNAT → gateway → pod), and for every such
// packet the kernel sends the source pod an ICMP redirect (in_dev == out_dev and the
// source on-link: __mkroute_input sets IPSKB_DOREDIRECT, ip_forward calls
// ip_rt_send_redirect; IcmpOutRedirects in /proc/net/snmp). ip_rt_send_redirect keeps its
// state in the same per-destination inet_peer as the ICMP error rate limit
// (icmpv4_xrlim_allow → inet_peer_xrlim_allow: rate_tokens, rate_last), and resets and
// refreshes it on every redirected packet; so the next ICMP error to that pod, e.g. the
// port unreachable of kube-proxy's reject for a Service without endpoints, is dropped
// (IcmpOutRateLimitHost) and the pod's connect() is refused only after the SYN's
// retransmit, 1 s later. Without redirects it is refused in milliseconds.
//
// The kernel sends redirects on a device when IN_DEV_TX_REDIRECTS holds, which is
// IN_DEV_ORCONF(SEND_REDIRECTS): net.ipv4.conf.all.send_redirects OR the device's own
// send_redirects (include/linux/inetdevice.h). With all = 1, the default, a device's 0
// changes nothing. What the daemon does, so that only the gateway stops sending them:
//  1. if all is 1, every other interface whose own send_redirects is 0 gets 1 (its
//     effective setting, all OR own, stays 1);
//  2. all is set to 0 (now every interface but the gateway still sends redirects by its
//     own 1; interfaces created later take net.ipv4.conf.default.send_redirects, 1 unless
//     the operator changed it, as before);
//  3. the gateway's own send_redirects is set to 0.
// The host's behaviour on its other interfaces is unchanged; what changes is the value
// shown by `sysctl net.ipv4.conf.all.send_redirects` (0), and an operator who sets all
// back to 1 turns redirects on the gateway back on until the gateway is configured again
// (every ConfigureGateway, i.e. daemon start and OVSDB reconnection, does it again). The
// per-device values go in RTM_SETLINK (IFLA_AF_SPEC → AF_INET → IFLA_INET_CONF, as
// hostend.go does); "all" is no device and has no netlink form, so it is written to
// /proc/sys. No interface of the daemon's own (host veth ends) forwards, so none of them
// sends redirects either way.

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/containernetworking/plugins/pkg/netlinksafe"
	"github.com/vishvananda/netlink/nl"
	"golang.org/x/sys/unix"
)

// ipv4DevconfSendRedirects is IPV4_DEVCONF_SEND_REDIRECTS (include/uapi/linux/ip.h).
const ipv4DevconfSendRedirects = 6

// procIPv4Conf is the /proc/sys directory of the IPv4 devconf of the calling thread's
// network namespace (a variable for tests of the decision only).
var procIPv4Conf = "/proc/sys/net/ipv4/conf"

// redirectsChange is what disableGatewayRedirects changed: AllWas is
// net.ipv4.conf.all.send_redirects before (0 or 1), Kept the interfaces whose own
// send_redirects it set to 1 so that they keep sending redirects.
type redirectsChange struct {
	AllWas int
	Kept   []string
}

// disableGatewayRedirects turns IPv4 ICMP redirects off on the gateway (ifindex index,
// name) and nowhere else, as the file comment describes. Errors name the setting and the
// fix (the daemon needs CAP_NET_ADMIN and a writable /proc/sys: a privileged container).
func disableGatewayRedirects(index int, name string) (redirectsChange, error) {
	var ch redirectsChange
	all, err := readDevconf("all", "send_redirects")
	if err != nil {
		return ch, err
	}
	ch.AllWas = all
	if all != 0 {
		entries, err := os.ReadDir(procIPv4Conf)
		if err != nil {
			return ch, fmt.Errorf("podnet: gateway %s: list %s: %w", name, procIPv4Conf, err)
		}
		for _, e := range entries {
			dev := e.Name()
			if dev == "all" || dev == "default" || dev == name {
				continue
			}
			own, err := readDevconf(dev, "send_redirects")
			if err != nil || own != 0 {
				continue // gone meanwhile, or already sending by its own setting
			}
			l, err := netlinksafe.LinkByName(dev)
			if err != nil {
				continue
			}
			if err := setDevconf(l.Attrs().Index, ipv4DevconfSendRedirects, 1); err != nil {
				return ch, fmt.Errorf("podnet: gateway %s: keep ICMP redirects on interface %s (its send_redirects 0 → 1 before net.ipv4.conf.all.send_redirects goes 0; the daemon needs CAP_NET_ADMIN): %w", name, dev, err)
			}
			ch.Kept = append(ch.Kept, dev)
		}
		key := filepath.Join(procIPv4Conf, "all", "send_redirects")
		if err := os.WriteFile(key, []byte("0\n"), 0o644); err != nil {
			return ch, fmt.Errorf("podnet: gateway %s: set net.ipv4.conf.all.send_redirects 0 (the kernel sends redirects on a device if all OR the device says so; the daemon needs a writable /proc/sys, e.g. a privileged container): %w", name, err)
		}
	}
	if err := setDevconf(index, ipv4DevconfSendRedirects, 0); err != nil {
		return ch, fmt.Errorf("podnet: gateway %s: set IPv4 send_redirects 0 (IFLA_INET_CONF; ICMP redirects for pods' service traffic through the gateway spend the kernel's ICMP budget for the pod and delay Service rejects by 1 s; the daemon needs CAP_NET_ADMIN): %w", name, err)
	}
	return ch, nil
}

// readDevconf reads /proc/sys/net/ipv4/conf/DEV/KEY as an integer.
func readDevconf(dev, key string) (int, error) {
	p := filepath.Join(procIPv4Conf, dev, key)
	b, err := os.ReadFile(p)
	if err != nil {
		return 0, fmt.Errorf("podnet: read %s: %w", p, err)
	}
	var v int
	if _, err := fmt.Sscan(strings.TrimSpace(string(b)), &v); err != nil {
		return 0, fmt.Errorf("podnet: read %s: %q is not a number", p, b)
	}
	return v, nil
}

// setDevconf sets one IPv4 devconf value of the link with ifindex index in one
// RTM_SETLINK (IFLA_AF_SPEC → AF_INET → IFLA_INET_CONF).
func setDevconf(index, devconf int, value uint32) error {
	req := nl.NewNetlinkRequest(unix.RTM_SETLINK, unix.NLM_F_ACK)
	msg := nl.NewIfInfomsg(unix.AF_UNSPEC)
	msg.Index = int32(index)
	req.AddData(msg)
	afSpec := nl.NewRtAttr(unix.IFLA_AF_SPEC, nil)
	afSpec.AddRtAttr(unix.AF_INET, nil).AddRtAttr(unix.IFLA_INET_CONF, nil).AddRtAttr(devconf, nl.Uint32Attr(value))
	req.AddData(afSpec)
	_, err := req.Execute(unix.NETLINK_ROUTE, 0)
	return err
}
