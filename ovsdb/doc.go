// Package ovsdb is ofsdn's side of the Open vSwitch database: it keeps one OVSDB
// connection (RFC 7047) to ovsdb-server, monitors the tables it needs into a local cache,
// and creates or removes bridges and ports with single transactions.
//
// # Design history
//
// The daemon must never shell out to ovs-vsctl (one fork+exec and one round trip per call,
// and no way to learn an ofport without polling). So, as Antrea's pkg/ovs/ovsconfig does,
// it speaks OVSDB itself, through github.com/ovn-kubernetes/libovsdb and the models that
// modelgen generated from vswitch.ovsschema (package vswitchd):
//
//   - Connect opens one JSON-RPC session (RFC 7047 §4) and issues one monitor_cond_since
//     request (an extension of the §4.1.5 monitor) for Open_vSwitch, Bridge, Port, Interface
//     and Flow_Table. Only the columns ofsdn reads are monitored, so the per-interface
//     statistics that ovs-vswitchd rewrites every few seconds never reach us. Reads
//     (ListPorts, GetPort, BridgeExternalIDs) are served from that cache and cost no round
//     trip. libovsdb reconnects with exponential backoff and re-issues the monitor, which
//     refreshes the cache.
//   - Every change is one "transact" (§4.1.3) whose operations (§5.2) create rows with
//     named UUIDs and link them in the same transaction: Interface + Port + a mutate of
//     Bridge.ports for a port; Flow_Table rows + Interface + Port + Bridge + a mutate of
//     Open_vSwitch.bridges for a bridge. Bridge, Port, Interface and Flow_Table are not root
//     tables (isRoot false, §3.2), so a row that nothing references any more is garbage
//     collected by ovsdb-server: removing a port is a mutate of Bridge.ports plus a delete
//     of the Port row, and its Interface goes with it.
//   - Port inserts and deletes of concurrent callers share transactions (group commit,
//     commit.go): one arriving while another group is in flight joins the next group,
//     sent when the one in flight has settled or after Options.GroupCommitMaxWait; a
//     lone change is sent at once. A group that ovsdb-server rejects is retried member by
//     member, so one bad port fails alone.
//   - Columns shared with other writers (external_ids, other_config, flow_tables) are only
//     ever changed with "mutate" (§5.2.4) on the keys ofsdn owns, never rewritten whole,
//     so keys set by an operator or another agent survive.
//   - The ofport of a new interface is chosen by ovs-vswitchd after it sees the
//     transaction. Instead of polling, a cache event handler wakes the goroutines that
//     wait on that interface's name; they re-read the row from the cache and return when
//     ofport is set (> 0), or fail when ovs-vswitchd wrote ofport -1 and the reason into
//     the Interface's "error" column.
//   - Every write waits until the monitor cache shows its effect before returning, so a
//     read right after a write sees it (read-your-writes through the cache).
//   - Bridge changes also bump Open_vSwitch.next_cfg and wait until ovs-vswitchd reports
//     the same cur_cfg, as ovs-vsctl does without --no-wait, so that the bridge's OpenFlow
//     management socket exists when EnsureBridge returns.
package ovsdb
