// Package ipam hands out the addresses of the node's pod subnets, one lease per pod
// interface, keyed by container ID + interface name (the CNI spec 1.1 attachment key,
// section "Attachment"), and persists every lease before it is returned so that a crash
// of the daemon can never hand out one IP twice.
//
// # Pools
//
// A Store holds a list of pools, one per pod subnet of the node, in the order of the
// node's pod subnets: at most one IPv4 and one IPv6 pool (a single-stack node has one, a
// dual-stack node two). A lease holds one address of every pool (Lease.IPs, in pool
// order): its addresses are allocated together and freed together, and a failure in any
// pool (one exhausted, a failed write) leaves the attachment with no address of any
// family, never with one family's only.
//
// Each pool allocates offsets from its subnet's base address, as uint32 arithmetic,
// round-robin after its own cursor (the last address it handed out):
//   - IPv4: every address of the subnet but the network and the broadcast address
//     (offset 0 and the last), so a /24 offers 254 and a /30 (the longest accepted
//     prefix) 2.
//   - IPv6: the subnet's first IPv6PoolSpan (2^16) addresses, or the whole subnet when it
//     is smaller (a /113 or longer), but the subnet-router anycast address (offset 0,
//     RFC 4291 section 2.6.1): a /64 offers 65535 addresses, base+1 .. base+0xffff, and a
//     /126 (the longest accepted prefix) 3. The cap keeps the arithmetic, the index and
//     the lease file small; a node never runs anywhere near 2^16 pods.
//
// Addresses passed to Open as reserved (each family's gateway) are never allocated in
// the pool they fall in.
//
// # Design history / why one file
//
// host-local (containernetworking/plugins/plugins/ipam/host-local) keeps one
// file per lease plus a last_reserved_ip file, and takes a lock file for
// every call because it runs as a separate process per CNI call. ofsdn runs
// IPAM inside the long-lived node daemon, so the in-memory index is the truth
// while the daemon runs and the disk only has to survive a crash. We keep the
// whole state, every pool's leases and cursors, in ONE small JSON file,
// DIR/ipam/leases.json, and rewrite it atomically on every change:
//
//	write DIR/ipam/leases.json.tmp-*  → fsync(tmp) → rename over leases.json → fsync(DIR/ipam)
//
// Why one file rather than one per lease:
//   - Same cost: both designs need one file fsync and one directory fsync per
//     allocation; the file is small (about 150 bytes per lease, ~16 KiB for a
//     full /25 of 110 pods, the kubelet's default pod limit), so rewriting it
//     is cheaper than the fsyncs.
//   - Always consistent: the rename swaps the old state for the new in one
//     step, so the round-robin cursors and the leases can never disagree, all the
//     addresses of a lease (one per pool) are written in the same step, and a
//     half-written lease file (crash between create and write) cannot exist.
//   - One layout for every node: a single-stack IPv4 node's file is the layout ofsdn
//     wrote before it had pools, byte for byte; the further pool of a dual-stack node
//     lives in keys only such a file has (fileState).
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
// pods hold. So is a file written for other pod subnets than Open is given (another
// subnet, or another list: a dual-stack file opened with one subnet), which names the
// file and both lists: dropping a pool's addresses would hand them out again.
//
// A Store also takes an exclusive flock(2) on DIR/ipam/lock so that two
// daemons (for example an overlapping DaemonSet roll-out) cannot share one
// pool; Close releases it.
package ipam

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io/fs"
	"math"
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
	// maxPrefixLen6 is the longest IPv6 prefix accepted as a pod subnet: a /126 has three
	// allocatable addresses once the subnet-router anycast address is excluded.
	maxPrefixLen6 = 126
	// maxPools is the most pools a Store holds: one IPv4 and one IPv6.
	maxPools = 2
)

// IPv6PoolSpan is how many addresses of an IPv6 pod subnet its pool uses: the subnet's
// first 2^16 (offsets 0..0xffff from the subnet's base address), or the whole subnet when
// it is smaller. Offset 0, the subnet-router anycast address, is never allocated, so an
// IPv6 pool of a /112 or shorter prefix offers IPv6PoolSpan-1 = 65535 addresses.
const IPv6PoolSpan = 1 << 16

