package ipam

import (
	"encoding/json"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"slices"
	"time"
)

// formatVersion is the version of the leases.json layout of a Store with one IPv4 pool,
// the layout of every file ofsdn wrote before it had pools. formatVersionPools is the
// version of any other Store's file (a dual-stack or an IPv6-only node): the layout with
// the keys of the further pools ("subnets", "lastAllocatedIPs", per lease "moreIPs").
// An older ofsdn refuses a version 2 file (a downgrade of a dual-stack node) instead of
// reading its first pool only and dropping the others' addresses. Open refuses other
// versions rather than guess.
const (
	formatVersion      = 1
	formatVersionPools = 2
)

// fileState is the JSON layout of DIR/ipam/leases.json (written compact, leases in
// address order of the first pool; shown indented here). A Store with one IPv4 pool
// writes version 1:
//
//	{
//	  "version": 1,
//	  "subnet": "10.128.0.0/24",
//	  "lastAllocated": "10.128.0.7",
//	  "leases": {
//	    "10.128.0.7": {"containerID": "3f1c…", "ifName": "eth0",
//	                   "owner": "default/web-0", "network": "ofsdn",
//	                   "netns": "/var/run/netns/cni-1234", "hostVeth": "ofs4be1c2d3e4f5",
//	                   "ofport": 32775, "ownerID": 7, "allocated": "2025-01-02T03:04:05Z"}
//
// "network" (the CNI network name the attachment was added with) is absent in files
// written before ofsdn recorded it; such a lease belongs to every network. "netns",
// "hostVeth" and "ofport" (the attachment's record, Lease.Netns/HostVeth/OFPort: what the
// node needs to re-create the attachment's OVS port when the OVS database is lost) are
// absent in files written before ofsdn recorded them, and each is optional. So is
// "ownerID" (Lease.OwnerID, the attachment's flow owner id): a lease without it has the id
// its flows carried before ofsdn recorded owner ids, its IPv4 address as a big-endian
// uint32, and two leases with one id (a hand-edited file) get a new one for the second.
// Readers that do not know these keys (an older ofsdn) ignore them, so the layout's
// version stays 1.
//
//	  }
//	}
//
// Any other Store (two pools, or one IPv6 pool) writes version 2, which adds the keys
// of every pool, in pool order, and keeps "subnet", "lastAllocated" and the leases' keys
// as the first pool's:
//
//	{
//	  "version": 2,
//	  "subnet": "10.128.0.0/24",
//	  "subnets": ["10.128.0.0/24", "fd00:10:128::/64"],
//	  "lastAllocated": "10.128.0.7",
//	  "lastAllocatedIPs": ["10.128.0.7", "fd00:10:128::7"],
//	  "leases": {
//	    "10.128.0.7": {"containerID": "3f1c…", "ifName": "eth0", "moreIPs": ["fd00:10:128::7"],
//	                   "ownerID": 7, "allocated": "2025-01-02T03:04:05Z"}
//	  }
//	}
//
// "subnets" lists every pool's subnet (the first equals "subnet"); "lastAllocatedIPs"
// every pool's cursor ("" for a pool that has handed out nothing; the first equals
// "lastAllocated"); "moreIPs" a lease's addresses of the pools after the first. A lease
// without "ownerID" in a version 2 file whose first pool is IPv6 gets a new id.
type fileState struct {
	Version          int                  `json:"version"`
	Subnet           string               `json:"subnet"`
	Subnets          []string             `json:"subnets,omitempty"`
	LastAllocated    string               `json:"lastAllocated,omitempty"`
	LastAllocatedIPs []string             `json:"lastAllocatedIPs,omitempty"`
	Leases           map[string]fileLease `json:"leases"`
}

type fileLease struct {
	ContainerID string    `json:"containerID"`
	IfName      string    `json:"ifName"`
	MoreIPs     []string  `json:"moreIPs,omitempty"`
	Owner       string    `json:"owner,omitempty"`
	Network     string    `json:"network,omitempty"`
	Netns       string    `json:"netns,omitempty"`
	HostVeth    string    `json:"hostVeth,omitempty"`
	OFPort      int       `json:"ofport,omitempty"`
	OwnerID     uint32    `json:"ownerID,omitempty"`
	Allocated   time.Time `json:"allocated"`
}

// decoded is a validated fileState.
type decoded struct {
	pools  []*pool // the file's pools, with their cursors (before the first address when absent), no leases
	leases []*lease
}

// singleV4 reports whether pools is one IPv4 pool: the Store that writes version 1.
func singleV4(pools []*pool) bool { return len(pools) == 1 && pools[0].v4 }

