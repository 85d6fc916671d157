package server

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/containernetworking/cni/pkg/types"
	current "github.com/containernetworking/cni/pkg/types/100"

	"github.com/ofsdn/ofsdn/cni"

	"github.com/ofsdn/ofsdn/test/testenv"
)

// fakeHandler records the requests it gets and answers with canned values.
// It stands in for the pod manager: these tests are about the server's
// protocol handling, not pod wiring.
type fakeHandler struct {
	mu     sync.Mutex
	calls  []cni.Request
	result *current.Result
	err    error
	panic  bool
}

func (f *fakeHandler) record(req *cni.Request) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls = append(f.calls, *req)
	if f.panic {
		panic("handler exploded")
	}
	return f.err
}

func (f *fakeHandler) Add(_ context.Context, req *cni.Request) (*current.Result, error) {
	if err := f.record(req); err != nil {
		return nil, err
	}
	return f.result, nil
}
func (f *fakeHandler) Del(_ context.Context, req *cni.Request) error    { return f.record(req) }
func (f *fakeHandler) Check(_ context.Context, req *cni.Request) error  { return f.record(req) }
func (f *fakeHandler) Status(_ context.Context, req *cni.Request) error { return f.record(req) }
func (f *fakeHandler) GC(_ context.Context, req *cni.Request) error     { return f.record(req) }

func (f *fakeHandler) Calls() []cni.Request {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]cni.Request(nil), f.calls...)
}

func cannedResult() *current.Result {
	ip, ipnet, _ := net.ParseCIDR("10.244.1.5/24")
	ipnet.IP = ip
	_, dflt, _ := net.ParseCIDR("0.0.0.0/0")
	mac := "0a:58:0a:f4:01:05"
	return &current.Result{
		CNIVersion: "1.0.0", // the server must send 1.1.0 whatever the handler says
		Interfaces: []*current.Interface{{Name: "eth0", Mac: mac, Sandbox: "/var/run/netns/pod1"}},
		IPs:        []*current.IPConfig{{Interface: current.Int(0), Address: *ipnet, Gateway: net.ParseIP("10.244.1.1")}},
		Routes:     []*types.Route{{Dst: *dflt, GW: net.ParseIP("10.244.1.1")}},
	}
}

const netconf = `{"cniVersion":"1.1.0","name":"ofsdn","type":"ofsdn"}`

func testLogger(t *testing.T) *slog.Logger {
	return slog.New(slog.NewTextHandler(tWriter{t}, &slog.HandlerOptions{Level: slog.LevelDebug}))
}

type tWriter struct{ t *testing.T }

func (w tWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}

// startServer starts a ready server with h on a socket under a fresh
// directory and returns it; it is shut down when the test ends.
func startServer(t *testing.T, h Handler) *Server {
	t.Helper()
	testenv.Privileged(t)
	sock := filepath.Join(t.TempDir(), "run", "ofsdn", "cni.sock")
	s := New(sock, h, testLogger(t))
	if err := s.Start(); err != nil {
		t.Fatal(err)
	}
	s.SetReady(true)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := s.Shutdown(ctx); err != nil {
			t.Errorf("Shutdown: %v", err)
		}
		if _, err := os.Lstat(sock); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("socket %s still there after Shutdown: %v", sock, err)
		}
	})
	return s
}

func addRequest() *cni.Request {
	return &cni.Request{Command: cni.CmdAdd, ContainerID: "ctr-1", Netns: "/var/run/netns/pod1", IfName: "eth0",
		Args: "IgnoreUnknown=1;K8S_POD_NAMESPACE=default;K8S_POD_NAME=web-0", Path: "/opt/cni/bin",
		Config: []byte(netconf)}
}

// wantCode checks err is a CNI error with code and a message containing
// each of the parts.
func wantCode(t *testing.T, err error, code uint, parts ...string) *types.Error {
	t.Helper()
	var e *types.Error
	if !errors.As(err, &e) {
		t.Fatalf("error %v (%T) is not a CNI error; want code %d", err, err, code)
	}
	if e.Code != code {
		t.Errorf("CNI error code %d (%q), want %d", e.Code, e.Msg, code)
	}
	for _, p := range parts {
		if !strings.Contains(e.Msg, p) {
			t.Errorf("CNI error message %q does not contain %q", e.Msg, p)
		}
	}
	return e
}

