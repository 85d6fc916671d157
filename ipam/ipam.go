// Package ipam hands out IPv4 addresses from the node's pod subnet, one per
// pod interface, keyed by container ID + interface name (the CNI spec 1.1
// attachment key, section "Attachment"), and persists every lease before it
// is returned so that a crash of the daemon can never hand out one IP twice.
//
// # Design history / why one file
//
// host-local (containernetworking/plugins/plugins/ipam/host-local) keeps one
// file per lease plus a last_reserved_ip file, and takes a lock file for
// every call because it runs as a separate process per CNI call. ofsdn runs
// IPAM inside the long-lived node daemon, so the in-memory index is the truth
// while the daemon runs and the disk only has to survive a crash. We keep the
// whole state in ONE small JSON file, DIR/ipam/leases.json, and rewrite it
// atomically on every change:
//
//	write DIR/ipam/leases.json.tmp-*  → fsync(tmp) → rename over leases.json → fsync(DIR/ipam)
//
// Why one file rather than one per lease:
//   - Same cost: both designs need one file fsync and one directory fsync per
//     allocation; the file is small (about 150 bytes per lease, ~16 KiB for a
//     full /25 of 110 pods, the kubelet's default pod limit), so rewriting it
//     is cheaper than the fsyncs.
//   - Always consistent: the rename swaps the old state for the new in one
//     step, so the round-robin cursor and the leases can never disagree, and a
//     half-written lease file (crash between create and write) cannot exist.
//   - Open is one read and one decode (and one fuzz target, FuzzDecodeStore).
//
// # Group commit
//
// Each change (Allocate of a new key, Release, ReleaseIP, Restore, Record) is applied to the
// in-memory index under the Store's mutex and joins the pending batch; one
// flusher goroutine then writes the WHOLE state once for every change in that
// batch (the sequence above: one file write, two fsyncs) without holding the
// mutex, and every caller of the batch returns only after that write. Changes
// arriving while a batch is being written form the next batch, written right
// after. So N concurrent callers cost about two writes instead of N
// (bench/RESULTS.md, "IPAM group commit": an Allocate+Release pair with 32
// goroutines went from 9.7 ms to 0.63 ms).
//
// Crash safety: Allocate returns an address only after a write that holds its
// lease is durable, and Release returns only after a write without the lease
// is durable. Batches are written in order and each write is a snapshot of
// everything applied before it, so an address released in batch N and handed
// to another caller in batch N (or later) is returned only once the release
// and the new lease are on disk together: a crash can never give the address
// to two pods. If a write fails, every change of that batch AND of the batch
// queued behind it (applied in memory on top of it, not yet written) is
// rolled back in memory, in reverse order, and every one of their callers
// gets the error: a failed write hands out nothing and releases nothing, and
// memory again equals the last durable file. A retried Allocate of a key
// whose lease is still being written waits for that write (and gets its
// error); so does a repeated Release of a key whose release is being written.
// Get, List and InUse report the in-memory state, including changes still
// being written.
//
// A crash before the rename leaves the old file plus a stale temp file, which
// Open deletes. A corrupt leases.json is an error
// naming the file: starting from an empty pool would hand out IPs that running
// pods hold.
//
// A Store also takes an exclusive flock(2) on DIR/ipam/lock so that two
// daemons (for example an overlapping DaemonSet roll-out) cannot share one
// pool; Close releases it.
package ipam

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"time"

	"golang.org/x/sys/unix"
)

const (
	// stateFile is the name of the lease file inside DIR/ipam.
	stateFile = "leases.json"
	// lockFile is the name of the flock(2) file inside DIR/ipam.
	lockFile = "lock"
	// tmpPrefix starts the names of temporary files written by persist.
	tmpPrefix = stateFile + ".tmp-"
	// maxPrefixLen is the longest IPv4 prefix accepted as a pod subnet:
	// a /30 has two allocatable addresses, a /31 or /32 has none once the
	// network and broadcast addresses are excluded.
	maxPrefixLen = 30
)

