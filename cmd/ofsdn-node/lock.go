package main

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"time"

	"golang.org/x/sys/unix"
)

// bridgeLockPath is the lock file that makes one ofsdn-node the only controller of a bridge:
// OVSRunDir/ofsdn-BRIDGE.lock. It lives in Open vSwitch's run directory because every daemon
// that can reach the bridge's OpenFlow socket shares that directory.
func bridgeLockPath(ovsRunDir, bridge string) string {
	return filepath.Join(ovsRunDir, "ofsdn-"+bridge+".lock")
}

// lockBridge takes an exclusive flock(2) on the bridge's lock file, waiting (polling once
// a second, logging while it waits) until the other holder exits or ctx ends. Two daemons
// on one bridge would each replace the other's flows (each installs its own desired state),
// so the second waits; a kernel lock is released when its holder dies, even by SIGKILL, so
// a crashed daemon never blocks its successor. The returned function releases the lock.
func lockBridge(ctx context.Context, ovsRunDir, bridge string, log *slog.Logger) (func(), error) {
	path := bridgeLockPath(ovsRunDir, bridge)
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, fmt.Errorf("bridge lock %s: %w (is ovsRunDir %s right?)", path, err, ovsRunDir)
	}
	warned := false
	for {
		err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB)
		if err == nil {
			return func() { _ = unix.Flock(int(f.Fd()), unix.LOCK_UN); f.Close() }, nil
		}
		if err != unix.EWOULDBLOCK {
			f.Close()
			return nil, fmt.Errorf("bridge lock %s: %w", path, err)
		}
		if !warned {
			log.Warn("another ofsdn-node controls this bridge; waiting for it to exit", "bridge", bridge, "lock", path)
			warned = true
		}
		select {
		case <-ctx.Done():
			f.Close()
			return nil, fmt.Errorf("bridge %s is controlled by another ofsdn-node (lock %s held): stop it first: %w", bridge, path, ctx.Err())
		case <-time.After(time.Second):
		}
	}
}