// parseSubnet parses a subnet of leases.json, which must be canonical, into its pool.
func parseSubnet(str string) (*pool, error) {
	_, n, err := net.ParseCIDR(str)
	if err != nil {
		return nil, fmt.Errorf("subnet %q: %w", str, err)
	}
	if n.String() != str {
		return nil, fmt.Errorf("subnet %q is not in canonical form %q", str, n.String())
	}
	return newPool(n)
}

// decodeState parses and validates the content of leases.json. It never
// panics on any input (see FuzzDecodeStore). Errors name the offending field.
func decodeState(data []byte) (*decoded, error) {
	var fsx fileState
	if err := json.Unmarshal(data, &fsx); err != nil {
		return nil, fmt.Errorf("invalid JSON: %w", err)
	}
	d := &decoded{}
	switch fsx.Version {
	case formatVersion:
		if fsx.Subnets != nil || fsx.LastAllocatedIPs != nil {
			return nil, fmt.Errorf("version %d has no subnets or lastAllocatedIPs (those of version %d)", formatVersion, formatVersionPools)
		}
		p, err := parseSubnet(fsx.Subnet)
		if err != nil {
			return nil, err
		}
		if !p.v4 {
			return nil, fmt.Errorf("subnet %s is not IPv4: a version %d file has one IPv4 pool", fsx.Subnet, formatVersion)
		}
		d.pools = []*pool{p}
		if fsx.LastAllocated != "" {
			fsx.LastAllocatedIPs = []string{fsx.LastAllocated}
		}
	case formatVersionPools:
		if len(fsx.Subnets) == 0 || fsx.Subnets[0] != fsx.Subnet {
			return nil, fmt.Errorf("subnets %q do not start with subnet %q", fsx.Subnets, fsx.Subnet)
		}
		subnets := make([]*net.IPNet, len(fsx.Subnets))
		for i, str := range fsx.Subnets {
			p, err := parseSubnet(str)
			if err != nil {
				return nil, fmt.Errorf("subnets: %w", err)
			}
			subnets[i] = p.subnet
		}
		pools, err := newPools(subnets)
		if err != nil {
			return nil, fmt.Errorf("subnets: %w", err)
		}
		if singleV4(pools) {
			return nil, fmt.Errorf("version %d with the one IPv4 subnet %s: that is a version %d file", formatVersionPools, fsx.Subnet, formatVersion)
		}
		d.pools = pools
		if fsx.LastAllocatedIPs != nil && len(fsx.LastAllocatedIPs) != len(pools) {
			return nil, fmt.Errorf("lastAllocatedIPs %q has %d entries for %d subnets", fsx.LastAllocatedIPs, len(fsx.LastAllocatedIPs), len(pools))
		}
		first := ""
		if len(fsx.LastAllocatedIPs) > 0 {
			first = fsx.LastAllocatedIPs[0]
		}
		if first != fsx.LastAllocated {
			return nil, fmt.Errorf("lastAllocated %q is not the first of lastAllocatedIPs %q", fsx.LastAllocated, fsx.LastAllocatedIPs)
		}
	default:
		return nil, fmt.Errorf("version %d is not supported (want %d or %d)", fsx.Version, formatVersion, formatVersionPools)
	}
	for i, str := range fsx.LastAllocatedIPs {
		if str == "" {
			continue
		}
		u, err := parsePoolIP(str, d.pools[i])
		if err != nil {
			return nil, fmt.Errorf("lastAllocated: %w", err)
		}
		d.pools[i].cursor = u
	}
	seen := make(map[key]string, len(fsx.Leases))
	held := make([]map[uint32]string, len(d.pools)) // the further pools' addresses: offset → lease
	for i := 1; i < len(d.pools); i++ {
		held[i] = make(map[uint32]string, len(fsx.Leases))
	}
	for ipStr, fl := range fsx.Leases {
		var off offsets
		u, err := parsePoolIP(ipStr, d.pools[0])
		if err != nil {
			return nil, fmt.Errorf("lease %q: %w", ipStr, err)
		}
		off[0] = u
		if len(fl.MoreIPs) != len(d.pools)-1 {
			return nil, fmt.Errorf("lease %s: %d moreIPs %q for %d further subnets", ipStr, len(fl.MoreIPs), fl.MoreIPs, len(d.pools)-1)
		}
		for j, more := range fl.MoreIPs {
			i := j + 1
			u, err := parsePoolIP(more, d.pools[i])
			if err != nil {
				return nil, fmt.Errorf("lease %s: moreIPs: %w", ipStr, err)
			}
			if other, dup := held[i][u]; dup {
				return nil, fmt.Errorf("leases %s and %s both hold %s", other, ipStr, more)
			}
			held[i][u], off[i] = ipStr, u
		}
		if fl.ContainerID == "" || fl.IfName == "" {
			return nil, fmt.Errorf("lease %s: containerID and ifName must not be empty", ipStr)
		}
		k := key{fl.ContainerID, fl.IfName}
		if other, dup := seen[k]; dup {
			return nil, fmt.Errorf("container %s interface %s holds two leases, %s and %s", k.containerID, k.ifName, other, ipStr)
		}
		if fl.OFPort < 0 || fl.OFPort > MaxOFPort {
			return nil, fmt.Errorf("lease %s: ofport %d is outside 0..%d", ipStr, fl.OFPort, MaxOFPort)
		}
		seen[k] = ipStr
		d.leases = append(d.leases, &lease{off: off, key: k, owner: fl.Owner, network: fl.Network,
			rec: record{netns: fl.Netns, hostVeth: fl.HostVeth, ofport: fl.OFPort}, ownerID: fl.OwnerID, allocated: fl.Allocated})
	}
	return d, nil
}

