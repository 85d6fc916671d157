package bench

// A plain node for the floor and shell-out modes: the same bridge, gateway and base
// pipeline the daemon would set up, made once through the product's packages, so that the
// per-pod work of every mode lands on a switch in the same shape.

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"regexp"
	"strconv"
	"sync"
	"unsafe"

	"github.com/contiv/libOpenflow/openflow13"
	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/ofsdn/ofsdn/controller"
	"github.com/ofsdn/ofsdn/flows"
	"github.com/ofsdn/ofsdn/openflow"
	"github.com/ofsdn/ofsdn/ovsdb"
	"github.com/ofsdn/ofsdn/podnet"
)

const (
	benchBridge  = "br-int"
	benchGateway = "ofsdn-gw0"
	benchMTU     = 1450
)

// quietLogger formats every record at info level like the daemon does, and throws it away.
func quietLogger() *slog.Logger {
	return slog.New(slog.NewTextHandler(io.Discard, &slog.HandlerOptions{Level: slog.LevelInfo}))
}

// plainNode is a bridge with the gateway port and the base pipeline, and the clients the
// floor needs: OVSDB (libovsdb, monitor cache) and one OpenFlow connection.
type plainNode struct {
	sb     *Sandbox
	db     *ovsdb.Client
	sw     *openflow.Conn
	cfg    flows.NodeConfig
	subnet *net.IPNet
}

func newPlainNode(ctx context.Context, sb *Sandbox, subnet *net.IPNet) (*plainNode, error) {
	n := &plainNode{sb: sb, subnet: subnet}
	var err error
	n.db, err = ovsdb.Connect(ctx, sb.Endpoint(), ovsdb.Options{Logger: quietLogger()})
	if err != nil {
		return nil, err
	}
	if err := n.db.EnsureBridge(ctx, ovsdb.BridgeSpec{Name: benchBridge, DatapathType: "netdev", FailMode: "secure",
		Protocols: []string{"OpenFlow13"}, TableNames: flows.TableNames()}); err != nil {
		n.close()
		return nil, err
	}
	gwPort, err := n.db.EnsureInternalPort(ctx, benchBridge, benchGateway, nil)
	if err != nil {
		n.close()
		return nil, err
	}
	gwIP := nthIP(subnet, 1)
	var gwMAC net.HardwareAddr
	if err := RunIn(sb.NetnsPath(), func() error {
		var err error
		gwMAC, err = podnet.ConfigureGateway(ctx, benchGateway, &net.IPNet{IP: gwIP, Mask: subnet.Mask}, benchMTU)
		return err
	}); err != nil {
		n.close()
		return nil, err
	}
	n.cfg = flows.NodeConfig{GatewayOFPort: uint32(gwPort), GatewayMAC: gwMAC, GatewayIP: gwIP, PodSubnet: subnet, Generation: 1}
	n.sw, err = openflow.Dial(ctx, sb.Mgmt(benchBridge), openflow.Options{Logger: quietLogger()})
	if err != nil {
		n.close()
		return nil, err
	}
	if err := n.sw.Apply(ctx, addOps("pipeline", flows.PipelineFlows(n.cfg))); err != nil {
		n.close()
		return nil, err
	}
	return n, nil
}

func (n *plainNode) close() {
	if n.sw != nil {
		n.sw.Close()
	}
	if n.db != nil {
		n.db.Close()
	}
}

// addOps turns flows into OFPFC_ADD flow mods named for errors.
func addOps(owner string, fs []flows.Flow) []openflow.FlowModOp {
	ops := make([]openflow.FlowModOp, len(fs))
	for i, f := range fs {
		ops[i] = openflow.FlowModOp{Mod: f.FlowMod(openflow13.FC_ADD), Name: owner + ": " + f.String()}
	}
	return ops
}

// podExternalIDs are the Interface external_ids the daemon writes for a pod (controller
// ExtID* keys), so every mode's OVSDB transaction carries the same payload.
func podExternalIDs(p Pod, ip *net.IPNet, mac net.HardwareAddr) map[string]string {
	return map[string]string{
		controller.ExtIDContainerID:  p.ContainerID,
		controller.ExtIDIfName:       p.IfName,
		controller.ExtIDPodNamespace: "bench",
		controller.ExtIDPodName:      p.Name,
		controller.ExtIDIP:           ip.String(),
		controller.ExtIDMAC:          mac.String(),
		controller.ExtIDNetns:        p.Netns,
	}
}

