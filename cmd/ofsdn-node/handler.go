package main

// The CNI server's handler: translates CNI requests (wire format, cni package) into pod
// operations (controller package) and attachments back into CNI results. It is the one
// place that knows both, so controller/ stays free of the CNI wire format.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"time"

	"github.com/containernetworking/cni/pkg/types"
	current "github.com/containernetworking/cni/pkg/types/100"
	"golang.org/x/sys/unix"

	"github.com/ofsdn/ofsdn/cni"
	"github.com/ofsdn/ofsdn/controller"
	"github.com/ofsdn/ofsdn/policy"
)

type handler struct {
	node *controller.Node
	log  *slog.Logger
	// addTimeout bounds one ADD (config addTimeout); 0 means none beyond the plugin's.
	addTimeout time.Duration
}

func (h *handler) podRequest(req *cni.Request) (controller.PodRequest, error) {
	id, err := req.PodIdentity()
	if err != nil {
		return controller.PodRequest{}, err
	}
	network, err := networkName(req.Config)
	if err != nil {
		return controller.PodRequest{}, err
	}
	return controller.PodRequest{
		ContainerID: req.ContainerID, IfName: req.IfName, Netns: req.Netns,
		PodNamespace: id.Namespace, PodName: id.Name, Network: network,
	}, nil
}

// networkName returns the netconf's "name" (SPEC.md "Section 1: Network configuration
// format"), the network an attachment belongs to. The server has validated the netconf;
// an undecodable one is CNI error 6.
func networkName(config []byte) (string, error) {
	var conf struct {
		Name string `json:"name"`
	}
	if err := json.Unmarshal(config, &conf); err != nil {
		return "", types.NewError(types.ErrDecodingFailure, "netconf cannot be decoded", err.Error())
	}
	return conf.Name, nil
}

func (h *handler) logOutcome(verb string, pr controller.PodRequest, start time.Time, err error) {
	attrs := []any{"container_id", pr.ContainerID, "pod", pr.PodNamespace + "/" + pr.PodName,
		"ifname", pr.IfName, "duration_ms", float64(time.Since(start).Microseconds()) / 1000}
	if err != nil {
		h.log.Warn(verb+" failed", append(attrs, "error", err.Error())...)
		return
	}
	h.log.Info(verb+" done", attrs...)
}

// Add implements server.Handler. The ADD runs under the addTimeout deadline, which bounds
// the answer (AddPod returns shortly after it, whatever Open vSwitch does); when it passes
// (Open vSwitch slow or stuck) the runtime gets CNI error 11 (try again later) naming the
// deadline and the step, and what the ADD created is removed, in the background once
// Open vSwitch answers again if not at once (controller.UndoRetryFor).
func (h *handler) Add(ctx context.Context, req *cni.Request) (*current.Result, error) {
	start := time.Now()
	pr, err := h.podRequest(req)
	if err != nil {
		return nil, err
	}
	if err := checkNetns(req.Netns); err != nil {
		return nil, err
	}
	if h.addTimeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, h.addTimeout)
		defer cancel()
	}
	a, err := h.node.AddPod(ctx, pr)
	h.logOutcome("ADD", pr, start, err)
	if err != nil {
		if errors.Is(err, policy.ErrPodUnknown) {
			// NetworkPolicy needs the Pod before the pod gets any flow: the kubelet retries.
			return nil, types.NewError(types.ErrTryAgainLater,
				fmt.Sprintf("ADD of %s: NetworkPolicy is enforced and the Pod is not known to this node's informers within %s (addTimeout); nothing was created, try again later", pr, h.addTimeout),
				err.Error())
		}
		if errors.Is(err, context.DeadlineExceeded) && errors.Is(ctx.Err(), context.DeadlineExceeded) {
			step := "waiting for another operation on the same pod"
			var se *controller.StepError
			if errors.As(err, &se) {
				step = "step " + se.Step
			}
			return nil, types.NewError(types.ErrTryAgainLater,
				fmt.Sprintf("ADD of %s did not finish within %s (addTimeout), at %s: Open vSwitch is slow or not answering; what the ADD created is removed (once Open vSwitch answers, if not at once), try again later", pr, h.addTimeout, step),
				err.Error())
		}
		return nil, cniError(err)
	}
	return resultFor(a), nil
}

