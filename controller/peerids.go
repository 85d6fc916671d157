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
	"fmt"
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

// peerIDsWhat names the peers' record in errors.
const peerIDsWhat = "peer owner ids"

// peerIDs is the record of peer owner ids (ownerIDs with the peers' layout, ids
// 1..2^32-1). The Overlay serialises its changes.
type peerIDs = ownerIDs

// newPeerIDs returns an empty record of peer owner ids at path.
func newPeerIDs(path string) *peerIDs {
	return newOwnerIDs(peerIDsWhat, path, PeerIDsJournal, true, 1<<32-1)
}

// readPeerIDs reads the record of peer owner ids at path (readOwnerIDs).
func readPeerIDs(path string) (*peerIDs, error) {
	return readOwnerIDs(peerIDsWhat, path, PeerIDsJournal, true, 1<<32-1)
}

// peerKey is the key under which peer p's owner id is recorded: its node name, else (no
// name) its pod subnet.
func peerKey(p flows.Peer) string {
	if p.Name != "" {
		return p.Name
	}
	return fmt.Sprintf("subnet %v", p.PodSubnet)
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
