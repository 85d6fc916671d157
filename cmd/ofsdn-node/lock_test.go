package main

import (
	"context"
	"log/slog"
	"os"
	"strings"
	"testing"
	"time"
)

func TestBridgeLockAdmitsOneDaemonAtATime(t *testing.T) {
	dir := t.TempDir()
	log := slog.New(slog.NewTextHandler(os.Stderr, nil))
	release, err := lockBridge(context.Background(), dir, "br-int", log)
	if err != nil {
		t.Fatal(err)
	}
	// A second daemon on the same bridge waits, and gives up with a clear error.
	ctx, cancel := context.WithTimeout(context.Background(), 1500*time.Millisecond)
	defer cancel()
	if _, err := lockBridge(ctx, dir, "br-int", log); err == nil || !strings.Contains(err.Error(), "another ofsdn-node") {
		t.Fatalf("second lock on br-int: want a refusal naming the other daemon, got %v", err)
	}
	// Another bridge is independent.
	other, err := lockBridge(context.Background(), dir, "br-other", log)
	if err != nil {
		t.Fatalf("lock on another bridge: %v", err)
	}
	other()
	// Once the first holder exits, the waiting daemon gets the bridge.
	got := make(chan error, 1)
	go func() {
		r, err := lockBridge(context.Background(), dir, "br-int", log)
		if err == nil {
			r()
		}
		got <- err
	}()
	release()
	select {
	case err := <-got:
		if err != nil {
			t.Fatalf("waiting daemon: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the waiting daemon never got the lock after the holder released it")
	}
}
