// Package podnet plumbs a pod's network namespace with netlink: one veth
// pair per pod interface, the host end left in the node's namespace for OVS,
// the pod end configured with the pod's MAC, MTU, IPv4 address and default
// route. It never executes `ip`.
//
// # Design history
//
// Most CNI plugins (containernetworking/plugins pkg/ip SetupVeth, used by
// the bridge plugin) create the veth pair inside the pod namespace and then
// move the host end out with RTM_SETLINK IFLA_NET_NS_FD, which takes the
// rtnl lock a second time and renames/re-registers the device: it was the
// largest single cost of a CNI ADD measured in those plugins. Here the pair
// is created from the node's namespace with the peer born in the pod
// namespace (IFLA_INFO_DATA/VETH_INFO_PEER carrying IFLA_NET_NS_FD, the MTU
// and the MAC), so nothing is ever moved and the pod end already has its MAC
// and MTU. The remaining pod-side work (link up, address, default route,
// optional TX checksum offload off) runs in one ns.Do on a locked OS thread.
//
// Host end names are derived from the attachment key (HostVethName), so CNI
// DEL needs no state to find them; a name that already exists is accepted
// only if its peer is the requested interface in the requested namespace (a
// retried ADD), never reused for another pod.
//
// Netlink dumps go through containernetworking/plugins pkg/netlinksafe,
// which retries on NLM_F_DUMP_INTR (netlink.ErrDumpInterrupted).
package podnet