// checkNetns checks CNI_NETNS for ADD and CHECK: it must exist, be a network namespace
// (nsfs) and not be the daemon's own namespace, which wiring would break. Errors: code 4
// (invalid CNI_NETNS) or 8 (ErrInvalidNetNS), naming the path.
func checkNetns(path string) error {
	var st, self unix.Stat_t
	if err := unix.Stat(path, &st); err != nil {
		return types.NewError(types.ErrInvalidEnvironmentVariables,
			fmt.Sprintf("CNI_NETNS %s cannot be used: %v; pass the path of the pod's network namespace", path, err), "")
	}
	var fs unix.Statfs_t
	if err := unix.Statfs(path, &fs); err != nil || fs.Type != unix.NSFS_MAGIC {
		return types.NewError(types.ErrInvalidEnvironmentVariables,
			fmt.Sprintf("CNI_NETNS %s is not a network namespace (not on nsfs); pass e.g. /var/run/netns/NAME or /proc/PID/ns/net", path), "")
	}
	if err := unix.Stat("/proc/self/ns/net", &self); err == nil && st.Dev == self.Dev && st.Ino == self.Ino {
		return types.NewError(types.ErrInvalidNetNS,
			fmt.Sprintf("CNI_NETNS %s is the ofsdn-node daemon's own network namespace, not a pod's", path), "")
	}
	return nil
}

// Del implements server.Handler.
func (h *handler) Del(ctx context.Context, req *cni.Request) error {
	start := time.Now()
	pr, err := h.podRequest(req)
	if err != nil {
		return err
	}
	err = h.node.DelPod(ctx, pr)
	h.logOutcome("DEL", pr, start, err)
	if err != nil {
		return cniError(err)
	}
	return nil
}

// Check implements server.Handler.
func (h *handler) Check(ctx context.Context, req *cni.Request) error {
	pr, err := h.podRequest(req)
	if err != nil {
		return err
	}
	if err := checkNetns(req.Netns); err != nil {
		return err
	}
	conf, err := cni.LoadNetConf(req.Config)
	if err != nil {
		return err
	}
	var want []*net.IPNet
	if conf.PrevResult != nil {
		prev, err := current.NewResultFromResult(conf.PrevResult)
		if err != nil {
			return types.NewError(types.ErrDecodingFailure, "prevResult cannot be converted to CNI 1.1.0", err.Error())
		}
		for _, ip := range prev.IPs {
			want = append(want, &ip.Address)
		}
	}
	if err := h.node.CheckPod(ctx, pr, want); err != nil {
		return cniError(err)
	}
	return nil
}

// Status implements server.Handler (CNI spec 1.1 STATUS: code 50 when ADD cannot be served).
func (h *handler) Status(ctx context.Context, req *cni.Request) error {
	if err := h.node.Status(); err != nil {
		return types.NewError(types.ErrPluginNotAvailable, err.Error(), "")
	}
	return nil
}

// GC implements server.Handler (CNI spec 1.1 GC): it removes the attachments of the
// netconf's network ("name") that are not in "cni.dev/valid-attachments" (the older key
// "cni.dev/attachments" is accepted too; libcni sends both). A GC whose netconf has
// neither key names no valid attachment at all, which cannot prove any attachment stale:
// it removes nothing and says so in the log.
func (h *handler) GC(ctx context.Context, req *cni.Request) error {
	network, valid, ok, err := parseGC(req.Config)
	if err != nil {
		return err
	}
	if !ok {
		h.log.Warn("GC without cni.dev/valid-attachments: nothing removed (a GC must list the attachments to keep)", "network", network)
		return nil
	}
	if err := h.node.GC(ctx, network, valid); err != nil {
		return cniError(err)
	}
	return nil
}

