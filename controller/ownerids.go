package controller

// The record of allocated owner ids: for one owner kind, each owner's id (the id bits of
// its flows' cookies, and for a Service port its group id) under a key naming the owner
// (a peer's node name, a Service port's name), in the data directory, so that a
// restarted daemon gives every owner the id it had. Peers (PeerIDsFile) and Service ports
// (ServicePortIDsFile) keep one each; the rules are the peers' (peerids.go's history):
//   - Ids are handed out round robin over 1..limit (the cursor, lastAllocated, is
//     recorded too), never one another owner holds, so an id comes back only after the
//     rest of the space has been used.
//   - A new id is recorded before any flow or group carries it, and a removed owner's id
//     is freed from the record only after the switch confirmed its flows and groups gone.
//   - The record is a snapshot (written whole by writeFileAtomic: temp file, fsync,
//     rename, fsync of the directory) and a journal beside it: the ids given or freed
//     after the snapshot, one line each, appended and fsync'd together for a batch
//     before the call returns. The journal is folded into a new snapshot at start and
//     whenever it holds more lines than twice the owners plus 1,024. Lines carry a
//     sequence number and the snapshot the last one it holds, so a journal left behind by
//     a crash between the new snapshot and the journal's removal is not applied twice; a
//     torn last line (a crash mid-append, before the change was acknowledged) is ignored.
//   - Nothing depends on the record to clean up: the first flow sync of a run removes the
//     earlier generation's flows and every group and meter of ofsdn's range no owner
//     wants, so a lost or corrupt record only costs owners their old ids.

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
)

// ownerIDsVersion is the layout version of an owner id snapshot; other versions are
// refused.
const ownerIDsVersion = 1

// ownerIDsCompactSlack is how many journal lines beyond twice the owners recorded make
// the next change fold the journal into a new snapshot.
const ownerIDsCompactSlack = 1024

// ownerIDsState is a snapshot's JSON layout. The peers' record names its map "peers"
// (its layout predates the other kinds); the others "owners".
type ownerIDsState struct {
	Version       int               `json:"version"`
	LastAllocated uint32            `json:"lastAllocated,omitempty"`
	Peers         map[string]uint32 `json:"peers,omitempty"`
	Owners        map[string]uint32 `json:"owners,omitempty"`
	// JournalSeq is the sequence number of the last journal line the snapshot holds
	// (0: none).
	JournalSeq uint64 `json:"journalSeq,omitempty"`
}

// ownerIDsEntry is one journal line; Peer (the peers' record) or Owner (the others) is
// the key.
type ownerIDsEntry struct {
	Seq           uint64 `json:"seq"`
	Peer          string `json:"peer,omitempty"`
	Owner         string `json:"owner,omitempty"`
	ID            uint32 `json:"id,omitempty"`
	Free          bool   `json:"free,omitempty"`
	LastAllocated uint32 `json:"lastAllocated,omitempty"`
}

func (e ownerIDsEntry) key() string { return e.Peer + e.Owner }

// ownerIDs is the record of one owner kind's ids, in memory and in its files. It is not
// safe for concurrent use (its user serialises its changes).
type ownerIDs struct {
	what    string // what the ids are, for errors: "peer owner ids"
	path    string // the snapshot
	journal string // the journal's file name, beside the snapshot
	peers   bool   // the peers' layout ("peers", "peer")
	limit   uint32 // ids are 1..limit
	found   bool   // the snapshot or the journal existed when read
	byKey   map[string]uint32
	byID    map[uint32]string
	cursor  uint32 // the last id handed out round robin
	seq     uint64 // the last journal line's sequence number (written or read)
	lines   int    // lines in the journal since the last snapshot
	broken  bool   // an append failed: the next change writes a snapshot
}

// newOwnerIDs returns an empty record of ids 1..limit at path (journal beside it).
func newOwnerIDs(what, path, journal string, peers bool, limit uint32) *ownerIDs {
	return &ownerIDs{what: what, path: path, journal: journal, peers: peers, limit: limit,
		byKey: map[string]uint32{}, byID: map[uint32]string{}}
}