// Lease is one allocated address.
type Lease struct {
	// IP is the allocated IPv4 address (4-byte form).
	IP net.IP
	// ContainerID is the CNI_CONTAINERID of the attachment.
	ContainerID string
	// IfName is the CNI_IFNAME of the attachment (the interface in the pod).
	IfName string
	// Owner is a free-form label of the holder, by convention "namespace/name"
	// of the pod; it is not part of the key.
	Owner string
	// Network is the name of the CNI network (netconf "name", SPEC.md "Section
	// 1: Network configuration format") the attachment was added with; "" for a
	// lease written before ofsdn recorded it, which belongs to every network.
	// It is not part of the key.
	Network string
	// Netns is the path of the attachment's network namespace (CNI_NETNS); "" when not
	// recorded (a lease written before ofsdn recorded it). Not part of the key.
	Netns string
	// HostVeth is the name of the attachment's host veth end, which is also its OVS port
	// and interface name; "" when not recorded. Not part of the key.
	HostVeth string
	// OFPort is the ofport the attachment's OVS port asked for (Interface
	// ofport_request), 1..MaxOFPort; 0 when not recorded. Not part of the key.
	// Netns, HostVeth and OFPort are the attachment's record: with the pod's identity
	// above they are what the node needs to re-create the attachment's OVS port when the
	// OVS database was lost (an empty conf.db), so they live here, on the node's disk.
	OFPort int
	// OwnerID is the attachment's flow owner id (the id bits of its flows' cookies, kind
	// pod), 1..2^32-1, allocated by the store with the lease and kept for the lease's life,
	// also across daemon restarts, so a restarted node gives the pod's flows the id they
	// had. Unique among the store's leases. A lease written before ofsdn recorded owner
	// ids has the id its flows carried then: its IPv4 address as a big-endian uint32.
	// ReserveLease and Restore ignore the field of their argument, except that Restore
	// keeps a free non-zero id it is given.
	OwnerID uint32
	// Allocated is when the lease was first handed out (wall clock, UTC).
	Allocated time.Time
}

// MaxOFPort is the highest ofport a lease records: 65279 (0xfeff), the last OpenFlow
// port number an Interface's ofport_request may ask for (vswitch.ovsschema:
// ofport_request 1..65279).
const MaxOFPort = 0xfeff

// record is a lease's attachment record (Lease.Netns, HostVeth, OFPort).
type record struct {
	netns, hostVeth string
	ofport          int
}

// key is the identity of one attachment (CNI spec 1.1: container ID + ifname).
type key struct{ containerID, ifName string }

// lease is the in-memory form of a Lease, with the address as an offset-free
// uint32 for cheap arithmetic.
type lease struct {
	ip        uint32
	key       key
	ownerID   uint32 // Lease.OwnerID, never 0
	owner     string
	network   string
	rec       record
	allocated time.Time
	// entry is the lease's leases.json entry, encoded on its first write (Store.encodeState);
	// the fields above never change while the lease lives. Guarded by Store.mu.
	entry []byte
	// pending is the batch whose write will make this lease durable; nil
	// once it is on disk. Guarded by Store.mu.
	pending *batch
}

// change is one in-memory change of a batch, kept so that a failed write can
// undo it.
type change struct {
	l          *lease
	added      bool   // true: l was allocated; false: l was released (unless prev is set)
	prevCursor uint32 // cursor before an allocation
	prev       *lease // set for a record update (Store.Record): the lease l replaced
}

// batch is a group of changes written to disk by one write. Its callers wait
// on done; err is set (before done is closed) when the write failed.
type batch struct {
	changes []change
	waiters int // callers waiting on done (guarded by Store.mu; tests read it)
	done    chan struct{}
	err     error
}

// wait blocks until b's write has finished and returns its error.
func (b *batch) wait() error {
	<-b.done
	return b.err
}

