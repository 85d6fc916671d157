// Package httpserve runs an [http.Server] in the background and stops it, the part the
// daemon's three HTTP servers (the CNI socket, the inspection socket and the metrics
// listener) share. Each server still builds its own http.Server (handler, timeouts in
// seconds); the two root-only unix sockets are listened on, served and removed through
// internal/rootsock (Serve, which runs them here), the metrics listener is plain TCP.
package httpserve

import (
	"context"
	"errors"
	"log/slog"
	"net"
	"net/http"
)

// MaxHeaderBytes is the limit on a request's header the daemon's servers set: 64 KiB
// (net/http's default is 1 MiB).
const MaxHeaderBytes = 64 << 10

// Server is an http.Server serving one listener in a background goroutine. Create it
// with Start; it is safe for concurrent use.
type Server struct {
	hs   *http.Server
	done chan struct{}
	err  error // set before done is closed
}

// Start serves hs on l in a background goroutine and returns at once. If hs.ErrorLog is
// nil, net/http's own messages (malformed requests, accept errors) go to log at level
// Warn. If serving ends with an error other than [http.ErrServerClosed], it is logged at
// level Error as "<what> stopped" and kept for [Server.Err]. log must not be nil.
func Start(hs *http.Server, l net.Listener, log *slog.Logger, what string) *Server {
	if hs.ErrorLog == nil {
		hs.ErrorLog = slog.NewLogLogger(log.Handler(), slog.LevelWarn)
	}
	s := &Server{hs: hs, done: make(chan struct{})}
	go func() {
		defer close(s.done)
		err := hs.Serve(l)
		if errors.Is(err, http.ErrServerClosed) {
			err = nil
		}
		s.err = err
		if err != nil {
			log.Error(what+" stopped", "err", err)
		}
	}()
	return s
}

// Done returns a channel that is closed when serving has ended, after Shutdown or
// because the listener failed.
func (s *Server) Done() <-chan struct{} { return s.done }

// Err returns the error that ended serving, nil after a clean Shutdown or while still
// serving.
func (s *Server) Err() error {
	select {
	case <-s.done:
		return s.err
	default:
		return nil
	}
}

// Shutdown stops accepting connections and waits for requests in flight until ctx ends
// (http.Server.Shutdown); if ctx ends first, it closes the remaining connections. It
// returns once the serving goroutine has finished, with http.Server.Shutdown's error:
// ctx's error if requests were still running when ctx ended, an error closing the
// listener, or nil. It may be called more than once.
func (s *Server) Shutdown(ctx context.Context) error {
	err := s.hs.Shutdown(ctx)
	if err != nil {
		s.hs.Close()
	}
	<-s.done
	return err
}