// Lease is one attachment's allocated addresses, one of every pool of the Store.
type Lease struct {
	// IPs are the allocated addresses, one per pool of the Store in pool order (the order
	// of the subnets given to Open): an IPv4 address in its 4-byte form, an IPv6 one in
	// its 16-byte form. A single-stack node's lease has one. Restore takes a subset (one
	// address per pool at most) and allocates the others; Record takes a subset to name
	// the lease; ReserveLease ignores the field.
	IPs []net.IP
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
	// ids (a single-stack IPv4 file) has the id its flows carried then: its IPv4 address
	// as a big-endian uint32. ReserveLease and Restore ignore the field of their argument,
	// except that Restore keeps a free non-zero id it is given.
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

// offsets are a lease's addresses as offsets from the base address of each pool, in pool
// order; the entries past the Store's number of pools are 0.
type offsets [maxPools]uint32

// lease is the in-memory form of a Lease, with the addresses as offsets for cheap
// arithmetic.
type lease struct {
	off       offsets
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
	l           *lease
	added       bool    // true: l was allocated; false: l was released (unless prev is set)
	prevCursors offsets // every pool's cursor before an allocation
	prev        *lease  // set for a record update (Store.Record): the lease l replaced
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

// pool is the addresses of one pod subnet. Its addresses are offsets from the subnet's
// base address (host bits zero): base | off is the address, for off in [first,last].
// Its index fields are guarded by Store.mu.
type pool struct {
	subnet *net.IPNet // canonical: host bits zero; a 4-byte IP for IPv4, 16 bytes for IPv6
	v4     bool
	first  uint32 // first allocatable offset (1)
	last   uint32 // last allocatable offset: IPv4 broadcast - 1; IPv6 min(size, IPv6PoolSpan) - 1

	reserved map[uint32]bool // offsets never allocated (gateway etc.), inside [first,last]

	byOff  map[uint32]*lease
	cursor uint32 // offset last handed out; the next scan starts after it
	// releasing maps an offset released by a batch not yet written to that batch, so a
	// repeated ReleaseIP waits for it.
	releasing map[uint32]*batch
}

// newPool validates a pod subnet and returns its empty pool (host bits of subnet
// cleared), cursor before the first address. Errors: nil, neither IPv4 nor IPv6, or a
// prefix longer than /30 (IPv4) or /126 (IPv6).
func newPool(subnet *net.IPNet) (*pool, error) {
	if subnet == nil {
		return nil, errors.New("ipam: pod subnet is nil: pass the node's pod subnet (e.g. 10.128.0.0/24)")
	}
	ones, bitsLen := subnet.Mask.Size()
	p := &pool{first: 1, reserved: map[uint32]bool{}, byOff: map[uint32]*lease{}, releasing: map[uint32]*batch{}}
	switch ip4 := subnet.IP.To4(); {
	case bitsLen == 32 && ip4 != nil:
		if ones > maxPrefixLen {
			return nil, fmt.Errorf("ipam: pod subnet %v is too small: use a prefix of /%d or shorter", subnet, maxPrefixLen)
		}
		mask := net.CIDRMask(ones, 32)
		p.subnet, p.v4 = &net.IPNet{IP: ip4.Mask(mask), Mask: mask}, true
		p.last = uint32(uint64(1)<<(32-ones) - 2) // broadcast - 1
	case bitsLen == 128 && ip4 == nil && len(subnet.IP) == net.IPv6len:
		if ones > maxPrefixLen6 {
			return nil, fmt.Errorf("ipam: pod subnet %v is too small: use a prefix of /%d or shorter", subnet, maxPrefixLen6)
		}
		mask := net.CIDRMask(ones, 128)
		p.subnet = &net.IPNet{IP: subnet.IP.Mask(mask), Mask: mask}
		span := uint64(IPv6PoolSpan)
		if host := 128 - ones; host < 16 {
			span = 1 << host
		}
		p.last = uint32(span - 1)
	default:
		return nil, fmt.Errorf("ipam: pod subnet %v is neither IPv4 nor IPv6: pass the node's pod subnet (e.g. 10.128.0.0/24 or fd00:10:128::/64)", subnet)
	}
	p.cursor = p.first - 1
	return p, nil
}

// family names the pool's address family in messages.
func (p *pool) family() string {
	if p.v4 {
		return "IPv4"
	}
	return "IPv6"
}

// ip returns the address at offset off.
func (p *pool) ip(off uint32) net.IP {
	if p.v4 {
		return u32ToIP(ipToU32(p.subnet.IP) + off)
	}
	ip := append(net.IP(nil), p.subnet.IP...)
	binary.BigEndian.PutUint32(ip[12:], binary.BigEndian.Uint32(ip[12:])|off)
	return ip
}

// offset returns ip's offset in the pool and whether ip is an address of the pool's
// subnet (of its family: an IPv4 address, also in its IPv4-mapped IPv6 form, is never one
// of an IPv6 pool). An address of the subnet beyond offset 2^32-1 (IPv6) has offset
// math.MaxUint32, which no pool allocates.
func (p *pool) offset(ip net.IP) (uint32, bool) {
	if p.v4 {
		ip4 := ip.To4()
		if ip4 == nil || !p.subnet.Contains(ip4) {
			return 0, false
		}
		return ipToU32(ip4) - ipToU32(p.subnet.IP), true
	}
	ip16 := ip.To16()
	if ip16 == nil || ip.To4() != nil || !p.subnet.Contains(ip16) {
		return 0, false
	}
	if !bytes.Equal(ip16[:12], p.subnet.IP[:12]) {
		return math.MaxUint32, true
	}
	return binary.BigEndian.Uint32(ip16[12:]) - binary.BigEndian.Uint32(p.subnet.IP[12:]), true
}

// allocatable reports whether off is an offset the pool hands out.
func (p *pool) allocatable(off uint32) bool {
	return off >= p.first && off <= p.last && !p.reserved[off]
}

// size is the number of addresses the pool hands out.
func (p *pool) size() int { return int(p.last-p.first+1) - len(p.reserved) }

// notAllocatable describes the addresses of the pool that are never handed out.
func (p *pool) notAllocatable() string {
	if p.v4 {
		return "the network, broadcast or a reserved address"
	}
	return fmt.Sprintf("the subnet-router anycast address, past the pool's first %d addresses, or a reserved address", IPv6PoolSpan)
}

// nextFree scans round-robin from the offset after the cursor. It returns false when
// every allocatable address is taken. Caller holds Store.mu.
func (p *pool) nextFree() (uint32, bool) {
	n := p.last - p.first + 1
	start := p.cursor + 1
	if start < p.first || start > p.last {
		start = p.first
	}
	for i := uint32(0); i < n; i++ {
		off := p.first + (start-p.first+i)%n
		if p.reserved[off] {
			continue
		}
		if _, used := p.byOff[off]; !used {
			return off, true
		}
	}
	return 0, false
}

// exhausted is the error of a pool with no free address, inUse being the Store's leases.
func (p *pool) exhausted(inUse int) error {
	if p.v4 {
		return fmt.Errorf("IP pool %v exhausted (%d in use): delete unused pods or give the node a larger pod subnet", p.subnet, inUse)
	}
	return fmt.Errorf("IP pool %v exhausted (%d in use; an IPv6 pool uses the first %d addresses of its subnet): delete unused pods", p.subnet, inUse, IPv6PoolSpan)
}

// Store is a persistent address pool of every pod subnet of a node (see the package
// comment, "Pools"). All methods are safe for concurrent use.
type Store struct {
	dir   string  // DIR/ipam
	pools []*pool // 1..maxPools, in the order of Open's subnets

	lockFD int // flock(2) descriptor on DIR/ipam/lock; -1 once closed

	mu      sync.Mutex
	idle    *sync.Cond // signalled (with mu) when the flusher stops
	closed  bool       // Close was called: no new changes
	byKey   map[key]*lease
	byOwner map[uint32]*lease // by Lease.OwnerID
	// ownerCursor is the last owner id handed out; the next one is the first free id after
	// it (round robin over 1..2^32-1), so a freed id is not soon given again.
	ownerCursor uint32

	// Group commit state, guarded by mu.
	pending  *batch // changes applied in memory, not yet being written
	flushing bool   // the flusher goroutine is running
	// releasing maps a key released by a batch not yet written to that batch, so a
	// repeated Release waits for it (pool.releasing does so for addresses).
	releasing map[key]*batch

	// writeHook, when set (tests only, before any use), runs at the start of
	// every write of the lease file; an error it returns fails that write.
	writeHook func() error
}

// newPools validates a node's list of pod subnets (Open's) and returns their empty pools.
func newPools(subnets []*net.IPNet) ([]*pool, error) {
	if len(subnets) == 0 || len(subnets) > maxPools {
		return nil, fmt.Errorf("ipam: %d pod subnets %v: pass the node's pod subnets, one or two (at most one IPv4 and one IPv6, e.g. [10.128.0.0/24 fd00:10:128::/64])", len(subnets), subnets)
	}
	pools := make([]*pool, 0, len(subnets))
	for _, sn := range subnets {
		p, err := newPool(sn)
		if err != nil {
			return nil, err
		}
		for _, o := range pools {
			if o.v4 == p.v4 {
				return nil, fmt.Errorf("ipam: pod subnets %v hold two %s subnets, %v and %v: pass at most one IPv4 and one IPv6 pod subnet", subnets, p.family(), o.subnet, p.subnet)
			}
		}
		pools = append(pools, p)
	}
	return pools, nil
}

// subnetsOf lists the subnets of pools, for messages and comparisons.
func subnetsOf(pools []*pool) []*net.IPNet {
	out := make([]*net.IPNet, len(pools))
	for i, p := range pools {
		out[i] = p.subnet
	}
	return out
}

// sameSubnets reports whether a and b are the same subnets in the same order.
func sameSubnets(a, b []*pool) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i].subnet.String() != b[i].subnet.String() {
			return false
		}
	}
	return true
}