// Store is a persistent IPv4 address pool. All methods are safe for
// concurrent use.
type Store struct {
	dir    string // DIR/ipam
	subnet *net.IPNet
	first  uint32 // first allocatable address (network + 1)
	last   uint32 // last allocatable address (broadcast - 1)

	reserved map[uint32]bool // never allocated (gateway etc.), inside [first,last]

	lockFD int // flock(2) descriptor on DIR/ipam/lock; -1 once closed

	mu      sync.Mutex
	idle    *sync.Cond // signalled (with mu) when the flusher stops
	closed  bool       // Close was called: no new changes
	byIP    map[uint32]*lease
	byKey   map[key]*lease
	byOwner map[uint32]*lease // by Lease.OwnerID
	cursor  uint32            // last address handed out; the next scan starts after it
	// ownerCursor is the last owner id handed out; the next one is the first free id after
	// it (round robin over 1..2^32-1), so a freed id is not soon given again.
	ownerCursor uint32

	// Group commit state, guarded by mu.
	pending  *batch // changes applied in memory, not yet being written
	flushing bool   // the flusher goroutine is running
	// releasing maps a key / an address released by a batch not yet
	// written to that batch, so a repeated Release waits for it.
	releasing   map[key]*batch
	releasingIP map[uint32]*batch

	// writeHook, when set (tests only, before any use), runs at the start of
	// every write of the lease file; an error it returns fails that write.
	writeHook func() error
}

// Open loads (or creates) the pool for subnet under dir (files go in
// dir/ipam). The network address, the broadcast address and every address in
// reserved (typically the node's gateway) are never allocated.
//
// Errors: subnet not IPv4 or longer than /30; a reserved address outside
// subnet; the directory cannot be created; another process holds the pool
// (flock); leases.json is corrupt (the error names the file); leases.json
// was written for a different subnet (the error names both and the fix); an
// on-disk lease sits on a reserved address.
func Open(dir string, subnet *net.IPNet, reserved ...net.IP) (*Store, error) {
	sn, first, last, err := canonicalSubnet(subnet)
	if err != nil {
		return nil, err
	}
	s := &Store{
		dir:      filepath.Join(dir, "ipam"),
		subnet:   sn,
		first:    first,
		last:     last,
		reserved: map[uint32]bool{},
		lockFD:   -1,
		byIP:     map[uint32]*lease{},
		byKey:    map[key]*lease{},
		byOwner:  map[uint32]*lease{},

		releasing:   map[key]*batch{},
		releasingIP: map[uint32]*batch{},
	}
	s.idle = sync.NewCond(&s.mu)
	for _, r := range reserved {
		r4 := r.To4()
		if r4 == nil || !sn.Contains(r4) {
			return nil, fmt.Errorf("ipam: reserved address %v is not in pod subnet %v: pass an address of the pod subnet (the node gateway)", r, sn)
		}
		if u := ipToU32(r4); u >= first && u <= last {
			s.reserved[u] = true
		}
	}
	if err := os.MkdirAll(s.dir, 0o700); err != nil {
		return nil, fmt.Errorf("ipam: create data directory %s: %w", s.dir, err)
	}
	if err := s.lock(); err != nil {
		return nil, err
	}
	if err := s.load(); err != nil {
		s.Close()
		return nil, err
	}
	return s, nil
}

// canonicalSubnet validates an IPv4 pod subnet and returns it in canonical
// form (host bits cleared) with its first and last allocatable addresses.
func canonicalSubnet(subnet *net.IPNet) (*net.IPNet, uint32, uint32, error) {
	if subnet == nil {
		return nil, 0, 0, errors.New("ipam: pod subnet is nil: pass the node's pod subnet (e.g. 10.128.0.0/24)")
	}
	ip4 := subnet.IP.To4()
	ones, bitsLen := subnet.Mask.Size()
	if ip4 == nil || bitsLen != 32 {
		return nil, 0, 0, fmt.Errorf("ipam: pod subnet %v is not IPv4: only IPv4 pod subnets are supported", subnet)
	}
	if ones > maxPrefixLen {
		return nil, 0, 0, fmt.Errorf("ipam: pod subnet %v is too small: use a prefix of /%d or shorter", subnet, maxPrefixLen)
	}
	mask := net.CIDRMask(ones, 32)
	sn := &net.IPNet{IP: ip4.Mask(mask), Mask: mask}
	network := ipToU32(sn.IP)
	broadcast := network | ^binary.BigEndian.Uint32(mask)
	return sn, network + 1, broadcast - 1, nil
}

