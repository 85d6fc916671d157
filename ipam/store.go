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

// formatVersion is the version of the leases.json layout written by this
// package. Open refuses other versions rather than guess.
const formatVersion = 1

// fileState is the JSON layout of DIR/ipam/leases.json (written compact, leases in
// address order; shown indented here):
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
type fileState struct {
	Version       int                  `json:"version"`
	Subnet        string               `json:"subnet"`
	LastAllocated string               `json:"lastAllocated,omitempty"`
	Leases        map[string]fileLease `json:"leases"`
}

type fileLease struct {
	ContainerID string    `json:"containerID"`
	IfName      string    `json:"ifName"`
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
	subnet *net.IPNet
	cursor uint32 // 0 when lastAllocated is absent
	leases []*lease
}

// decodeState parses and validates the content of leases.json. It never
// panics on any input (see FuzzDecodeStore). Errors name the offending field.
func decodeState(data []byte) (*decoded, error) {
	var fsx fileState
	if err := json.Unmarshal(data, &fsx); err != nil {
		return nil, fmt.Errorf("invalid JSON: %w", err)
	}
	if fsx.Version != formatVersion {
		return nil, fmt.Errorf("version %d is not supported (want %d)", fsx.Version, formatVersion)
	}
	_, n, err := net.ParseCIDR(fsx.Subnet)
	if err != nil {
		return nil, fmt.Errorf("subnet %q: %w", fsx.Subnet, err)
	}
	if n.String() != fsx.Subnet {
		return nil, fmt.Errorf("subnet %q is not in canonical form %q", fsx.Subnet, n.String())
	}
	sn, first, last, err := canonicalSubnet(n)
	if err != nil {
		return nil, err
	}
	d := &decoded{subnet: sn}
	if fsx.LastAllocated != "" {
		u, err := parsePoolIP(fsx.LastAllocated, first, last)
		if err != nil {
			return nil, fmt.Errorf("lastAllocated: %w", err)
		}
		d.cursor = u
	}
	seen := make(map[key]string, len(fsx.Leases))
	for ipStr, fl := range fsx.Leases {
		u, err := parsePoolIP(ipStr, first, last)
		if err != nil {
			return nil, fmt.Errorf("lease %q: %w", ipStr, err)
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
		d.leases = append(d.leases, &lease{ip: u, key: k, owner: fl.Owner, network: fl.Network,
			rec: record{netns: fl.Netns, hostVeth: fl.HostVeth, ofport: fl.OFPort}, ownerID: fl.OwnerID, allocated: fl.Allocated})
	}
	return d, nil
}

// parsePoolIP parses a canonical dotted-quad IPv4 address inside [first,last].
func parsePoolIP(s string, first, last uint32) (uint32, error) {
	ip := net.ParseIP(s).To4()
	if ip == nil || ip.String() != s {
		return 0, fmt.Errorf("%q is not a dotted-quad IPv4 address", s)
	}
	u := ipToU32(ip)
	if u < first || u > last {
		return 0, fmt.Errorf("%s is outside the allocatable range %s-%s", s, u32ToIP(first), u32ToIP(last))
	}
	return u, nil
}

// encodeState renders the in-memory state as leases.json (the fileState layout, compact,
// leases in address order). Each lease's entry is encoded once, when first written, and
// kept (a lease does not change while it lives), so a write of N leases costs copying N
// entries rather than encoding them: at 500 leases the re-encoding with MarshalIndent on
// every ADD and DEL was a fifth of the daemon's CPU (bench/RESULTS.md). Caller holds s.mu.
func (s *Store) encodeState() ([]byte, error) {
	head, err := json.Marshal(struct {
		Version       int    `json:"version"`
		Subnet        string `json:"subnet"`
		LastAllocated string `json:"lastAllocated,omitempty"`
	}{Version: formatVersion, Subnet: s.subnet.String(), LastAllocated: s.lastAllocated()})
	if err != nil {
		return nil, err
	}
	ips := make([]uint32, 0, len(s.byIP))
	size := len(head) + 16
	for ip, l := range s.byIP {
		if l.entry == nil {
			if l.entry, err = l.encode(); err != nil {
				return nil, err
			}
		}
		ips = append(ips, ip)
		size += len(l.entry) + 1
	}
	slices.Sort(ips)
	out := make([]byte, 0, size)
	out = append(out, head[:len(head)-1]...) // without its closing brace
	out = append(out, `,"leases":{`...)
	for i, ip := range ips {
		if i > 0 {
			out = append(out, ',')
		}
		out = append(out, s.byIP[ip].entry...)
	}
	return append(out, "}}\n"...), nil
}

// lastAllocated is the cursor as leases.json writes it ("" when unset).
func (s *Store) lastAllocated() string {
	if s.cursor >= s.first && s.cursor <= s.last {
		return u32ToIP(s.cursor).String()
	}
	return ""
}

// encode renders l as its leases.json entry: "IP":{fileLease}.
func (l *lease) encode() ([]byte, error) {
	k, err := json.Marshal(u32ToIP(l.ip).String())
	if err != nil {
		return nil, err
	}
	ownerID := l.ownerID
	if ownerID == l.ip {
		ownerID = 0 // what a reader takes for an absent ownerID: the entry reads as before
	}
	v, err := json.Marshal(fileLease{ContainerID: l.key.containerID, IfName: l.key.ifName, Owner: l.owner, Network: l.network,
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
			s.cursor = c.prevCursor
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
		if s.releasingIP[c.l.ip] == b {
			delete(s.releasingIP, c.l.ip)
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