// Open loads (or creates) the pools of subnets under dir (files go in dir/ipam): one pool
// per subnet, in the order given, which is the order of every Lease.IPs. subnets are the
// node's pod subnets: one or two, at most one IPv4 and one IPv6 (host bits are ignored).
// An IPv4 pool never allocates its network and broadcast address, an IPv6 pool its
// subnet-router anycast address nor any past its first IPv6PoolSpan addresses (see the
// package comment, "Pools"); neither allocates an address of reserved (typically each
// family's node gateway), which apply to the pool they fall in.
//
// Errors: no subnet, more than two, or two of one family (the error names the subnets
// and the fix); a subnet neither IPv4 nor IPv6, or longer than /30 (IPv4) or /126
// (IPv6); a reserved address in none of the subnets; the directory cannot be created;
// another process holds the pools (flock); leases.json is corrupt (the error names the
// file); leases.json was written for other pod subnets, or for another list of them
// (the error names the file, both lists and the fix); an on-disk lease sits on a
// reserved address.
func Open(dir string, subnets []*net.IPNet, reserved ...net.IP) (*Store, error) {
	pools, err := newPools(subnets)
	if err != nil {
		return nil, err
	}
	s := &Store{
		dir:     filepath.Join(dir, "ipam"),
		pools:   pools,
		lockFD:  -1,
		byKey:   map[key]*lease{},
		byOwner: map[uint32]*lease{},

		releasing: map[key]*batch{},
	}
	s.idle = sync.NewCond(&s.mu)
	for _, r := range reserved {
		i, off, ok := s.poolOf(r)
		if !ok {
			return nil, fmt.Errorf("ipam: reserved address %v is not in pod subnets %v: pass an address of a pod subnet (the node gateway)", r, subnetsOf(pools))
		}
		if p := pools[i]; off >= p.first && off <= p.last {
			p.reserved[off] = true
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

// poolOf returns the index of the pool whose subnet holds ip, and ip's offset in it.
func (s *Store) poolOf(ip net.IP) (int, uint32, bool) {
	for i, p := range s.pools {
		if off, ok := p.offset(ip); ok {
			return i, off, true
		}
	}
	return 0, 0, false
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
		return nil // every cursor is before its pool's first address
	}
	if err != nil {
		return fmt.Errorf("ipam: read lease file %s: %w", path, err)
	}
	st, err := decodeState(data)
	if err != nil {
		return fmt.Errorf("ipam: lease file %s is corrupt: %w; restore it from a backup, or, if no pod on this node holds an address, remove it", path, err)
	}
	if !sameSubnets(st.pools, s.pools) {
		if len(st.pools) == 1 && len(s.pools) == 1 {
			return fmt.Errorf("ipam: lease file %s is for pod subnet %v but this node's pod subnet is %v: fix the node's pod subnet, or drain the node and remove %s", path, st.pools[0].subnet, s.pools[0].subnet, path)
		}
		return fmt.Errorf("ipam: lease file %s is for pod subnets %v but this node's pod subnets are %v (the addresses of every pool of the file must be kept): fix the node's pod subnets, or drain the node and remove %s", path, subnetsOf(st.pools), subnetsOf(s.pools), path)
	}
	for _, l := range st.leases {
		for i, p := range s.pools {
			if p.reserved[l.off[i]] {
				return fmt.Errorf("ipam: lease file %s gives reserved address %s to container %s/%s: release that pod or change the reserved address", path, p.ip(l.off[i]), l.key.containerID, l.key.ifName)
			}
		}
		if l.ownerID == 0 {
			l.ownerID = s.legacyOwnerID(l) // written before owner ids were recorded: the id its flows carry
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
	for i, p := range s.pools {
		if c := st.pools[i].cursor; c >= p.first && c <= p.last {
			p.cursor = c
		}
	}
	return nil
}

// legacyOwnerID is the owner id the flows of l carried before ofsdn recorded owner ids:
// its IPv4 address as a big-endian uint32 when the first pool is IPv4 (a file of that
// time has one IPv4 pool); 0 (none) otherwise.
func (s *Store) legacyOwnerID(l *lease) uint32 {
	if p := s.pools[0]; p.v4 {
		return ipToU32(p.subnet.IP) + l.off[0]
	}
	return 0
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

// Subnets returns the pod subnets of the pools, in pool order (the order of every
// Lease.IPs), canonical (host bits zero); the slice and its subnets are copies.
func (s *Store) Subnets() []*net.IPNet {
	out := make([]*net.IPNet, len(s.pools))
	for i, p := range s.pools {
		out[i] = &net.IPNet{IP: append(net.IP(nil), p.subnet.IP...), Mask: append(net.IPMask(nil), p.subnet.Mask...)}
	}
	return out
}

// Sizes returns the number of allocatable addresses of each pool, in pool order: an
// IPv4 subnet's addresses minus network, broadcast and the reserved addresses; an IPv6
// subnet's first IPv6PoolSpan addresses (or all, if fewer) minus the subnet-router
// anycast address and the reserved addresses.
func (s *Store) Sizes() []int {
	out := make([]int, len(s.pools))
	for i, p := range s.pools {
		out[i] = p.size()
	}
	return out
}

// Capacity returns the number of leases the Store can hold: a lease takes one address of
// every pool, so the smallest of Sizes.
func (s *Store) Capacity() int {
	c := math.MaxInt
	for _, p := range s.pools {
		c = min(c, p.size())
	}
	return c
}

// InUse returns the number of leases (each holding one address of every pool).
func (s *Store) InUse() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.byKey)
}

// Allocate returns the addresses leased to (containerID, ifName), one per pool in pool
// order, allocating them if there are none. A second call with the same key returns the
// same addresses (idempotent retry of a CNI ADD); owner is recorded only on the first
// call. New addresses are picked round-robin after the last one each pool handed out, so
// an address freed by a deleted pod is not reused at once.
//
// The lease is durable on disk before Allocate returns. Errors: empty containerID or
// ifName; a pool exhausted ("IP pool 10.128.0.0/24 exhausted (253 in use)", naming the
// pool; no address of any pool is allocated); the lease file cannot be written (nothing
// is allocated).
func (s *Store) Allocate(containerID, ifName, owner string) ([]net.IP, error) {
	return s.AllocateIn(containerID, ifName, owner, "")
}

// AllocateIn is Allocate recording network, the CNI network name (netconf "name") the
// attachment belongs to, in the lease (Lease.Network), so that operations on many
// attachments (CNI GC) can tell the networks apart. network is recorded only on the
// first call, like owner; "" records none. Errors: those of Allocate.
func (s *Store) AllocateIn(containerID, ifName, owner, network string) ([]net.IP, error) {
	ips, durable, err := s.Reserve(containerID, ifName, owner, network)
	if err != nil {
		return nil, err
	}
	if err := durable(); err != nil {
		return nil, err
	}
	return ips, nil
}

// Reserve is AllocateIn without the wait for the disk: it returns the addresses leased to
// (containerID, ifName) at once (one per pool, in pool order), reserved in memory (no
// other caller is given them, Get and List show them), together with durable, which
// blocks until the write holding the lease is on disk and returns that write's error. The
// write runs meanwhile (in the group-commit flusher), so the caller can prepare what
// needs the addresses (the pod's veth) while the lease is being made durable
// (bench/RESULTS.md, "Issue 14: the lease write beside the veth").
//
// The caller must not let the addresses be seen outside the node (attach the pod's port,
// answer the CNI runtime) before durable returned nil: a crash before that could hand an
// address out twice. When durable returns an error the lease has been rolled back (as by
// AllocateIn's failure) and its addresses may already be another caller's: the caller
// removes what it made with them; Release of the key is then a no-op. durable may be
// called more than once and returns the same result. A key that already holds a durable
// lease gets its addresses and a durable that returns nil. Errors of Reserve itself:
// those of Allocate, except the write's, which durable returns.
func (s *Store) Reserve(containerID, ifName, owner, network string) (ips []net.IP, durable func() error, err error) {
	return s.ReserveLease(Lease{ContainerID: containerID, IfName: ifName, Owner: owner, Network: network})
}

// ReserveLease is Reserve for want.ContainerID and want.IfName, recording want's Owner,
// Network and attachment record (Netns, HostVeth, OFPort) in the new lease; want.IPs and
// want.Allocated are ignored. A key that already holds a lease gets its addresses, and
// the lease keeps what it recorded. Errors: those of Reserve, and an OFPort outside
// 0..MaxOFPort.
func (s *Store) ReserveLease(want Lease) (ips []net.IP, durable func() error, err error) {
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
		ips := s.ips(l)
		s.mu.Unlock()
		if b == nil {
			return ips, func() error { return nil }, nil
		}
		// Allocated by a call whose write is still running.
		return ips, b.wait, nil
	}
	// Every pool's address is found before any is taken: an exhausted pool leaves the
	// others as they were (no lease with one family's address only).
	var off offsets
	for i, p := range s.pools {
		u, ok := p.nextFree()
		if !ok {
			err := p.exhausted(len(s.byKey))
			s.mu.Unlock()
			return nil, nil, err
		}
		off[i] = u
	}
	b := s.join()
	l := &lease{off: off, key: k, ownerID: s.nextOwnerID(), owner: owner, network: network, rec: recordOf(want),
		allocated: time.Now().UTC().Truncate(time.Second), pending: b}
	s.put(l)
	b.changes = append(b.changes, change{l: l, added: true, prevCursors: s.cursors()})
	for i, p := range s.pools {
		p.cursor = off[i]
	}
	b.waiters++
	ips = s.ips(l)
	s.mu.Unlock()
	return ips, b.wait, nil
}

// cursors returns every pool's cursor. Caller holds s.mu.
func (s *Store) cursors() offsets {
	var c offsets
	for i, p := range s.pools {
		c[i] = p.cursor
	}
	return c
}

// ips returns l's addresses in pool order.
func (s *Store) ips(l *lease) []net.IP {
	out := make([]net.IP, len(s.pools))
	for i, p := range s.pools {
		out[i] = p.ip(l.off[i])
	}
	return out
}

// Restore records the lease of (l.ContainerID, l.IfName) with l.IPs, l.Owner and
// l.Network, durably, as the recovery of a lease the store lost (a lease file deleted or
// restored from an old backup) from another record of the attachment: the node re-creates
// the lease of a pod whose OVS port still carries its address, so that the address is
// never handed to a second pod. l.IPs holds at least one address and at most one per pool,
// in any order; a pool l.IPs has no address of is given a free one (round robin, moving
// that pool's cursor), so the restored lease holds one address of every pool. The cursor
// of a pool whose address l.IPs names is not moved. Restoring a lease the key already
// holds at each of l.IPs is a no-op.
//
// Errors: empty key; no address; an address that is not an allocatable address of a pool
// (in none of the subnets, or network, broadcast, subnet-router anycast, past an IPv6
// pool's IPv6PoolSpan or reserved); two addresses of one pool; an address leased to
// another attachment; the key holds other addresses; a pool without a given address is
// exhausted; the lease file cannot be written. On every error nothing is recorded.
func (s *Store) Restore(l Lease) error {
	if l.ContainerID == "" || l.IfName == "" {
		return fmt.Errorf("ipam: restore needs a container ID and an interface name (got %q, %q)", l.ContainerID, l.IfName)
	}
	if len(l.IPs) == 0 {
		return fmt.Errorf("ipam: cannot restore the lease of container %s/%s: no address given", l.ContainerID, l.IfName)
	}
	var (
		off   offsets
		given [maxPools]bool
	)
	for _, ip := range l.IPs {
		i, u, ok := s.poolOf(ip)
		if !ok {
			return fmt.Errorf("ipam: cannot restore lease %v of container %s/%s: not an address of pod subnets %v", ip, l.ContainerID, l.IfName, subnetsOf(s.pools))
		}
		p := s.pools[i]
		if !p.allocatable(u) {
			return fmt.Errorf("ipam: cannot restore lease %v of container %s/%s: %s of pod subnet %v", ip, l.ContainerID, l.IfName, p.notAllocatable(), p.subnet)
		}
		if given[i] {
			return fmt.Errorf("ipam: cannot restore lease %v of container %s/%s: two addresses of pod subnet %v, %v and %v", l.IPs, l.ContainerID, l.IfName, p.subnet, p.ip(off[i]), ip)
		}
		off[i], given[i] = u, true
	}
	k := key{l.ContainerID, l.IfName}
	s.mu.Lock()
	if err := s.usable(); err != nil {
		s.mu.Unlock()
		return err
	}
	if old, ok := s.byKey[k]; ok {
		same := true
		for i := range s.pools {
			same = same && (!given[i] || old.off[i] == off[i])
		}
		held := s.ips(old)
		s.mu.Unlock()
		if same {
			return nil
		}
		return fmt.Errorf("ipam: cannot restore lease %v of container %s/%s: it holds %v; DEL the attachment first", l.IPs, l.ContainerID, l.IfName, held)
	}
	for i, p := range s.pools {
		if !given[i] {
			continue
		}
		if other, ok := p.byOff[off[i]]; ok {
			s.mu.Unlock()
			return fmt.Errorf("ipam: cannot restore lease %v of container %s/%s: the address is leased to container %s/%s", p.ip(off[i]), l.ContainerID, l.IfName, other.key.containerID, other.key.ifName)
		}
	}
	for i, p := range s.pools {
		if given[i] {
			continue
		}
		u, ok := p.nextFree()
		if !ok {
			err := p.exhausted(len(s.byKey))
			s.mu.Unlock()
			return fmt.Errorf("ipam: cannot restore the lease of container %s/%s: %w", l.ContainerID, l.IfName, err)
		}
		off[i] = u
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
	nl := &lease{off: off, key: k, ownerID: id, owner: l.Owner, network: l.Network, rec: recordOf(l), allocated: allocated, pending: b}
	s.put(nl)
	b.changes = append(b.changes, change{l: nl, added: true, prevCursors: s.cursors()})
	for i, p := range s.pools {
		if !given[i] {
			p.cursor = off[i]
		}
	}
	b.waiters++
	s.mu.Unlock()
	return b.wait()
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

// put indexes l by every pool's address, key and owner id, replacing what held them.
// Caller holds s.mu.
func (s *Store) put(l *lease) {
	for i, p := range s.pools {
		p.byOff[l.off[i]] = l
	}
	s.byKey[l.key], s.byOwner[l.ownerID] = l, l
}

// remove drops l from the indexes. Caller holds s.mu.
func (s *Store) remove(l *lease) {
	for i, p := range s.pools {
		delete(p.byOff, l.off[i])
	}
	delete(s.byKey, l.key)
	delete(s.byOwner, l.ownerID)
}

// Release frees the addresses (of every pool) of (containerID, ifName). Releasing a key
// that holds no lease is not an error (CNI DEL is idempotent, CNI spec 1.1 section
// "DEL"). Errors: the lease file cannot be written (the lease stays, with every address).
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

// ReleaseIP frees the lease holding ip, an address of any pool, whoever holds it: with
// ip, the lease's addresses of the other pools are freed too. An address without a lease
// (or outside every pool) is not an error. Errors: the lease file cannot be written (the
// lease stays).
func (s *Store) ReleaseIP(ip net.IP) error {
	i, u, ok := s.poolOf(ip)
	if !ok {
		return nil
	}
	p := s.pools[i]
	s.mu.Lock()
	if err := s.usable(); err != nil {
		s.mu.Unlock()
		return err
	}
	l, ok := p.byOff[u]
	return s.finishRelease(l, ok, p.releasing[u])
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
	s.releasing[l.key] = b
	for i, p := range s.pools {
		p.releasing[l.off[i]] = b
	}
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
	return s.export(l), true
}

// List returns every lease, ordered by the address of the first pool.
func (s *Store) List() []Lease {
	s.mu.Lock()
	ls := make([]*lease, 0, len(s.byKey))
	for _, l := range s.byKey {
		ls = append(ls, l)
	}
	sort.Slice(ls, func(i, j int) bool { return ls[i].off[0] < ls[j].off[0] })
	out := make([]Lease, len(ls))
	for i, l := range ls {
		out[i] = s.export(l)
	}
	s.mu.Unlock()
	return out
}

// export returns l as a Lease. Caller holds s.mu (the pools' fields it reads never change).
func (s *Store) export(l *lease) Lease {
	return Lease{IPs: s.ips(l), ContainerID: l.key.containerID, IfName: l.key.ifName, Owner: l.owner, Network: l.network,
		Netns: l.rec.netns, HostVeth: l.rec.hostVeth, OFPort: l.rec.ofport, OwnerID: l.ownerID, Allocated: l.allocated}
}

func recordOf(l Lease) record { return record{netns: l.Netns, hostVeth: l.HostVeth, ofport: l.OFPort} }

// Record replaces the attachment record (Netns, HostVeth, OFPort) of existing leases with
// those of updates, each naming its lease by ContainerID, IfName and IPs (one or more of
// the lease's addresses, at most one per pool; a Lease from Get or List names all); the
// other fields of updates are ignored. All of them are written in one durable write (one
// batch of the group commit), which Record waits for. The node uses it to give leases
// from an older ofsdn (no record) the record of their attachment, and to follow an
// ofport that changed. An update equal to what the lease records is skipped; with
// nothing to change Record writes nothing. Errors: a key without a lease, no address, or
// an address the key's lease does not hold (nothing is changed); an OFPort outside
// 0..MaxOFPort; the lease file cannot be written (every change of the call is rolled
// back).
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
		if !ok || !s.holds(old, u.IPs) {
			s.mu.Unlock()
			return fmt.Errorf("ipam: record of container %s/%s at %v: no such lease; ADD the attachment again", u.ContainerID, u.IfName, u.IPs)
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
		nl := &lease{off: u.old.off, key: u.old.key, ownerID: u.old.ownerID, owner: u.old.owner, network: u.old.network, rec: u.rec,
			allocated: u.old.allocated, pending: b}
		s.put(nl)
		b.changes = append(b.changes, change{l: nl, prev: u.old})
	}
	b.waiters++
	s.mu.Unlock()
	return b.wait()
}

// holds reports whether ips is a non-empty list of l's addresses, at most one per pool.
func (s *Store) holds(l *lease, ips []net.IP) bool {
	var seen [maxPools]bool
	for _, ip := range ips {
		i, u, ok := s.poolOf(ip)
		if !ok || seen[i] || l.off[i] != u {
			return false
		}
		seen[i] = true
	}
	return len(ips) > 0
}

func ipToU32(ip4 net.IP) uint32 { return binary.BigEndian.Uint32(ip4) }

func u32ToIP(u uint32) net.IP {
	ip := make(net.IP, 4)
	binary.BigEndian.PutUint32(ip, u)
	return ip
}
