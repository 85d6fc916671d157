package podnet

// Batched veth deletion.
//
// Deleting a veth costs ~18 ms of wall time on these machines, almost none of it CPU:
// unregistering net devices waits for RCU (synchronize_net, then rcu_barrier and the
// reference-count wait in netdev_run_todo) once per unregister batch, under the rtnl
// lock, so concurrent RTM_DELLINKs queue behind each other: 8 concurrent deletions took
// ~8× one, while ONE RTM_DELLINK removing 8 pairs took about as long as one (bench/
// RESULTS.md, "DEL"). Deleting from the pod side instead of the host side changes nothing
// (the same two devices are unregistered together either way).
//
// So Teardown applies ipam's group commit to deletions: a deletion arriving when none
// is in flight in the caller's network namespace runs at once, alone (a lone DEL never
// waits); deletions arriving meanwhile queue, and when the one in flight ends, one of the
// queued callers deletes them all with a single RTM_DELLINK selecting a link group
// (IFLA_GROUP, rtnl_group_dellink: one unregister_netdevice_many for all of them). The
// group number is random and is put only on our veths, and before the delete a dump
// checks that no other link of the namespace carries it; if one does, or anything else
// fails, each veth is deleted on its own, so one bad deletion fails alone. Every caller
// returns only after its own pair is gone (or its own error). The batch runs on the
// thread of a caller queued in it, in that caller's network namespace: callers in
// different namespaces are never batched together.

import (
	"crypto/rand"
	"encoding/binary"
	"fmt"
	"sync"

	"github.com/containernetworking/plugins/pkg/netlinksafe"
	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netlink/nl"
	"golang.org/x/sys/unix"
)

// maxReapBatch bounds how many veths one RTM_DELLINK deletes.
const maxReapBatch = 64

// reapReq is one caller's deletion.
type reapReq struct {
	name  string
	done  chan struct{} // closed when the deletion has ended (err set)
	lead  chan []*reapReq
	err   error
	alone bool // set before done: deleted by its own RTM_DELLINK (tests)
}

// reaper batches the deletions of one network namespace.
type reaper struct {
	mu    sync.Mutex
	busy  bool
	queue []*reapReq
}

var (
	// reapers holds one reaper per network namespace a deletion ran in (one in the
	// daemon; a small struct per namespace, never removed).
	reapersMu sync.Mutex
	reapers   = map[uint64]*reaper{} // network namespace inode → its reaper

	// groupDeletes counts the RTM_DELLINKs by link group made so far (tests).
	groupDeletes struct {
		sync.Mutex
		n int
	}
)

// threadNetns returns the inode of the calling thread's network namespace.
func threadNetns() (uint64, error) {
	var st unix.Stat_t
	if err := unix.Stat("/proc/thread-self/ns/net", &st); err != nil {
		return 0, fmt.Errorf("podnet: stat /proc/thread-self/ns/net: %w", err)
	}
	return st.Ino, nil
}

// deleteHostVeth deletes the veth called name in the calling thread's network namespace,
// batched with concurrent deletions there (see the file comment). The caller's goroutine
// must stay on its OS thread (it may run the batch of others, in its namespace).
func deleteHostVeth(name string) error {
	ns, err := threadNetns()
	if err != nil {
		return err
	}
	reapersMu.Lock()
	r := reapers[ns]
	if r == nil {
		r = &reaper{}
		reapers[ns] = r
	}
	reapersMu.Unlock()

	req := &reapReq{name: name, done: make(chan struct{}), lead: make(chan []*reapReq, 1)}
	r.mu.Lock()
	if !r.busy {
		r.busy = true
		r.mu.Unlock()
		r.runAndHandOff([]*reapReq{req})
		return req.err
	}
	r.queue = append(r.queue, req)
	r.mu.Unlock()
	select {
	case <-req.done:
	case batch := <-req.lead:
		r.runAndHandOff(batch)
	}
	return req.err
}

// runAndHandOff deletes batch on the calling thread, completes its members, then hands
// the next queued batch to one of its members (who runs it on its own thread), or marks
// the reaper idle.
func (r *reaper) runAndHandOff(batch []*reapReq) {
	deleteBatch(batch)
	for _, q := range batch {
		close(q.done)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.queue) == 0 {
		r.busy = false
		return
	}
	n := min(len(r.queue), maxReapBatch)
	next := append([]*reapReq(nil), r.queue[:n]...)
	r.queue = append(r.queue[:0], r.queue[n:]...)
	next[0].lead <- next
}

// testHookReap, when set by tests, runs before each batch is deleted, with its names.
var testHookReap func(names []string)

// deleteBatch deletes the veths of batch, setting each member's err.
func deleteBatch(batch []*reapReq) {
	if testHookReap != nil {
		names := make([]string, len(batch))
		for i, q := range batch {
			names[i] = q.name
		}
		testHookReap(names)
	}
	var links []netlink.Link
	var members []*reapReq
	for _, q := range batch {
		link, err := netlinksafe.LinkByName(q.name)
		switch {
		case err == nil:
			if _, ok := link.(*netlink.Veth); !ok {
				q.err = fmt.Errorf("podnet: host interface %s is a %s, not a veth: refusing to delete it; remove it by hand if it is stale", q.name, link.Type())
				continue
			}
			links = append(links, link)
			members = append(members, q)
		case isNotFound(err):
			// Already gone: DEL is idempotent.
		default:
			q.err = fmt.Errorf("podnet: look up host veth %s: %w", q.name, err)
		}
	}
	if len(links) > 1 && deleteByGroup(links) == nil {
		return
	}
	for i, link := range links {
		members[i].alone = true
		if err := netlink.LinkDel(link); err != nil && !isNotFound(err) {
			members[i].err = fmt.Errorf("podnet: delete host veth %s: %w", members[i].name, err)
		}
	}
}

// deleteByGroup puts links in a fresh random link group, checks that no other link of the
// namespace is in it, and deletes the group with one RTM_DELLINK (IFLA_GROUP). Any error
// means "delete them one by one": a link whose group was set keeps it until deleted, which
// changes nothing for a veth whose only user is OVS.
func deleteByGroup(links []netlink.Link) error {
	var b [4]byte
	if _, err := rand.Read(b[:]); err != nil {
		return err
	}
	group := binary.LittleEndian.Uint32(b[:]) | 0x40000000 // never 0, the default group
	ours := map[int]bool{}
	for _, l := range links {
		if err := netlink.LinkSetGroup(l, int(group)); err != nil {
			return err
		}
		ours[l.Attrs().Index] = true
	}
	all, err := netlinksafe.LinkList()
	if err != nil {
		return err
	}
	n := 0
	for _, l := range all {
		if l.Attrs().Group != group {
			continue
		}
		if !ours[l.Attrs().Index] {
			return fmt.Errorf("podnet: link %s is in group %d too", l.Attrs().Name, group)
		}
		n++
	}
	if n != len(links) {
		return fmt.Errorf("podnet: %d of %d veths in group %d", n, len(links), group)
	}
	req := nl.NewNetlinkRequest(unix.RTM_DELLINK, unix.NLM_F_ACK)
	req.AddData(nl.NewIfInfomsg(unix.AF_UNSPEC))
	req.AddData(nl.NewRtAttr(unix.IFLA_GROUP, nl.Uint32Attr(group)))
	if _, err := req.Execute(unix.NETLINK_ROUTE, 0); err != nil {
		return fmt.Errorf("podnet: RTM_DELLINK group %d: %w", group, err)
	}
	groupDeletes.Lock()
	groupDeletes.n++
	groupDeletes.Unlock()
	return nil
}