// parseGC decodes a GC netconf: the network name, the valid attachments (the union of
// "cni.dev/valid-attachments" and "cni.dev/attachments") and whether either key is
// present (a JSON null counts as absent). Errors: CNI error 6 for an undecodable netconf.
func parseGC(config []byte) (network string, valid []controller.AttachmentID, present bool, err error) {
	type attachment struct {
		ContainerID string `json:"containerID"`
		IfName      string `json:"ifname"`
	}
	var conf struct {
		Name  string        `json:"name"`
		Valid *[]attachment `json:"cni.dev/valid-attachments"`
		Old   *[]attachment `json:"cni.dev/attachments"`
	}
	if err := json.Unmarshal(config, &conf); err != nil {
		return "", nil, false, types.NewError(types.ErrDecodingFailure, "GC: netconf cannot be decoded", err.Error())
	}
	valid = []controller.AttachmentID{}
	for _, list := range []*[]attachment{conf.Valid, conf.Old} {
		if list == nil {
			continue
		}
		present = true
		for _, v := range *list {
			valid = append(valid, controller.AttachmentID{ContainerID: v.ContainerID, IfName: v.IfName})
		}
	}
	return conf.Name, valid, present, nil
}

// resultFor renders an attachment as a CNI 1.1.0 ADD result (SPEC.md "Section 5: Result
// Types", "ADD Success"): the host veth (no sandbox) and the pod interface (with sandbox
// and mtu), the IPs in the order of the node's pod subnets (IPv4 first unless the node is IPv6-first or IPv6-only) each with its
// family's gateway on interface 1, and one default route per family.
func resultFor(a *controller.Attachment) *current.Result {
	idx := 1
	// One default route per family the pod has, in the order of its addresses (an
	// IPv6-first node's IPv6 route first, an IPv6-only node's alone).
	var routes []*types.Route
	v4, v6 := false, false
	for _, ip := range a.IPs {
		switch {
		case ip.IP.To4() != nil && !v4 && a.Gateway != nil:
			v4 = true
			routes = append(routes, &types.Route{Dst: net.IPNet{IP: net.IPv4zero.To4(), Mask: net.CIDRMask(0, 32)}, GW: a.Gateway})
		case ip.IP.To4() == nil && !v6 && a.Gateway6 != nil:
			v6 = true
			routes = append(routes, &types.Route{Dst: net.IPNet{IP: net.IPv6zero, Mask: net.CIDRMask(0, 128)}, GW: a.Gateway6})
		}
	}
	return &current.Result{
		CNIVersion: current.ImplementedSpecVersion,
		Interfaces: []*current.Interface{
			{Name: a.HostVeth, Mac: a.HostMAC.String()},
			{Name: a.IfName, Mac: a.MAC.String(), Sandbox: a.Netns, Mtu: a.MTU},
		},
		IPs:    ipConfigs(a, &idx),
		Routes: routes,
	}
}

// cniError keeps *types.Error values and wraps step errors as CNI code 999 with the step
// in the message (CNI spec 1.1 reserves codes below 100 for its own meanings).
func cniError(err error) error {
	var te *types.Error
	if errors.As(err, &te) {
		return te
	}
	code := uint(types.ErrInternal)
	if errors.Is(err, controller.ErrOVSUnavailable) {
		// Open vSwitch (ovsdb-server or ovs-vswitchd) is restarting: the runtime retries.
		code = types.ErrTryAgainLater
	}
	var se *controller.StepError
	if errors.As(err, &se) {
		return types.NewError(code, fmt.Sprintf("ofsdn %s step failed: %v", se.Step, se.Err), "")
	}
	return types.NewError(code, err.Error(), "")
}

// ipConfigs returns the CNI result's ips (CNI spec 1.1 "Success": one per address, in the
// attachment's order, each naming the pod interface idx), with the gateway of the
// address's family (the node's IPv4 gateway for an IPv4 address, its IPv6 gateway for an
// IPv6 one).
func ipConfigs(a *controller.Attachment, idx *int) []*current.IPConfig {
	out := make([]*current.IPConfig, 0, len(a.IPs))
	for _, ip := range a.IPs {
		c := &current.IPConfig{Interface: idx, Address: *ip}
		switch {
		case ip.IP.To4() != nil && a.Gateway.To4() != nil:
			c.Gateway = a.Gateway
		case ip.IP.To4() == nil && a.Gateway6 != nil:
			c.Gateway = a.Gateway6
		}
		out = append(out, c)
	}
	return out
}
