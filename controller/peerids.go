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
//   - A new id is recorded before the peer's flows are installed, and a removed peer's id
//     is freed from the record only after its flows are deleted: a flow on the switch
//     never carries a peer id the record does not hold.
//   - The record is a snapshot (PeerIDsFile, written whole by writeFileAtomic: temp file,
//     fsync, rename, fsync of the directory) and a journal beside it (PeerIDsJournal): each
//     id given or freed after the snapshot is one appended line, fsync'd before the call
//     returns. The snapshot alone was rewritten at every peer added or removed, so a node
//     learning N peers one by one wrote N snapshots of up to N entries: at 5,000 Node
//     objects the JSON encoding of those snapshots was 47% of the daemon's CPU and
//     realizing 5,000 peers took 27 s against 2.5 s for 1,000 (make bench-nodes, profile
//     of ofsdn-node). The journal is folded into a new snapshot at start and whenever it
//     holds more lines than twice the peers plus 1,024, so each change costs one append
//     and, spread over the changes, a constant share of a snapshot. Lines carry a
//     sequence number and the snapshot the last one it holds (journalSeq), so a journal
//     left behind by a crash between the new snapshot and the journal's removal is not
//     applied twice; a torn last line (a crash mid-append, before the change was
//     acknowledged) is ignored.
//   - A node without the record (upgraded from a build before it) gives each peer it
//     knows at start the id those builds derived (flows.LegacyPeerID), so no peer flow
//     changes its cookie on upgrade; peers added later get round-robin ids.
//   - At start the record keeps exactly the peers the topology lists then (Overlay.load):
//     a peer removed while the daemon was down is freed. Its flows, like every flow of the
//     earlier run, went with the earlier generation in the first sync's bundle, which is
//     what makes a lost or corrupt record harmless: the peers then get new ids and nothing
//     stale is left.

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/ofsdn/ofsdn/flows"
)

// PeerIDsFile is the file in NodeOptions.DataDir that records each peer's flow owner id
// (flows.Peer.OwnerID, 1..2^32-1) under the peer's node name (its pod subnet, "subnet
// 10.244.2.0/24", for a peer without one), and the last id handed out:
//
//	{"version":1,"lastAllocated":2,"peers":{"node-b":183763456,"node-c":2}}
const PeerIDsFile = "peer-ids.json"

// PeerIDsJournal is the file in NodeOptions.DataDir that records the ids given and freed
// since PeerIDsFile was written, one JSON object per line, in order:
//
//	{"seq":7,"peer":"node-d","id":3,"lastAllocated":3}
//	{"seq":8,"peer":"node-b","free":true}
//
// Builds before it read PeerIDsFile alone (its version is unchanged): a daemon downgraded
// after peers were added gives those peers new ids, which the first flow sync's
// generation sweep makes harmless (see above).
const PeerIDsJournal = "peer-ids.journal"

// peerIDsVersion is the layout version of PeerIDsFile; other versions are refused.
const peerIDsVersion = 1

// peerIDsCompactSlack is how many journal lines beyond twice the peers recorded make the
// next change fold the journal into a new snapshot.
const peerIDsCompactSlack = 1024

// peerIDsState is PeerIDsFile's JSON layout.
type peerIDsState struct {
	Version       int               `json:"version"`
	LastAllocated uint32            `json:"lastAllocated,omitempty"`
	Peers         map[string]uint32 `json:"peers"`
	// JournalSeq is the sequence number of the last PeerIDsJournal line the snapshot
	// holds (0: none).
	JournalSeq uint64 `json:"journalSeq,omitempty"`
}

// peerIDsEntry is one PeerIDsJournal line.
type peerIDsEntry struct {
	Seq           uint64 `json:"seq"`
	Peer          string `json:"peer"`
	ID            uint32 `json:"id,omitempty"`
	Free          bool   `json:"free,omitempty"`
	LastAllocated uint32 `json:"lastAllocated,omitempty"`
}

// peerIDs is the record of peer owner ids, in memory and in its file. It is not safe for
// concurrent use (the Overlay serialises its changes).
type peerIDs struct {
	path   string
	found  bool // the file existed when it was read
	byKey  map[string]uint32
	byID   map[uint32]string
	cursor uint32 // the last id handed out round robin
	seq    uint64 // the last journal line's sequence number (written or read)
	lines  int    // lines in the journal since the last snapshot
	broken bool   // an append failed: the next change writes a snapshot
}

// journalPath is the journal's path: PeerIDsJournal beside the snapshot.
func (r *peerIDs) journalPath() string {
	return filepath.Join(filepath.Dir(r.path), PeerIDsJournal)
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
		return r, r.replay()
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
	r.found, r.cursor, r.seq = true, st.LastAllocated, st.JournalSeq
	return r, r.replay()
}

