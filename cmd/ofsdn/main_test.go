package main

// These tests build the plugin binary and run it the way a container runtime
// does, through libcni, against a real cni/server on a unix socket whose
// Handler is a fake returning canned answers. They test the plugin's CNI
// wiring (environment, stdin, result version conversion, error codes), not
// pod networking.

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/containernetworking/cni/libcni"
	"github.com/containernetworking/cni/pkg/types"
	types020 "github.com/containernetworking/cni/pkg/types/020"
	types040 "github.com/containernetworking/cni/pkg/types/040"
	current "github.com/containernetworking/cni/pkg/types/100"

	"github.com/ofsdn/ofsdn/cni"
	"github.com/ofsdn/ofsdn/cni/cnitest"
	"github.com/ofsdn/ofsdn/cni/server"

	"github.com/ofsdn/ofsdn/test/testenv"
)

// binDir holds the plugin binary "ofsdn", built once by TestMain.
var binDir string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "ofsdn-plugin-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	out, err := exec.Command("go", "build", "-o", filepath.Join(dir, "ofsdn"), ".").CombinedOutput()
	if err != nil {
		fmt.Fprintf(os.Stderr, "go build of the plugin failed: %v\n%s", err, out)
		os.RemoveAll(dir)
		os.Exit(1)
	}
	binDir = dir
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// fakeHandler records requests and answers with canned values; it stands in
// for the daemon's pod manager.
type fakeHandler struct {
	mu        sync.Mutex
	calls     []cni.Request
	addErr    error
	statusErr error
}

func (f *fakeHandler) record(req *cni.Request) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls = append(f.calls, *req)
}

func (f *fakeHandler) Add(_ context.Context, req *cni.Request) (*current.Result, error) {
	f.record(req)
	if f.addErr != nil {
		return nil, f.addErr
	}
	return cnitest.CannedResult(req.Netns), nil
}
func (f *fakeHandler) Del(_ context.Context, req *cni.Request) error   { f.record(req); return nil }
func (f *fakeHandler) Check(_ context.Context, req *cni.Request) error { f.record(req); return nil }
func (f *fakeHandler) GC(_ context.Context, req *cni.Request) error    { f.record(req); return nil }
func (f *fakeHandler) Status(_ context.Context, req *cni.Request) error {
	f.record(req)
	return f.statusErr
}

func (f *fakeHandler) Calls(command string) []cni.Request {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []cni.Request
	for _, c := range f.calls {
		if c.Command == command {
			out = append(out, c)
		}
	}
	return out
}

type tWriter struct{ t *testing.T }

func (w tWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}

// startDaemon runs a ready CNI server with a fake handler on a fresh socket.
func startDaemon(t *testing.T) (*fakeHandler, *server.Server) {
	t.Helper()
	testenv.Privileged(t)
	h := &fakeHandler{}
	s := server.New(filepath.Join(t.TempDir(), "run", "cni.sock"), h,
		slog.New(slog.NewTextHandler(tWriter{t}, nil)))
	if err := s.Start(); err != nil {
		t.Fatal(err)
	}
	s.SetReady(true)
	t.Cleanup(func() { s.Shutdown(context.Background()) })
	return h, s
}

func newCNI(t *testing.T) *libcni.CNIConfig {
	return libcni.NewCNIConfigWithCacheDir([]string{binDir}, t.TempDir(), nil)
}

func pluginConf(t *testing.T, cniVersion, socket string) *libcni.PluginConfig {
	t.Helper()
	conf, err := libcni.NetworkPluginConfFromBytes([]byte(fmt.Sprintf(
		`{"cniVersion":%q,"name":"ofsdn-test","type":"ofsdn","socket":%q}`, cniVersion, socket)))
	if err != nil {
		t.Fatal(err)
	}
	return conf
}

func confList(t *testing.T, cniVersion, socket string) *libcni.NetworkConfigList {
	t.Helper()
	list, err := libcni.NetworkConfFromBytes([]byte(fmt.Sprintf(
		`{"cniVersion":%q,"name":"ofsdn-test","plugins":[{"type":"ofsdn","socket":%q}]}`, cniVersion, socket)))
	if err != nil {
		t.Fatal(err)
	}
	return list
}

