package rootsock

// The lifecycle of an HTTP server on a root-only unix socket, shared by the CNI socket
// (cni/server) and the inspection socket (ctl): listen (Listen), record each connection's
// peer credentials in its requests' context, serve in the background (internal/httpserve,
// which also runs the metrics listener), and on Shutdown stop serving and remove the
// socket.

import (
	"context"
	"errors"
	"log/slog"
	"net"
	"net/http"

	"golang.org/x/sys/unix"

	"github.com/ofsdn/ofsdn/internal/httpserve"
)

// Server is an HTTP server on a root-only unix socket, made by Serve. It is safe for
// concurrent use.
type Server struct {
	path, what string
	srv        *httpserve.Server
}

// peerCredKey keys a connection's SO_PEERCRED result in its requests' context.
type peerCredKey struct{}

// peerCred is what SO_PEERCRED told about the client process, or the error reading it.
type peerCred struct {
	ucred *unix.Ucred
	err   error
}

// errNoPeerCred is PeerCredFrom's error for a context that Serve did not make.
var errNoPeerCred = errors.New("no peer credentials recorded for this request (not served by rootsock.Serve)")

// Serve prepares path and listens on it as Listen does (what names the socket in errors
// and logs), records each connection's peer credentials (socket(7) SO_PEERCRED) for
// PeerCredFrom in the context of its requests, and serves hs in the background. hs's own
// ConnContext, if any, runs after the credentials are recorded. Errors: those of Listen.
func Serve(path, what string, hs *http.Server, log *slog.Logger) (*Server, error) {
	l, err := Listen(path, what)
	if err != nil {
		return nil, err
	}
	next := hs.ConnContext
	hs.ConnContext = func(ctx context.Context, c net.Conn) context.Context {
		var pc peerCred
		pc.ucred, pc.err = PeerCred(c)
		ctx = context.WithValue(ctx, peerCredKey{}, pc)
		if next != nil {
			ctx = next(ctx, c)
		}
		return ctx
	}
	return &Server{path: path, what: what, srv: httpserve.Start(hs, l, log, what)}, nil
}

// PeerCredFrom returns the credentials of the process that connected to the socket the
// request came in by (recorded by Serve), or why they could not be read.
func PeerCredFrom(ctx context.Context) (*unix.Ucred, error) {
	pc, ok := ctx.Value(peerCredKey{}).(peerCred)
	if !ok {
		return nil, errNoPeerCred
	}
	if pc.ucred == nil && pc.err == nil {
		return nil, errNoPeerCred
	}
	return pc.ucred, pc.err
}

// Path returns the socket's path.
func (s *Server) Path() string { return s.path }

// Done returns a channel closed when serving has ended (after Shutdown, or because the
// listener failed).
func (s *Server) Done() <-chan struct{} { return s.srv.Done() }

// Shutdown stops accepting connections, waits for requests in flight until ctx ends, then
// closes the rest and removes the socket (Remove). It returns the error that ended serving
// (if the listener failed), ctx's error if requests were still running when it ended, or
// an error removing the socket, joined. It may be called more than once.
func (s *Server) Shutdown(ctx context.Context) error {
	err := s.srv.Shutdown(ctx)
	if rmErr := Remove(s.path, s.what); err == nil {
		err = rmErr
	}
	return errors.Join(s.srv.Err(), err)
}