func TestRoundTripAllCommands(t *testing.T) {
	h := &fakeHandler{result: cannedResult()}
	s := startServer(t, h)
	c := cni.NewClient(s.SocketPath(), 10*time.Second)
	ctx := context.Background()

	raw, err := c.Do(ctx, addRequest())
	if err != nil {
		t.Fatal(err)
	}
	var res current.Result
	if err := json.Unmarshal(raw, &res); err != nil {
		t.Fatalf("decode result %s: %v", raw, err)
	}
	if res.CNIVersion != "1.1.0" {
		t.Errorf("result cniVersion %q, want 1.1.0", res.CNIVersion)
	}
	if len(res.IPs) != 1 || res.IPs[0].Address.String() != "10.244.1.5/24" || !res.IPs[0].Gateway.Equal(net.ParseIP("10.244.1.1")) ||
		*res.IPs[0].Interface != 0 || res.Interfaces[0].Mac != "0a:58:0a:f4:01:05" || res.Routes[0].Dst.String() != "0.0.0.0/0" {
		t.Errorf("result %s does not match the handler's", raw)
	}

	for _, req := range []*cni.Request{
		{Command: cni.CmdDel, ContainerID: "ctr-1", IfName: "eth0", Config: []byte(netconf)}, // netns optional for DEL
		{Command: cni.CmdCheck, ContainerID: "ctr-1", Netns: "/var/run/netns/pod1", IfName: "eth0", Config: []byte(netconf)},
		{Command: cni.CmdStatus, Config: []byte(netconf)},
		{Command: cni.CmdGC, Config: []byte(`{"cniVersion":"1.1.0","name":"ofsdn","cni.dev/valid-attachments":[{"containerID":"ctr-2","ifname":"eth0"}]}`)},
	} {
		raw, err := c.Do(ctx, req)
		if err != nil || raw != nil {
			t.Errorf("%s: result %s, error %v; want no result, no error", req.Command, raw, err)
		}
	}

	calls := h.Calls()
	var cmds []string
	for _, c := range calls {
		cmds = append(cmds, c.Command)
	}
	if got := strings.Join(cmds, ","); got != "ADD,DEL,CHECK,STATUS,GC" {
		t.Fatalf("handler calls %s, want ADD,DEL,CHECK,STATUS,GC", got)
	}
	want := addRequest()
	got := calls[0]
	if got.ContainerID != want.ContainerID || got.Netns != want.Netns || got.IfName != want.IfName ||
		got.Args != want.Args || got.Path != want.Path || !bytes.Equal(got.Config, want.Config) {
		t.Errorf("handler got %+v, want %+v", got, *want)
	}
	if !bytes.Contains(calls[4].Config, []byte("cni.dev/valid-attachments")) {
		t.Errorf("GC netconf %s lost cni.dev/valid-attachments", calls[4].Config)
	}
}

func TestHandlerErrorMapping(t *testing.T) {
	h := &fakeHandler{}
	s := startServer(t, h)
	c := cni.NewClient(s.SocketPath(), 10*time.Second)

	h.err = types.NewError(types.ErrUnknownContainer, "container ctr-1 unknown", "no lease")
	_, err := c.Do(context.Background(), addRequest())
	if e := wantCode(t, err, types.ErrUnknownContainer, "container ctr-1 unknown"); e.Details != "no lease" {
		t.Errorf("details %q, want kept", e.Details)
	}

	h.err = fmt.Errorf("wiring pod: %w", types.NewError(types.ErrTryAgainLater, "OpenFlow connection down", ""))
	_, err = c.Do(context.Background(), addRequest())
	wantCode(t, err, types.ErrTryAgainLater, "OpenFlow connection down")

	h.err = errors.New("bridge br-int has no port ofs1234: boom")
	_, err = c.Do(context.Background(), addRequest())
	wantCode(t, err, types.ErrInternal, "bridge br-int has no port ofs1234: boom")

	h.err = types.NewError(types.ErrPluginNotAvailable, "IP pool exhausted", "")
	_, err = c.Do(context.Background(), &cni.Request{Command: cni.CmdStatus, Config: []byte(netconf)})
	wantCode(t, err, types.ErrPluginNotAvailable, "IP pool exhausted")

	h.err = nil
	h.panic = true
	_, err = c.Do(context.Background(), addRequest())
	wantCode(t, err, types.ErrInternal, "panicked", "handler exploded")

	h.panic = false
	h.result = nil
	_, err = c.Do(context.Background(), addRequest())
	wantCode(t, err, types.ErrInternal, "neither a result nor an error")
}