// runtimeConf is a pod attachment. The netns path does not exist: the fake
// handler does not use it, and skel only checks that it is not the plugin's
// own namespace.
func runtimeConf(id string) *libcni.RuntimeConf {
	return &libcni.RuntimeConf{
		ContainerID: id,
		NetNS:       "/var/run/netns/ofsdn-test-" + id,
		IfName:      "eth0",
		Args: [][2]string{{"IgnoreUnknown", "1"}, {"K8S_POD_NAMESPACE", "default"},
			{"K8S_POD_NAME", "web-0"}, {"K8S_POD_INFRA_CONTAINER_ID", id}},
	}
}

func wantCNIError(t *testing.T, err error, code uint, parts ...string) {
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
}

func TestVersion(t *testing.T) {
	info, err := newCNI(t).GetVersionInfo(context.Background(), "ofsdn")
	if err != nil {
		t.Fatal(err)
	}
	got := info.SupportedVersions()
	for _, v := range []string{"0.1.0", "0.2.0", "0.3.0", "0.3.1", "0.4.0", "1.0.0", "1.1.0"} {
		if !slices.Contains(got, v) {
			t.Errorf("VERSION lists %v, missing %s", got, v)
		}
	}
}

func TestAddForwardsRequest(t *testing.T) {
	h, s := startDaemon(t)
	rt := runtimeConf("ctr-fwd")
	res, err := newCNI(t).AddNetwork(context.Background(), pluginConf(t, "1.1.0", s.SocketPath()), rt)
	if err != nil {
		t.Fatal(err)
	}
	r, ok := res.(*current.Result)
	if !ok || r.CNIVersion != "1.1.0" {
		t.Fatalf("result %T %+v, want a 1.1.0 result", res, res)
	}
	want := cnitest.CannedResult(rt.NetNS)
	gotJSON, _ := json.Marshal(r)
	wantJSON, _ := json.Marshal(want)
	if !bytes.Equal(gotJSON, wantJSON) {
		t.Errorf("result\n%s\nwant\n%s", gotJSON, wantJSON)
	}
	adds := h.Calls(cni.CmdAdd)
	if len(adds) != 1 {
		t.Fatalf("daemon got %d ADDs, want 1", len(adds))
	}
	req := adds[0]
	if req.ContainerID != "ctr-fwd" || req.IfName != "eth0" || req.Netns != rt.NetNS || req.Path != binDir {
		t.Errorf("daemon got %+v", req)
	}
	pod, err := req.PodIdentity()
	if err != nil || pod != (cni.PodIdentity{Namespace: "default", Name: "web-0", InfraContainerID: "ctr-fwd"}) {
		t.Errorf("pod identity from CNI_ARGS %q: %+v, %v", req.Args, pod, err)
	}
	conf, err := cni.LoadNetConf(req.Config)
	if err != nil || conf.Socket != s.SocketPath() || conf.Name != "ofsdn-test" {
		t.Errorf("daemon got netconf %s (%v)", req.Config, err)
	}
}

