package main

// The node IP with the userspace datapath (underlayBridge, controller.MoveUnderlay): a
// bridge whose external_ids:ofsdn-underlay names the node's NIC holds the node's IPv4
// addresses only while this container's ovs-vswitchd forwards for it. When it stops
// ovs-vswitchd on SIGTERM (the pod deleted or rolled), ofsdn-ovs first moves them back
// onto the NIC, so that the node, its kubelet included, keeps its network while no OVS
// runs and can fetch the pod that brings OVS back; when it has started ovs-vswitchd, it
// moves them onto the bridge again. A crash (SIGKILL) moves nothing: the kubelet restarts
// the container from the pod it has, and the addresses are still on the bridge.

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"time"

	"github.com/vishvananda/netlink"

	"github.com/ofsdn/ofsdn/podnet"
)

// underlay is a bridge holding the node IP in place of a NIC.
type underlay struct{ bridge, nic string }

// findUnderlay returns the bridge whose external_ids:ofsdn-underlay names a NIC, if any.
func findUnderlay(ctx context.Context, sock string) (underlay, bool, error) {
	var res []struct {
		Rows []struct {
			Name        string          `json:"name"`
			ExternalIDs json.RawMessage `json:"external_ids"`
		} `json:"rows"`
		Error string `json:"error"`
	}
	err := rpc(ctx, sock, "transact", []any{"Open_vSwitch", map[string]any{
		"op": "select", "table": "Bridge", "where": []any{}, "columns": []string{"name", "external_ids"},
	}}, &res)
	if err != nil {
		return underlay{}, false, err
	}
	if len(res) != 1 || res[0].Error != "" {
		return underlay{}, false, fmt.Errorf("select bridges: %+v", res)
	}
	for _, r := range res[0].Rows {
		// An OVSDB map: ["map", [[key, value], ...]] (RFC 7047 §5.1).
		var m []json.RawMessage
		if json.Unmarshal(r.ExternalIDs, &m) != nil || len(m) != 2 {
			continue
		}
		var pairs [][2]string
		if json.Unmarshal(m[1], &pairs) != nil {
			continue
		}
		for _, p := range pairs {
			if p[0] == "ofsdn-underlay" && p[1] != "" {
				return underlay{bridge: r.Name, nic: p[1]}, true, nil
			}
		}
	}
	return underlay{}, false, nil
}

// hasIPv4 reports whether the link name exists and holds an IPv4 address.
func hasIPv4(name string) bool {
	l, err := netlink.LinkByName(name)
	if err != nil {
		return false
	}
	a, err := netlink.AddrList(l, netlink.FAMILY_V4)
	return err == nil && len(a) > 0
}

// underlayToBridge moves the node's addresses from the NIC onto the bridge once
// ovs-vswitchd has made the bridge's internal port (bounded by ctx).
func underlayToBridge(ctx context.Context, log *slog.Logger, u underlay) error {
	for {
		if _, err := netlink.LinkByName(u.bridge); err == nil {
			break
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("underlay bridge %s: ovs-vswitchd made no internal port: %w", u.bridge, ctx.Err())
		case <-time.After(100 * time.Millisecond):
		}
	}
	if !hasIPv4(u.nic) {
		return nil // already on the bridge (a restart after a crash), or nothing to move
	}
	start := time.Now()
	m, err := podnet.MoveIPv4(u.nic, u.bridge)
	if err != nil {
		return err
	}
	log.Info("node addresses moved onto the underlay bridge", "from", u.nic, "to", u.bridge,
		"addresses", m.Addresses, "routes", m.Routes, "took", time.Since(start).Round(time.Microsecond))
	return nil
}

// underlayToNIC moves the node's addresses from the bridge back onto the NIC.
func underlayToNIC(log *slog.Logger, u underlay) error {
	if !hasIPv4(u.bridge) {
		return nil
	}
	start := time.Now()
	m, err := podnet.MoveIPv4(u.bridge, u.nic)
	if err != nil {
		return err
	}
	log.Info("node addresses moved back onto the NIC before ovs-vswitchd stops", "from", u.bridge, "to", u.nic,
		"addresses", m.Addresses, "routes", m.Routes, "took", time.Since(start).Round(time.Microsecond))
	return nil
}