// postRaw sends body as POST /cni and decodes the answer.
func postRaw(t *testing.T, sock string, method string, body io.Reader) (int, cni.Response) {
	t.Helper()
	hc := &http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		return (&net.Dialer{}).DialContext(ctx, "unix", sock)
	}}}
	req, err := http.NewRequest(method, "http://ofsdn-node"+cni.RequestPath, body)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := hc.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var r cni.Response
	if err := json.NewDecoder(resp.Body).Decode(&r); err != nil {
		t.Fatalf("answer is not a cni.Response: %v", err)
	}
	return resp.StatusCode, r
}

func TestBadJSON(t *testing.T) {
	h := &fakeHandler{}
	s := startServer(t, h)
	status, r := postRaw(t, s.SocketPath(), http.MethodPost, strings.NewReader(`{"command":"ADD",`))
	if status != http.StatusBadRequest || r.Error == nil || r.Error.Code != types.ErrDecodingFailure {
		t.Errorf("truncated JSON: HTTP %d, %+v; want 400 with code 6", status, r.Error)
	}
	status, r = postRaw(t, s.SocketPath(), http.MethodGet, nil)
	if status != http.StatusMethodNotAllowed || r.Error == nil {
		t.Errorf("GET: HTTP %d, %+v; want 405 with a CNI error", status, r.Error)
	}
	if n := len(h.Calls()); n != 0 {
		t.Errorf("handler called %d times for bad requests", n)
	}
}

