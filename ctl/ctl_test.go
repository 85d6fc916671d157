package ctl

import (
	"context"
	"errors"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/ofsdn/ofsdn/test/testenv"
)

type fakeSource struct {
	ready bool
}

func (f fakeSource) Pods() ([]Pod, error) {
	if !f.ready {
		return nil, ErrNotReady
	}
	return []Pod{{ContainerID: "c1", IfName: "eth0", Namespace: "ns", Name: "p", IP: "10.128.0.2/24",
		MAC: "0a:58:0a:80:00:02", OFPort: 2, HostVeth: "ofs1234", Netns: "/var/run/netns/x"}}, nil
}

func (f fakeSource) Flows(ctx context.Context) ([]Stage, error) {
	if !f.ready {
		return nil, ErrNotReady
	}
	return nil, errors.New("dump flows of bridge br-int: openflow connection to the switch is down")
}

func (f fakeSource) Peers() ([]Peer, error) { return []Peer{}, nil }

func (f fakeSource) Policies(ctx context.Context) (PolicyReport, error) {
	return PolicyReport{Enabled: true, Synced: true, Policies: 2, PodPolicies: []PodPolicy{{Namespace: "ns", Name: "p",
		IngressIsolated: true, IngressPolicies: []string{"deny"}, Denied: map[string]uint64{"ingress": 3}}}}, nil
}

func (f fakeSource) Services(context.Context) (ServiceReport, error) {
	return ServiceReport{Ports: []ServicePort{}}, nil
}

func (f fakeSource) PolicyStatus() (PolicyReport, error) {
	r, err := f.Policies(context.Background())
	r.PodPolicies = []PodPolicy{}
	return r, err
}

func start(t *testing.T, src Source) (*Server, string) {
	t.Helper()
	testenv.Privileged(t)
	path := filepath.Join(t.TempDir(), "run", "ctl.sock")
	s := NewServer(path, src, nil)
	if err := s.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Shutdown(context.Background()) })
	return s, path
}

func TestClientServer(t *testing.T) {
	_, path := start(t, fakeSource{ready: true})
	fi, err := os.Stat(path)
	if err != nil || fi.Mode().Perm() != 0o600 {
		t.Errorf("socket %s: mode %v err %v, want 0600", path, fi.Mode(), err)
	}
	if di, _ := os.Stat(filepath.Dir(path)); di.Mode().Perm() != 0o700 {
		t.Errorf("socket directory mode %v, want 0700", di.Mode().Perm())
	}
	c := NewClient(path, 10*time.Second)
	pods, err := c.Pods(t.Context())
	if err != nil || len(pods) != 1 || pods[0].ContainerID != "c1" || pods[0].OFPort != 2 {
		t.Errorf("Pods: %+v %v", pods, err)
	}
	peers, err := c.Peers(t.Context())
	if err != nil || peers == nil || len(peers) != 0 {
		t.Errorf("Peers: %#v %v", peers, err)
	}
	// The daemon's error reaches the caller with its message.
	if _, err := c.Flows(t.Context()); err == nil || !strings.Contains(err.Error(), "connection to the switch is down") {
		t.Errorf("Flows with the switch down: %v", err)
	}
	// Only GET.
	hc := &http.Client{Transport: c.http.Transport}
	resp, err := hc.Post("http://x"+PathPods, "application/json", nil)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusMethodNotAllowed {
		t.Errorf("POST %s: %d, want 405", PathPods, resp.StatusCode)
	}
}

func TestNotReadyIs503(t *testing.T) {
	_, path := start(t, fakeSource{})
	_, err := NewClient(path, 10*time.Second).Pods(t.Context())
	if err == nil || !strings.Contains(err.Error(), "503") || !strings.Contains(err.Error(), "connecting to Open vSwitch") {
		t.Errorf("Pods before ready: %v, want 503 saying the daemon is connecting", err)
	}
}

func TestSocketPathChecks(t *testing.T) {
	// A second daemon on a live socket is refused.
	s, path := start(t, fakeSource{ready: true})
	if err := NewServer(path, fakeSource{}, nil).Start(); err == nil || !strings.Contains(err.Error(), "another server") {
		t.Errorf("second server on a live socket: %v", err)
	}
	// A stale socket (a daemon that died without removing it) is replaced.
	_ = s.Shutdown(t.Context())
	l, err := net.Listen("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	l.(*net.UnixListener).SetUnlinkOnClose(false)
	l.Close()
	if _, err := os.Stat(path); err != nil {
		t.Fatalf("stale socket not left behind: %v", err)
	}
	if err := os.WriteFile(path+".tmp", nil, 0o600); err != nil {
		t.Fatal(err)
	}
	s2 := NewServer(path, fakeSource{ready: true}, nil)
	if err := s2.Start(); err != nil {
		t.Errorf("start after the old server: %v", err)
	}
	_ = s2.Shutdown(t.Context())
	// A regular file is never removed.
	file := path + ".tmp"
	if err := NewServer(file, fakeSource{}, nil).Start(); err == nil || !strings.Contains(err.Error(), "not a socket") {
		t.Errorf("socket path on a regular file: %v", err)
	}
	if _, err := os.Stat(file); err != nil {
		t.Errorf("regular file removed: %v", err)
	}
	// The client names the socket when nothing listens.
	if _, err := NewClient(path, time.Second).Pods(t.Context()); err == nil || !strings.Contains(err.Error(), path) {
		t.Errorf("client without a daemon: %v, want the socket path named", err)
	}
}
