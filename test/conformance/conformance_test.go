// Package conformance checks ofsdn against the CNI specification 1.1.0 (SPEC.md): one case
// per requirement, each naming the section it checks, run through libcni (the library
// containerd and CRI-O use) and the real plugin binary for every spec version libcni
// knows where the verb exists (ADD and DEL: 0.1.0…1.1.0; CHECK: 0.4.0+; STATUS, GC:
// 1.1.0).
package conformance

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/containernetworking/cni/libcni"
	"github.com/containernetworking/cni/pkg/types"
	types020 "github.com/containernetworking/cni/pkg/types/020"
	types040 "github.com/containernetworking/cni/pkg/types/040"
	current "github.com/containernetworking/cni/pkg/types/100"
	"github.com/containernetworking/cni/pkg/version"
	"github.com/containernetworking/plugins/pkg/ns"
	"github.com/containernetworking/plugins/pkg/testutils"
	"github.com/vishvananda/netlink"
)

// env is what one case gets: the node, the spec version under test and its netconf.
type env struct {
	n    *node
	v    string
	list *libcni.NetworkConfigList
}

var seq atomic.Int64

// attachment returns the runtime parameters of a fresh attachment in a new netns.
func (e *env) attachment(t *testing.T) (*libcni.RuntimeConf, ns.NetNS) {
	netns := newNetns(t)
	id := fmt.Sprintf("conf-%s-%d", strings.ReplaceAll(e.v, ".", ""), seq.Add(1))
	return &libcni.RuntimeConf{ContainerID: id, NetNS: netns.Path(), IfName: "eth0",
		Args: [][2]string{{"K8S_POD_NAMESPACE", "conformance"}, {"K8S_POD_NAME", id}}}, netns
}

func (e *env) add(t *testing.T, rt *libcni.RuntimeConf) types.Result {
	t.Helper()
	res, err := e.n.CNI.AddNetworkList(context.Background(), e.list, rt)
	if err != nil {
		t.Fatalf("ADD (cniVersion %s): %v", e.v, err)
	}
	return res
}

func (e *env) del(t *testing.T, rt *libcni.RuntimeConf, what string) {
	t.Helper()
	if err := e.n.CNI.DelNetworkList(context.Background(), e.list, rt); err != nil {
		t.Errorf("%s (cniVersion %s): %v", what, e.v, err)
	}
}

// checkResultShape checks an ADD result against SPEC.md "Section 5: Result Types", "ADD
// Success" for version v: the result is in the requested version; interfaces name the
// host and the pod interface, the pod one with its sandbox; every ips[].interface is an
// index into interfaces pointing at an interface in the sandbox; the address is really on
// that interface with the MAC the result gives.
func checkResultShape(t *testing.T, v string, res types.Result, netns ns.NetNS) {
	t.Helper()
	if res.Version() != v {
		t.Errorf("result cniVersion %s, want the netconf's %s", res.Version(), v)
	}
	var ifaces []*current.Interface
	var ips []*current.IPConfig
	switch r := res.(type) {
	case *current.Result:
		ifaces, ips = r.Interfaces, r.IPs
	case *types040.Result:
		for _, i := range r.Interfaces {
			ifaces = append(ifaces, &current.Interface{Name: i.Name, Mac: i.Mac, Sandbox: i.Sandbox})
		}
		for _, ip := range r.IPs {
			if ip.Version != "4" {
				t.Errorf("0.3/0.4 result: ips[].version %q, want \"4\"", ip.Version)
			}
			ips = append(ips, &current.IPConfig{Interface: ip.Interface, Address: ip.Address, Gateway: ip.Gateway})
		}
	case *types020.Result:
		// 0.1.0/0.2.0 have no interfaces list: an ip4 block with address and gateway.
		if r.IP4 == nil || r.IP4.IP.IP.To4() == nil || r.IP4.Gateway == nil {
			t.Fatalf("%s result without ip4 address and gateway: %+v", v, r)
		}
		ips = append(ips, &current.IPConfig{Address: r.IP4.IP})
	default:
		t.Fatalf("result type %T for cniVersion %s", res, v)
	}
	if len(ips) == 0 {
		t.Fatal("result has no IP")
	}
	var mac string
	if ifaces != nil {
		for _, ip := range ips {
			if ip.Interface == nil || *ip.Interface < 0 || *ip.Interface >= len(ifaces) {
				t.Fatalf("ips[].interface %v is not an index into %d interfaces", ip.Interface, len(ifaces))
			}
			in := ifaces[*ip.Interface]
			if in.Sandbox != netns.Path() || in.Name != "eth0" {
				t.Errorf("ips[].interface %d names %+v, want eth0 in sandbox %s", *ip.Interface, in, netns.Path())
			}
			mac = in.Mac
		}
		host := 0
		for _, in := range ifaces {
			if in.Sandbox == "" {
				host++
			}
		}
		if host != 1 {
			t.Errorf("%d host-side interfaces (no sandbox) in the result, want 1", host)
		}
	}
	err := netns.Do(func(ns.NetNS) error {
		l, err := netlink.LinkByName("eth0")
		if err != nil {
			return err
		}
		if mac != "" && l.Attrs().HardwareAddr.String() != mac {
			return fmt.Errorf("eth0 has MAC %s, the result says %s", l.Attrs().HardwareAddr, mac)
		}
		addrs, err := netlink.AddrList(l, netlink.FAMILY_V4)
		if err != nil {
			return err
		}
		for _, a := range addrs {
			if a.IPNet.String() == ips[0].Address.String() {
				return nil
			}
		}
		return fmt.Errorf("eth0 lacks the result's address %s (has %v)", ips[0].Address.String(), addrs)
	})
	if err != nil {
		t.Error(err)
	}
}

