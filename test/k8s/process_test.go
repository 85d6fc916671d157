package k8s

import (
	"os"
	"strings"
	"testing"
	"time"
)

// TestProcessExitAndStop: a server that exits is seen as exited, with its log; one that
// ignores SIGTERM is killed after the grace period.
func TestProcessExitAndStop(t *testing.T) {
	dir := t.TempDir()
	p, err := StartProcess(dir, "quits", "", "/bin/sh", []string{"-c", "echo bad flag; exit 3"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	WaitFor(t, "exit seen", 10*time.Second, func() error {
		if !p.Exited() {
			return os.ErrDeadlineExceeded
		}
		return nil
	})
	if got := p.LogTail(5); !strings.Contains(got, "bad flag") {
		t.Errorf("log tail %q", got)
	}
	// A permanent error ends the wait at once, not at its limit.
	start := time.Now()
	err = poll(time.Minute, 10*time.Millisecond, func() error { return Permanent(os.ErrClosed) })
	if err != os.ErrClosed || time.Since(start) > 30*time.Second {
		t.Errorf("poll with a permanent error: %v after %v", err, time.Since(start))
	}
	stubborn, err := StartProcess(dir, "stubborn", "", "/bin/sh", []string{"-c", "trap '' TERM; sleep 60 & wait"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(200 * time.Millisecond)
	stubborn.Stop(500 * time.Millisecond)
	if !stubborn.Exited() {
		t.Fatal("Stop returned with the process alive")
	}
}