// wire is the floor of one pod ADD after the address is chosen: the veth pair created in
// place (pod end born in the pod namespace, configured there on this same thread), one
// OVSDB transaction adding the port with ofport from the monitor cache, and one batch of
// the pod's flow mods confirmed by a barrier. The calling goroutine must be locked into the
// node's network namespace. step, if not nil, receives each step's duration.
func (n *plainNode) wire(ctx context.Context, p Pod, ip *net.IPNet, step func(string)) (flows.Pod, error) {
	hostVeth := podnet.HostVethName(p.ContainerID, p.IfName)
	mac := podnet.MACFromIP(ip.IP)
	if err := floorVeth(p, hostVeth, ip, n.cfg.GatewayIP, mac); err != nil {
		return flows.Pod{}, err
	}
	step("veth")
	ofport, err := n.db.AddPort(ctx, benchBridge, hostVeth, podExternalIDs(p, ip, mac))
	step("ovsdb")
	if err != nil {
		return flows.Pod{}, err
	}
	fp := flows.Pod{OFPort: uint32(ofport), MAC: mac, IPs: []net.IP{ip.IP.To4()}, OwnerID: benchOwnerID(ip.IP)}
	err = n.sw.Apply(ctx, addOps("pod "+p.ContainerID, flows.PodFlows(n.cfg, fp)))
	step("openflow")
	return fp, err
}

// benchOwnerID is the flow owner id the benchmark's own modes give the pod at ip: the
// address as a big-endian uint32, unique in their one pool (the daemon allocates ids with
// its leases instead, ipam.Lease.OwnerID; an id costs the same either way).
func benchOwnerID(ip net.IP) uint32 {
	ip4 := ip.To4()
	return uint32(ip4[0])<<24 | uint32(ip4[1])<<16 | uint32(ip4[2])<<8 | uint32(ip4[3])
}

// unwire is the floor of one pod DEL: one flow mod deleting the pod's flows by cookie
// (+ barrier), one OVSDB transaction removing the port, one netlink message deleting the
// veth pair.
func (n *plainNode) unwire(ctx context.Context, p Pod, ip net.IP, step func(string)) error {
	cookie, mask := flows.PodCookie(flows.Pod{IPs: []net.IP{ip}, OwnerID: benchOwnerID(ip)})
	if err := n.sw.Apply(ctx, []openflow.FlowModOp{{Mod: flows.DeleteByCookie(cookie, mask), Name: "delete pod " + p.ContainerID}}); err != nil {
		return err
	}
	step("del openflow")
	hostVeth := podnet.HostVethName(p.ContainerID, p.IfName)
	if err := n.db.DeletePort(ctx, benchBridge, hostVeth); err != nil {
		return err
	}
	step("del ovsdb")
	if err := netlink.LinkDel(&netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: hostVeth}}); err != nil {
		return fmt.Errorf("delete veth %s: %w", hostVeth, err)
	}
	step("del veth")
	return nil
}

// floorVeth creates the pair with the peer born in the pod namespace with its MAC and MTU
// and the host end already up (one RTM_NEWLINK), then, on the same locked thread switched
// into the pod namespace: TX checksum offload off (required on the userspace datapath),
// link up, address, default route.
func floorVeth(p Pod, hostVeth string, ip *net.IPNet, gw net.IP, mac net.HardwareAddr) (err error) {
	podNS, err := unix.Open(p.Netns, unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("open pod netns %s: %w", p.Netns, err)
	}
	defer unix.Close(podNS)
	veth := &netlink.Veth{
		LinkAttrs:     netlink.LinkAttrs{Name: hostVeth, MTU: benchMTU, Flags: net.FlagUp},
		PeerName:      p.IfName,
		PeerNamespace: netlink.NsFd(podNS), PeerMTU: benchMTU, PeerHardwareAddr: mac,
	}
	if err := netlink.LinkAdd(veth); err != nil {
		return fmt.Errorf("create veth %s/%s in %s: %w", hostVeth, p.IfName, p.Netns, err)
	}
	self, err := unix.Open("/proc/thread-self/ns/net", unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return err
	}
	defer unix.Close(self)
	if err := unix.Setns(podNS, unix.CLONE_NEWNET); err != nil {
		return fmt.Errorf("setns %s: %w", p.Netns, err)
	}
	defer func() {
		if serr := unix.Setns(self, unix.CLONE_NEWNET); serr != nil && err == nil {
			err = fmt.Errorf("setns back from %s: %w", p.Netns, serr)
		}
	}()
	link, err := netlink.LinkByName(p.IfName)
	if err != nil {
		return err
	}
	if err := txChecksumOff(p.IfName); err != nil {
		return err
	}
	if err := netlink.LinkSetUp(link); err != nil {
		return err
	}
	if err := netlink.AddrAdd(link, &netlink.Addr{IPNet: ip}); err != nil {
		return err
	}
	return netlink.RouteReplace(&netlink.Route{LinkIndex: link.Attrs().Index, Gw: gw,
		Dst: &net.IPNet{IP: net.IPv4zero.To4(), Mask: net.CIDRMask(0, 32)}})
}