type conformanceCase struct {
	name    string
	section string // SPEC.md section and the requirement, quoted or paraphrased
	min     string // first spec version with the verb
	run     func(t *testing.T, e *env)
}

var cases = []conformanceCase{
	{
		name:    "ADD result shape",
		section: `Section 2 "ADD" and Section 5 "ADD Success": the result is in the version of the netconf; ips[].interface is an index into interfaces; the container interface carries its sandbox`,
		min:     "0.1.0",
		run: func(t *testing.T, e *env) {
			rt, netns := e.attachment(t)
			checkResultShape(t, e.v, e.add(t, rt), netns)
			e.del(t, rt, "DEL")
			e.n.assertGone(t, rt.ContainerID)
		},
	},
	{
		name:    "ADD failure is an error and DEL after it cleans up",
		section: `Section 2 "ADD" ("If the plugin encounters an error, it must output an error result") and "DEL" (runtimes call DEL after a failed ADD; it must succeed and release what ADD took)`,
		min:     "0.1.0",
		run: func(t *testing.T, e *env) {
			rt, netns := e.attachment(t)
			// eth0 already exists in the netns (another plugin's): ADD must fail cleanly.
			if err := netns.Do(func(ns.NetNS) error {
				return netlink.LinkAdd(&netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: "eth0"}, PeerName: "other0"})
			}); err != nil {
				t.Fatal(err)
			}
			_, err := e.n.CNI.AddNetworkList(context.Background(), e.list, rt)
			var ce *types.Error
			if !errors.As(err, &ce) || ce.Code == 0 || !strings.Contains(ce.Msg, "eth0") {
				t.Fatalf("ADD into a netns that already has eth0: %v; want a CNI error naming eth0", err)
			}
			e.n.assertGone(t, rt.ContainerID)
			e.del(t, rt, "DEL after a failed ADD")
			e.n.assertGone(t, rt.ContainerID)
			if err := netns.Do(func(ns.NetNS) error { _, err := netlink.LinkByName("eth0"); return err }); err != nil {
				t.Errorf("the failed ADD or its DEL removed the other plugin's eth0: %v", err)
			}
		},
	},
	{
		name:    "DEL twice",
		section: `Section 2 "DEL": plugins should complete DEL without error even if resources are already gone; a repeated DEL succeeds`,
		min:     "0.1.0",
		run: func(t *testing.T, e *env) {
			rt, _ := e.attachment(t)
			e.add(t, rt)
			e.del(t, rt, "first DEL")
			e.n.assertGone(t, rt.ContainerID)
			e.del(t, rt, "second DEL")
		},
	},
	{
		name:    "DEL with the netns gone",
		section: `Section 2 "DEL": CNI_NETNS may be gone (or empty); the plugin must still release the attachment's resources and succeed`,
		min:     "0.1.0",
		run: func(t *testing.T, e *env) {
			rt, netns := e.attachment(t)
			e.add(t, rt)
			netns.Close()
			if err := testutils.UnmountNS(netns); err != nil {
				t.Fatal(err)
			}
			e.del(t, rt, "DEL after the netns was deleted")
			e.n.assertGone(t, rt.ContainerID)
		},
	},
	{
		name:    "CHECK after ADD passes, fails after tampering",
		section: `Section 2 "CHECK": the plugin must consult prevResult and return an error if the container's networking is not as expected`,
		min:     "0.4.0",
		run: func(t *testing.T, e *env) {
			rt, netns := e.attachment(t)
			res := e.add(t, rt)
			if err := e.n.CNI.CheckNetworkList(context.Background(), e.list, rt); err != nil {
				t.Errorf("CHECK right after ADD: %v", err)
			}
			cur, err := current.NewResultFromResult(res)
			if err != nil {
				t.Fatal(err)
			}
			if err := netns.Do(func(ns.NetNS) error {
				l, err := netlink.LinkByName("eth0")
				if err != nil {
					return err
				}
				return netlink.AddrDel(l, &netlink.Addr{IPNet: &cur.IPs[0].Address})
			}); err != nil {
				t.Fatal(err)
			}
			err = e.n.CNI.CheckNetworkList(context.Background(), e.list, rt)
			var ce *types.Error
			if !errors.As(err, &ce) || !strings.Contains(ce.Msg, cur.IPs[0].Address.IP.String()) {
				t.Errorf("CHECK after the pod's address was removed: %v; want a CNI error naming %s", err, cur.IPs[0].Address.IP)
			}
			e.del(t, rt, "DEL")
		},
	},
	{
		name:    "GC with cni.dev/valid-attachments",
		section: `Section 2 "GC": the plugin must release resources of attachments not in cni.dev/valid-attachments and leave the listed ones alone`,
		min:     "1.1.0",
		run: func(t *testing.T, e *env) {
			keep, _ := e.attachment(t)
			drop, _ := e.attachment(t)
			e.add(t, keep)
			e.add(t, drop)
			err := e.n.CNI.GCNetworkList(context.Background(), e.list, &libcni.GCArgs{
				ValidAttachments: []types.GCAttachment{{ContainerID: keep.ContainerID, IfName: "eth0"}}})
			if err != nil {
				t.Fatalf("GC: %v", err)
			}
			e.n.assertGone(t, drop.ContainerID)
			if err := e.n.CNI.CheckNetworkList(context.Background(), e.list, keep); err != nil {
				t.Errorf("attachment listed as valid broken by GC: %v", err)
			}
			e.del(t, keep, "DEL")
			e.del(t, drop, "DEL of the collected attachment")
		},
	},
	{
		name:    "STATUS",
		section: `Section 2 "STATUS": success when the plugin can serve ADD`,
		min:     "1.1.0",
		run: func(t *testing.T, e *env) {
			if err := e.n.CNI.GetStatusNetworkList(context.Background(), e.list); err != nil {
				t.Errorf("STATUS: %v", err)
			}
		},
	},
}

