// Package unixctl calls ovs-vswitchd's control commands (the ones ovs-appctl sends) over
// its control socket, without running ovs-appctl: one JSON-RPC 1.0 request per
// connection, as lib/unixctl.c serves it (request {"id", "method", "params": [strings]},
// reply {"id", "result", "error"}, objects sent back to back on the stream).
package unixctl

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// SocketPath returns ovs-vswitchd's control socket in the OVS run directory: its
// --unixctl socket "ovs-vswitchd.ctl" if that exists (as test sandboxes start it), else
// the default "ovs-vswitchd.PID.ctl" with the PID from "ovs-vswitchd.pid". Errors name
// both paths tried.
func SocketPath(runDir string) (string, error) {
	plain := filepath.Join(runDir, "ovs-vswitchd.ctl")
	if fi, err := os.Stat(plain); err == nil && fi.Mode()&os.ModeSocket != 0 {
		return plain, nil
	}
	pidFile := filepath.Join(runDir, "ovs-vswitchd.pid")
	b, err := os.ReadFile(pidFile)
	if err != nil {
		return "", fmt.Errorf("unixctl: no ovs-vswitchd control socket %s and no pid file %s (is ovs-vswitchd running with this OVS run directory?): %w", plain, pidFile, err)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil || pid <= 0 {
		return "", fmt.Errorf("unixctl: pid file %s holds %q, not a pid", pidFile, strings.TrimSpace(string(b)))
	}
	return filepath.Join(runDir, fmt.Sprintf("ovs-vswitchd.%d.ctl", pid)), nil
}

type request struct {
	ID     int      `json:"id"`
	Method string   `json:"method"`
	Params []string `json:"params"`
}

type reply struct {
	ID     int             `json:"id"`
	Result json.RawMessage `json:"result"`
	Error  json.RawMessage `json:"error"`
}

// Call sends command with args to the control socket at path and returns the command's
// output. It fails when ctx ends (default bound 10 s), when the socket cannot be reached,
// or when the command answers with an error (returned with its text).
func Call(ctx context.Context, path, command string, args ...string) (string, error) {
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
	}
	var d net.Dialer
	c, err := d.DialContext(ctx, "unix", path)
	if err != nil {
		return "", fmt.Errorf("unixctl: %s: %w", path, err)
	}
	defer c.Close()
	if dl, ok := ctx.Deadline(); ok {
		_ = c.SetDeadline(dl)
	}
	if args == nil {
		args = []string{}
	}
	if err := json.NewEncoder(c).Encode(request{ID: 0, Method: command, Params: args}); err != nil {
		return "", fmt.Errorf("unixctl: %s: send %s: %w", path, command, err)
	}
	var r reply
	if err := json.NewDecoder(c).Decode(&r); err != nil {
		return "", fmt.Errorf("unixctl: %s: reply to %s: %w", path, command, err)
	}
	if len(r.Error) > 0 && string(r.Error) != "null" {
		var msg string
		if json.Unmarshal(r.Error, &msg) != nil {
			msg = string(r.Error)
		}
		return "", fmt.Errorf("unixctl: %s: %s: %w: %s", path, command, ErrCommand, strings.TrimSpace(msg))
	}
	var out string
	if len(r.Result) > 0 && string(r.Result) != "null" {
		if json.Unmarshal(r.Result, &out) != nil {
			out = string(r.Result)
		}
	}
	return out, nil
}

// ErrCommand is matched by Call's error when ovs-vswitchd ran the command and refused it.
var ErrCommand = errors.New("command failed")