func TestValidation(t *testing.T) {
	h := &fakeHandler{result: cannedResult()}
	s := startServer(t, h)
	c := cni.NewClient(s.SocketPath(), 10*time.Second)
	mod := func(f func(r *cni.Request)) *cni.Request { r := addRequest(); f(r); return r }
	for _, tc := range []struct {
		name string
		req  *cni.Request
		code uint
		want string
	}{
		{"no command", mod(func(r *cni.Request) { r.Command = "" }), 4, "CNI_COMMAND"},
		{"VERSION is not forwarded", mod(func(r *cni.Request) { r.Command = "VERSION" }), 4, "CNI_COMMAND"},
		{"ADD without container ID", mod(func(r *cni.Request) { r.ContainerID = "" }), 4, "CNI_CONTAINERID"},
		{"DEL without container ID", mod(func(r *cni.Request) { r.Command, r.ContainerID = cni.CmdDel, "" }), 4, "CNI_CONTAINERID"},
		{"CHECK without container ID", mod(func(r *cni.Request) { r.Command, r.ContainerID = cni.CmdCheck, "" }), 4, "CNI_CONTAINERID"},
		{"bad container ID", mod(func(r *cni.Request) { r.ContainerID = "-x/../y" }), 4, "CNI_CONTAINERID"},
		{"ADD without ifname", mod(func(r *cni.Request) { r.IfName = "" }), 4, "CNI_IFNAME"},
		{"DEL without ifname", mod(func(r *cni.Request) { r.Command, r.IfName = cni.CmdDel, "" }), 4, "CNI_IFNAME"},
		{"ifname too long", mod(func(r *cni.Request) { r.IfName = "eth0123456789012" }), 4, "CNI_IFNAME"},
		{"ADD without netns", mod(func(r *cni.Request) { r.Netns = "" }), 4, "CNI_NETNS"},
		{"CHECK without netns", mod(func(r *cni.Request) { r.Command, r.Netns = cni.CmdCheck, "" }), 4, "CNI_NETNS"},
		{"bad CNI_ARGS", mod(func(r *cni.Request) { r.Args = "K8S_POD_NAME=a;oops" }), 4, "CNI_ARGS"},
		{"no netconf", mod(func(r *cni.Request) { r.Config = nil }), 6, "netconf"},
		{"netconf not JSON", mod(func(r *cni.Request) { r.Config = []byte("{") }), 6, "netconf"},
		{"netconf without name", mod(func(r *cni.Request) { r.Config = []byte(`{"cniVersion":"1.1.0"}`) }), 7, `"name"`},
		{"netconf without cniVersion", mod(func(r *cni.Request) { r.Config = []byte(`{"name":"n"}`) }), 7, `"cniVersion"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := c.Do(context.Background(), tc.req)
			wantCode(t, err, tc.code, tc.want)
		})
	}
	if n := len(h.Calls()); n != 0 {
		t.Errorf("handler called %d times for invalid requests", n)
	}
	// STATUS and GC need no container ID, ifname or netns.
	for _, cmd := range []string{cni.CmdStatus, cni.CmdGC} {
		if _, err := c.Do(context.Background(), &cni.Request{Command: cmd, Config: []byte(netconf)}); err != nil {
			t.Errorf("%s without CNI_CONTAINERID: %v", cmd, err)
		}
	}
}

func TestNotReady(t *testing.T) {
	h := &fakeHandler{result: cannedResult()}
	s := startServer(t, h)
	s.SetReady(false)
	if s.Ready() {
		t.Fatal("Ready() after SetReady(false)")
	}
	c := cni.NewClient(s.SocketPath(), 10*time.Second)
	_, err := c.Do(context.Background(), addRequest())
	wantCode(t, err, types.ErrTryAgainLater, "not ready")
	_, err = c.Do(context.Background(), &cni.Request{Command: cni.CmdDel, ContainerID: "c", IfName: "eth0", Config: []byte(netconf)})
	wantCode(t, err, types.ErrTryAgainLater, "not ready")
	_, err = c.Do(context.Background(), &cni.Request{Command: cni.CmdStatus, Config: []byte(netconf)})
	wantCode(t, err, types.ErrPluginNotAvailable, "not ready")
	if n := len(h.Calls()); n != 0 {
		t.Errorf("handler called %d times while not ready", n)
	}
	s.SetReady(true)
	if _, err := c.Do(context.Background(), addRequest()); err != nil {
		t.Errorf("ADD after SetReady(true): %v", err)
	}
}

func TestOversizedBody(t *testing.T) {
	h := &fakeHandler{result: cannedResult()}
	s := startServer(t, h)
	big := addRequest()
	// A valid netconf just over the limit once base64-encoded.
	big.Config = []byte(`{"cniVersion":"1.1.0","name":"ofsdn","pad":"` + strings.Repeat("x", MaxRequestBytes) + `"}`)
	_, err := cni.NewClient(s.SocketPath(), 10*time.Second).Do(context.Background(), big)
	wantCode(t, err, types.ErrInvalidNetworkConfig, "exceeds 1048576 bytes")
	if n := len(h.Calls()); n != 0 {
		t.Errorf("handler called %d times for an oversized request", n)
	}
	// Just under the limit is fine.
	ok := addRequest()
	ok.Config = []byte(`{"cniVersion":"1.1.0","name":"ofsdn","pad":"` + strings.Repeat("x", 600<<10) + `"}`)
	if _, err := cni.NewClient(s.SocketPath(), 10*time.Second).Do(context.Background(), ok); err != nil {
		t.Errorf("600 KiB netconf: %v", err)
	}
}

func TestSocketPermissions(t *testing.T) {
	testenv.Privileged(t)
	// A missing directory is created 0700 root:root.
	dir := filepath.Join(t.TempDir(), "ofsdn")
	sock := filepath.Join(dir, "cni.sock")
	s := New(sock, &fakeHandler{}, testLogger(t))
	if err := s.Start(); err != nil {
		t.Fatal(err)
	}
	defer s.Shutdown(context.Background())
	fi, err := os.Stat(dir)
	if err != nil {
		t.Fatal(err)
	}
	st := fi.Sys().(*syscall.Stat_t)
	if fi.Mode().Perm() != 0o700 || st.Uid != 0 || st.Gid != 0 {
		t.Errorf("socket directory %s: mode %o owner %d:%d, want 0700 root:root", dir, fi.Mode().Perm(), st.Uid, st.Gid)
	}
	fi, err = os.Lstat(sock)
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode()&os.ModeSocket == 0 || fi.Mode().Perm() != 0o600 {
		t.Errorf("socket %s: mode %s, want a socket with mode 0600", sock, fi.Mode())
	}
}

func TestStaleSocket(t *testing.T) {
	testenv.Privileged(t)
	dir := filepath.Join(t.TempDir(), "ofsdn")
	if err := os.Mkdir(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	sock := filepath.Join(dir, "cni.sock")

	// A socket left behind by a daemon that died: nobody listens on it.
	l, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	l.(*net.UnixListener).SetUnlinkOnClose(false)
	l.Close()
	if _, err := os.Lstat(sock); err != nil {
		t.Fatalf("stale socket not left behind: %v", err)
	}
	s := New(sock, &fakeHandler{}, testLogger(t))
	if err := s.Start(); err != nil {
		t.Fatalf("Start over a stale socket: %v", err)
	}
	s.SetReady(true)
	if _, err := cni.NewClient(sock, 5*time.Second).Do(context.Background(), &cni.Request{Command: cni.CmdStatus, Config: []byte(netconf)}); err != nil {
		t.Errorf("STATUS on the new server: %v", err)
	}

	// A second server must not steal the socket of a live one.
	err = New(sock, &fakeHandler{}, testLogger(t)).Start()
	if err == nil || !strings.Contains(err.Error(), "another server is listening") {
		t.Errorf("second Start on a live socket: %v, want refusal", err)
	}
	if err := s.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}

	// Something that is not a socket is never deleted.
	if err := os.WriteFile(sock, []byte("keep me"), 0o600); err != nil {
		t.Fatal(err)
	}
	err = New(sock, &fakeHandler{}, testLogger(t)).Start()
	if err == nil || !strings.Contains(err.Error(), "not a socket") {
		t.Errorf("Start on a regular file: %v, want refusal", err)
	}
	if data, _ := os.ReadFile(sock); string(data) != "keep me" {
		t.Error("regular file at the socket path was changed")
	}
}

func TestServeUntilCancelled(t *testing.T) {
	testenv.Privileged(t)
	sock := filepath.Join(t.TempDir(), "ofsdn", "cni.sock")
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() { errc <- Serve(ctx, sock, &fakeHandler{result: cannedResult()}, testLogger(t)) }()
	c := cni.NewClient(sock, 5*time.Second)
	deadline := time.Now().Add(5 * time.Second)
	for {
		_, err := c.Do(context.Background(), addRequest())
		if err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("Serve never answered: %v", err)
		}
		time.Sleep(20 * time.Millisecond)
	}
	cancel()
	select {
	case err := <-errc:
		if err != nil {
			t.Errorf("Serve returned %v after cancel, want nil", err)
		}
	case <-time.After(15 * time.Second):
		t.Fatal("Serve did not return after cancel")
	}
	if _, err := os.Lstat(sock); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("socket still present after Serve returned: %v", err)
	}
}

// helperEnv makes the test binary act as a CNI client (see TestMain) that
// sends one STATUS to the socket it names and prints the CNI error JSON.
const helperEnv = "OFSDN_SERVER_TEST_CLIENT_SOCKET"

func TestMain(m *testing.M) {
	if sock := os.Getenv(helperEnv); sock != "" {
		_, err := cni.NewClient(sock, 5*time.Second).Do(context.Background(),
			&cni.Request{Command: cni.CmdStatus, Config: []byte(netconf)})
		json.NewEncoder(os.Stdout).Encode(err)
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// TestNonRootCallerRefused runs a client as uid 65534 (nobody). The socket's
// directory and file permissions are loosened by the test so that only the
// SO_PEERCRED check stands between that client and the handler.
func TestNonRootCallerRefused(t *testing.T) {
	testenv.Privileged(t)
	h := &fakeHandler{}
	base, err := os.MkdirTemp("", "ofsdn-peercred-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(base) })
	sock := filepath.Join(base, "run", "cni.sock")
	s := New(sock, h, testLogger(t))
	if err := s.Start(); err != nil {
		t.Fatal(err)
	}
	s.SetReady(true)
	defer s.Shutdown(context.Background())

	// Copy this test binary where nobody can execute it.
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(base, "client")
	data, err := os.ReadFile(self)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(bin, data, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{base, filepath.Dir(sock)} {
		if err := os.Chmod(p, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Chmod(sock, 0o666); err != nil {
		t.Fatal(err)
	}

	cmd := exec.Command(bin)
	cmd.Env = []string{helperEnv + "=" + sock}
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534}}
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("client as uid 65534: %v\n%s", err, out)
	}
	var e types.Error
	if err := json.Unmarshal(out, &e); err != nil {
		t.Fatalf("client output %q: %v", out, err)
	}
	if e.Code != types.ErrInternal || !strings.Contains(e.Msg, "caller uid 65534 is not root") {
		t.Errorf("non-root caller got %+v, want code 999 \"caller uid 65534 is not root\"", e)
	}
	if n := len(h.Calls()); n != 0 {
		t.Errorf("handler called %d times for a non-root caller", n)
	}
	// Root is still served.
	if _, err := cni.NewClient(sock, 5*time.Second).Do(context.Background(), &cni.Request{Command: cni.CmdStatus, Config: []byte(netconf)}); err != nil {
		t.Errorf("root caller: %v", err)
	}
}

// TestBadRequestsTable: every malformed request the socket may get is answered
// with the CNI error code of SPEC.md "Section 5: Result Types", "Error", and
// never reaches the handler.
func TestBadRequestsTable(t *testing.T) {
	h := &fakeHandler{result: cannedResult()}
	s := startServer(t, h)
	for _, tc := range []struct {
		name, body string
		code       uint
		want       string
	}{
		{"empty body", ``, 6, "decode"},
		{"not JSON", `hello`, 6, "decode"},
		{"JSON array", `[1,2]`, 6, "decode"},
		{"wrong field type", `{"command":7}`, 6, "decode"},
		{"config not base64", `{"command":"ADD","config":"%%%"}`, 6, "decode"},
		{"two objects", `{"command":"STATUS"}{"command":"STATUS"}`, 6, "more than one JSON value"},
		{"trailing garbage", `{"command":"STATUS"} x`, 6, "decode"},
		{"unknown cniVersion", reqJSON(t, &cni.Request{Command: cni.CmdStatus, Config: []byte(`{"cniVersion":"2.0.0","name":"n"}`)}), 1, `"2.0.0"`},
		{"STATUS on a 1.0.0 netconf", reqJSON(t, &cni.Request{Command: cni.CmdStatus, Config: []byte(`{"cniVersion":"1.0.0","name":"n"}`)}), 1, "STATUS needs cniVersion 1.1.0"},
		{"GC on a 0.4.0 netconf", reqJSON(t, &cni.Request{Command: cni.CmdGC, Config: []byte(`{"cniVersion":"0.4.0","name":"n"}`)}), 1, "GC needs cniVersion 1.1.0"},
		{"CHECK on a 0.3.1 netconf", reqJSON(t, &cni.Request{Command: cni.CmdCheck, ContainerID: "c", IfName: "eth0", Netns: "/run/netns/x",
			Config: []byte(`{"cniVersion":"0.3.1","name":"n"}`)}), 1, "CHECK needs cniVersion 0.4.0"},
		{"relative netns", reqJSON(t, &cni.Request{Command: cni.CmdAdd, ContainerID: "c", IfName: "eth0", Netns: "netns/x",
			Config: []byte(netconf)}), 4, "CNI_NETNS"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, r := postRaw(t, s.SocketPath(), http.MethodPost, strings.NewReader(tc.body))
			if r.Error == nil {
				t.Fatalf("no CNI error, want code %d", tc.code)
			}
			if r.Error.Code != tc.code || !strings.Contains(r.Error.Msg, tc.want) {
				t.Errorf("CNI error %d %q, want code %d containing %q", r.Error.Code, r.Error.Msg, tc.code, tc.want)
			}
		})
	}
	if n := len(h.Calls()); n != 0 {
		t.Errorf("handler called %d times for bad requests", n)
	}
	// Every version the CNI library knows is accepted for ADD.
	c := cni.NewClient(s.SocketPath(), 10*time.Second)
	for _, v := range cni.SupportedVersions {
		req := addRequest()
		req.Config = []byte(`{"cniVersion":"` + v + `","name":"n"}`)
		if _, err := c.Do(context.Background(), req); err != nil {
			t.Errorf("ADD with cniVersion %s: %v", v, err)
		}
	}
}

func reqJSON(t *testing.T, r *cni.Request) string {
	t.Helper()
	b, err := json.Marshal(r)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// TestSlowAndVanishingClients: a client that sends its body too slowly gets
// CNI error 5 once the read deadline passes, one that stalls in its headers
// is disconnected, one that goes away mid-body costs nothing; none of them
// reach the handler, and the server keeps serving.
func TestSlowAndVanishingClients(t *testing.T) {
	testenv.Privileged(t)
	h := &fakeHandler{result: cannedResult()}
	sock := filepath.Join(t.TempDir(), "run", "cni.sock")
	s := New(sock, h, testLogger(t))
	s.SetReadTimeouts(time.Second, 2*time.Second)
	if err := s.Start(); err != nil {
		t.Fatal(err)
	}
	s.SetReady(true)
	defer s.Shutdown(context.Background())
	body := reqJSON(t, addRequest())
	dial := func() net.Conn {
		c, err := net.Dial("unix", sock)
		if err != nil {
			t.Fatal(err)
		}
		c.SetDeadline(time.Now().Add(30 * time.Second)) // the test's own bound
		return c
	}
	head := fmt.Sprintf("POST %s HTTP/1.1\r\nHost: ofsdn-node\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n", cni.RequestPath, len(body))

	t.Run("slow body", func(t *testing.T) {
		c := dial()
		defer c.Close()
		if _, err := io.WriteString(c, head+body[:10]); err != nil {
			t.Fatal(err)
		}
		resp, err := http.ReadResponse(bufio.NewReader(c), nil)
		if err != nil {
			t.Fatalf("no answer to a stalled body: %v", err)
		}
		defer resp.Body.Close()
		var r cni.Response
		if err := json.NewDecoder(resp.Body).Decode(&r); err != nil {
			t.Fatal(err)
		}
		if resp.StatusCode != http.StatusRequestTimeout || r.Error == nil || r.Error.Code != types.ErrIOFailure ||
			!strings.Contains(r.Error.Msg, "did not arrive within 2s") {
			t.Errorf("stalled body: HTTP %d %+v, want 408 with CNI code 5", resp.StatusCode, r.Error)
		}
	})
	t.Run("slow headers", func(t *testing.T) {
		c := dial()
		defer c.Close()
		if _, err := io.WriteString(c, "POST /cni HTTP/1.1\r\nHost: x\r\n"); err != nil {
			t.Fatal(err)
		}
		// The server gives up on the headers and closes the connection.
		_, err := io.ReadAll(c)
		var ne net.Error
		if errors.As(err, &ne) && ne.Timeout() {
			t.Fatal("server kept a connection with stalled headers open for 30s")
		}
	})
	t.Run("client vanishes mid-body", func(t *testing.T) {
		for i := 0; i < 20; i++ {
			c := dial()
			io.WriteString(c, head+body[:len(body)/2])
			c.Close()
		}
	})
	if n := len(h.Calls()); n != 0 {
		t.Errorf("handler called %d times for incomplete requests", n)
	}
	if _, err := cni.NewClient(sock, 10*time.Second).Do(context.Background(), addRequest()); err != nil {
		t.Errorf("ADD after misbehaving clients: %v", err)
	}
}

// FuzzDecodeRequest feeds arbitrary bytes to the daemon's request decoding
// and validation, as they would arrive on the socket: no input may panic, every
// refusal is a CNI error with a code of the spec's table for bad input (1, 4,
// 6, 7), and an accepted request is one the Handler contract allows.
func FuzzDecodeRequest(f *testing.F) {
	for _, r := range []*cni.Request{
		addRequest(),
		{Command: cni.CmdDel, ContainerID: "ctr-1", IfName: "eth0", Config: []byte(netconf)},
		{Command: cni.CmdCheck, ContainerID: "c", Netns: "/proc/1/ns/net", IfName: "net1", Config: []byte(`{"cniVersion":"0.4.0","name":"n","prevResult":{"cniVersion":"0.4.0","ips":[{"version":"4","address":"10.0.0.2/24"}]}}`)},
		{Command: cni.CmdGC, Config: []byte(`{"cniVersion":"1.1.0","name":"ofsdn","cni.dev/valid-attachments":[{"containerID":"c","ifname":"eth0"}]}`)},
		{Command: cni.CmdStatus, Config: []byte(netconf)},
	} {
		b, _ := json.Marshal(r)
		f.Add(b)
	}
	for _, s := range []string{``, `{}`, `null`, `{"command":"ADD"}{}`, `{"command":"ADD","config":"e30="}`, `[`, `{"config":7}`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		req, e := decodeRequest(http.MaxBytesReader(nil, io.NopCloser(bytes.NewReader(data)), MaxRequestBytes), time.Second)
		if e == nil {
			e = validate(req)
		}
		if e != nil {
			switch e.Code {
			case types.ErrIncompatibleCNIVersion, types.ErrInvalidEnvironmentVariables, types.ErrDecodingFailure, types.ErrInvalidNetworkConfig:
			default:
				t.Fatalf("input %q: CNI error code %d (%s), want 1, 4, 6 or 7", data, e.Code, e.Msg)
			}
			if e.Msg == "" {
				t.Fatalf("input %q: CNI error %d without a message", data, e.Code)
			}
			return
		}
		switch req.Command {
		case cni.CmdAdd, cni.CmdCheck:
			if req.Netns == "" || req.Netns[0] != '/' {
				t.Fatalf("input %q: %s accepted without an absolute CNI_NETNS", data, req.Command)
			}
			fallthrough
		case cni.CmdDel:
			if req.ContainerID == "" || req.IfName == "" || len(req.IfName) > 15 {
				t.Fatalf("input %q: %s accepted with container %q ifname %q", data, req.Command, req.ContainerID, req.IfName)
			}
		case cni.CmdStatus, cni.CmdGC:
		default:
			t.Fatalf("input %q: command %q accepted", data, req.Command)
		}
		if _, err := cni.LoadNetConf(req.Config); err != nil {
			t.Fatalf("input %q: accepted with a netconf LoadNetConf refuses: %v", data, err)
		}
	})
}

// lockedBuffer is a log sink safe for the server's goroutines.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// TestNotReadyStatusPollsLoggedOnce: the runtime polls STATUS while the daemon starts;
// every poll is answered with code 50, but only the first is logged as a warning (the
// rest at debug), so start-up does not flood the log.
func TestNotReadyStatusPollsLoggedOnce(t *testing.T) {
	testenv.Privileged(t)
	var logs lockedBuffer
	s := New(filepath.Join(t.TempDir(), "cni.sock"), &fakeHandler{},
		slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug})))
	if err := s.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Shutdown(context.Background()) })
	c := cni.NewClient(s.SocketPath(), 10*time.Second)
	const polls = 5
	for i := 0; i < polls; i++ {
		_, err := c.Do(context.Background(), &cni.Request{Command: cni.CmdStatus, Config: []byte(netconf)})
		wantCode(t, err, types.ErrPluginNotAvailable, "not ready")
	}
	out := logs.String()
	if n := strings.Count(out, `level=WARN msg="CNI request refused" component=cni-server`); n != 1 {
		t.Errorf("%d not-ready STATUS polls logged %d warnings, want 1:\n%s", polls, n, out)
	}
	if n := strings.Count(out, `level=DEBUG msg="CNI request refused"`); n != polls-1 {
		t.Errorf("%d not-ready STATUS polls logged %d debug lines, want %d:\n%s", polls, n, polls-1, out)
	}
}