func TestAddConvertsResultVersion(t *testing.T) {
	_, s := startDaemon(t)
	c := newCNI(t)
	for _, v := range []string{"1.1.0", "1.0.0", "0.4.0", "0.3.1", "0.3.0", "0.2.0", "0.1.0"} {
		t.Run(v, func(t *testing.T) {
			rt := runtimeConf("ctr-" + strings.ReplaceAll(v, ".", ""))
			res, err := c.AddNetwork(context.Background(), pluginConf(t, v, s.SocketPath()), rt)
			if err != nil {
				t.Fatal(err)
			}
			if res.Version() != v {
				t.Errorf("result version %s, want %s", res.Version(), v)
			}
			switch r := res.(type) {
			case *current.Result:
				if len(r.IPs) != 1 || r.IPs[0].Address.String() != "10.244.1.5/24" || *r.IPs[0].Interface != 1 {
					t.Errorf("%s result IPs %v", v, r.IPs)
				}
			case *types040.Result:
				// 0.3.x/0.4.0 results keep interfaces and carry the IP version.
				if len(r.IPs) != 1 || r.IPs[0].Version != "4" || r.IPs[0].Address.String() != "10.244.1.5/24" ||
					*r.IPs[0].Interface != 1 || r.Interfaces[1].Sandbox != rt.NetNS || len(r.Routes) != 1 {
					t.Errorf("%s result %+v", v, r)
				}
			case *types020.Result:
				if r.IP4 == nil || r.IP4.IP.String() != "10.244.1.5/24" || !r.IP4.Gateway.Equal(net.ParseIP("10.244.1.1")) ||
					len(r.IP4.Routes) != 1 {
					t.Errorf("%s result %+v", v, r)
				}
			default:
				t.Errorf("%s result has type %T", v, res)
			}
		})
	}
}

func TestLifecycleThroughList(t *testing.T) {
	h, s := startDaemon(t)
	c := newCNI(t)
	ctx := context.Background()
	list := confList(t, "1.1.0", s.SocketPath())
	rt := runtimeConf("ctr-life")

	if _, err := c.AddNetworkList(ctx, list, rt); err != nil {
		t.Fatal(err)
	}
	if err := c.CheckNetworkList(ctx, list, rt); err != nil {
		t.Fatalf("CHECK: %v", err)
	}
	checks := h.Calls(cni.CmdCheck)
	if len(checks) != 1 {
		t.Fatalf("daemon got %d CHECKs", len(checks))
	}
	conf, err := cni.LoadNetConf(checks[0].Config)
	if err != nil {
		t.Fatal(err)
	}
	prev, err := current.GetResult(conf.PrevResult)
	if err != nil || len(prev.IPs) != 1 || prev.IPs[0].Address.String() != "10.244.1.5/24" {
		t.Errorf("CHECK prevResult %+v (%v), want the ADD result", conf.PrevResult, err)
	}

	if err := c.GetStatusNetworkList(ctx, list); err != nil {
		t.Fatalf("STATUS: %v", err)
	}
	if n := len(h.Calls(cni.CmdStatus)); n != 1 {
		t.Errorf("daemon got %d STATUS", n)
	}

	err = c.GCNetworkList(ctx, list, &libcni.GCArgs{ValidAttachments: []types.GCAttachment{{ContainerID: "ctr-life", IfName: "eth0"}}})
	if err != nil {
		t.Fatalf("GC: %v", err)
	}
	gcs := h.Calls(cni.CmdGC)
	if len(gcs) != 1 {
		t.Fatalf("daemon got %d GCs", len(gcs))
	}
	gconf, err := cni.LoadNetConf(gcs[0].Config)
	if err != nil || len(gconf.ValidAttachments) != 1 || gconf.ValidAttachments[0] != (types.GCAttachment{ContainerID: "ctr-life", IfName: "eth0"}) {
		t.Errorf("GC netconf %s: valid attachments %+v (%v)", gcs[0].Config, gconf, err)
	}

	if err := c.DelNetworkList(ctx, list, rt); err != nil {
		t.Fatalf("DEL: %v", err)
	}
	dels := h.Calls(cni.CmdDel)
	if len(dels) != 1 || dels[0].ContainerID != "ctr-life" || dels[0].IfName != "eth0" {
		t.Fatalf("daemon DELs %+v", dels)
	}
	if !bytes.Contains(dels[0].Config, []byte("prevResult")) {
		t.Errorf("DEL netconf %s has no prevResult", dels[0].Config)
	}
}