// lock takes a non-blocking exclusive flock on DIR/ipam/lock.
func (s *Store) lock() error {
	path := filepath.Join(s.dir, lockFile)
	fd, err := unix.Open(path, unix.O_RDWR|unix.O_CREAT|unix.O_CLOEXEC, 0o600)
	if err != nil {
		return fmt.Errorf("ipam: open lock file %s: %w", path, err)
	}
	if err := unix.Flock(fd, unix.LOCK_EX|unix.LOCK_NB); err != nil {
		unix.Close(fd)
		if errors.Is(err, unix.EWOULDBLOCK) {
			return fmt.Errorf("ipam: pool %s is in use by another process or Store (flock %s): stop the other ofsdn-node or Close the other Store", s.dir, path)
		}
		return fmt.Errorf("ipam: lock %s: %w", path, err)
	}
	s.lockFD = fd
	return nil
}

// Close waits for changes still being written (their callers get the
// write's result), then releases the pool's lock. The Store must not be used
// afterwards: changes after Close fail. Close is idempotent and returns the
// error of close(2), if any.
func (s *Store) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.closed = true
	for s.flushing {
		s.idle.Wait()
	}
	if s.lockFD < 0 {
		return nil
	}
	err := unix.Close(s.lockFD) // closing the last descriptor drops the flock
	s.lockFD = -1
	return err
}

// load removes stale temp files and reads leases.json, if present.
func (s *Store) load() error {
	if err := s.removeTempFiles(); err != nil {
		return err
	}
	path := filepath.Join(s.dir, stateFile)
	data, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		s.cursor = s.first - 1 // first scan starts at the first address
		return nil
	}
	if err != nil {
		return fmt.Errorf("ipam: read lease file %s: %w", path, err)
	}
	st, err := decodeState(data)
	if err != nil {
		return fmt.Errorf("ipam: lease file %s is corrupt: %w; restore it from a backup, or, if no pod on this node holds an address, remove it", path, err)
	}
	if st.subnet.String() != s.subnet.String() {
		return fmt.Errorf("ipam: lease file %s is for pod subnet %v but this node's pod subnet is %v: fix the node's pod subnet, or drain the node and remove %s", path, st.subnet, s.subnet, path)
	}
	for _, l := range st.leases {
		if s.reserved[l.ip] {
			return fmt.Errorf("ipam: lease file %s gives reserved address %s to container %s/%s: release that pod or change the reserved address", path, u32ToIP(l.ip), l.key.containerID, l.key.ifName)
		}
		if l.ownerID == 0 {
			l.ownerID = l.ip // written before owner ids were recorded: the id its flows carry
		}
		if _, dup := s.byOwner[l.ownerID]; dup {
			l.ownerID, l.entry = 0, nil // given a new one below, written with the next change
		}
		s.put(l)
		s.ownerCursor = max(s.ownerCursor, l.ownerID)
	}
	for _, l := range st.leases {
		if l.ownerID == 0 {
			delete(s.byOwner, 0)
			l.ownerID = s.nextOwnerID()
			s.byOwner[l.ownerID] = l
		}
	}
	s.cursor = s.first - 1
	if st.cursor >= s.first && st.cursor <= s.last {
		s.cursor = st.cursor
	}
	return nil
}

// removeTempFiles deletes temp files left by a crash between create and
// rename; they never held committed state.
func (s *Store) removeTempFiles() error {
	ents, err := os.ReadDir(s.dir)
	if err != nil {
		return fmt.Errorf("ipam: list %s: %w", s.dir, err)
	}
	for _, e := range ents {
		if strings.HasPrefix(e.Name(), tmpPrefix) {
			p := filepath.Join(s.dir, e.Name())
			if err := os.Remove(p); err != nil && !errors.Is(err, fs.ErrNotExist) {
				return fmt.Errorf("ipam: remove stale temp file %s: %w", p, err)
			}
		}
	}
	return nil
}

