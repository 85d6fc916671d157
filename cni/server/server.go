// Package server is the ofsdn-node daemon's end of the CNI plugin protocol: an
// HTTP server on a root-only unix socket that receives the CNI operations the
// plugin binary (cmd/ofsdn) forwards as [cni.Request], validates them, hands
// them to a [Handler] (the pod manager) and answers a [cni.Response].
//
// Validation follows the CNI specification 1.1.0, SPEC.md "Section 2:
// Execution Protocol" (which parameters each operation requires) and the
// error code table of SPEC.md "Section 5: Result Types", "Error": a request
// that cannot be decoded gets code 6, a missing or invalid CNI_* parameter
// code 4 naming the variable, an invalid netconf code 7. Nothing reaches the
// Handler before the request has passed every check.
//
// The socket is the only access control, so it is set up defensively
// (internal/rootsock): a missing directory is created with mode 0700 and owned
// by root, an existing one must be root's and not writable by others, the
// socket is mode 0600, and each connection's peer credentials (SO_PEERCRED)
// are checked so that only root (uid 0) is served.
package server

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"runtime/debug"
	"sync"
	"sync/atomic"
	"time"

	"github.com/containernetworking/cni/pkg/types"
	current "github.com/containernetworking/cni/pkg/types/100"
	"github.com/containernetworking/cni/pkg/utils"
	"github.com/containernetworking/cni/pkg/version"

	"github.com/ofsdn/ofsdn/cni"
	"github.com/ofsdn/ofsdn/internal/httpserve"
	"github.com/ofsdn/ofsdn/internal/rootsock"
)

// Handler carries out validated CNI operations. The server calls it only
// with requests whose Command, CNI_* parameters (SPEC.md "Section 2:
// Execution Protocol", "Parameters"), CNI_ARGS and netconf have been checked;
// ctx is cancelled when the plugin gives up (its timeout, see
// cni.DefaultTimeout) or the server shuts down.
//
// Errors: return a *types.Error to choose the CNI error code (SPEC.md
// "Section 5: Result Types", "Error"; e.g. 3 unknown container, 7 invalid
// netconf, 11 try again later, 50/51 for STATUS); any other error is sent as
// code 999 (ErrInternal) with its message kept.
type Handler interface {
	// Add attaches the container (SPEC.md "ADD") and returns its result; the
	// server sends it as CNI 1.1.0 and the plugin converts it to the
	// netconf's cniVersion.
	Add(ctx context.Context, req *cni.Request) (*current.Result, error)
	// Del detaches the container (SPEC.md "DEL"). It must succeed when the
	// container is already gone or was never attached.
	Del(ctx context.Context, req *cni.Request) error
	// Check verifies the attachment against the netconf's prevResult
	// (SPEC.md "CHECK").
	Check(ctx context.Context, req *cni.Request) error
	// Status reports whether ADD can be served now (SPEC.md "STATUS"):
	// nil, or a *types.Error with code 50 or 51.
	Status(ctx context.Context, req *cni.Request) error
	// GC releases resources of attachments not listed in the netconf's
	// "cni.dev/valid-attachments" (SPEC.md "GC").
	GC(ctx context.Context, req *cni.Request) error
}

// Limits and timeouts of the HTTP server.
const (
	// MaxRequestBytes is the largest request body accepted: 1 MiB.
	MaxRequestBytes = 1 << 20
	// ReadHeaderTimeout bounds reading a request's headers: 10 seconds.
	ReadHeaderTimeout = 10 * time.Second
	// ReadTimeout bounds reading a whole request (headers and body): 30
	// seconds. There is no write timeout: an ADD may legitimately take
	// long, and the plugin's own timeout (cni.DefaultTimeout) bounds it.
	ReadTimeout = 30 * time.Second
	// IdleTimeout closes idle keep-alive connections: 60 seconds.
	IdleTimeout = 60 * time.Second
)