func TestDaemonErrorsKeepTheirCode(t *testing.T) {
	h, s := startDaemon(t)
	c := newCNI(t)
	h.addErr = types.NewError(types.ErrInvalidNetworkConfig, "pod subnet 10.244.1.0/24 exhausted", "253 leases in use")
	_, err := c.AddNetwork(context.Background(), pluginConf(t, "1.0.0", s.SocketPath()), runtimeConf("ctr-err"))
	wantCNIError(t, err, types.ErrInvalidNetworkConfig, "pod subnet 10.244.1.0/24 exhausted")

	h.addErr = errors.New("OVSDB transaction on bridge br-int failed")
	_, err = c.AddNetwork(context.Background(), pluginConf(t, "1.0.0", s.SocketPath()), runtimeConf("ctr-err"))
	wantCNIError(t, err, types.ErrInternal, "OVSDB transaction on bridge br-int failed")

	h.statusErr = types.NewError(types.ErrLimitedConnectivity, "OpenFlow connection to br-int lost", "")
	err = c.GetStatusNetworkList(context.Background(), confList(t, "1.1.0", s.SocketPath()))
	wantCNIError(t, err, types.ErrLimitedConnectivity, "OpenFlow connection to br-int lost")

	s.SetReady(false)
	_, err = c.AddNetwork(context.Background(), pluginConf(t, "1.1.0", s.SocketPath()), runtimeConf("ctr-err"))
	wantCNIError(t, err, types.ErrTryAgainLater, "not ready")
	err = c.GetStatusNetworkList(context.Background(), confList(t, "1.1.0", s.SocketPath()))
	wantCNIError(t, err, types.ErrPluginNotAvailable, "not ready")
}

func TestDaemonUnreachable(t *testing.T) {
	sock := filepath.Join(t.TempDir(), "nobody-home", "cni.sock")
	c := newCNI(t)
	ctx := context.Background()

	_, err := c.AddNetwork(ctx, pluginConf(t, "0.4.0", sock), runtimeConf("ctr-gone"))
	wantCNIError(t, err, types.ErrTryAgainLater, sock, "ofsdn-node daemon must be running")

	err = c.DelNetwork(ctx, pluginConf(t, "0.4.0", sock), runtimeConf("ctr-gone"))
	wantCNIError(t, err, types.ErrTryAgainLater, sock, "ofsdn-node daemon must be running")

	err = c.GetStatusNetworkList(ctx, confList(t, "1.1.0", sock))
	wantCNIError(t, err, types.ErrPluginNotAvailable, sock, "ofsdn-node daemon must be running")
}

// TestPluginDirect runs the binary without libcni to check the raw protocol:
// CNI error JSON on stdout with exit status 1, netconf validation before any
// request is sent, and the about text.
func TestPluginDirect(t *testing.T) {
	run := func(env []string, stdin string) (stdout, stderr string, err error) {
		cmd := exec.Command(filepath.Join(binDir, "ofsdn"))
		cmd.Env = env
		cmd.Stdin = strings.NewReader(stdin)
		var o, e bytes.Buffer
		cmd.Stdout, cmd.Stderr = &o, &e
		err = cmd.Run()
		return o.String(), e.String(), err
	}
	env := []string{"CNI_COMMAND=ADD", "CNI_CONTAINERID=c1", "CNI_NETNS=/var/run/netns/x", "CNI_IFNAME=eth0", "CNI_PATH=" + binDir}

	out, _, err := run(env, `{"cniVersion":"1.1.0","name":"n","type":"ofsdn","socket":"relative/cni.sock"}`)
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != 1 {
		t.Errorf("bad socket: exit %v, want status 1", err)
	}
	var e types.Error
	if jerr := json.Unmarshal([]byte(out), &e); jerr != nil || e.Code != types.ErrInvalidNetworkConfig || !strings.Contains(e.Msg, `"socket"`) {
		t.Errorf("bad socket: stdout %q, want CNI error code 7 naming \"socket\"", out)
	}

	// Without CNI_COMMAND the plugin describes itself on stderr (skel's
	// "about") and exits 0.
	out, stderr, err := run(env[1:], "")
	if err != nil || out != "" || !strings.Contains(stderr, "ofsdn-node") || !strings.Contains(stderr, "1.1.0") {
		t.Errorf("no CNI_COMMAND: err %v, stdout %q, stderr %q; want the about text and versions on stderr", err, out, stderr)
	}
}

