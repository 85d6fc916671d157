package controller

// Peer owner ids: the id bits of a peer's flows' cookies (flows.Peer.OwnerID), allocated
// here and recorded in the data directory (PeerIDsFile) under the peer's key (its node
// name), so that a restarted daemon gives every peer the id its flows had.
//
// Design history (issue 21): a peer's owner id was the network address of its IPv4 pod
// subnet (now flows.LegacyPeerID), so a peer with only an IPv6 pod subnet would have none,
// and a peer whose subnet changed became another owner. The rules:
//   - Ids are handed out round robin over 1..2^32-1 (the cursor, lastAllocated, is
//     recorded too), never one another peer holds, so an id comes back only after the
//     rest of the space has been used.
//   - A new id is recorded (writeFileAtomic: temp file, fsync, rename, fsync of the
//     directory) before the peer's flows are installed, and a removed peer's id is freed
//     from the record only after its flows are deleted: a flow on the switch never carries
//     a peer id the record does not hold.
//   - A node without the record (upgraded from a build before it) gives each peer it
//     knows at start the id those builds derived (flows.LegacyPeerID), so no peer flow
//     changes its cookie on upgrade; peers added later get round-robin ids.
//   - At start the record keeps exactly the peers the topology lists then (Overlay.load):
//     a peer removed while the daemon was down is freed. Its flows, like every flow of the
//     earlier run, went with the earlier generation in the first sync's bundle, which is
//     what makes a lost or corrupt record harmless: the peers then get new ids and nothing
//     stale is left.

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"

	"github.com/ofsdn/ofsdn/flows"
)

// PeerIDsFile is the file in NodeOptions.DataDir that records each peer's flow owner id
// (flows.Peer.OwnerID, 1..2^32-1) under the peer's node name (its pod subnet, "subnet
// 10.244.2.0/24", for a peer without one), and the last id handed out:
//
//	{"version":1,"lastAllocated":2,"peers":{"node-b":183763456,"node-c":2}}
const PeerIDsFile = "peer-ids.json"

// peerIDsVersion is the layout version of PeerIDsFile; other versions are refused.
const peerIDsVersion = 1

// peerIDsState is PeerIDsFile's JSON layout.
type peerIDsState struct {
	Version       int               `json:"version"`
	LastAllocated uint32            `json:"lastAllocated,omitempty"`
	Peers         map[string]uint32 `json:"peers"`
}

// peerIDs is the record of peer owner ids, in memory and in its file. It is not safe for
// concurrent use (the Overlay serialises its changes).
type peerIDs struct {
	path   string
	found  bool // the file existed when it was read
	byKey  map[string]uint32
	byID   map[uint32]string
	cursor uint32 // the last id handed out round robin
}

// peerKey is the key under which peer p's owner id is recorded: its node name, else (no
// name) its pod subnet.
func peerKey(p flows.Peer) string {
	if p.Name != "" {
		return p.Name
	}
	return fmt.Sprintf("subnet %v", p.PodSubnet)
}

// readPeerIDs reads the record at path. A missing file is an empty record with found
// false (ids are then seeded, see Overlay.load). Errors name the file: it cannot be read,
// is not JSON of this layout's version, or records id 0, one id for two peers or an empty
// key.
func readPeerIDs(path string) (*peerIDs, error) {
	r := &peerIDs{path: path, byKey: map[string]uint32{}, byID: map[uint32]string{}}
	b, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return r, nil
	}
	if err != nil {
		return nil, fmt.Errorf("peer owner ids %s: %w", path, err)
	}
	var st peerIDsState
	if err := json.Unmarshal(b, &st); err != nil {
		return nil, fmt.Errorf("peer owner ids %s: invalid JSON: %w", path, err)
	}
	if st.Version != peerIDsVersion {
		return nil, fmt.Errorf("peer owner ids %s: version %d is not supported (want %d)", path, st.Version, peerIDsVersion)
	}
	for key, id := range st.Peers {
		switch other, dup := r.byID[id]; {
		case key == "":
			return nil, fmt.Errorf("peer owner ids %s: an entry without a peer name (id %d)", path, id)
		case id == 0:
			return nil, fmt.Errorf("peer owner ids %s: peer %s has id 0, not an owner id (1..2^32-1)", path, key)
		case dup:
			return nil, fmt.Errorf("peer owner ids %s: peers %s and %s have the same id %d", path, min(key, other), max(key, other), id)
		}
		r.byKey[key], r.byID[id] = id, key
	}
	r.found, r.cursor = true, st.LastAllocated
	return r, nil
}

// get returns the id recorded for key.
func (r *peerIDs) get(key string) (uint32, bool) {
	id, ok := r.byKey[key]
	return id, ok
}

// peek returns the id reserve(key, 0) would give key, without reserving it: its recorded
// id, else the first id after the cursor that no peer holds (0 only when all 2^32-1 are
// held).
func (r *peerIDs) peek(key string) uint32 {
	if id, ok := r.byKey[key]; ok {
		return id
	}
	id := r.cursor
	for range uint64(1) << 32 {
		id++
		if id == 0 {
			id = 1
		}
		if _, held := r.byID[id]; !held {
			return id
		}
	}
	return 0
}

// reserve gives key an id in memory (save records it) and returns it; fresh says it is
// new. A key already recorded keeps its id. Otherwise want, if it is not 0 and no peer
// holds it (a legacy id), else the next id round robin (peek). It returns 0 only when
// every id is held.
func (r *peerIDs) reserve(key string, want uint32) (id uint32, fresh bool) {
	if id, ok := r.byKey[key]; ok {
		return id, false
	}
	if _, held := r.byID[want]; want != 0 && !held {
		id = want
	} else if id = r.peek(key); id == 0 {
		return 0, false
	} else {
		r.cursor = id
	}
	r.byKey[key], r.byID[id] = id, key
	return id, true
}

// release frees key's id in memory (save records it); it reports whether key had one.
func (r *peerIDs) release(key string) bool {
	id, ok := r.byKey[key]
	if ok {
		delete(r.byKey, key)
		delete(r.byID, id)
	}
	return ok
}

// save writes the record to its file (writeFileAtomic). Errors name the file.
func (r *peerIDs) save() error {
	b, err := json.Marshal(peerIDsState{Version: peerIDsVersion, LastAllocated: r.cursor, Peers: r.byKey})
	if err != nil {
		return fmt.Errorf("peer owner ids %s: %w", r.path, err)
	}
	if err := writeFileAtomic(r.path, append(b, '\n')); err != nil {
		return fmt.Errorf("peer owner ids %s: %w", r.path, err)
	}
	r.found = true
	return nil
}

// assign returns key's id, allocating a new one round robin and recording it (save)
// before it returns if key has none. On an error nothing changes: the error names the
// file, or says that every id is held.
func (r *peerIDs) assign(key string) (uint32, error) {
	cursor := r.cursor
	id, fresh := r.reserve(key, 0)
	if id == 0 {
		return 0, fmt.Errorf("peer owner ids %s: all 2^32-1 ids are held", r.path)
	}
	if fresh {
		if err := r.save(); err != nil {
			r.release(key)
			r.cursor = cursor
			return 0, err
		}
	}
	return id, nil
}

// free removes key's id from the record (save) if it has one. On an error the id stays
// recorded; the error names the file.
func (r *peerIDs) free(key string) error {
	id, ok := r.byKey[key]
	if !ok {
		return nil
	}
	r.release(key)
	if err := r.save(); err != nil {
		r.byKey[key], r.byID[id] = id, key
		return err
	}
	return nil
}
