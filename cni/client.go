package cni

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"time"

	"github.com/containernetworking/cni/pkg/types"
)

// DefaultTimeout is the time the plugin waits for the daemon's answer to one
// request: 90 seconds, enough for an ADD that waits behind other operations
// on the same pod, and below the kubelet's default 2-minute runtime request
// timeout (runtimeRequestTimeout), so the runtime sees our CNI error rather
// than its own deadline.
const DefaultTimeout = 90 * time.Second

// MaxResponseBytes bounds the daemon response the client reads: 1 MiB.
const MaxResponseBytes = 1 << 20

// Client sends forwarded CNI requests to the ofsdn-node daemon as
// "POST /cni" over its unix socket. It is safe for concurrent use.
type Client struct {
	socketPath string
	timeout    time.Duration
	http       *http.Client
}

// dialError marks a failure to connect to the daemon's socket, as opposed to
// a failure after the daemon accepted the connection.
type dialError struct{ err error }

func (e *dialError) Error() string { return e.err.Error() }
func (e *dialError) Unwrap() error { return e.err }

// NewClient returns a client for the daemon socket at socketPath (an absolute
// path, e.g. DefaultSocketPath). timeout bounds each request from dial to the
// end of the response body; zero or negative means DefaultTimeout.
func NewClient(socketPath string, timeout time.Duration) *Client {
	if timeout <= 0 {
		timeout = DefaultTimeout
	}
	dialer := &net.Dialer{}
	tr := &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			c, err := dialer.DialContext(ctx, "unix", socketPath)
			if err != nil {
				return nil, &dialError{err: err}
			}
			return c, nil
		},
		// One request per plugin run: nothing to keep alive.
		DisableKeepAlives: true,
	}
	return &Client{
		socketPath: socketPath,
		timeout:    timeout,
		http:       &http.Client{Transport: tr, Timeout: timeout},
	}
}

// SocketPath returns the daemon socket path the client dials.
func (c *Client) SocketPath() string { return c.socketPath }

// Do sends req to the daemon and returns its result: for ADD the CNI 1.1.0
// result JSON (SPEC.md "Section 5: Result Types", "ADD Success"), for the
// other commands nil.
//
// Every error is a *types.Error (SPEC.md "Section 5: Result Types", "Error"):
//   - the daemon's own CNI error, code and message unchanged;
//   - 11 (ErrTryAgainLater) when the socket cannot be dialled (the message
//     names the socket path and says the ofsdn-node daemon must be running),
//     or when the daemon does not answer within the client's timeout;
//   - 5 (ErrIOFailure) when the connection fails mid-request;
//   - 6 (ErrDecodingFailure) when the daemon's answer is not a Response;
//   - 999 (ErrInternal) when an ADD's answer has no result. Whether the result is
//     a valid one is ResultForVersion's check.
func (c *Client) Do(ctx context.Context, req *Request) (json.RawMessage, error) {
	body, err := json.Marshal(req)
	if err != nil {
		return nil, types.NewError(types.ErrInternal, "cannot encode the CNI request for the ofsdn-node daemon", err.Error())
	}
	hreq, err := http.NewRequestWithContext(ctx, http.MethodPost, "http://ofsdn-node"+RequestPath, bytes.NewReader(body))
	if err != nil {
		return nil, types.NewError(types.ErrInternal, "cannot build the HTTP request for the ofsdn-node daemon", err.Error())
	}
	hreq.Header.Set("Content-Type", "application/json")

	resp, err := c.http.Do(hreq)
	if err != nil {
		var de *dialError
		switch {
		case errors.As(err, &de):
			return nil, types.NewError(types.ErrTryAgainLater,
				fmt.Sprintf("cannot reach the ofsdn-node daemon on %s: the ofsdn-node daemon must be running on this node", c.socketPath),
				de.err.Error())
		case errors.Is(err, context.DeadlineExceeded) || isTimeout(err):
			return nil, types.NewError(types.ErrTryAgainLater,
				fmt.Sprintf("the ofsdn-node daemon on %s did not answer within %s", c.socketPath, c.timeout),
				err.Error())
		default:
			return nil, types.NewError(types.ErrIOFailure,
				fmt.Sprintf("request to the ofsdn-node daemon on %s failed", c.socketPath), err.Error())
		}
	}
	defer resp.Body.Close()

	data, err := io.ReadAll(io.LimitReader(resp.Body, MaxResponseBytes+1))
	if err != nil {
		return nil, types.NewError(types.ErrIOFailure,
			fmt.Sprintf("cannot read the answer of the ofsdn-node daemon on %s", c.socketPath), err.Error())
	}
	if len(data) > MaxResponseBytes {
		return nil, types.NewError(types.ErrDecodingFailure,
			fmt.Sprintf("the answer of the ofsdn-node daemon on %s exceeds %d bytes", c.socketPath, MaxResponseBytes), "")
	}
	var r Response
	if err := json.Unmarshal(data, &r); err != nil {
		return nil, types.NewError(types.ErrDecodingFailure,
			fmt.Sprintf("cannot decode the answer of the ofsdn-node daemon on %s (HTTP %d)", c.socketPath, resp.StatusCode),
			fmt.Sprintf("%v; body %q", err, truncate(data, 256)))
	}
	if r.Error != nil {
		return nil, r.Error
	}
	if resp.StatusCode != http.StatusOK {
		return nil, types.NewError(types.ErrInternal,
			fmt.Sprintf("the ofsdn-node daemon on %s answered HTTP %d without a CNI error", c.socketPath, resp.StatusCode), "")
	}
	if req.Command == CmdAdd && len(r.Result) == 0 {
		return nil, types.NewError(types.ErrInternal,
			fmt.Sprintf("the ofsdn-node daemon on %s answered ADD without a result: a successful ADD must return the pod's interfaces and IP addresses; the ADD is refused, see the daemon's log", c.socketPath), "")
	}
	return r.Result, nil
}

func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

func truncate(b []byte, n int) []byte {
	if len(b) > n {
		return b[:n]
	}
	return b
}