// runPlugin executes the plugin binary as a runtime does: env is the whole
// environment, stdin the netconf (nil: a stdin the runtime never closes).
// It returns stdout, the exit status and how long the run took.
func runPlugin(t *testing.T, env []string, stdin *string) (string, int) {
	t.Helper()
	cmd := exec.Command(filepath.Join(binDir, "ofsdn"))
	cmd.Env = env
	if stdin != nil {
		cmd.Stdin = strings.NewReader(*stdin)
	} else {
		pr, pw, err := os.Pipe()
		if err != nil {
			t.Fatal(err)
		}
		defer pw.Close() // held open until the plugin has exited
		defer pr.Close()
		cmd.Stdin = pr
	}
	var o, e bytes.Buffer
	cmd.Stdout, cmd.Stderr = &o, &e
	err := cmd.Run()
	code := 0
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatalf("run plugin: %v", err)
	}
	if e.Len() > 0 {
		t.Logf("plugin stderr: %s", strings.TrimSpace(e.String()))
	}
	return o.String(), code
}

func str(s string) *string { return &s }

// TestBadInputTable runs the plugin binary directly with each bad input a
// runtime may send and checks the CNI error JSON on stdout, the exit status 1
// and the spec's code (SPEC.md "Section 5: Result Types", "Error"); the
// daemon must never see such a request. docs/cni-errors.md lists these rows.
func TestBadInputTable(t *testing.T) {
	h, s := startDaemon(t)
	sock := s.SocketPath()
	conf := func(v string) string {
		return fmt.Sprintf(`{"cniVersion":%q,"name":"ofsdn-test","type":"ofsdn","socket":%q}`, v, sock)
	}
	good := conf("1.1.0")
	own := fmt.Sprintf("/proc/%d/ns/net", os.Getpid()) // the plugin inherits our netns
	env := func(cmd string, drop string, set ...string) []string {
		vars := map[string]string{"CNI_COMMAND": cmd, "CNI_CONTAINERID": "ctr-bad", "CNI_NETNS": "/var/run/netns/ofsdn-bad",
			"CNI_IFNAME": "eth0", "CNI_PATH": binDir}
		delete(vars, drop)
		for i := 0; i+1 < len(set); i += 2 {
			vars[set[i]] = set[i+1]
		}
		var out []string
		for k, v := range vars {
			out = append(out, k+"="+v)
		}
		return out
	}
	big := `{"cniVersion":"1.1.0","name":"n","pad":"` + strings.Repeat("x", cni.MaxNetConfBytes) + `"}`
	for _, tc := range []struct {
		name  string
		env   []string
		stdin *string
		code  uint
		want  string
	}{
		{"unknown CNI_COMMAND", env("FROB", ""), &good, types.ErrInvalidEnvironmentVariables, "CNI_COMMAND"},
		{"ADD without CNI_CONTAINERID", env("ADD", "CNI_CONTAINERID"), &good, types.ErrInvalidEnvironmentVariables, "CNI_CONTAINERID"},
		{"ADD without CNI_NETNS", env("ADD", "CNI_NETNS"), &good, types.ErrInvalidEnvironmentVariables, "CNI_NETNS"},
		{"ADD without CNI_IFNAME", env("ADD", "CNI_IFNAME"), &good, types.ErrInvalidEnvironmentVariables, "CNI_IFNAME"},
		{"ADD without CNI_PATH", env("ADD", "CNI_PATH"), &good, types.ErrInvalidEnvironmentVariables, "CNI_PATH"},
		{"DEL without CNI_CONTAINERID", env("DEL", "CNI_CONTAINERID"), &good, types.ErrInvalidEnvironmentVariables, "CNI_CONTAINERID"},
		{"invalid CNI_CONTAINERID", env("ADD", "", "CNI_CONTAINERID", "../etc"), &good, types.ErrInvalidEnvironmentVariables, "CNI_CONTAINERID"},
		{"CNI_IFNAME longer than 15 bytes", env("ADD", "", "CNI_IFNAME", "eth0123456789abc"), &good, types.ErrInvalidEnvironmentVariables, "CNI_IFNAME"},
		{"CNI_IFNAME with '/'", env("DEL", "", "CNI_IFNAME", "et/h0"), &good, types.ErrInvalidEnvironmentVariables, "CNI_IFNAME"},
		{"malformed CNI_ARGS", env("ADD", "", "CNI_ARGS", "K8S_POD_NAME=a;junk"), &good, types.ErrInvalidEnvironmentVariables, "CNI_ARGS"},
		{"CNI_NETNS is the plugin's own", env("ADD", "", "CNI_NETNS", own), &good, types.ErrInvalidNetNS, "CNI_NETNS"},
		{"empty stdin", env("ADD", ""), str(""), types.ErrDecodingFailure, "netconf"},
		{"stdin not JSON", env("ADD", ""), str("cniVersion=1.1.0"), types.ErrDecodingFailure, "netconf"},
		{"netconf without name", env("ADD", ""), str(`{"cniVersion":"1.1.0","type":"ofsdn"}`), types.ErrInvalidNetworkConfig, `"name"`},
		{"netconf with invalid name", env("ADD", ""), str(`{"cniVersion":"1.1.0","name":"a b"}`), types.ErrInvalidNetworkConfig, `"name"`},
		{"netconf without cniVersion", env("ADD", ""), str(`{"name":"n","type":"ofsdn","socket":"` + sock + `"}`), types.ErrInvalidNetworkConfig, `"cniVersion"`},
		{"netconf with relative socket", env("ADD", ""), str(`{"cniVersion":"1.1.0","name":"n","socket":"cni.sock"}`), types.ErrInvalidNetworkConfig, `"socket"`},
		{"netconf with bad prevResult", env("DEL", ""), str(`{"cniVersion":"1.1.0","name":"n","socket":"` + sock + `","prevResult":{"cniVersion":"1.1.0","ips":[{"address":"x"}]}}`), types.ErrDecodingFailure, "prevResult"},
		{"unknown cniVersion 2.0.0", env("ADD", ""), str(conf("2.0.0")), types.ErrIncompatibleCNIVersion, `"2.0.0", which ofsdn does not support: use one of 0.1.0`},
		{"unknown cniVersion 1.2.0 for DEL", env("DEL", ""), str(conf("1.2.0")), types.ErrIncompatibleCNIVersion, `"1.2.0"`},
		{"cniVersion not a version", env("ADD", ""), str(conf("one")), types.ErrInvalidNetworkConfig, `"cniVersion" is invalid`},
		{"CHECK with cniVersion 0.3.1", env("CHECK", ""), str(conf("0.3.1")), types.ErrIncompatibleCNIVersion, "CHECK"},
		{"STATUS with cniVersion 1.0.0", env("STATUS", ""), str(conf("1.0.0")), types.ErrIncompatibleCNIVersion, "STATUS"},
		{"GC with cniVersion 0.4.0", env("GC", ""), str(conf("0.4.0")), types.ErrIncompatibleCNIVersion, "GC"},
		{"netconf larger than 640 KiB", env("ADD", ""), &big, types.ErrInvalidNetworkConfig, "exceeds 655360 bytes"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out, status := runPlugin(t, tc.env, tc.stdin)
			var e types.Error
			if err := json.Unmarshal([]byte(out), &e); err != nil || e.Code == 0 {
				t.Fatalf("stdout %q is not a CNI error (%v)", out, err)
			}
			if status != 1 {
				t.Errorf("exit status %d, want 1", status)
			}
			if e.Code != tc.code || !strings.Contains(e.Msg, tc.want) {
				t.Errorf("CNI error %d %q, want code %d containing %q", e.Code, e.Msg, tc.code, tc.want)
			}
			t.Logf("| %s | %d | `%s` |", tc.name, e.Code, e.Msg)
		})
	}
	if calls := h.Calls(cni.CmdAdd); len(h.Calls(cni.CmdDel))+len(calls)+len(h.Calls(cni.CmdCheck))+len(h.Calls(cni.CmdStatus))+len(h.Calls(cni.CmdGC)) != 0 {
		t.Errorf("the daemon received %d requests for bad input", len(h.calls))
	}
	// VERSION ignores stdin, whatever it holds.
	out, status := runPlugin(t, []string{"CNI_COMMAND=VERSION"}, str("garbage"))
	if status != 0 || !strings.Contains(out, `"supportedVersions"`) {
		t.Errorf("VERSION with garbage stdin: exit %d, stdout %q", status, out)
	}
}