// txChecksumOff turns TX checksum offload off with the ethtool ioctl (ETHTOOL_STXCSUM),
// as podnet does.
func txChecksumOff(name string) error {
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	ev := struct{ cmd, data uint32 }{cmd: unix.ETHTOOL_STXCSUM}
	var req struct {
		name [unix.IFNAMSIZ]byte
		data unsafe.Pointer
		_    [unsafe.Sizeof(unix.Ifreq{}) - unix.IFNAMSIZ - unsafe.Sizeof(uintptr(0))]byte
	}
	copy(req.name[:], name)
	req.data = unsafe.Pointer(&ev)
	if _, _, errno := unix.Syscall(unix.SYS_IOCTL, uintptr(fd), unix.SIOCETHTOOL, uintptr(unsafe.Pointer(&req))); errno != 0 {
		return fmt.Errorf("ETHTOOL_STXCSUM %s: %w", name, errno)
	}
	return nil
}

// ipPool hands out host addresses of a subnet from .2 on, reusing released ones; the
// floor's stand-in for IPAM (no persistence).
type ipPool struct {
	mu     sync.Mutex
	subnet *net.IPNet
	next   uint32
	free   []uint32
}

func (p *ipPool) get() (*net.IPNet, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	var off uint32
	if len(p.free) > 0 {
		off, p.free = p.free[len(p.free)-1], p.free[:len(p.free)-1]
	} else {
		if p.next == 0 {
			p.next = 2
		}
		ones, bits := p.subnet.Mask.Size()
		if p.next >= 1<<(bits-ones)-1 {
			return nil, fmt.Errorf("ip pool %s exhausted", p.subnet)
		}
		off = p.next
		p.next++
	}
	return &net.IPNet{IP: nthIP(p.subnet, off), Mask: p.subnet.Mask}, nil
}

func (p *ipPool) put(ip net.IP) {
	ip4 := ip.To4()
	base := p.subnet.IP.To4()
	off := (uint32(ip4[0])<<24 | uint32(ip4[1])<<16 | uint32(ip4[2])<<8 | uint32(ip4[3])) -
		(uint32(base[0])<<24 | uint32(base[1])<<16 | uint32(base[2])<<8 | uint32(base[3]))
	p.mu.Lock()
	p.free = append(p.free, off)
	p.mu.Unlock()
}

// nthIP returns the n-th address of subnet (0 is the network address).
func nthIP(subnet *net.IPNet, n uint32) net.IP {
	ip := subnet.IP.To4()
	v := uint32(ip[0])<<24 | uint32(ip[1])<<16 | uint32(ip[2])<<8 | uint32(ip[3]) + n
	return net.IPv4(byte(v>>24), byte(v>>16), byte(v>>8), byte(v)).To4()
}

var tableRef = regexp.MustCompile(`(table=|goto_table:)"?([A-Za-z0-9_]+)"?`)

// ofctlText renders a flow for ovs-ofctl with table numbers instead of stage names, as
// OpenShift SDN wrote its flows (names need ovs-ofctl to fetch the switch's table
// features first; the baseline runs it with --no-names).
func ofctlText(s string) string {
	ids := map[string]string{}
	for _, t := range flows.Tables() {
		ids[t.Name] = strconv.Itoa(int(t.ID))
	}
	return tableRef.ReplaceAllStringFunc(s, func(m string) string {
		sub := tableRef.FindStringSubmatch(m)
		if id, ok := ids[sub[2]]; ok {
			return sub[1] + id
		}
		return m
	})
}
