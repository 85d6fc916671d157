package controller

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/ofsdn/ofsdn/ovsdb"
)

// TestAddPodUndoGoesOnInBackground: an ADD fails while OVSDB is down (its port
// transaction committed, the port's delete keeps failing). AddPod returns the ADD's error
// without waiting for OVSDB, while its undo goes on and holds the pod's lock: a DEL of
// the same pod meanwhile waits and gives up at its deadline, saying why. Once OVSDB
// answers again the undo finishes by itself and leaves nothing behind (port, veth, lease,
// flows), and the DEL then succeeds.
func TestAddPodUndoGoesOnInBackground(t *testing.T) {
	w := newWorld()
	n := testNode(w)
	down := fmt.Errorf("transaction: %w", ovsdb.ErrUnavailable)
	w.mu.Lock()
	w.fail["ovsdb.AddPort"] = down
	w.fail["ovsdb.DeletePort"] = down
	w.addPortCommits = true
	w.mu.Unlock()

	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	_, err := n.AddPod(ctx, podReq("c1"))
	if err == nil || !strings.Contains(err.Error(), "unavailable") {
		t.Fatalf("ADD with OVSDB down: %v, want the OVSDB step's error", err)
	}
	if left := w.left(); !strings.Contains(left, "port ") {
		t.Fatalf("the undo finished although the port cannot be deleted yet; left: %q", left)
	}

	dctx, dcancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	err = n.DelPod(dctx, podReq("c1"))
	dcancel()
	if err == nil || !strings.Contains(err.Error(), "another operation on this pod is still running") {
		t.Fatalf("DEL while the failed ADD's undo runs: %v, want it to wait for the undo and give up at its deadline", err)
	}

	w.mu.Lock()
	delete(w.fail, "ovsdb.DeletePort") // OVSDB is back
	w.mu.Unlock()
	deadline := time.Now().Add(30 * time.Second)
	for w.left() != "" {
		if time.Now().After(deadline) {
			t.Fatalf("30s after OVSDB answers, the failed ADD left: %s", w.left())
		}
		time.Sleep(20 * time.Millisecond)
	}
	// The port's delete was retried until it went through.
	w.mu.Lock()
	j := strings.Join(w.journal, "\n")
	w.mu.Unlock()
	if strings.Count(j, "ovsdb.DeletePort") < 2 {
		t.Errorf("the port's delete was not retried:\n%s", j)
	}
	lctx, lcancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer lcancel()
	if err := n.DelPod(lctx, podReq("c1")); err != nil {
		t.Errorf("DEL once the undo finished: %v", err)
	}
}