// parsePoolIP parses a canonical address (dotted quad for IPv4, RFC 5952 for IPv6) of
// pool p's family at an allocatable offset (reserved addresses aside: the file does not
// know them) and returns the offset.
func parsePoolIP(s string, p *pool) (uint32, error) {
	ip := net.ParseIP(s)
	if ip == nil || ip.String() != s {
		if p.v4 {
			return 0, fmt.Errorf("%q is not a dotted-quad IPv4 address", s)
		}
		return 0, fmt.Errorf("%q is not an IPv6 address in canonical form", s)
	}
	u, ok := p.offset(ip)
	if !ok || u < p.first || u > p.last {
		return 0, fmt.Errorf("%s is outside the allocatable range %s-%s", s, p.ip(p.first), p.ip(p.last))
	}
	return u, nil
}

// encodeState renders the in-memory state as leases.json (the fileState layout, compact,
// leases in address order of the first pool). Each lease's entry is encoded once, when
// first written, and kept (a lease does not change while it lives), so a write of N
// leases costs copying N entries rather than encoding them: at 500 leases the re-encoding
// with MarshalIndent on every ADD and DEL was a fifth of the daemon's CPU
// (bench/RESULTS.md). Caller holds s.mu.
func (s *Store) encodeState() ([]byte, error) {
	h := struct {
		Version          int      `json:"version"`
		Subnet           string   `json:"subnet"`
		Subnets          []string `json:"subnets,omitempty"`
		LastAllocated    string   `json:"lastAllocated,omitempty"`
		LastAllocatedIPs []string `json:"lastAllocatedIPs,omitempty"`
	}{Version: formatVersion, Subnet: s.pools[0].subnet.String(), LastAllocated: s.pools[0].lastAllocated()}
	if !singleV4(s.pools) {
		h.Version = formatVersionPools
		for _, p := range s.pools {
			h.Subnets = append(h.Subnets, p.subnet.String())
			h.LastAllocatedIPs = append(h.LastAllocatedIPs, p.lastAllocated())
		}
	}
	head, err := json.Marshal(h)
	if err != nil {
		return nil, err
	}
	first := s.pools[0].byOff
	offs := make([]uint32, 0, len(first))
	size := len(head) + 16
	for off, l := range first {
		if l.entry == nil {
			if l.entry, err = s.encode(l); err != nil {
				return nil, err
			}
		}
		offs = append(offs, off)
		size += len(l.entry) + 1
	}
	slices.Sort(offs)
	out := make([]byte, 0, size)
	out = append(out, head[:len(head)-1]...) // without its closing brace
	out = append(out, `,"leases":{`...)
	for i, off := range offs {
		if i > 0 {
			out = append(out, ',')
		}
		out = append(out, first[off].entry...)
	}
	return append(out, "}}\n"...), nil
}

// lastAllocated is the pool's cursor as leases.json writes it ("" when unset).
func (p *pool) lastAllocated() string {
	if p.cursor >= p.first && p.cursor <= p.last {
		return p.ip(p.cursor).String()
	}
	return ""
}

// encode renders l as its leases.json entry: "IP":{fileLease}, IP its first pool's
// address.
func (s *Store) encode(l *lease) ([]byte, error) {
	k, err := json.Marshal(s.pools[0].ip(l.off[0]).String())
	if err != nil {
		return nil, err
	}
	ownerID := l.ownerID
	if ownerID == s.legacyOwnerID(l) {
		ownerID = 0 // what a reader takes for an absent ownerID: the entry reads as before
	}
	var more []string
	for i := 1; i < len(s.pools); i++ {
		more = append(more, s.pools[i].ip(l.off[i]).String())
	}
	v, err := json.Marshal(fileLease{ContainerID: l.key.containerID, IfName: l.key.ifName, MoreIPs: more, Owner: l.owner, Network: l.network,
		Netns: l.rec.netns, HostVeth: l.rec.hostVeth, OFPort: l.rec.ofport, OwnerID: ownerID, Allocated: l.allocated})
	if err != nil {
		return nil, err
	}
	return append(append(k, ':'), v...), nil
}