// replay applies the journal's lines newer than the snapshot (r.seq) to r. A last line
// without its newline is a torn append and is ignored. Errors name the journal: it cannot
// be read, a line is not an entry, or an entry contradicts the record (id 0, an id another
// peer holds).
func (r *peerIDs) replay() error {
	jp := r.journalPath()
	b, err := os.ReadFile(jp)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("peer owner ids %s: %w", jp, err)
	}
	r.found = true
	for n := 1; len(b) > 0; n++ {
		i := bytes.IndexByte(b, '\n')
		if i < 0 {
			break // torn last line
		}
		line := b[:i]
		b = b[i+1:]
		var e peerIDsEntry
		if err := json.Unmarshal(line, &e); err != nil || e.Peer == "" {
			return fmt.Errorf("peer owner ids %s: line %d is not an entry: %q", jp, n, line)
		}
		r.lines++
		if e.Seq <= r.seq {
			continue // already in the snapshot
		}
		r.seq = e.Seq
		if e.Free {
			r.release(e.Peer)
			continue
		}
		if other, held := r.byID[e.ID]; e.ID == 0 || (held && other != e.Peer) {
			return fmt.Errorf("peer owner ids %s: line %d gives peer %s id %d, held by %q or not an owner id", jp, n, e.Peer, e.ID, other)
		}
		r.release(e.Peer)
		r.byKey[e.Peer], r.byID[e.ID] = e.ID, e.Peer
		r.cursor = e.LastAllocated
	}
	return nil
}

// appendJournal records one change (e, its Seq set here) as a journal line, fsync'd, or
// folds the journal into a new snapshot (save) when it has grown past its bound; the
// change must already be in r's maps. Errors name the file.
func (r *peerIDs) appendJournal(e peerIDsEntry) error {
	if r.broken || r.lines >= 2*len(r.byKey)+peerIDsCompactSlack {
		return r.save()
	}
	e.Seq = r.seq + 1
	line, err := json.Marshal(e)
	if err != nil {
		return fmt.Errorf("peer owner ids %s: %w", r.journalPath(), err)
	}
	jp := r.journalPath()
	_, statErr := os.Stat(jp)
	f, err := os.OpenFile(jp, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o600)
	if err != nil {
		return fmt.Errorf("peer owner ids %s: %w", jp, err)
	}
	_, err = f.Write(append(line, '\n'))
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil && statErr != nil {
		err = syncDir(filepath.Dir(jp)) // the new file's name must survive a crash too
	}
	if err != nil {
		// The journal may now end in part of a line, which a later append would turn
		// into a corrupt one: the next change writes a snapshot instead, which replaces
		// the journal (a part left by a crash before then is a torn last line, ignored).
		r.broken = true
		return fmt.Errorf("peer owner ids %s: %w", jp, err)
	}
	r.seq, r.lines, r.found = e.Seq, r.lines+1, true
	return nil
}

// RecordedPeerIDs returns the peer owner ids recorded in data directory dataDir
// (PeerIDsFile with PeerIDsJournal applied), by peer key (node name), as a restarted
// daemon would read them: empty when there is no record. Errors are readPeerIDs's, naming
// the file.
func RecordedPeerIDs(dataDir string) (map[string]uint32, error) {
	r, err := readPeerIDs(filepath.Join(dataDir, PeerIDsFile))
	if err != nil {
		return nil, err
	}
	return r.byKey, nil
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

// save writes the whole record as a new snapshot (writeFileAtomic), holding every
// journal line so far, then removes the journal. Errors name the file.
func (r *peerIDs) save() error {
	b, err := json.Marshal(peerIDsState{Version: peerIDsVersion, LastAllocated: r.cursor, Peers: r.byKey, JournalSeq: r.seq})
	if err != nil {
		return fmt.Errorf("peer owner ids %s: %w", r.path, err)
	}
	if err := writeFileAtomic(r.path, append(b, '\n')); err != nil {
		return fmt.Errorf("peer owner ids %s: %w", r.path, err)
	}
	r.found = true
	// The snapshot holds every line: a journal that outlives a crash here is skipped by
	// its sequence numbers.
	if err := os.Remove(r.journalPath()); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("peer owner ids %s: %w", r.journalPath(), err)
	}
	r.lines, r.broken = 0, false
	return nil
}

// assign returns key's id, allocating a new one round robin and recording it (a journal
// line) before it returns if key has none. On an error nothing changes: the error names the
// file, or says that every id is held.
func (r *peerIDs) assign(key string) (uint32, error) {
	cursor := r.cursor
	id, fresh := r.reserve(key, 0)
	if id == 0 {
		return 0, fmt.Errorf("peer owner ids %s: all 2^32-1 ids are held", r.path)
	}
	if fresh {
		if err := r.appendJournal(peerIDsEntry{Peer: key, ID: id, LastAllocated: r.cursor}); err != nil {
			r.release(key)
			r.cursor = cursor
			return 0, err
		}
	}
	return id, nil
}

// free removes key's id from the record (a journal line) if it has one. On an error the id stays
// recorded; the error names the file.
func (r *peerIDs) free(key string) error {
	id, ok := r.byKey[key]
	if !ok {
		return nil
	}
	r.release(key)
	if err := r.appendJournal(peerIDsEntry{Peer: key, Free: true}); err != nil {
		r.byKey[key], r.byID[id] = id, key
		return err
	}
	return nil
}