// readOwnerIDs reads the record at path (newOwnerIDs's arguments). A missing snapshot and
// journal is an empty record with found false. Errors name the file: it cannot be read,
// is not JSON of this layout's version, or records id 0 or one beyond limit, one id for
// two owners or an empty key.
func readOwnerIDs(what, path, journal string, peers bool, limit uint32) (*ownerIDs, error) {
	r := newOwnerIDs(what, path, journal, peers, limit)
	b, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return r, r.replay()
	}
	if err != nil {
		return nil, fmt.Errorf("%s %s: %w", what, path, err)
	}
	var st ownerIDsState
	if err := json.Unmarshal(b, &st); err != nil {
		return nil, fmt.Errorf("%s %s: invalid JSON: %w", what, path, err)
	}
	if st.Version != ownerIDsVersion {
		return nil, fmt.Errorf("%s %s: version %d is not supported (want %d)", what, path, st.Version, ownerIDsVersion)
	}
	entries := st.Owners
	if peers {
		entries = st.Peers
	}
	for key, id := range entries {
		switch other, dup := r.byID[id]; {
		case key == "":
			return nil, fmt.Errorf("%s %s: an entry without a key (id %d)", what, path, id)
		case id == 0 || id > limit:
			return nil, fmt.Errorf("%s %s: %s has id %d, not an owner id (1..%d)", what, path, key, id, limit)
		case dup:
			return nil, fmt.Errorf("%s %s: %s and %s have the same id %d", what, path, min(key, other), max(key, other), id)
		}
		r.byKey[key], r.byID[id] = id, key
	}
	r.found, r.cursor, r.seq = true, st.LastAllocated, st.JournalSeq
	return r, r.replay()
}

// journalPath is the journal's path, beside the snapshot.
func (r *ownerIDs) journalPath() string {
	return filepath.Join(filepath.Dir(r.path), r.journal)
}

// replay applies the journal's lines newer than the snapshot (r.seq) to r. A last line
// without its newline is a torn append and is ignored. Errors name the journal: it cannot
// be read, a line is not an entry, or an entry contradicts the record (id 0 or beyond the
// limit, an id another owner holds).
func (r *ownerIDs) replay() error {
	jp := r.journalPath()
	b, err := os.ReadFile(jp)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("%s %s: %w", r.what, jp, err)
	}
	r.found = true
	for n := 1; len(b) > 0; n++ {
		i := bytes.IndexByte(b, '\n')
		if i < 0 {
			break // torn last line
		}
		line := b[:i]
		b = b[i+1:]
		var e ownerIDsEntry
		if err := json.Unmarshal(line, &e); err != nil || e.key() == "" {
			return fmt.Errorf("%s %s: line %d is not an entry: %q", r.what, jp, n, line)
		}
		r.lines++
		if e.Seq <= r.seq {
			continue // already in the snapshot
		}
		r.seq = e.Seq
		key := e.key()
		if e.Free {
			r.release(key)
			continue
		}
		if other, held := r.byID[e.ID]; e.ID == 0 || e.ID > r.limit || (held && other != key) {
			return fmt.Errorf("%s %s: line %d gives %s id %d, held by %q or not an owner id", r.what, jp, n, key, e.ID, other)
		}
		r.release(key)
		r.byKey[key], r.byID[e.ID] = e.ID, key
		r.cursor = e.LastAllocated
	}
	return nil
}

// entry returns the journal line recording key's id (free: its removal).
func (r *ownerIDs) entry(key string, free bool) ownerIDsEntry {
	e := ownerIDsEntry{Free: free}
	if !free {
		e.ID, e.LastAllocated = r.byKey[key], r.cursor
	}
	if r.peers {
		e.Peer = key
	} else {
		e.Owner = key
	}
	return e
}

// appendJournal records changes es (their Seq set here) as journal lines with one fsync,
// or folds the journal into a new snapshot (save) when it has grown past its bound; the
// changes must already be in r's maps. Errors name the file.
func (r *ownerIDs) appendJournal(es ...ownerIDsEntry) error {
	if len(es) == 0 {
		return nil
	}
	if r.broken || r.lines+len(es) > 2*len(r.byKey)+ownerIDsCompactSlack {
		return r.save()
	}
	var buf []byte
	seq := r.seq
	for _, e := range es {
		seq++
		e.Seq = seq
		line, err := json.Marshal(e)
		if err != nil {
			return fmt.Errorf("%s %s: %w", r.what, r.journalPath(), err)
		}
		buf = append(append(buf, line...), '\n')
	}
	jp := r.journalPath()
	_, statErr := os.Stat(jp)
	f, err := os.OpenFile(jp, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o600)
	if err != nil {
		return fmt.Errorf("%s %s: %w", r.what, jp, err)
	}
	_, err = f.Write(buf)
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
		return fmt.Errorf("%s %s: %w (fix: make the data directory writable, with free space)", r.what, jp, err)
	}
	r.seq, r.lines, r.found = seq, r.lines+len(es), true
	return nil
}