// join returns the pending batch, creating it and starting the flusher
// goroutine if needed. Caller holds s.mu and must add its change to the
// batch before releasing s.mu.
func (s *Store) join() *batch {
	if s.pending == nil {
		s.pending = &batch{done: make(chan struct{})}
	}
	if !s.flushing {
		s.flushing = true
		go s.flush()
	}
	return s.pending
}

// flush is the group-commit writer: while a batch is pending it takes it,
// snapshots the state under s.mu (so the snapshot holds exactly the changes
// of this batch and of every batch before it), writes it without s.mu, and
// then completes the batch. On a write error it rolls back, newest first,
// the batch queued meanwhile and then this batch, and fails both: the queued
// batch's changes were applied on top of this one's (for example an address
// this batch released, allocated again), so it cannot be kept alone.
func (s *Store) flush() {
	s.mu.Lock()
	for s.pending != nil {
		b := s.pending
		s.pending = nil
		data, err := s.encodeState()
		s.mu.Unlock()
		if err == nil {
			err = s.write(data)
		}
		s.mu.Lock()
		if err == nil {
			s.finish(b, nil)
			continue
		}
		if next := s.pending; next != nil {
			s.pending = nil
			s.rollback(next)
			s.finish(next, err)
		}
		s.rollback(b)
		s.finish(b, err)
	}
	s.flushing = false
	s.idle.Broadcast()
	s.mu.Unlock()
}

// rollback undoes the in-memory changes of b, newest first. Caller holds s.mu.
func (s *Store) rollback(b *batch) {
	for i := len(b.changes) - 1; i >= 0; i-- {
		c := b.changes[i]
		if c.prev != nil { // a record update: the lease before it comes back
			s.put(c.prev)
			continue
		}
		if c.added {
			s.remove(c.l)
			for i, p := range s.pools {
				p.cursor = c.prevCursors[i]
			}
		} else {
			s.put(c.l)
		}
	}
}

// finish marks b's leases durable (err == nil), drops its entries from the
// releasing maps and wakes its callers. Caller holds s.mu.
func (s *Store) finish(b *batch, err error) {
	for _, c := range b.changes {
		if c.added || c.prev != nil {
			if c.l.pending == b {
				c.l.pending = nil
			}
			continue
		}
		if s.releasing[c.l.key] == b {
			delete(s.releasing, c.l.key)
		}
		for i, p := range s.pools {
			if p.releasing[c.l.off[i]] == b {
				delete(p.releasing, c.l.off[i])
			}
		}
	}
	b.err = err
	close(b.done)
}

// write stores data (encodeState) durably: temp file in the same directory, fsync, rename
// over leases.json, fsync of the directory (so the rename itself survives a
// power loss). It does not touch the Store's in-memory state and runs without
// s.mu, from the flusher only. On error the old leases.json is untouched and
// no temp file is left behind.
func (s *Store) write(data []byte) (err error) {
	if s.writeHook != nil {
		if err := s.writeHook(); err != nil {
			return fmt.Errorf("ipam: write leases in %s: %w", s.dir, err)
		}
	}
	path := filepath.Join(s.dir, stateFile)
	f, err := os.CreateTemp(s.dir, tmpPrefix+"*")
	if err != nil {
		return fmt.Errorf("ipam: create temp file in %s: %w", s.dir, err)
	}
	tmp := f.Name()
	defer func() {
		if err != nil {
			f.Close()
			os.Remove(tmp)
		}
	}()
	if _, err = f.Write(data); err != nil {
		return fmt.Errorf("ipam: write %s: %w", tmp, err)
	}
	if err = f.Sync(); err != nil {
		return fmt.Errorf("ipam: fsync %s: %w", tmp, err)
	}
	if err = f.Close(); err != nil {
		return fmt.Errorf("ipam: close %s: %w", tmp, err)
	}
	if err = os.Rename(tmp, path); err != nil {
		return fmt.Errorf("ipam: rename %s to %s: %w", tmp, path, err)
	}
	// The rename is done and the new state is what any reader (and a restart
	// without power loss) sees, so memory must follow it: a failed directory
	// fsync is logged, not returned, because rolling memory back would make it
	// disagree with the file.
	if derr := syncDir(s.dir); derr != nil {
		slog.Warn("ipam: fsync of lease directory failed; the last change may not survive a power loss", "dir", s.dir, "err", derr)
	}
	return nil
}

// syncDir fsyncs a directory so that a rename in it is durable.
func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}
