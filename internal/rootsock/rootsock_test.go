package rootsock

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/ofsdn/ofsdn/test/testenv"
)

func TestListenCreatesRootOnlyDirectory(t *testing.T) {
	testenv.Privileged(t)
	dir := filepath.Join(t.TempDir(), "a", "b")
	l, err := Listen(filepath.Join(dir, "x.sock"), "test socket")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	fi, err := os.Stat(dir)
	if err != nil || fi.Mode().Perm() != 0o700 {
		t.Fatalf("created directory mode %v (%v), want 0700", fi.Mode().Perm(), err)
	}
	si, err := os.Lstat(filepath.Join(dir, "x.sock"))
	if err != nil || si.Mode().Perm() != 0o600 || si.Mode()&os.ModeSocket == 0 {
		t.Fatalf("socket mode %v (%v), want a socket with 0600", si.Mode(), err)
	}
}

func TestListenLeavesAnExistingDirectoryAlone(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "run")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	l, err := Listen(filepath.Join(dir, "x.sock"), "test socket")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	if fi, _ := os.Stat(dir); fi.Mode().Perm() != 0o755 {
		t.Fatalf("an existing directory's mode was changed to %v; it may be the host's /run", fi.Mode().Perm())
	}
}

func TestListenRefusesSharedDirectories(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "shared")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(dir, 0o777|os.ModeSticky); err != nil {
		t.Fatal(err)
	}
	_, err := Listen(filepath.Join(dir, "x.sock"), "test socket")
	if err == nil || !strings.Contains(err.Error(), "writable by others") {
		t.Fatalf("want a refusal naming the shared directory, got %v", err)
	}
	if fi, _ := os.Stat(dir); fi.Mode()&os.ModeSticky == 0 || fi.Mode().Perm() != 0o777 {
		t.Fatalf("the shared directory's mode was changed to %v", fi.Mode())
	}
}

func TestListenReplacesOnlyStaleSockets(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "x.sock")
	live, err := net.Listen("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := Listen(path, "test socket"); err == nil || !strings.Contains(err.Error(), "another server") {
		t.Fatalf("want a refusal while a server listens, got %v", err)
	}
	live.(*net.UnixListener).SetUnlinkOnClose(false)
	live.Close()
	l, err := Listen(path, "test socket")
	if err != nil {
		t.Fatalf("stale socket not replaced: %v", err)
	}
	l.Close()
	file := filepath.Join(dir, "plain")
	if err := os.WriteFile(file, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := Listen(file, "test socket"); err == nil || !strings.Contains(err.Error(), "not a socket") {
		t.Fatalf("want a refusal of a regular file, got %v", err)
	}
}

func TestRemove(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "x.sock")
	l, err := Listen(path, "test socket")
	if err != nil {
		t.Fatal(err)
	}
	l.(*net.UnixListener).SetUnlinkOnClose(false)
	l.Close()
	if err := Remove(path, "test socket"); err != nil {
		t.Fatalf("Remove: %v", err)
	}
	if _, err := os.Lstat(path); !os.IsNotExist(err) {
		t.Fatalf("socket still there after Remove: %v", err)
	}
	if err := Remove(path, "test socket"); err != nil {
		t.Fatalf("Remove of a socket already gone: %v", err)
	}
	full := filepath.Join(dir, "full")
	if err := os.MkdirAll(filepath.Join(full, "sub"), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := Remove(full, "test socket"); err == nil || !strings.Contains(err.Error(), full) {
		t.Fatalf("Remove of a non-empty directory: %v, want an error naming %s", err, full)
	}
}

// TestServeLifecycle: Serve listens on a root-only socket, each request's context carries
// the caller's credentials (this test runs as root: uid 0, our pid), and Shutdown stops
// serving and removes the socket.
func TestServeLifecycle(t *testing.T) {
	testenv.Privileged(t)
	path := filepath.Join(t.TempDir(), "run", "x.sock")
	hs := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		cred, err := PeerCredFrom(r.Context())
		if err != nil {
			http.Error(w, err.Error(), http.StatusForbidden)
			return
		}
		fmt.Fprintf(w, "uid=%d pid=%d", cred.Uid, cred.Pid)
	})}
	s, err := Serve(path, "test socket", hs, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		t.Fatal(err)
	}
	c := &http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		return (&net.Dialer{}).DialContext(ctx, "unix", path)
	}}}
	resp, err := c.Get("http://socket/")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if want := fmt.Sprintf("uid=%d pid=%d", os.Getuid(), os.Getpid()); string(body) != want {
		t.Errorf("handler saw %q, want %q", body, want)
	}
	c.CloseIdleConnections()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := s.Shutdown(ctx); err != nil {
		t.Fatalf("Shutdown: %v", err)
	}
	select {
	case <-s.Done():
	default:
		t.Error("Done not closed after Shutdown")
	}
	if _, err := os.Lstat(path); !os.IsNotExist(err) {
		t.Errorf("socket still there after Shutdown: %v", err)
	}
	if _, err := PeerCredFrom(context.Background()); err == nil {
		t.Error("PeerCredFrom of a context Serve did not make returned no error")
	}
}
