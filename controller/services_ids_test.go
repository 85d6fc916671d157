package controller

import (
	"log/slog"
	"os"
	"path/filepath"
	"testing"
)

// TestServicePortIDsTornJournalFoldedAtStart: a journal whose last line was torn by a crash
// is folded into a snapshot when the Service proxy starts, so the next id appended is not
// glued to the torn line and the record stays readable (it was refused whole before: every
// Service port then got a new id and group). No switch, no root.
func TestServicePortIDsTornJournalFoldedAtStart(t *testing.T) {
	dir := t.TempDir()
	journal := `{"seq":1,"owner":"x/a:/TCP","id":1,"lastAllocated":1}` + "\n" + `{"seq":2,"owner":"x/b:/T`
	if err := os.WriteFile(filepath.Join(dir, ServicePortIDsJournal), []byte(journal), 0o600); err != nil {
		t.Fatal(err)
	}
	n := &Node{log: slog.Default(), opts: NodeOptions{DataDir: dir}}
	sp := newServiceProxy(n, ServiceOptions{})
	if id, ok := sp.rec.get("x/a:/TCP"); !ok || id != 1 {
		t.Fatalf("x/a after the start: id %d (recorded %v), want its recorded 1", id, ok)
	}
	if id, fresh := sp.rec.reserve("x/c:/TCP", 0); !fresh || id != 2 {
		t.Fatalf("x/c: id %d fresh %v, want a new id 2", id, fresh)
	}
	if err := sp.rec.record("x/c:/TCP"); err != nil {
		t.Fatal(err)
	}
	rec, err := RecordedServicePortIDs(dir)
	if err != nil || len(rec) != 2 || rec["x/a:/TCP"] != 1 || rec["x/c:/TCP"] != 2 {
		t.Fatalf("record after an append: %v, %v; want x/a 1 and x/c 2", rec, err)
	}
}