// get returns the id recorded for key.
func (r *ownerIDs) get(key string) (uint32, bool) {
	id, ok := r.byKey[key]
	return id, ok
}

// peek returns the id reserve(key, 0) would give key, without reserving it: its recorded
// id, else the first id after the cursor that no owner holds (0 only when all limit ids
// are held).
func (r *ownerIDs) peek(key string) uint32 {
	if id, ok := r.byKey[key]; ok {
		return id
	}
	if uint64(len(r.byID)) >= uint64(r.limit) {
		return 0
	}
	id := r.cursor
	for {
		id++
		if id == 0 || id > r.limit {
			id = 1
		}
		if _, held := r.byID[id]; !held {
			return id
		}
	}
}

// reserve gives key an id in memory (save or appendJournal records it) and returns it;
// fresh says it is new. A key already recorded keeps its id. Otherwise want, if it is not
// 0, within the limit and no owner holds it (a legacy id), else the next id round robin
// (peek). It returns 0 only when every id is held.
func (r *ownerIDs) reserve(key string, want uint32) (id uint32, fresh bool) {
	if id, ok := r.byKey[key]; ok {
		return id, false
	}
	if _, held := r.byID[want]; want != 0 && want <= r.limit && !held {
		id = want
	} else if id = r.peek(key); id == 0 {
		return 0, false
	} else {
		r.cursor = id
	}
	r.byKey[key], r.byID[id] = id, key
	return id, true
}

// release frees key's id in memory (save or appendJournal records it); it reports
// whether key had one.
func (r *ownerIDs) release(key string) bool {
	id, ok := r.byKey[key]
	if ok {
		delete(r.byKey, key)
		delete(r.byID, id)
	}
	return ok
}

// save writes the whole record as a new snapshot (writeFileAtomic), holding every
// journal line so far, then removes the journal. Errors name the file.
func (r *ownerIDs) save() error {
	st := ownerIDsState{Version: ownerIDsVersion, LastAllocated: r.cursor, JournalSeq: r.seq}
	if r.peers {
		st.Peers = r.byKey
	} else {
		st.Owners = r.byKey
	}
	b, err := json.Marshal(st)
	if err != nil {
		return fmt.Errorf("%s %s: %w", r.what, r.path, err)
	}
	if err := writeFileAtomic(r.path, append(b, '\n')); err != nil {
		return fmt.Errorf("%s %s: %w (fix: make the data directory writable, with free space)", r.what, r.path, err)
	}
	r.found = true
	// The snapshot holds every line: a journal that outlives a crash here is skipped by
	// its sequence numbers.
	if err := os.Remove(r.journalPath()); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("%s %s: %w", r.what, r.journalPath(), err)
	}
	r.lines, r.broken = 0, false
	return nil
}

// assign returns key's id, allocating a new one round robin and recording it (a journal
// line) before it returns if key has none. On an error nothing changes: the error names
// the file, or says that every id is held.
func (r *ownerIDs) assign(key string) (uint32, error) {
	cursor := r.cursor
	id, fresh := r.reserve(key, 0)
	if id == 0 {
		return 0, fmt.Errorf("%s %s: all %d ids are held", r.what, r.path, r.limit)
	}
	if fresh {
		if err := r.appendJournal(r.entry(key, false)); err != nil {
			r.release(key)
			r.cursor = cursor
			return 0, err
		}
	}
	return id, nil
}

// record writes journal lines for keys, reserved in memory since the last record: each
// key's id, or its removal for a key no longer held (one fsync for all). Errors name the
// file; the record in memory is unchanged by one.
func (r *ownerIDs) record(keys ...string) error {
	es := make([]ownerIDsEntry, 0, len(keys))
	for _, k := range keys {
		_, held := r.byKey[k]
		es = append(es, r.entry(k, !held))
	}
	return r.appendJournal(es...)
}

// free removes key's id from the record (a journal line) if it has one. On an error the
// id stays recorded; the error names the file.
func (r *ownerIDs) free(key string) error {
	id, ok := r.byKey[key]
	if !ok {
		return nil
	}
	r.release(key)
	if err := r.appendJournal(r.entry(key, true)); err != nil {
		r.byKey[key], r.byID[id] = id, key
		return err
	}
	return nil
}
