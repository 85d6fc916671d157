package main

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net"
	"strings"

	"github.com/ofsdn/ofsdn/internal/unixctl"
)

// rpc sends one OVSDB JSON-RPC request (RFC 7047) on the unix socket sock and decodes the
// result into out.
func rpc(ctx context.Context, sock, method string, params []any, out any) error {
	var d net.Dialer
	c, err := d.DialContext(ctx, "unix", sock)
	if err != nil {
		return err
	}
	defer c.Close()
	if dl, ok := ctx.Deadline(); ok {
		_ = c.SetDeadline(dl)
	}
	if err := json.NewEncoder(c).Encode(map[string]any{"id": "ofsdn-ovs", "method": method, "params": params}); err != nil {
		return err
	}
	var r struct {
		Result json.RawMessage `json:"result"`
		Error  any             `json:"error"`
	}
	if err := json.NewDecoder(c).Decode(&r); err != nil {
		return fmt.Errorf("%s: reply: %w", method, err)
	}
	if r.Error != nil {
		return fmt.Errorf("%s: %v", method, r.Error)
	}
	if out == nil {
		return nil
	}
	return json.Unmarshal(r.Result, out)
}

// ovsdbEcho checks that ovsdb-server answers an echo on sock.
func ovsdbEcho(ctx context.Context, sock string) error {
	return rpc(ctx, sock, "echo", []any{"ofsdn-ovs"}, nil)
}

// bridgeMade checks that bridge is in the database and ovs-vswitchd has made it (set its
// datapath_id).
func bridgeMade(ctx context.Context, sock, bridge string) error {
	var res []struct {
		Rows []struct {
			DatapathID any `json:"datapath_id"`
		} `json:"rows"`
		Error string `json:"error"`
	}
	err := rpc(ctx, sock, "transact", []any{"Open_vSwitch", map[string]any{
		"op": "select", "table": "Bridge", "where": []any{[]any{"name", "==", bridge}}, "columns": []string{"datapath_id"},
	}}, &res)
	if err != nil {
		return err
	}
	if len(res) != 1 || res[0].Error != "" {
		return fmt.Errorf("select bridge %s: %+v", bridge, res)
	}
	if len(res[0].Rows) == 0 {
		return fmt.Errorf("bridge %s is not in the database yet (ofsdn-node creates it)", bridge)
	}
	if id, ok := res[0].Rows[0].DatapathID.(string); !ok || id == "" {
		return fmt.Errorf("bridge %s is in the database but ovs-vswitchd has not made it (no datapath_id)", bridge)
	}
	return nil
}

// runProbe runs the live or ready probe.
func runProbe(ctx context.Context, kind string, s settings) error {
	if kind != "live" && kind != "ready" {
		return fmt.Errorf("-probe %q: want live or ready", kind)
	}
	if kind == "live" && s.OVS == "host" {
		return nil // nothing runs here to restart
	}
	sock, ok := strings.CutPrefix(s.OVSDB, "unix:")
	if !ok {
		return fmt.Errorf("ovsdb %q: the probes dial unix sockets only", s.OVSDB)
	}
	if err := ovsdbEcho(ctx, sock); err != nil {
		return fmt.Errorf("ovsdb-server on %s does not answer: %w", sock, err)
	}
	ctl, err := unixctl.SocketPath(s.OVSRunDir)
	if err != nil {
		return err
	}
	if _, err := unixctl.Call(ctx, ctl, "version"); err != nil {
		return fmt.Errorf("ovs-vswitchd does not answer on %s: %w", ctl, err)
	}
	if kind == "ready" {
		return bridgeMade(ctx, sock, s.Bridge)
	}
	return nil
}

// holdKernelFlows sets other_config:flow-restore-wait=true when bridge is in the database
// on the kernel datapath (datapath_type "system" or ""), before ovs-vswitchd starts.
func holdKernelFlows(ctx context.Context, log *slog.Logger, sock, bridge string) error {
	var res []struct {
		Rows []struct {
			DatapathType string `json:"datapath_type"`
		} `json:"rows"`
		Error string `json:"error"`
	}
	err := rpc(ctx, sock, "transact", []any{"Open_vSwitch", map[string]any{
		"op": "select", "table": "Bridge", "where": []any{[]any{"name", "==", bridge}}, "columns": []string{"datapath_type"},
	}}, &res)
	if err != nil {
		return err
	}
	if len(res) != 1 || res[0].Error != "" {
		return fmt.Errorf("select bridge %s: %+v", bridge, res)
	}
	if len(res[0].Rows) == 0 || res[0].Rows[0].DatapathType == "netdev" {
		return nil // a new database, or the userspace datapath
	}
	var out []struct {
		Error string `json:"error"`
	}
	err = rpc(ctx, sock, "transact", []any{"Open_vSwitch", map[string]any{
		"op": "mutate", "table": "Open_vSwitch", "where": []any{},
		"mutations": []any{
			[]any{"other_config", "delete", []any{"set", []any{"flow-restore-wait"}}},
			[]any{"other_config", "insert", []any{"map", []any{[]any{"flow-restore-wait", "true"}}}},
		},
	}}, &out)
	if err != nil {
		return err
	}
	if len(out) != 1 || out[0].Error != "" {
		return fmt.Errorf("set other_config:flow-restore-wait: %+v", out)
	}
	log.Info("flow-restore-wait set: ovs-vswitchd keeps the kernel's flows until ofsdn-node has replayed its own", "bridge", bridge)
	return nil
}
