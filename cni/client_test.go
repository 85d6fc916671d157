package cni

import (
	"context"
	"encoding/json"
	"net"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/containernetworking/cni/pkg/types"
)

// serveUnix runs an HTTP handler on a fresh unix socket and returns its path.
func serveUnix(t *testing.T, h http.HandlerFunc) string {
	t.Helper()
	sock := filepath.Join(t.TempDir(), "cni.sock")
	l, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: h}
	go srv.Serve(l)
	t.Cleanup(func() { srv.Close() })
	return sock
}

var addReq = &Request{Command: CmdAdd, ContainerID: "c1", Netns: "/var/run/netns/x", IfName: "eth0",
	Config: []byte(`{"cniVersion":"1.1.0","name":"n"}`)}

func TestClientUnreachableSocket(t *testing.T) {
	sock := filepath.Join(t.TempDir(), "missing", "cni.sock")
	_, err := NewClient(sock, 5*time.Second).Do(context.Background(), addReq)
	code, msg := cniCode(t, err)
	if code != types.ErrTryAgainLater {
		t.Errorf("code %d, want 11 (try again later)", code)
	}
	if !strings.Contains(msg, sock) || !strings.Contains(msg, "ofsdn-node daemon must be running") {
		t.Errorf("message %q must name the socket %s and say the ofsdn-node daemon must be running", msg, sock)
	}
}

func TestClientPassesDaemonErrorAndResult(t *testing.T) {
	var got Request
	sock := serveUnix(t, func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodPost || r.URL.Path != RequestPath {
			t.Errorf("request %s %s, want POST %s", r.Method, r.URL.Path, RequestPath)
		}
		if err := json.NewDecoder(r.Body).Decode(&got); err != nil {
			t.Error(err)
		}
		if got.Command == CmdDel {
			w.WriteHeader(http.StatusInternalServerError)
			w.Write([]byte(`{"error":{"code":3,"msg":"no such container","details":"c1"}}`))
			return
		}
		w.Write([]byte(`{"result":{"cniVersion":"1.1.0","ips":[{"address":"10.0.0.2/24"}]}}`))
	})
	c := NewClient(sock, 0)
	res, err := c.Do(context.Background(), addReq)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(res), "10.0.0.2/24") {
		t.Errorf("result %s", res)
	}
	if string(got.Config) != string(addReq.Config) || got.ContainerID != "c1" || got.Netns != "/var/run/netns/x" {
		t.Errorf("daemon saw %+v", got)
	}
	_, err = c.Do(context.Background(), &Request{Command: CmdDel, ContainerID: "c1", IfName: "eth0"})
	code, msg := cniCode(t, err)
	e := err.(*types.Error)
	if code != types.ErrUnknownContainer || msg != "no such container" || e.Details != "c1" {
		t.Errorf("daemon error came back as %+v", e)
	}
}

func TestClientUndecodableAnswer(t *testing.T) {
	sock := serveUnix(t, func(w http.ResponseWriter, r *http.Request) {
		w.Write([]byte("<html>surprise</html>"))
	})
	_, err := NewClient(sock, 0).Do(context.Background(), addReq)
	if code, _ := cniCode(t, err); code != types.ErrDecodingFailure {
		t.Errorf("code %d, want 6", code)
	}
}

func TestClientTimeout(t *testing.T) {
	release := make(chan struct{})
	sock := serveUnix(t, func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-release:
		case <-r.Context().Done():
		}
	})
	defer close(release)
	start := time.Now()
	_, err := NewClient(sock, 200*time.Millisecond).Do(context.Background(), addReq)
	code, msg := cniCode(t, err)
	if code != types.ErrTryAgainLater || !strings.Contains(msg, "did not answer within 200ms") {
		t.Errorf("code %d msg %q, want 11 saying it did not answer", code, msg)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("timeout took %s", d)
	}
}