// Subnet returns the pod subnet of the pool (canonical, host bits zero).
func (s *Store) Subnet() *net.IPNet {
	return &net.IPNet{IP: append(net.IP(nil), s.subnet.IP...), Mask: append(net.IPMask(nil), s.subnet.Mask...)}
}

// Size returns the number of allocatable addresses: the subnet's addresses
// minus network, broadcast and the reserved addresses.
func (s *Store) Size() int {
	return int(s.last-s.first+1) - len(s.reserved)
}

// InUse returns the number of leases.
func (s *Store) InUse() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.byIP)
}

// Allocate returns the address leased to (containerID, ifName), allocating
// one if there is none. A second call with the same key returns the same
// address (idempotent retry of a CNI ADD); owner is recorded only on the
// first call. New addresses are picked round-robin after the last one handed
// out, so an address freed by a deleted pod is not reused at once.
//
// The lease is durable on disk before Allocate returns. Errors: empty
// containerID or ifName; pool exhausted ("IP pool 10.128.0.0/24 exhausted
// (253 in use)"); the lease file cannot be written (nothing is allocated).
func (s *Store) Allocate(containerID, ifName, owner string) (net.IP, error) {
	return s.AllocateIn(containerID, ifName, owner, "")
}

// AllocateIn is Allocate recording network, the CNI network name (netconf "name") the
// attachment belongs to, in the lease (Lease.Network), so that operations on many
// attachments (CNI GC) can tell the networks apart. network is recorded only on the
// first call, like owner; "" records none. Errors: those of Allocate.
func (s *Store) AllocateIn(containerID, ifName, owner, network string) (net.IP, error) {
	ip, durable, err := s.Reserve(containerID, ifName, owner, network)
	if err != nil {
		return nil, err
	}
	if err := durable(); err != nil {
		return nil, err
	}
	return ip, nil
}

// Reserve is AllocateIn without the wait for the disk: it returns the address leased to
// (containerID, ifName) at once, reserved in memory (no other caller is given it, Get and
// List show it), together with durable, which blocks until the write holding the lease is
// on disk and returns that write's error. The write runs meanwhile (in the group-commit
// flusher), so the caller can prepare what needs the address (the pod's veth) while the
// lease is being made durable (bench/RESULTS.md, "Issue 14: the lease write beside the
// veth").
//
// The caller must not let the address be seen outside the node (attach the pod's port,
// answer the CNI runtime) before durable returned nil: a crash before that could hand the
// address out twice. When durable returns an error the lease has been rolled back (as by
// AllocateIn's failure) and the address may already be another caller's: the caller
// removes what it made with it; Release of the key is then a no-op. durable may be called
// more than once and returns the same result. A key that already holds a durable lease
// gets its address and a durable that returns nil. Errors of Reserve itself: those of
// Allocate, except the write's, which durable returns.
func (s *Store) Reserve(containerID, ifName, owner, network string) (ip net.IP, durable func() error, err error) {
	return s.ReserveLease(Lease{ContainerID: containerID, IfName: ifName, Owner: owner, Network: network})
}