// Server is the daemon's CNI server on one unix socket. Create it with New,
// call Start, and Shutdown when done. Until SetReady(true), every request is
// refused with CNI code 11 (50 for STATUS) so that the runtime retries.
type Server struct {
	socketPath string
	handler    Handler
	log        *slog.Logger
	observer   Observer

	ready atomic.Bool

	// statusErr is the error code of the last failed STATUS (0 after one passed): a
	// STATUS failing again with the same code (50, an outage of OVS: its message names
	// whichever connection is down and its last error, which change while it lasts) is
	// logged at debug level, so an outage the runtime polls STATUS through is logged once,
	// not per poll.
	statusMu  sync.Mutex
	statusErr uint

	readHeaderTimeout, readTimeout time.Duration

	mu  sync.Mutex
	srv *rootsock.Server // nil before Start
}

// New returns a server for socketPath (an absolute path, normally
// cni.DefaultSocketPath) that passes requests to h. logger nil means
// slog.Default(). The server starts not ready.
func New(socketPath string, h Handler, logger *slog.Logger) *Server {
	if logger == nil {
		logger = slog.Default()
	}
	return &Server{
		socketPath:        socketPath,
		handler:           h,
		log:               logger.With("component", "cni-server", "socket", socketPath),
		readHeaderTimeout: ReadHeaderTimeout,
		readTimeout:       ReadTimeout,
	}
}

// SetReadTimeouts replaces ReadHeaderTimeout and ReadTimeout (the bounds on
// reading a request's headers, and its headers and body) for this server;
// values ≤ 0 keep the defaults. Call it before Start. A client slower than
// that gets CNI error 5 (body) or a closed connection (headers).
func (s *Server) SetReadTimeouts(header, whole time.Duration) {
	if header > 0 {
		s.readHeaderTimeout = header
	}
	if whole > 0 {
		s.readTimeout = whole
	}
}

// SocketPath returns the path of the server's unix socket.
func (s *Server) SocketPath() string { return s.socketPath }

// SetReady opens (true) or closes (false) the ready gate. While closed, ADD,
// DEL, CHECK and GC get CNI error 11 (ErrTryAgainLater) and STATUS gets 50
// (ErrPluginNotAvailable), both "daemon not ready".
func (s *Server) SetReady(ready bool) {
	if s.ready.Swap(ready) != ready {
		s.log.Info("CNI server readiness changed", "ready", ready)
	}
}

// Ready reports whether the ready gate is open.
func (s *Server) Ready() bool { return s.ready.Load() }

// Start prepares the socket and begins serving in the background
// (rootsock.Serve):
//   - creates a missing socket directory with mode 0700, owned by root; an
//     existing one is left as it is but must be root's and not writable by
//     others;
//   - removes a stale socket left by an earlier daemon, but fails if another
//     server still answers on it or if the path is not a socket;
//   - listens and sets the socket to mode 0600.
//
// Errors name the path and the failed step. Start may be called once.
func (s *Server) Start() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.srv != nil {
		return fmt.Errorf("CNI server on %s: already started", s.socketPath)
	}
	mux := http.NewServeMux()
	mux.HandleFunc(cni.RequestPath, s.serveCNI)
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		writeResponse(w, http.StatusNotFound, &cni.Response{Error: types.NewError(types.ErrInternal,
			fmt.Sprintf("no CNI endpoint at %s %s: the plugin sends POST %s", r.Method, r.URL.Path, cni.RequestPath), "")})
	})
	srv, err := rootsock.Serve(s.socketPath, "CNI server", &http.Server{
		Handler:           mux,
		ReadHeaderTimeout: s.readHeaderTimeout,
		ReadTimeout:       s.readTimeout,
		IdleTimeout:       IdleTimeout,
		MaxHeaderBytes:    httpserve.MaxHeaderBytes,
	}, s.log)
	if err != nil {
		return err
	}
	s.srv = srv
	s.log.Info("CNI server listening")
	return nil
}

// Shutdown stops accepting connections, waits for requests in flight until
// ctx ends, then closes the rest and removes the socket. It returns the
// error that stopped serving, if any, or ctx's error if requests were still
// running when it ended.
func (s *Server) Shutdown(ctx context.Context) error {
	s.mu.Lock()
	srv := s.srv
	s.mu.Unlock()
	if srv == nil {
		return nil
	}
	err := srv.Shutdown(ctx)
	s.log.Info("CNI server stopped")
	return err
}

