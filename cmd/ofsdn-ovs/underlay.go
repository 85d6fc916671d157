package main

// The node IP with the userspace datapath (underlayBridge, controller.MoveUnderlay): a
// bridge whose external_ids:ofsdn-underlay names the node's NIC holds the node's
// addresses (IPv4, and IPv6 but link-local ones: podnet.MoveAddresses) only while this
// container's ovs-vswitchd forwards for it. Whenever no ovs-vswitchd of this container
// forwards, they are on the NIC, so that the node, its kubelet included, keeps its
// network and can fetch the pod (or the fixed image) that brings OVS back:
//
//   - SIGTERM (the pod deleted or rolled): back onto the NIC before ovs-vswitchd stops;
//   - a daemon exited (ovs-vswitchd or ovsdb-server died): back onto the NIC before the
//     other is stopped and ofsdn-ovs exits 1;
//   - any other exit on an error (the database unreadable, ovsdb-server not answering, a
//     bad config): back onto the NIC before the exit;
//   - at start, before ovsdb-server runs: back onto the NIC when a crash left them on the
//     bridge (ovs-vswitchd or the container killed, SIGKILL: the bridge's tap device
//     outlives ovs-vswitchd, down and without carrier, still holding the addresses);
//   - once the new ovs-vswitchd has attached the bridge's tap device (its carrier is up):
//     onto the bridge again.
//
// Which bridge and NIC: the database's bridge while ovsdb-server answers; otherwise
// underlayRecord in the database directory (a hostPath), which ofsdn-ovs rewrites while
// it runs from what the database says (so it outlives a database that can no longer be
// read); otherwise the database file itself, read with `ovsdb-tool query`.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"time"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/ofsdn/ofsdn/podnet"
)

// underlay is a bridge holding the node IP in place of a NIC.
type underlay struct{ bridge, nic string }

// bridgeRows is the result of a select of the Bridge table's name and external_ids.
type bridgeRows []struct {
	Rows []struct {
		Name        string          `json:"name"`
		ExternalIDs json.RawMessage `json:"external_ids"`
	} `json:"rows"`
	Error string `json:"error"`
}

// selectBridges is the OVSDB select of the Bridge table's names and external_ids.
var selectBridges = map[string]any{"op": "select", "table": "Bridge", "where": []any{}, "columns": []string{"name", "external_ids"}}

// findUnderlay returns the bridge whose external_ids:ofsdn-underlay names a NIC, if any,
// asking ovsdb-server on sock.
func findUnderlay(ctx context.Context, sock string) (underlay, bool, error) {
	var res bridgeRows
	if err := rpc(ctx, sock, "transact", []any{"Open_vSwitch", selectBridges}, &res); err != nil {
		return underlay{}, false, err
	}
	return res.underlay()
}