// ReserveLease is Reserve for want.ContainerID and want.IfName, recording want's Owner,
// Network and attachment record (Netns, HostVeth, OFPort) in the new lease; want.IP and
// want.Allocated are ignored. A key that already holds a lease gets its address, and the
// lease keeps what it recorded. Errors: those of Reserve, and an OFPort outside
// 0..MaxOFPort.
func (s *Store) ReserveLease(want Lease) (ip net.IP, durable func() error, err error) {
	containerID, ifName, owner, network := want.ContainerID, want.IfName, want.Owner, want.Network
	if want.OFPort < 0 || want.OFPort > MaxOFPort {
		return nil, nil, fmt.Errorf("ipam: lease of container %s/%s: ofport %d is outside 0..%d", containerID, ifName, want.OFPort, MaxOFPort)
	}
	if containerID == "" || ifName == "" {
		return nil, nil, fmt.Errorf("ipam: allocate needs a container ID and an interface name (got %q, %q)", containerID, ifName)
	}
	k := key{containerID, ifName}
	s.mu.Lock()
	if err := s.usable(); err != nil {
		s.mu.Unlock()
		return nil, nil, err
	}
	if l, ok := s.byKey[k]; ok {
		b := l.pending
		if b != nil {
			b.waiters++
		}
		s.mu.Unlock()
		if b == nil {
			return u32ToIP(l.ip), func() error { return nil }, nil
		}
		// Allocated by a call whose write is still running.
		return u32ToIP(l.ip), b.wait, nil
	}
	u, ok := s.nextFree()
	if !ok {
		s.mu.Unlock()
		return nil, nil, fmt.Errorf("IP pool %v exhausted (%d in use): delete unused pods or give the node a larger pod subnet", s.subnet, len(s.byIP))
	}
	b := s.join()
	l := &lease{ip: u, key: k, ownerID: s.nextOwnerID(), owner: owner, network: network, rec: recordOf(want),
		allocated: time.Now().UTC().Truncate(time.Second), pending: b}
	s.put(l)
	b.changes = append(b.changes, change{l: l, added: true, prevCursor: s.cursor})
	s.cursor = u
	b.waiters++
	s.mu.Unlock()
	return u32ToIP(u), b.wait, nil
}

// Restore records the lease l.IP for (l.ContainerID, l.IfName) with l.Owner and
// l.Network, durably, as the recovery of a lease the store lost (a lease file deleted
// or restored from an old backup) from another record of the attachment: the node
// re-creates the lease of a pod whose OVS port still carries its address, so that the
// address is never handed to a second pod. Restoring a lease the key already holds at
// that address is a no-op. The round-robin cursor is not moved. Errors: empty key; the
// address is not an allocatable address of the pool (outside the subnet, network,
// broadcast or reserved); the address is leased to another attachment; the key holds
// another address; the lease file cannot be written (nothing is recorded).
func (s *Store) Restore(l Lease) error {
	if l.ContainerID == "" || l.IfName == "" {
		return fmt.Errorf("ipam: restore needs a container ID and an interface name (got %q, %q)", l.ContainerID, l.IfName)
	}
	ip4 := l.IP.To4()
	if ip4 == nil || !s.subnet.Contains(ip4) {
		return fmt.Errorf("ipam: cannot restore lease %v of container %s/%s: not an address of pod subnet %v", l.IP, l.ContainerID, l.IfName, s.subnet)
	}
	u := ipToU32(ip4)
	if u < s.first || u > s.last || s.reserved[u] {
		return fmt.Errorf("ipam: cannot restore lease %v of container %s/%s: the network, broadcast or a reserved address of pod subnet %v", l.IP, l.ContainerID, l.IfName, s.subnet)
	}
	k := key{l.ContainerID, l.IfName}
	s.mu.Lock()
	if err := s.usable(); err != nil {
		s.mu.Unlock()
		return err
	}
	if old, ok := s.byKey[k]; ok {
		s.mu.Unlock()
		if old.ip == u {
			return nil
		}
		return fmt.Errorf("ipam: cannot restore lease %v of container %s/%s: it holds %v; DEL the attachment first", l.IP, l.ContainerID, l.IfName, u32ToIP(old.ip))
	}
	if other, ok := s.byIP[u]; ok {
		s.mu.Unlock()
		return fmt.Errorf("ipam: cannot restore lease %v of container %s/%s: the address is leased to container %s/%s", l.IP, l.ContainerID, l.IfName, other.key.containerID, other.key.ifName)
	}
	allocated := l.Allocated.UTC().Truncate(time.Second)
	if l.Allocated.IsZero() {
		allocated = time.Now().UTC().Truncate(time.Second)
	}
	id := l.OwnerID
	if _, used := s.byOwner[id]; used || id == 0 {
		id = s.nextOwnerID()
	}
	b := s.join()
	nl := &lease{ip: u, key: k, ownerID: id, owner: l.Owner, network: l.Network, rec: recordOf(l), allocated: allocated, pending: b}
	s.put(nl)
	b.changes = append(b.changes, change{l: nl, added: true, prevCursor: s.cursor})
	b.waiters++
	s.mu.Unlock()
	return b.wait()
}