// TestConformance runs every case for every spec version libcni knows that has the verb.
func TestConformance(t *testing.T) {
	n := startNode(t, "10.150.0.0/24")
	t.Run("VERSION", func(t *testing.T) {
		// Section 2 "VERSION" and Section 5 "VERSION Success": the plugin reports its
		// cniVersion and supportedVersions; ofsdn supports every version libcni knows.
		info, err := n.CNI.GetVersionInfo(context.Background(), "ofsdn")
		if err != nil {
			t.Fatal(err)
		}
		for _, v := range version.All.SupportedVersions() {
			if !slices.Contains(info.SupportedVersions(), v) {
				t.Errorf("VERSION lists %v, missing %s", info.SupportedVersions(), v)
			}
		}
	})
	for _, v := range version.All.SupportedVersions() {
		e := &env{n: n, v: v, list: n.confList(t, v)}
		for _, c := range cases {
			if ok, _ := version.GreaterThanOrEqualTo(v, c.min); !ok {
				continue
			}
			t.Run(v+"/"+c.name, func(t *testing.T) {
				t.Logf("SPEC.md %s", c.section)
				c.run(t, e)
			})
		}
	}
	// Section 2 "STATUS": "If the plugin is not ready to serve ADD requests, it must return
	// error code 50" — the daemon stopped.
	t.Run("1.1.0/STATUS when the daemon is down", func(t *testing.T) {
		n.stopDaemon()
		err := n.CNI.GetStatusNetworkList(context.Background(), n.confList(t, "1.1.0"))
		var ce *types.Error
		if !errors.As(err, &ce) || ce.Code != types.ErrPluginNotAvailable {
			t.Errorf("STATUS with the daemon down: %v; want CNI error 50", err)
		}
		// ADD then gets 11 (try again later) naming the socket.
		rt := &libcni.RuntimeConf{ContainerID: "conf-down", NetNS: newNetns(t).Path(), IfName: "eth0"}
		_, err = n.CNI.AddNetworkList(context.Background(), n.confList(t, "1.1.0"), rt)
		if !errors.As(err, &ce) || ce.Code != types.ErrTryAgainLater || !strings.Contains(ce.Msg, n.Socket) {
			t.Errorf("ADD with the daemon down: %v; want CNI error 11 naming %s", err, n.Socket)
		}
	})
}