// TestStdinNeverClosed: a runtime that never closes stdin gets CNI error 5
// after StdinTimeout instead of a plugin that hangs.
func TestStdinNeverClosed(t *testing.T) {
	t.Parallel()
	env := []string{"CNI_COMMAND=ADD", "CNI_CONTAINERID=c", "CNI_NETNS=/var/run/netns/x", "CNI_IFNAME=eth0", "CNI_PATH=" + binDir}
	out, status := runPlugin(t, env, nil)
	var e types.Error
	if err := json.Unmarshal([]byte(out), &e); err != nil || status != 1 || e.Code != types.ErrIOFailure || !strings.Contains(e.Msg, "close stdin within 10s") {
		t.Errorf("stdin never closed: exit %d, stdout %q; want code 5 naming the 10s deadline", status, out)
	}
}

// TestStatusPollsWhileStartingQuiet: the runtime polls STATUS, also while the daemon is
// starting (its socket not there yet, then not ready). Each poll gets the same CNI error
// as before (code 50 on stdout, exit status 1, the message naming the cause) and writes no
// warning to stderr, which runtimes keep in their logs: no WARN line per poll.
func TestStatusPollsWhileStartingQuiet(t *testing.T) {
	_, s := startDaemon(t)
	s.SetReady(false)
	absent := filepath.Join(t.TempDir(), "nobody-home", "cni.sock")
	for _, c := range []struct {
		name, socket, msg string
	}{
		{"socket not there yet", absent, "ofsdn-node daemon must be running"},
		{"daemon not ready", s.SocketPath(), "not ready"},
	} {
		for poll := 0; poll < 3; poll++ {
			cmd := exec.Command(filepath.Join(binDir, "ofsdn"))
			cmd.Env = []string{"CNI_COMMAND=STATUS", "CNI_PATH=" + binDir}
			cmd.Stdin = strings.NewReader(fmt.Sprintf(`{"cniVersion":"1.1.0","name":"ofsdn-test","type":"ofsdn","socket":%q}`, c.socket))
			var o, e bytes.Buffer
			cmd.Stdout, cmd.Stderr = &o, &e
			err := cmd.Run()
			var ee *exec.ExitError
			if !errors.As(err, &ee) || ee.ExitCode() != 1 {
				t.Errorf("%s: exit %v, want status 1", c.name, err)
			}
			var cerr types.Error
			if jerr := json.Unmarshal(o.Bytes(), &cerr); jerr != nil || cerr.Code != types.ErrPluginNotAvailable || !strings.Contains(cerr.Msg, c.msg) {
				t.Errorf("%s: stdout %q, want CNI error code 50 saying %q", c.name, o.String(), c.msg)
			}
			if strings.Contains(e.String(), "WARN") {
				t.Errorf("%s, poll %d: a warning on stderr per STATUS poll: %s", c.name, poll, strings.TrimSpace(e.String()))
			}
		}
	}
}

// TestPluginLinksNoHeavyPackages keeps out of the plugin binary the packages whose
// start-up and size every exec pays for nothing it does (bench/RESULTS.md, "Plugin exec
// CPU"): net/http's client and, through it, TLS, HTTP/2 and compression. The plugin
// speaks HTTP/1.1 to the daemon through cni.Client.
func TestPluginLinksNoHeavyPackages(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps", ".").Output()
	if err != nil {
		t.Fatalf("go list -deps: %v", err)
	}
	for _, p := range strings.Fields(string(out)) {
		if p == "net/http" || p == "crypto/tls" || p == "compress/gzip" {
			t.Errorf("the plugin links %s: it costs every plugin exec its init and page faults; keep it out of cmd/ofsdn and the packages it imports", p)
		}
	}
}