// nextFree scans round-robin from the address after the cursor. It returns
// false when every allocatable address is taken.
func (s *Store) nextFree() (uint32, bool) {
	n := s.last - s.first + 1
	start := s.cursor + 1
	if start < s.first || start > s.last {
		start = s.first
	}
	for i := uint32(0); i < n; i++ {
		ip := s.first + (start-s.first+i)%n
		if s.reserved[ip] {
			continue
		}
		if _, used := s.byIP[ip]; !used {
			return ip, true
		}
	}
	return 0, false
}

// nextOwnerID returns the first owner id after ownerCursor that no lease holds (round
// robin over 1..2^32-1) and moves the cursor to it. A pool has far fewer leases than ids,
// so the scan ends. Caller holds s.mu.
func (s *Store) nextOwnerID() uint32 {
	for {
		s.ownerCursor++
		if s.ownerCursor == 0 {
			continue
		}
		if _, used := s.byOwner[s.ownerCursor]; !used {
			return s.ownerCursor
		}
	}
}

// put indexes l by address, key and owner id, replacing what held them. Caller holds s.mu.
func (s *Store) put(l *lease) { s.byIP[l.ip], s.byKey[l.key], s.byOwner[l.ownerID] = l, l, l }

// remove drops l from the indexes. Caller holds s.mu.
func (s *Store) remove(l *lease) {
	delete(s.byIP, l.ip)
	delete(s.byKey, l.key)
	delete(s.byOwner, l.ownerID)
}

// Release frees the address of (containerID, ifName). Releasing a key that
// holds no lease is not an error (CNI DEL is idempotent, CNI spec 1.1
// section "DEL"). Errors: the lease file cannot be written (the lease stays).
func (s *Store) Release(containerID, ifName string) error {
	k := key{containerID, ifName}
	s.mu.Lock()
	if err := s.usable(); err != nil {
		s.mu.Unlock()
		return err
	}
	l, ok := s.byKey[k]
	return s.finishRelease(l, ok, s.releasing[k])
}

// ReleaseIP frees ip whoever holds it; an address without a lease (or
// outside the pool) is not an error. Errors: the lease file cannot be
// written (the lease stays).
func (s *Store) ReleaseIP(ip net.IP) error {
	ip4 := ip.To4()
	if ip4 == nil {
		return nil
	}
	u := ipToU32(ip4)
	s.mu.Lock()
	if err := s.usable(); err != nil {
		s.mu.Unlock()
		return err
	}
	l, ok := s.byIP[u]
	return s.finishRelease(l, ok, s.releasingIP[u])
}

// finishRelease ends a release begun under s.mu, and unlocks it: a held lease l is dropped
// (see drop); without one, a release of the same lease whose write is still running
// (pending) is waited for and its result returned; otherwise there is nothing to release.
func (s *Store) finishRelease(l *lease, held bool, pending *batch) error {
	if held {
		return s.drop(l)
	}
	if pending != nil {
		pending.waiters++
	}
	s.mu.Unlock()
	if pending != nil {
		return pending.wait()
	}
	return nil
}

// drop removes l in memory, joins the pending batch, unlocks s.mu and waits
// for the batch's write. Caller holds s.mu; drop releases it. On a write
// error the batch's rollback restores l.
func (s *Store) drop(l *lease) error {
	b := s.join()
	s.remove(l)
	b.changes = append(b.changes, change{l: l})
	s.releasing[l.key], s.releasingIP[l.ip] = b, b
	b.waiters++
	s.mu.Unlock()
	return b.wait()
}