// underlay returns the bridge of the rows whose external_ids:ofsdn-underlay names a NIC.
func (res bridgeRows) underlay() (underlay, bool, error) {
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

// underlayRecord is the file, in the database directory, holding the underlay bridge and
// NIC last seen in the database ({"bridge":"br-phy","nic":"eth0"}); no file: none seen.
const underlayRecord = "underlay.json"

// record is underlayRecord's content.
type record struct {
	Bridge string `json:"bridge"`
	NIC    string `json:"nic"`
}

// saveUnderlay makes underlayRecord say u (ok) or removes it (!ok), when it says otherwise.
func saveUnderlay(dbDir string, u underlay, ok bool) error {
	file := filepath.Join(dbDir, underlayRecord)
	if !ok {
		if err := os.Remove(file); err != nil && !errors.Is(err, os.ErrNotExist) {
			return err
		}
		return nil
	}
	if old, had := loadUnderlay(dbDir); had && old == u {
		return nil
	}
	b, _ := json.Marshal(record{Bridge: u.bridge, NIC: u.nic})
	tmp := file + ".new"
	if err := os.WriteFile(tmp, b, 0o640); err != nil {
		return err
	}
	return os.Rename(tmp, file)
}

// loadUnderlay returns the underlay of underlayRecord, if any.
func loadUnderlay(dbDir string) (underlay, bool) {
	b, err := os.ReadFile(filepath.Join(dbDir, underlayRecord))
	if err != nil {
		return underlay{}, false
	}
	var r record
	if json.Unmarshal(b, &r) != nil || r.Bridge == "" || r.NIC == "" {
		return underlay{}, false
	}
	return underlay{bridge: r.Bridge, nic: r.NIC}, true
}

// knownUnderlay returns the underlay bridge when ovsdb-server on sock does not answer:
// from underlayRecord, else from the database file (ovsdb-tool query; nothing if it
// cannot be read).
func knownUnderlay(s settings, dbDir string) (underlay, bool) {
	if u, ok := loadUnderlay(dbDir); ok {
		return u, true
	}
	db := filepath.Join(dbDir, "conf.db")
	if _, err := os.Stat(db); err != nil {
		return underlay{}, false
	}
	q, _ := json.Marshal([]any{"Open_vSwitch", selectBridges})
	out, err := runTool(s, dbDir, "query", db, string(q))
	if err != nil {
		return underlay{}, false
	}
	var res bridgeRows
	if json.Unmarshal([]byte(out), &res) != nil {
		return underlay{}, false
	}
	u, ok, err := res.underlay()
	return u, ok && err == nil
}

// hasNodeAddresses reports whether the link name exists and holds an address that
// podnet.MoveAddresses moves (IPv4, or IPv6 but link-local).
func hasNodeAddresses(name string) bool {
	l, err := netlink.LinkByName(name)
	if err != nil {
		return false
	}
	a, err := podnet.NodeAddresses(l)
	return err == nil && len(a) > 0
}

// logMoved logs a move's addresses, routes and unannounced IPv6 addresses.
func logMoved(log *slog.Logger, msg string, m podnet.Moved, args ...any) {
	args = append(args, "addresses", m.Addresses, "routes", m.Routes)
	if m.AnnounceErr != nil {
		args = append(args, "ipv6_not_announced", m.AnnounceErr.Error())
	}
	log.Info(msg, args...)
}

// underlayToBridge moves the node's addresses from the NIC onto the bridge once
// ovs-vswitchd has made the bridge's internal port and attached it (bounded by ctx): a
// tap device that a killed ovs-vswitchd left has no carrier until the new one opens it.
func underlayToBridge(ctx context.Context, log *slog.Logger, u underlay) error {
	for {
		l, err := netlink.LinkByName(u.bridge)
		if err == nil && l.Attrs().RawFlags&unix.IFF_UP == 0 {
			_ = netlink.LinkSetUp(l) // the carrier shows on an up link only
		} else if err == nil && l.Attrs().RawFlags&unix.IFF_LOWER_UP != 0 {
			break
		}
		select {
		case <-ctx.Done():
			if err != nil {
				return fmt.Errorf("underlay bridge %s: ovs-vswitchd made no internal port: %w", u.bridge, ctx.Err())
			}
			return fmt.Errorf("underlay bridge %s: its internal port has no carrier (ovs-vswitchd has not opened it; the addresses stay on %s): %w", u.bridge, u.nic, ctx.Err())
		case <-time.After(100 * time.Millisecond):
		}
	}
	if !hasNodeAddresses(u.nic) {
		return nil // already on the bridge, or nothing to move
	}
	start := time.Now()
	m, err := podnet.MoveAddresses(u.nic, u.bridge)
	if err != nil {
		return err
	}
	logMoved(log, "node addresses moved onto the underlay bridge", m, "from", u.nic, "to", u.bridge,
		"took", time.Since(start).Round(time.Microsecond))
	return nil
}

// underlayToNIC moves the node's addresses from the bridge back onto the NIC; why is
// logged.
func underlayToNIC(log *slog.Logger, u underlay, why string) error {
	if !hasNodeAddresses(u.bridge) {
		return nil
	}
	start := time.Now()
	m, err := podnet.MoveAddresses(u.bridge, u.nic)
	if err != nil {
		return err
	}
	logMoved(log, "node addresses moved back onto the NIC", m, "why", why, "from", u.bridge, "to", u.nic,
		"took", time.Since(start).Round(time.Microsecond))
	return nil
}
