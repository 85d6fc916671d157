package cni

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
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

// silentDaemon serves a daemon socket that never answers: each request waits until the
// client goes away or the test ends.
func silentDaemon(t *testing.T) string {
	release := make(chan struct{})
	t.Cleanup(func() { close(release) })
	return serveUnix(t, func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-release:
		case <-r.Context().Done():
		}
	})
}

func TestClientTimeout(t *testing.T) {
	sock := silentDaemon(t)
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

// bigResult is an ADD result of more than n bytes (padded with routes), which a net/http
// server sends in chunked transfer coding when the handler gives no Content-Length.
func bigResult(n int) string {
	var b strings.Builder
	b.WriteString(`{"result":{"cniVersion":"1.1.0","ips":[{"address":"10.0.0.2/24"}],"routes":[`)
	for i := 0; b.Len() < n; i++ {
		if i > 0 {
			b.WriteString(",")
		}
		fmt.Fprintf(&b, `{"dst":"10.%d.%d.0/24"}`, i/256%256, i%256)
	}
	b.WriteString(`]}}`)
	return b.String()
}

// The daemon's net/http server sends answers of more than 2 KiB chunked, shorter ones
// with a Content-Length; a server may also end the body by closing the connection. The
// client reads each whole, and refuses (code 6) an answer over MaxResponseBytes.
func TestClientAnswerFraming(t *testing.T) {
	big := bigResult(100 << 10)
	for _, tc := range []struct {
		name, body string
		flush      bool
	}{
		{"content-length", `{"result":{"cniVersion":"1.1.0","ips":[{"address":"10.0.0.2/24"}]}}`, false},
		{"chunked", big, false},
		{"chunked-flushed", big, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			sock := serveUnix(t, func(w http.ResponseWriter, r *http.Request) {
				if tc.flush { // many small chunks
					for i := 0; i < len(tc.body); i += 1000 {
						w.Write([]byte(tc.body[i:min(i+1000, len(tc.body))]))
						w.(http.Flusher).Flush()
					}
					return
				}
				w.Write([]byte(tc.body))
			})
			res, err := NewClient(sock, 5*time.Second).Do(context.Background(), addReq)
			if err != nil {
				t.Fatal(err)
			}
			var want Response
			if err := json.Unmarshal([]byte(tc.body), &want); err != nil {
				t.Fatal(err)
			}
			if string(res) != string(want.Result) {
				t.Errorf("result of %d bytes, want the daemon's %d bytes", len(res), len(want.Result))
			}
		})
	}
	t.Run("too-large", func(t *testing.T) {
		sock := serveUnix(t, func(w http.ResponseWriter, r *http.Request) {
			w.Write([]byte(bigResult(MaxResponseBytes + 10)))
		})
		_, err := NewClient(sock, 5*time.Second).Do(context.Background(), addReq)
		if code, msg := cniCode(t, err); code != types.ErrDecodingFailure || !strings.Contains(msg, "exceeds 1048576 bytes") {
			t.Errorf("code %d msg %q, want 6 saying the answer exceeds 1048576 bytes", code, msg)
		}
	})
	// Raw servers: a body ended by closing the connection, and one cut short of its
	// Content-Length (code 5: the connection failed mid-answer).
	for _, tc := range []struct {
		name, answer string
		code         uint
	}{
		{"until-close", "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n\r\n" + `{"result":{"cniVersion":"1.1.0"}}`, 0},
		{"interim-100", "HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 200 OK\r\nContent-Length: 33\r\n\r\n" + `{"result":{"cniVersion":"1.1.0"}}`, 0},
		{"cut-short", "HTTP/1.1 200 OK\r\nContent-Length: 500\r\n\r\n" + `{"result":{"cniVersion":"1.1.0"}}`, types.ErrIOFailure},
		{"no-answer", "", types.ErrIOFailure},
		{"not-http", "SSH-2.0-OpenSSH_9.2\r\n", types.ErrIOFailure},
	} {
		t.Run(tc.name, func(t *testing.T) {
			sock := filepath.Join(t.TempDir(), "raw.sock")
			l, err := net.Listen("unix", sock)
			if err != nil {
				t.Fatal(err)
			}
			defer l.Close()
			go func() {
				c, err := l.Accept()
				if err != nil {
					return
				}
				defer c.Close()
				// Read the request (header and body) before answering.
				req, err := http.ReadRequest(bufio.NewReader(c))
				if err == nil {
					io.Copy(io.Discard, req.Body)
				}
				c.Write([]byte(tc.answer))
			}()
			res, err := NewClient(sock, 5*time.Second).Do(context.Background(), addReq)
			if tc.code == 0 {
				if err != nil || string(res) != `{"cniVersion":"1.1.0"}` {
					t.Errorf("result %s, %v; want the daemon's", res, err)
				}
				return
			}
			if code, msg := cniCode(t, err); code != tc.code {
				t.Errorf("code %d (%q), want %d", code, msg, tc.code)
			}
		})
	}
}

// A request whose context is cancelled while the daemon has not answered ends at once
// with code 5 (the request failed), not 11 (the daemon's timeout).
func TestClientCancelled(t *testing.T) {
	sock := silentDaemon(t)
	ctx, cancel := context.WithCancel(context.Background())
	time.AfterFunc(100*time.Millisecond, cancel)
	start := time.Now()
	_, err := NewClient(sock, time.Minute).Do(ctx, addReq)
	if code, msg := cniCode(t, err); code != types.ErrIOFailure {
		t.Errorf("code %d msg %q, want 5", code, msg)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("cancelled request took %s", d)
	}
}

// A daemon that sends its answer's header and then nothing more within the client's
// timeout did not answer in time either: code 11 (try again later), as when the header
// itself is late (TestClientTimeout), not 5.
func TestClientTimeoutInBody(t *testing.T) {
	for _, cancelled := range []bool{false, true} {
		t.Run(fmt.Sprintf("cancelled=%v", cancelled), func(t *testing.T) { clientTimeoutInBody(t, cancelled) })
	}
}

// clientTimeoutInBody: with cancelled, the caller's context is cancelled while the body
// is late: code 5, as TestClientCancelled before the header.
func clientTimeoutInBody(t *testing.T, cancelled bool) {
	sock := filepath.Join(t.TempDir(), "cni.sock")
	l, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	release := make(chan struct{})
	defer close(release)
	go func() {
		c, err := l.Accept()
		if err != nil {
			return
		}
		defer c.Close()
		if req, err := http.ReadRequest(bufio.NewReader(c)); err == nil {
			io.Copy(io.Discard, req.Body)
		}
		c.Write([]byte("HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\n{\"result\":"))
		<-release
	}()
	start := time.Now()
	if cancelled {
		ctx, cancel := context.WithCancel(context.Background())
		time.AfterFunc(100*time.Millisecond, cancel)
		_, err = NewClient(sock, time.Minute).Do(ctx, addReq)
		if code, msg := cniCode(t, err); code != types.ErrIOFailure {
			t.Errorf("code %d msg %q, want 5", code, msg)
		}
		return
	}
	_, err = NewClient(sock, 300*time.Millisecond).Do(context.Background(), addReq)
	code, msg := cniCode(t, err)
	if code != types.ErrTryAgainLater || !strings.Contains(msg, "did not answer within 300ms") {
		t.Errorf("code %d msg %q, want 11 saying it did not answer", code, msg)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("timeout took %s", d)
	}
}