// usable reports an error once the Store is closed. Caller holds s.mu.
func (s *Store) usable() error {
	if s.closed || s.lockFD < 0 {
		return fmt.Errorf("ipam: pool %s is closed: Open it again", s.dir)
	}
	return nil
}

// Get returns the lease of (containerID, ifName), if any.
func (s *Store) Get(containerID, ifName string) (Lease, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	l, ok := s.byKey[key{containerID, ifName}]
	if !ok {
		return Lease{}, false
	}
	return l.export(), true
}

// List returns every lease, ordered by address.
func (s *Store) List() []Lease {
	s.mu.Lock()
	out := make([]Lease, 0, len(s.byIP))
	for _, l := range s.byIP {
		out = append(out, l.export())
	}
	s.mu.Unlock()
	sort.Slice(out, func(i, j int) bool { return ipToU32(out[i].IP) < ipToU32(out[j].IP) })
	return out
}

func (l *lease) export() Lease {
	return Lease{IP: u32ToIP(l.ip), ContainerID: l.key.containerID, IfName: l.key.ifName, Owner: l.owner, Network: l.network,
		Netns: l.rec.netns, HostVeth: l.rec.hostVeth, OFPort: l.rec.ofport, OwnerID: l.ownerID, Allocated: l.allocated}
}

func recordOf(l Lease) record { return record{netns: l.Netns, hostVeth: l.HostVeth, ofport: l.OFPort} }

// Record replaces the attachment record (Netns, HostVeth, OFPort) of existing leases with
// those of updates, each naming its lease by ContainerID, IfName and IP; the other fields
// of updates are ignored. All of them are written in one durable write (one batch of the
// group commit), which Record waits for. The node uses it to give leases from an older
// ofsdn (no record) the record of their attachment, and to follow an ofport that changed.
// An update equal to what the lease records is skipped; with nothing to change Record
// writes nothing. Errors: a key without a lease, or whose lease holds another address
// (nothing is changed); an OFPort outside 0..MaxOFPort; the lease file cannot be written
// (every change of the call is rolled back).
func (s *Store) Record(updates []Lease) error {
	s.mu.Lock()
	if err := s.usable(); err != nil {
		s.mu.Unlock()
		return err
	}
	type upd struct {
		old *lease
		rec record
	}
	var todo []upd
	for _, u := range updates {
		k := key{u.ContainerID, u.IfName}
		old, ok := s.byKey[k]
		ip4 := u.IP.To4()
		if !ok || ip4 == nil || old.ip != ipToU32(ip4) {
			s.mu.Unlock()
			return fmt.Errorf("ipam: record of container %s/%s at %v: no such lease; ADD the attachment again", u.ContainerID, u.IfName, u.IP)
		}
		if u.OFPort < 0 || u.OFPort > MaxOFPort {
			s.mu.Unlock()
			return fmt.Errorf("ipam: record of container %s/%s: ofport %d is outside 0..%d", u.ContainerID, u.IfName, u.OFPort, MaxOFPort)
		}
		if rec := recordOf(u); rec != old.rec {
			todo = append(todo, upd{old, rec})
		}
	}
	if len(todo) == 0 {
		s.mu.Unlock()
		return nil
	}
	b := s.join()
	for _, u := range todo {
		nl := &lease{ip: u.old.ip, key: u.old.key, ownerID: u.old.ownerID, owner: u.old.owner, network: u.old.network, rec: u.rec,
			allocated: u.old.allocated, pending: b}
		s.put(nl)
		b.changes = append(b.changes, change{l: nl, prev: u.old})
	}
	b.waiters++
	s.mu.Unlock()
	return b.wait()
}

func ipToU32(ip4 net.IP) uint32 { return binary.BigEndian.Uint32(ip4) }

func u32ToIP(u uint32) net.IP {
	ip := make(net.IP, 4)
	binary.BigEndian.PutUint32(ip, u)
	return ip
}
