// Package rootsock makes the daemon's root-only unix sockets and runs their HTTP servers:
// the CNI socket and the inspection socket share one way of preparing the directory,
// replacing a stale socket, listening (Listen), serving with the caller's credentials
// (socket(7) SO_PEERCRED) in each request's context (Serve, PeerCredFrom), and shutting
// down with the socket removed (Server.Shutdown).
package rootsock

import (
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"time"

	"golang.org/x/sys/unix"
)

// Listen prepares path and listens on it:
//   - a missing socket directory is created with mode 0700, owned by root:root; an existing
//     one is never changed (it may be /run or /tmp), but must be owned by root and not
//     writable by group or others, or Listen refuses it;
//   - a stale socket left by an earlier daemon is removed, but a path that is not a socket,
//     or a socket on which a server still accepts connections, is an error;
//   - the socket is made mode 0600 (the directory is already root-only, so the moment
//     between bind and chmod exposes nothing).
//
// what names the socket in errors (e.g. "CNI server", "inspection socket"); errors name the
// path and the failed step.
func Listen(path, what string) (net.Listener, error) {
	if !filepath.IsAbs(path) {
		return nil, fmt.Errorf("%s socket %q: not an absolute path", what, path)
	}
	dir := filepath.Dir(path)
	if err := ensureDir(dir, what); err != nil {
		return nil, err
	}
	if err := removeStale(path, what); err != nil {
		return nil, err
	}
	l, err := net.Listen("unix", path)
	if err != nil {
		return nil, fmt.Errorf("%s: listen on unix socket %s: %w", what, path, err)
	}
	if err := os.Chmod(path, 0o600); err != nil {
		l.Close()
		return nil, fmt.Errorf("%s: set mode 0600 on socket %s: %w", what, path, err)
	}
	return l, nil
}

// ensureDir creates dir 0700 root:root, or checks that an existing dir is safe to hold a
// root-only socket: owned by root, not writable by group or others.
func ensureDir(dir, what string) error {
	fi, err := os.Stat(dir)
	if errors.Is(err, os.ErrNotExist) {
		if err := os.MkdirAll(dir, 0o700); err != nil {
			return fmt.Errorf("%s: create socket directory %s: %w", what, dir, err)
		}
		if err := os.Chown(dir, 0, 0); err != nil {
			return fmt.Errorf("%s: make socket directory %s owned by root (the daemon must run as root): %w", what, dir, err)
		}
		// MkdirAll applies the umask; make the mode exact.
		if err := os.Chmod(dir, 0o700); err != nil {
			return fmt.Errorf("%s: set mode 0700 on socket directory %s: %w", what, dir, err)
		}
		return nil
	}
	if err != nil {
		return fmt.Errorf("%s: socket directory %s: %w", what, dir, err)
	}
	if !fi.IsDir() {
		return fmt.Errorf("%s: %s is not a directory; choose a socket path in a directory of its own", what, dir)
	}
	st, ok := fi.Sys().(*unix.Stat_t)
	if ok && st.Uid != 0 {
		return fmt.Errorf("%s: socket directory %s is owned by uid %d, not root; use a directory of the daemon's own such as /var/run/ofsdn", what, dir, st.Uid)
	}
	if fi.Mode().Perm()&0o022 != 0 {
		return fmt.Errorf("%s: socket directory %s is writable by others (mode %s), so another user could replace the socket; use a directory of the daemon's own such as /var/run/ofsdn", what, dir, fi.Mode().Perm())
	}
	return nil
}

// removeStale deletes a socket file left at path by a previous daemon. It refuses to delete
// anything that is not a socket, and a socket on which a server still accepts connections.
func removeStale(path, what string) error {
	fi, err := os.Lstat(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("%s: inspect %s: %w", what, path, err)
	}
	if fi.Mode()&os.ModeSocket == 0 {
		return fmt.Errorf("%s: %s exists and is not a socket (mode %s): remove it or choose another socket path", what, path, fi.Mode())
	}
	if c, err := net.DialTimeout("unix", path, time.Second); err == nil {
		c.Close()
		return fmt.Errorf("%s: another server is listening on %s: stop the other ofsdn-node daemon first", what, path)
	}
	if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("%s: remove stale socket %s: %w", what, path, err)
	}
	return nil
}

// Remove deletes the socket at path when its server has stopped; a socket already gone
// (net.UnixListener unlinks its own on Close) is not an error. what names the socket in
// the error, which names the path.
func Remove(path, what string) error {
	if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("%s: remove socket %s: %w", what, path, err)
	}
	return nil
}

// PeerCred returns the credentials of the process that connected c (socket(7) SO_PEERCRED).
// It returns an error for connections that are not unix sockets or whose option cannot be
// read.
func PeerCred(c net.Conn) (*unix.Ucred, error) {
	uc, ok := c.(*net.UnixConn)
	if !ok {
		return nil, errors.New("not a unix socket connection")
	}
	raw, err := uc.SyscallConn()
	if err != nil {
		return nil, err
	}
	var cred *unix.Ucred
	var credErr error
	if err := raw.Control(func(fd uintptr) {
		cred, credErr = unix.GetsockoptUcred(int(fd), unix.SOL_SOCKET, unix.SO_PEERCRED)
	}); err != nil {
		return nil, err
	}
	return cred, credErr
}