// Serve runs a ready server (see Server) on socketPath until ctx is
// cancelled, then shuts it down, giving requests in flight up to 10 seconds.
// It returns Start's error, or the one that ended serving; nil after a clean
// shutdown. Use New/Start/SetReady/Shutdown for control over readiness.
func Serve(ctx context.Context, socketPath string, h Handler, logger *slog.Logger) error {
	s := New(socketPath, h, logger)
	if err := s.Start(); err != nil {
		return err
	}
	s.SetReady(true)
	select {
	case <-ctx.Done():
	case <-s.srv.Done():
	}
	sctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	return s.Shutdown(sctx)
}

// statusFor is the HTTP status sent with a CNI error code; the plugin reads
// only the body, the status helps people using curl.
func statusFor(code uint) int {
	switch code {
	case types.ErrInvalidEnvironmentVariables, types.ErrDecodingFailure, types.ErrInvalidNetworkConfig,
		types.ErrIncompatibleCNIVersion, types.ErrUnsupportedField:
		return http.StatusBadRequest
	case types.ErrTryAgainLater, types.ErrPluginNotAvailable, types.ErrLimitedConnectivity:
		return http.StatusServiceUnavailable
	default:
		return http.StatusInternalServerError
	}
}

func writeResponse(w http.ResponseWriter, status int, resp *cni.Response) {
	data, err := json.Marshal(resp)
	if err != nil {
		status = http.StatusInternalServerError
		data = []byte(`{"error":{"code":999,"msg":"cannot encode the CNI response"}}`)
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_, _ = w.Write(data)
}

// statusLevel returns the level at which to log a failed request of command with error e
// (lvl by default): a STATUS failing with the same code as the last failed STATUS is
// logged at debug level. With e nil (a STATUS that passed) it forgets the last failure and
// returns lvl.
func (s *Server) statusLevel(command string, e *types.Error, lvl slog.Level) slog.Level {
	if command != cni.CmdStatus {
		return lvl
	}
	s.statusMu.Lock()
	defer s.statusMu.Unlock()
	if e == nil {
		s.statusErr = 0
		return lvl
	}
	if e.Code == s.statusErr {
		return slog.LevelDebug
	}
	s.statusErr = e.Code
	return lvl
}

// serveCNI handles POST /cni: decode, check caller, check readiness,
// validate, call the Handler, answer.
func (s *Server) serveCNI(w http.ResponseWriter, r *http.Request) {
	start := time.Now()
	var req cni.Request
	code := uint(0)
	if obs := s.observer; obs != nil {
		defer func() { obs(commandLabel(req.Command), code, time.Since(start)) }()
	}
	fail := func(status int, e *types.Error, attrs ...any) {
		code = e.Code
		s.log.Log(r.Context(), s.statusLevel(req.Command, e, slog.LevelWarn), "CNI request refused",
			append(attrs, "code", e.Code, "msg", e.Msg, "details", e.Details)...)
		writeResponse(w, status, &cni.Response{Error: e})
	}
	if r.Method != http.MethodPost {
		w.Header().Set("Allow", http.MethodPost)
		fail(http.StatusMethodNotAllowed, types.NewError(types.ErrInternal,
			fmt.Sprintf("method %s not allowed on %s: the plugin sends POST", r.Method, cni.RequestPath), ""))
		return
	}
	cred, err := rootsock.PeerCredFrom(r.Context())
	if cred == nil {
		fail(http.StatusForbidden, types.NewError(types.ErrInternal,
			"cannot read the caller's credentials (SO_PEERCRED); refusing the CNI request", fmt.Sprint(err)))
		return
	}
	if cred.Uid != 0 {
		fail(http.StatusForbidden, types.NewError(types.ErrInternal,
			fmt.Sprintf("caller uid %d is not root: only root (the container runtime) may send CNI requests to ofsdn-node", cred.Uid), ""),
			"peer_pid", cred.Pid, "peer_uid", cred.Uid)
		return
	}

	decoded, e := decodeRequest(http.MaxBytesReader(w, r.Body, MaxRequestBytes), s.readTimeout)
	if e != nil {
		status := http.StatusBadRequest
		switch e.Code {
		case types.ErrInvalidNetworkConfig:
			status = http.StatusRequestEntityTooLarge
		case types.ErrIOFailure:
			status = http.StatusRequestTimeout
		}
		fail(status, e)
		return
	}
	req = *decoded
	attrs := []any{"command", req.Command, "container_id", req.ContainerID, "ifname", req.IfName, "netns", req.Netns}

	if !s.ready.Load() {
		code := types.ErrTryAgainLater
		if req.Command == cni.CmdStatus {
			code = types.ErrPluginNotAvailable
		}
		fail(http.StatusServiceUnavailable, types.NewError(code,
			"ofsdn-node daemon not ready: it is still connecting to Open vSwitch; try again later", ""), attrs...)
		return
	}

	if e := validate(&req); e != nil {
		fail(statusFor(e.Code), e, attrs...)
		return
	}
	if pod, err := req.PodIdentity(); err == nil && !pod.IsZero() {
		attrs = append(attrs, "pod", pod.String())
	}

	result, err := s.call(r.Context(), &req)
	if err != nil {
		var e *types.Error
		if !errors.As(err, &e) {
			e = types.NewError(types.ErrInternal, err.Error(), "")
		}
		code = e.Code
		// The handler logs ADD and DEL outcomes itself (one line each); here at debug level
		// for those, so that one failure is not logged twice.
		lvl := slog.LevelWarn
		if req.Command == cni.CmdAdd || req.Command == cni.CmdDel {
			lvl = slog.LevelDebug
		}
		lvl = s.statusLevel(req.Command, e, lvl)
		s.log.Log(r.Context(), lvl, "CNI request failed", append(attrs, "code", e.Code, "msg", e.Msg, "details", e.Details,
			"duration", time.Since(start))...)
		writeResponse(w, statusFor(e.Code), &cni.Response{Error: e})
		return
	}
	resp := &cni.Response{}
	if req.Command == cni.CmdAdd {
		if result == nil {
			e := types.NewError(types.ErrInternal, "ADD handler returned neither a result nor an error", "")
			code = e.Code
			s.log.Error("CNI request failed", append(attrs, "code", e.Code, "msg", e.Msg)...)
			writeResponse(w, http.StatusInternalServerError, &cni.Response{Error: e})
			return
		}
		raw, err := encodeResult(result)
		if err != nil {
			e := types.NewError(types.ErrInternal, "cannot encode the ADD result as CNI 1.1.0", err.Error())
			code = e.Code
			s.log.Error("CNI request failed", append(attrs, "code", e.Code, "msg", e.Msg, "details", e.Details)...)
			writeResponse(w, http.StatusInternalServerError, &cni.Response{Error: e})
			return
		}
		resp.Result = raw
	}
	if req.Command == cni.CmdStatus {
		s.statusLevel(req.Command, nil, 0)
	}
	s.log.Debug("CNI request done", append(attrs, "duration", time.Since(start))...)
	writeResponse(w, http.StatusOK, resp)
}

// Observer is told of every CNI request the server answers: command is one of ADD, DEL,
// CHECK, STATUS, GC or "other" (a bounded set, fit for a metric label), code is 0 on success
// or the CNI error code sent (SPEC.md "Section 5: Result Types", "Error"), d the time from
// receiving the request to answering it.
type Observer func(command string, code uint, d time.Duration)

// SetObserver installs o; call it before Start. nil removes it.
func (s *Server) SetObserver(o Observer) { s.observer = o }

func commandLabel(c string) string {
	switch c {
	case cni.CmdAdd, cni.CmdDel, cni.CmdCheck, cni.CmdStatus, cni.CmdGC:
		return c
	}
	return "other"
}

// call runs the handler for req's command, turning a panic into an error so
// the plugin gets a CNI error instead of a dropped connection.
func (s *Server) call(ctx context.Context, req *cni.Request) (res *current.Result, err error) {
	defer func() {
		if p := recover(); p != nil {
			s.log.Error("CNI handler panicked", "command", req.Command, "container_id", req.ContainerID,
				"panic", p, "stack", string(debug.Stack()))
			res, err = nil, types.NewError(types.ErrInternal, fmt.Sprintf("ofsdn-node CNI handler panicked: %v", p), "")
		}
	}()
	switch req.Command {
	case cni.CmdAdd:
		return s.handler.Add(ctx, req)
	case cni.CmdDel:
		return nil, s.handler.Del(ctx, req)
	case cni.CmdCheck:
		return nil, s.handler.Check(ctx, req)
	case cni.CmdStatus:
		return nil, s.handler.Status(ctx, req)
	case cni.CmdGC:
		return nil, s.handler.GC(ctx, req)
	}
	return nil, types.NewError(types.ErrInvalidEnvironmentVariables, fmt.Sprintf("CNI_COMMAND: unknown command %q", req.Command), "")
}

// encodeResult marshals an ADD result as CNI 1.1.0 (SPEC.md "Section 5:
// Result Types"), whatever CNIVersion the handler left in it.
func encodeResult(r *current.Result) (json.RawMessage, error) {
	c := *r
	c.CNIVersion = current.ImplementedSpecVersion
	return json.Marshal(&c)
}

// decodeRequest reads one JSON [cni.Request] from body, which must hold
// nothing else. readTimeout only names the limit in messages (the server's
// connection deadline enforces it). Errors, as CNI errors:
//   - 7 (ErrInvalidNetworkConfig): body longer than MaxRequestBytes (body is
//     an http.MaxBytesReader);
//   - 5 (ErrIOFailure): the body did not arrive within readTimeout, or the
//     client went away mid-body;
//   - 6 (ErrDecodingFailure): not a JSON object of the Request shape, or
//     data after it.
func decodeRequest(body io.Reader, readTimeout time.Duration) (*cni.Request, *types.Error) {
	src := &readErrRecorder{r: body}
	dec := json.NewDecoder(src)
	var req cni.Request
	err := dec.Decode(&req)
	if err == nil {
		var extra json.RawMessage
		switch xerr := dec.Decode(&extra); {
		case errors.Is(xerr, io.EOF):
		case xerr == nil:
			return nil, types.NewError(types.ErrDecodingFailure,
				"the CNI request body holds more than one JSON value: send exactly one request object", "")
		default:
			err = xerr
		}
	}
	if err == nil {
		return &req, nil
	}
	var mbe *http.MaxBytesError
	var ne net.Error
	switch {
	case errors.As(err, &mbe):
		return nil, types.NewError(types.ErrInvalidNetworkConfig,
			fmt.Sprintf("CNI request body exceeds %d bytes: the netconf is too large", MaxRequestBytes), "")
	case errors.Is(err, os.ErrDeadlineExceeded) || (errors.As(err, &ne) && ne.Timeout()):
		return nil, types.NewError(types.ErrIOFailure,
			fmt.Sprintf("the CNI request body did not arrive within %s: the client is too slow", readTimeout), err.Error())
	case src.err != nil:
		// The transport failed (e.g. a Content-Length body cut short), not
		// the JSON.
		return nil, types.NewError(types.ErrIOFailure,
			"the CNI request body ended early: the client closed the connection mid-request", src.err.Error())
	}
	return nil, types.NewError(types.ErrDecodingFailure, "cannot decode the CNI request JSON", err.Error())
}

// readErrRecorder remembers the first error other than io.EOF its reader
// returned, to tell a broken connection from broken JSON.
type readErrRecorder struct {
	r   io.Reader
	err error
}

func (e *readErrRecorder) Read(p []byte) (int, error) {
	n, err := e.r.Read(p)
	if err != nil && err != io.EOF && e.err == nil {
		e.err = err
	}
	return n, err
}

// validate checks a request as SPEC.md "Section 2: Execution Protocol"
// requires before any side effect: a known CNI_COMMAND; CNI_CONTAINERID and
// CNI_IFNAME for ADD, DEL and CHECK; CNI_NETNS for ADD and CHECK (an
// absolute path whenever given); CNI_ARGS well formed; the netconf valid
// (cni.LoadNetConf) with a cniVersion that has the verb. Errors carry code 4
// naming the variable, the netconf's code 6/7, or 1 for a version ofsdn does
// not support or that predates the verb.
func validate(req *cni.Request) *types.Error {
	var needID, needIf, needNetns bool
	switch req.Command {
	case cni.CmdAdd, cni.CmdCheck:
		needID, needIf, needNetns = true, true, true
	case cni.CmdDel:
		needID, needIf = true, true
	case cni.CmdStatus, cni.CmdGC:
	case "":
		return types.NewError(types.ErrInvalidEnvironmentVariables, "CNI_COMMAND is missing", "")
	default:
		return types.NewError(types.ErrInvalidEnvironmentVariables,
			fmt.Sprintf("CNI_COMMAND %q is not one of ADD, DEL, CHECK, STATUS, GC", req.Command), "")
	}
	if needID {
		if req.ContainerID == "" {
			return types.NewError(types.ErrInvalidEnvironmentVariables,
				fmt.Sprintf("CNI_CONTAINERID is missing; %s needs it", req.Command), "")
		}
		if e := utils.ValidateContainerID(req.ContainerID); e != nil {
			return types.NewError(types.ErrInvalidEnvironmentVariables,
				fmt.Sprintf("CNI_CONTAINERID %q is invalid: %s", req.ContainerID, e.Msg), e.Details)
		}
	}
	if needIf {
		if req.IfName == "" {
			return types.NewError(types.ErrInvalidEnvironmentVariables,
				fmt.Sprintf("CNI_IFNAME is missing; %s needs it", req.Command), "")
		}
		if e := utils.ValidateInterfaceName(req.IfName); e != nil {
			return types.NewError(types.ErrInvalidEnvironmentVariables,
				fmt.Sprintf("CNI_IFNAME %q is invalid: %s", req.IfName, e.Msg), e.Details)
		}
	}
	if needNetns && req.Netns == "" {
		return types.NewError(types.ErrInvalidEnvironmentVariables,
			fmt.Sprintf("CNI_NETNS is missing; %s needs it", req.Command), "")
	}
	if req.Netns != "" && !filepath.IsAbs(req.Netns) {
		return types.NewError(types.ErrInvalidEnvironmentVariables,
			fmt.Sprintf("CNI_NETNS %q is invalid: want an absolute path such as /var/run/netns/NAME", req.Netns), "")
	}
	if _, err := cni.ParseArgs(req.Args); err != nil {
		var e *types.Error
		if errors.As(err, &e) {
			return e
		}
		return types.NewError(types.ErrInvalidEnvironmentVariables, err.Error(), "")
	}
	if len(req.Config) == 0 {
		return types.NewError(types.ErrDecodingFailure, "the CNI request carries no netconf (config is empty)", "")
	}
	conf, err := cni.LoadNetConf(req.Config)
	if err != nil {
		var e *types.Error
		if errors.As(err, &e) {
			return e
		}
		return types.NewError(types.ErrInvalidNetworkConfig, err.Error(), "")
	}
	// Verbs newer than the netconf's version (SPEC.md "Section 2: Execution
	// Protocol": CHECK since 0.4.0, STATUS and GC since 1.1.0), refused as
	// pkg/skel refuses them in the plugin.
	if min := minVersion[req.Command]; min != "" {
		if ok, _ := version.GreaterThanOrEqualTo(conf.CNIVersion, min); !ok {
			return types.NewError(types.ErrIncompatibleCNIVersion,
				fmt.Sprintf("%s needs cniVersion %s or later; the netconf has %s", req.Command, min, conf.CNIVersion), "")
		}
	}
	return nil
}

// minVersion is the first CNI version that has each verb.
var minVersion = map[string]string{cni.CmdCheck: "0.4.0", cni.CmdStatus: "1.1.0", cni.CmdGC: "1.1.0"}
