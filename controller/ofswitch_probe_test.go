package controller

import (
	"context"
	"log/slog"
	"strings"
	"testing"
	"time"
)

// TEMPORARY: OVS probes an idle mgmt connection; we must answer its echo requests.
func TestOFSwitchProbeTemp(t *testing.T) {
	logs := &ofLogRecorder{}
	_, sw := ofTestBridge(t, OFOptions{EchoInterval: -1, Logger: slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug}))})
	time.Sleep(135 * time.Second)
	if err := sw.Err(); err != nil {
		t.Fatalf("dropped: %v\n%s", err, logs.String())
	}
	if err := sw.Barrier(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Logf("logs:\n%s", logs.String())
	_ = strings.Contains
}