import (
	"bytes"
	"crypto/rand"
	"errors"
	"fmt"
	"net"

	"github.com/containernetworking/plugins/pkg/netlinksafe"
	"github.com/containernetworking/plugins/pkg/ns"
	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

const (
	// MinMTU is the smallest MTU Setup accepts, in bytes: the IPv4 minimum
	// (RFC 791: every host must accept 68-byte datagrams).
	MinMTU = 68
	// MaxMTU is the largest MTU Setup accepts, in bytes (the veth driver's
	// limit, ETH_MAX_MTU).
	MaxMTU = 65535
)

// testHookAfterCreate, when set by tests, runs in Setup after the pair is
// created and the host end is up, to exercise the rollback path.
var testHookAfterCreate func() error

// Spec describes one pod interface for Setup.
type Spec struct {
	// Netns is the path of the pod's network namespace (CNI_NETNS), e.g.
	// /var/run/netns/cni-1234 or /proc/PID/ns/net.
	Netns string
	// IfName is the interface name inside the pod (CNI_IFNAME), 1-15 bytes.
	IfName string
	// HostVeth is the name of the host end, normally
	// HostVethName(containerID, IfName); 1-15 bytes.
	HostVeth string
	// MTU of both ends, in bytes, MinMTU..MaxMTU.
	MTU int
	// Addr is the pod's IPv4 address with the pod subnet's prefix length
	// (e.g. 10.128.0.5/24); the kernel adds the on-link subnet route. Nil on an
	// IPv6-only node's pod (Addr6 alone), which then has no IPv4 address or route.
	Addr *net.IPNet
	// Gateway is the pod's default gateway; it must lie in Addr's subnet. Set exactly
	// with Addr.
	Gateway net.IP
	// Addr6 is the pod's IPv6 address with the IPv6 pod subnet's prefix length (e.g.
	// fd00:10:128::5/64) on a dual-stack node, nil on an IPv4-only one. With it the pod
	// interface also gets the link-local address LinkLocalFromMAC(MAC)/64 (the kernel's
	// own generation off), both without duplicate address detection (ipv6.go).
	Addr6 *net.IPNet
	// Gateway6 is the pod's IPv6 default gateway, set exactly with Addr6; it must lie in
	// Addr6's subnet (the gateway port's IPv6 address).
	Gateway6 net.IP
	// MAC is the pod interface's MAC. Optional: nil means MACFromIP(Addr.IP), or on an
	// IPv6-only pod MACFromIPv6(Addr6.IP).
	// It must be a 6-byte unicast address.
	MAC net.HardwareAddr
	// DisableTxChecksum turns off TX checksum offload on the pod interface;
	// required for TCP through the OVS userspace datapath (netdev bridges).
	DisableTxChecksum bool
}

// Result is what Setup created; the fields map onto the CNI spec 1.1 result
// "interfaces" list (host end without sandbox, pod end with sandbox).
type Result struct {
	// HostVeth is the name of the host end (to add to br-int).
	HostVeth string
	// HostMAC is the MAC of the host end.
	HostMAC net.HardwareAddr
	// ContainerMAC is the MAC of the pod interface.
	ContainerMAC net.HardwareAddr
	// ContainerIfIndex is the ifindex of the pod interface inside the pod
	// namespace.
	ContainerIfIndex int
	// MTU of both ends, in bytes.
	MTU int
}

// Setup creates and configures the veth pair of one pod interface. It runs
// in the calling thread's network namespace as the host side (the node's
// namespace in the daemon; tests run it inside ns.Do of a test namespace).
//
// Steps: validate the spec; create the veth pair with the peer born in the
// pod namespace with its MAC and MTU; keep the host's IP stack off the host end
// (IsolateHostEnd: no ARP answers, no forwarding, strict reverse-path filter, no
// IPv6); bring the host end up, promiscuous (setHostEndUp: ovs-vswitchd then has no
// flag to change when it opens the port); in the pod
// namespace turn off TX checksum offload (if asked), with Addr6 turn IPv6 on and
// duplicate address detection and the kernel's link-local generation off, bring the
// interface up, add the address and the default route via Gateway and, with Addr6, the
// link-local address LinkLocalFromMAC(MAC), Addr6 (both IFA_F_NODAD) and the IPv6
// default route via Gateway6. Calling Setup again
// with the same spec after a success or a partial failure is a retry and
// succeeds. If HostVeth exists with a peer anywhere else, Setup fails
// naming the collision and changes nothing. On any error, links this call
// created are deleted.
//
// Errors: invalid spec; the pod namespace cannot be opened; IfName already
// exists in the pod namespace; host-name collision; any netlink or ioctl
// failure (wrapped, naming the interface and namespace).
func Setup(spec Spec) (res Result, err error) {
	mac, err := spec.validate()
	if err != nil {
		return Result{}, err
	}
	podNS, err := ns.GetNS(spec.Netns)
	if err != nil {
		return Result{}, fmt.Errorf("podnet: open pod netns %s: %w", spec.Netns, err)
	}
	defer podNS.Close()

	host, created, err := ensureVeth(spec, mac, podNS)
	if err != nil {
		return Result{}, err
	}
	defer func() {
		if err != nil && created {
			// Deleting the host end deletes the pod end with it.
			if derr := netlink.LinkDel(host); derr != nil && !isNotFound(derr) {
				err = errors.Join(err, fmt.Errorf("podnet: clean up host veth %s: %w", spec.HostVeth, derr))
			}
		}
	}()
	if err = isolateHostLink(host.Attrs().Index, spec.HostVeth); err != nil {
		return Result{}, err
	}
	if err = setHostEndUp(host.Attrs().Index, spec.HostVeth); err != nil {
		return Result{}, err
	}
	if testHookAfterCreate != nil {
		if err = testHookAfterCreate(); err != nil {
			return Result{}, err
		}
	}
	index, err := configurePod(podNS, spec, mac)
	if err != nil {
		return Result{}, err
	}
	return Result{
		HostVeth:         spec.HostVeth,
		HostMAC:          host.Attrs().HardwareAddr,
		ContainerMAC:     mac,
		ContainerIfIndex: index,
		MTU:              spec.MTU,
	}, nil
}

// validate checks the spec before any side effect and returns the pod MAC
// to use.
func (s *Spec) validate() (net.HardwareAddr, error) {
	if s.Netns == "" {
		return nil, errors.New("podnet: pod netns path is empty: pass CNI_NETNS")
	}
	if err := validIfName(s.IfName); err != nil {
		return nil, fmt.Errorf("podnet: pod interface: %w", err)
	}
	if err := validIfName(s.HostVeth); err != nil {
		return nil, fmt.Errorf("podnet: host veth: %w", err)
	}
	if s.MTU < MinMTU || s.MTU > MaxMTU {
		return nil, fmt.Errorf("podnet: MTU %d bytes is outside %d-%d", s.MTU, MinMTU, MaxMTU)
	}
	v6only := s.Addr == nil && s.Gateway == nil && s.Addr6 != nil
	if !v6only {
		addr, err := ipv4Net(s.Addr)
		if err != nil {
			return nil, fmt.Errorf("podnet: pod address: %w", err)
		}
		s.Addr = addr
		gw := s.Gateway.To4()
		if gw == nil || !addr.Contains(gw) || gw.Equal(addr.IP) {
			return nil, fmt.Errorf("podnet: gateway %v must be an IPv4 address in pod subnet %v other than the pod's", s.Gateway, addr)
		}
		s.Gateway = gw
	}
	if err := s.validateIPv6(); err != nil {
		return nil, err
	}
	mac := s.MAC
	if mac == nil {
		mac = PodMAC(s.Addr, s.Addr6) // s.Addr is nil exactly on an IPv6-only pod (v6only)
	}
	if len(mac) != 6 || mac[0]&1 != 0 || bytes.Equal(mac, make(net.HardwareAddr, 6)) {
		return nil, fmt.Errorf("podnet: MAC %v is not a 6-byte unicast address", mac)
	}
	return mac, nil
}

// ipv4Net returns n with a 4-byte IP and mask, or an error if it is not an
// IPv4 host address with a prefix.
func ipv4Net(n *net.IPNet) (*net.IPNet, error) {
	if n == nil {
		return nil, errors.New("address is nil")
	}
	ip := n.IP.To4()
	ones, bits := n.Mask.Size()
	if ip == nil || (bits != 32 && bits != 128) || (bits == 128 && ones < 96) {
		return nil, fmt.Errorf("%v is not an IPv4 address with a prefix length", n)
	}
	if bits == 128 {
		ones -= 96
	}
	return &net.IPNet{IP: ip, Mask: net.CIDRMask(ones, 32)}, nil
}

// ensureVeth creates the pair, or finds it from an earlier attempt of the
// same spec. created reports whether this call made it.
func ensureVeth(spec Spec, mac net.HardwareAddr, podNS ns.NetNS) (link netlink.Link, created bool, err error) {
	existing, err := netlinksafe.LinkByName(spec.HostVeth)
	if err == nil {
		if err := checkRetry(existing, spec, podNS); err != nil {
			return nil, false, err
		}
		return existing, false, nil
	}
	if !isNotFound(err) {
		return nil, false, fmt.Errorf("podnet: look up host veth %s: %w", spec.HostVeth, err)
	}
	hostMAC, err := randomMAC()
	if err != nil {
		return nil, false, err
	}
	veth := &netlink.Veth{
		LinkAttrs:        netlink.LinkAttrs{Name: spec.HostVeth, MTU: spec.MTU, HardwareAddr: hostMAC},
		PeerName:         spec.IfName,
		PeerNamespace:    netlink.NsFd(int(podNS.Fd())),
		PeerMTU:          uint32(spec.MTU),
		PeerHardwareAddr: mac,
	}
	if err := netlink.LinkAdd(veth); err != nil {
		if errors.Is(err, unix.EEXIST) {
			if _, lerr := netlinksafe.LinkByName(spec.HostVeth); lerr == nil {
				return nil, false, fmt.Errorf("podnet: host veth %s was created concurrently by someone else: retry the ADD", spec.HostVeth)
			}
			return nil, false, fmt.Errorf("podnet: interface %s already exists in pod netns %s: another plugin or an earlier attachment owns it; delete it or use another CNI_IFNAME", spec.IfName, spec.Netns)
		}
		return nil, false, fmt.Errorf("podnet: create veth pair %s (host) / %s (pod netns %s): %w", spec.HostVeth, spec.IfName, spec.Netns, err)
	}
	return veth, true, nil
}

// checkRetry accepts an existing host link only if it is a veth whose peer
// is spec.IfName inside the pod namespace.
func checkRetry(host netlink.Link, spec Spec, podNS ns.NetNS) error {
	if _, ok := host.(*netlink.Veth); !ok {
		return fmt.Errorf("podnet: host interface %s already exists and is a %s, not a veth: another program uses the name; delete it", spec.HostVeth, host.Type())
	}
	collision := func(why string) error {
		return fmt.Errorf("podnet: host veth %s already exists but %s, so it belongs to another pod or a stale attachment: delete the stale pod (CNI DEL) or the link", spec.HostVeth, why)
	}
	nsid, err := netlink.GetNetNsIdByFd(int(podNS.Fd()))
	if err != nil {
		return fmt.Errorf("podnet: get netnsid of pod netns %s: %w", spec.Netns, err)
	}
	peerNSID := host.Attrs().NetNsID
	if peerNSID < 0 || nsid < 0 || peerNSID != nsid {
		return collision(fmt.Sprintf("its peer is in another network namespace (netnsid %d), not pod netns %s (netnsid %d)", peerNSID, spec.Netns, nsid))
	}
	return podNS.Do(func(ns.NetNS) error {
		peer, err := netlinksafe.LinkByName(spec.IfName)
		if err != nil {
			return collision(fmt.Sprintf("pod netns %s has no interface %s (%v)", spec.Netns, spec.IfName, err))
		}
		if peer.Attrs().Index != host.Attrs().ParentIndex || peer.Attrs().ParentIndex != host.Attrs().Index {
			return collision(fmt.Sprintf("its peer is not %s in pod netns %s", spec.IfName, spec.Netns))
		}
		return nil
	})
}

// configurePod configures the pod end inside the pod namespace and returns
// its ifindex there.
func configurePod(podNS ns.NetNS, spec Spec, mac net.HardwareAddr) (index int, err error) {
	err = podNS.Do(func(ns.NetNS) error {
		link, err := netlinksafe.LinkByName(spec.IfName)
		if err != nil {
			return fmt.Errorf("podnet: find %s in pod netns %s: %w", spec.IfName, spec.Netns, err)
		}
		index = link.Attrs().Index
		// Born with MAC and MTU; these only act on a retry of an older attempt.
		if !bytes.Equal(link.Attrs().HardwareAddr, mac) {
			if err := netlink.LinkSetHardwareAddr(link, mac); err != nil {
				return fmt.Errorf("podnet: set MAC %v on %s in pod netns %s: %w", mac, spec.IfName, spec.Netns, err)
			}
		}
		if link.Attrs().MTU != spec.MTU {
			if err := netlink.LinkSetMTU(link, spec.MTU); err != nil {
				return fmt.Errorf("podnet: set MTU %d on %s in pod netns %s: %w", spec.MTU, spec.IfName, spec.Netns, err)
			}
		}
		if spec.DisableTxChecksum {
			if err := setTxChecksum(spec.IfName, false); err != nil {
				return fmt.Errorf("podnet: pod netns %s: %w", spec.Netns, err)
			}
		}
		if spec.Addr6 != nil {
			// Before the link is up: no DAD, no link-local address of the kernel's own.
			if err := prepareIPv6(link, spec.IfName, spec.Netns); err != nil {
				return err
			}
		}
		if err := netlink.LinkSetUp(link); err != nil {
			return fmt.Errorf("podnet: set %s up in pod netns %s: %w", spec.IfName, spec.Netns, err)
		}
		if spec.Addr == nil { // an IPv6-only pod
			return addIPv6(link, spec.IfName, spec.Netns, mac, spec.Addr6, spec.Gateway6)
		}
		if err := netlink.AddrAdd(link, &netlink.Addr{IPNet: spec.Addr}); err != nil && !errors.Is(err, unix.EEXIST) {
			return fmt.Errorf("podnet: add address %v to %s in pod netns %s: %w", spec.Addr, spec.IfName, spec.Netns, err)
		}
		route := &netlink.Route{
			LinkIndex: index,
			Dst:       &net.IPNet{IP: net.IPv4zero.To4(), Mask: net.CIDRMask(0, 32)},
			Gw:        spec.Gateway,
			Scope:     netlink.SCOPE_UNIVERSE,
		}
		if err := netlink.RouteReplace(route); err != nil {
			return fmt.Errorf("podnet: add default route via %v dev %s in pod netns %s: %w", spec.Gateway, spec.IfName, spec.Netns, err)
		}
		if spec.Addr6 != nil {
			return addIPv6(link, spec.IfName, spec.Netns, mac, spec.Addr6, spec.Gateway6)
		}
		return nil
	})
	return index, err
}

// Teardown removes the veth pair of one pod interface. It is idempotent
// (CNI spec 1.1 section "DEL": DEL of something absent succeeds): if
// hostVeth exists it is deleted, which deletes the pod end too. When hostVeth
// does not exist, nothing is deleted: a veth pair only ever goes as a whole,
// so a link called ifName in the pod netns (netnsPath) is then not the pod
// end of ours but, say, another plugin's interface that made our ADD fail
// (SPEC.md "DEL" after a failed ADD must not remove it). netnsPath and ifName
// are kept for the callers' symmetry with Setup and are not opened.
//
// Teardown returns only once the pair is gone. Deletions running concurrently in the
// same network namespace share one RTM_DELLINK (reap.go): the kernel's fixed cost of
// unregistering devices is then paid once for all of them. The calling goroutine must be
// locked to its OS thread when the caller relies on a namespace set on that thread (the
// deletion of others may run on it).
//
// Errors: hostVeth exists but is not a veth (Teardown refuses to delete
// another program's link); a netlink failure other than "not found".
func Teardown(hostVeth, netnsPath, ifName string) error {
	_, _ = netnsPath, ifName
	if hostVeth == "" {
		return nil
	}
	return deleteHostVeth(hostVeth)
}

// isNotFound reports whether err is netlink's "no such link".
func isNotFound(err error) bool {
	var nf netlink.LinkNotFoundError
	return errors.As(err, &nf) || errors.Is(err, unix.ENODEV)
}

// randomMAC returns a random locally administered unicast MAC (what the
// kernel's eth_random_addr gives), so the host end's MAC is known without
// reading it back.
func randomMAC() (net.HardwareAddr, error) {
	mac := make(net.HardwareAddr, 6)
	if _, err := rand.Read(mac); err != nil {
		return nil, fmt.Errorf("podnet: random MAC: %w", err)
	}
	mac[0] = mac[0]&^0x01 | 0x02 // unicast, locally administered
	return mac, nil
}
