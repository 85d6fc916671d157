package ctl

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"sync"
	"time"

	"github.com/ofsdn/ofsdn/internal/httpserve"
	"github.com/ofsdn/ofsdn/internal/rootsock"
)

// ErrNotReady is what a Source returns while the node is not started; the server answers
// 503 with its message.
var ErrNotReady = errors.New("ofsdn-node is still connecting to Open vSwitch; try again later")

// FlowDumpTimeout bounds one flow dump (the flow-stats round trip to the switch): 30 seconds.
const FlowDumpTimeout = 30 * time.Second

// Source answers the API's questions. Implementations must be safe for concurrent use.
// Errors wrapping ErrNotReady become 503, others 500; the message is sent to the client.
type Source interface {
	// Pods returns the local pods.
	Pods() ([]Pod, error)
	// Flows dumps the switch's flows grouped by stage, in pipeline order.
	Flows(ctx context.Context) ([]Stage, error)
	// Peers returns the known peer nodes.
	Peers() ([]Peer, error)
	// Policies reports NetworkPolicy enforcement (with flow counters from the switch).
	Policies(ctx context.Context) (PolicyReport, error)
	// PolicyStatus is Policies without PodPolicies (and so without the switch's counters).
	PolicyStatus() (PolicyReport, error)
	// Services reports the Service ports load-balanced in the switch (with flow counters
	// from the switch).
	Services(ctx context.Context) (ServiceReport, error)
}

// Server serves the inspection API on a unix socket. Create it with NewServer, then Start.
type Server struct {
	path string
	src  Source
	log  *slog.Logger

	mu  sync.Mutex
	srv *rootsock.Server // nil before Start
}

// NewServer returns a server for the unix socket at path (absolute) answering from src.
// logger nil means slog.Default().
func NewServer(path string, src Source, logger *slog.Logger) *Server {
	if logger == nil {
		logger = slog.Default()
	}
	return &Server{path: path, src: src, log: logger.With("component", "ctl", "socket", path)}
}

// Start prepares the socket and serves in the background (rootsock.Serve): a missing
// socket directory is created with mode 0700 owned by root (an existing one must be
// root's and not writable by others), a stale socket of an earlier daemon is removed (a
// live one, or a path that is not a socket, is an error), the socket is made mode 0600,
// and each connection's SO_PEERCRED must show uid 0.
// Errors name the path and the step.
func (s *Server) Start() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.srv != nil {
		return fmt.Errorf("inspection socket %s: already started", s.path)
	}
	mux := http.NewServeMux()
	mux.HandleFunc(PathPods, func(w http.ResponseWriter, r *http.Request) {
		pods, err := s.src.Pods()
		s.answer(w, r, pods, err)
	})
	mux.HandleFunc(PathFlows, func(w http.ResponseWriter, r *http.Request) {
		ctx, cancel := context.WithTimeout(r.Context(), FlowDumpTimeout)
		defer cancel()
		stages, err := s.src.Flows(ctx)
		s.answer(w, r, stages, err)
	})
	mux.HandleFunc(PathPeers, func(w http.ResponseWriter, r *http.Request) {
		peers, err := s.src.Peers()
		s.answer(w, r, peers, err)
	})
	mux.HandleFunc(PathPolicies, func(w http.ResponseWriter, r *http.Request) {
		ctx, cancel := context.WithTimeout(r.Context(), FlowDumpTimeout)
		defer cancel()
		rep, err := s.src.Policies(ctx)
		s.answer(w, r, rep, err)
	})
	mux.HandleFunc(PathPolicyStatus, func(w http.ResponseWriter, r *http.Request) {
		rep, err := s.src.PolicyStatus()
		s.answer(w, r, rep, err)
	})
	mux.HandleFunc(PathServices, func(w http.ResponseWriter, r *http.Request) {
		ctx, cancel := context.WithTimeout(r.Context(), FlowDumpTimeout)
		defer cancel()
		rep, err := s.src.Services(ctx)
		s.answer(w, r, rep, err)
	})
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, http.StatusNotFound, errorBody{Error: fmt.Sprintf("no endpoint at %s: try %s, %s, %s, %s or %s", r.URL.Path, PathPods, PathFlows, PathPeers, PathPolicies, PathServices)})
	})
	srv, err := rootsock.Serve(s.path, "inspection socket", &http.Server{
		Handler:           rootOnly(mux),
		ReadHeaderTimeout: 10 * time.Second,
		IdleTimeout:       60 * time.Second,
		MaxHeaderBytes:    httpserve.MaxHeaderBytes,
	}, s.log)
	if err != nil {
		return err
	}
	s.srv = srv
	s.log.Info("serving the inspection API")
	return nil
}

// Shutdown stops serving, waits for requests in flight until ctx ends and removes the
// socket.
func (s *Server) Shutdown(ctx context.Context) error {
	s.mu.Lock()
	srv := s.srv
	s.mu.Unlock()
	if srv == nil {
		return nil
	}
	return srv.Shutdown(ctx)
}

func (s *Server) answer(w http.ResponseWriter, r *http.Request, v any, err error) {
	if r.Method != http.MethodGet {
		w.Header().Set("Allow", http.MethodGet)
		writeJSON(w, http.StatusMethodNotAllowed, errorBody{Error: fmt.Sprintf("method %s not allowed on %s: use GET", r.Method, r.URL.Path)})
		return
	}
	if err != nil {
		status := http.StatusInternalServerError
		if errors.Is(err, ErrNotReady) {
			status = http.StatusServiceUnavailable
		}
		s.log.Warn("inspection request failed", "path", r.URL.Path, "err", err)
		writeJSON(w, status, errorBody{Error: err.Error()})
		return
	}
	writeJSON(w, http.StatusOK, v)
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	b, err := json.Marshal(v)
	if err != nil {
		status = http.StatusInternalServerError
		b = []byte(`{"error":"cannot encode the answer as JSON"}`)
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_, _ = w.Write(append(b, '\n'))
}

// rootOnly refuses callers whose uid is not 0.
func rootOnly(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		uid := int64(-1)
		if cred, err := rootsock.PeerCredFrom(r.Context()); err == nil {
			uid = int64(cred.Uid)
		}
		if uid != 0 {
			writeJSON(w, http.StatusForbidden, errorBody{Error: fmt.Sprintf("caller uid %d is not root: only root may use the ofsdn-node inspection socket", uid)})
			return
		}
		h.ServeHTTP(w, r)
	})
}
