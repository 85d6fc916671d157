package metrics

// The HTTP listener: /metrics for Prometheus, /healthz and /readyz for the DaemonSet's
// liveness and readiness probes (Kubernetes "Configure Liveness, Readiness and Startup
// Probes": any status 200..399 passes, anything else fails).

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/ofsdn/ofsdn/internal/httpserve"
)

// DefaultAddress is the listener's default address: port 9469 on the loopback. For
// Prometheus on another host use ":9469" (every address); a DaemonSet on the host network
// can probe the loopback with httpGet host: 127.0.0.1.
const DefaultAddress = "127.0.0.1:9469"

// Paths served by Server.
const (
	// PathMetrics serves the Prometheus text exposition format.
	PathMetrics = "/metrics"
	// PathHealthz answers 200 "ok" while the process serves HTTP (liveness).
	PathHealthz = "/healthz"
	// PathReadyz answers 200 "ok" when the readiness check passes, else 503 with the
	// reason (readiness).
	PathReadyz = "/readyz"
)

// errStarting is the readiness error before SetReadiness is called.
var errStarting = errors.New("starting: not connected to Open vSwitch yet")

// Server is the HTTP listener for /metrics, /healthz and /readyz. Create it with
// NewServer, then Start; it is not ready until SetReadiness installs a check that passes.
type Server struct {
	addr string
	log  *slog.Logger
	g    prometheus.Gatherer

	ready atomic.Pointer[func() error]

	mu       sync.Mutex
	srv      *httpserve.Server // nil before Start
	listener net.Listener
}

// NewServer returns a listener for addr ("host:port"; port 0 picks a free one) that
// serves g's metrics. logger nil means slog.Default().
func NewServer(addr string, g prometheus.Gatherer, logger *slog.Logger) *Server {
	if logger == nil {
		logger = slog.Default()
	}
	return &Server{addr: addr, g: g, log: logger.With("component", "metrics", "address", addr)}
}

// SetReadiness installs the readiness check: nil error means ready. It is called on
// every /readyz request and must be cheap and safe for concurrent use. A nil check means
// "starting" (503).
func (s *Server) SetReadiness(check func() error) {
	if check == nil {
		s.ready.Store(nil)
		return
	}
	s.ready.Store(&check)
}

// Readiness runs the installed check: nil when ready, else the reason.
func (s *Server) Readiness() error {
	p := s.ready.Load()
	if p == nil {
		return errStarting
	}
	return (*p)()
}

// Start listens on the address and serves in the background. Errors name the address
// (e.g. already in use: choose another metricsAddress).
func (s *Server) Start() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.srv != nil {
		return fmt.Errorf("metrics listener on %s: already started", s.addr)
	}
	l, err := net.Listen("tcp", s.addr)
	if err != nil {
		return fmt.Errorf("metrics listener: listen on %s: %w (set metricsAddress to a free host:port, or \"\" to turn the listener off)", s.addr, err)
	}
	mux := http.NewServeMux()
	mux.Handle(PathMetrics, promhttp.HandlerFor(s.g, promhttp.HandlerOpts{
		ErrorLog:          slog.NewLogLogger(s.log.Handler(), slog.LevelWarn),
		ErrorHandling:     promhttp.ContinueOnError,
		EnableOpenMetrics: true,
		Timeout:           30 * time.Second,
	}))
	mux.HandleFunc(PathHealthz, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		_, _ = w.Write([]byte("ok\n"))
	})
	mux.HandleFunc(PathReadyz, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		if err := s.Readiness(); err != nil {
			w.WriteHeader(http.StatusServiceUnavailable)
			_, _ = fmt.Fprintf(w, "not ready: %v\n", err)
			return
		}
		_, _ = w.Write([]byte("ok\n"))
	})
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		http.Error(w, fmt.Sprintf("no endpoint at %s: try %s, %s or %s", r.URL.Path, PathMetrics, PathHealthz, PathReadyz), http.StatusNotFound)
	})
	s.listener = l
	s.srv = httpserve.Start(&http.Server{
		Handler:           mux,
		ReadHeaderTimeout: 10 * time.Second,
		ReadTimeout:       30 * time.Second,
		WriteTimeout:      60 * time.Second,
		IdleTimeout:       90 * time.Second,
		MaxHeaderBytes:    httpserve.MaxHeaderBytes,
	}, l, s.log, "metrics listener")
	s.log.Info("serving metrics and health endpoints", "listening", l.Addr().String(),
		"paths", []string{PathMetrics, PathHealthz, PathReadyz})
	return nil
}

// Addr returns the address listened on (with the real port when started with port 0),
// or nil before Start.
func (s *Server) Addr() net.Addr {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.listener == nil {
		return nil
	}
	return s.listener.Addr()
}

// Shutdown stops the listener, waiting for requests in flight until ctx ends.
func (s *Server) Shutdown(ctx context.Context) error {
	s.mu.Lock()
	srv := s.srv
	s.mu.Unlock()
	if srv == nil {
		return nil
	}
	return srv.Shutdown(ctx)
}
