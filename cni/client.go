package cni

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net"
	"net/textproto"
	"strconv"
	"strings"
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

// maxHeaderBytes bounds the status line and header of the daemon's answer: 64 KiB.
const maxHeaderBytes = 64 << 10

// Client sends forwarded CNI requests to the ofsdn-node daemon as
// "POST /cni" over its unix socket. It is safe for concurrent use.
//
// It speaks the least of HTTP/1.1 (RFC 9112) that the daemon's net/http server
// needs, on one connection per request ("Connection: close"): a POST with a
// Content-Length, and an answer whose body is delimited by Content-Length,
// chunked transfer coding or the end of the connection. The plugin is exec'd
// once per CNI operation, and net/http's client (its transport, and the TLS,
// HTTP/2 and compression packages it links in) cost every exec 12-13% more CPU
// for nothing it uses here (bench/RESULTS.md, "Plugin exec CPU").
type Client struct {
	socketPath string
	timeout    time.Duration
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
	return &Client{socketPath: socketPath, timeout: timeout}
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
//     or when the daemon's whole answer (header and body) does not arrive within
//     the client's timeout;
//   - 5 (ErrIOFailure) when the connection fails mid-request;
//   - 6 (ErrDecodingFailure) when the daemon's answer is not a Response;
//   - 999 (ErrInternal) when an ADD's answer has no result. Whether the result is
//     a valid one is ResultForVersion's check.
func (c *Client) Do(ctx context.Context, req *Request) (json.RawMessage, error) {
	body, err := json.Marshal(req)
	if err != nil {
		return nil, types.NewError(types.ErrInternal, "cannot encode the CNI request for the ofsdn-node daemon", err.Error())
	}
	ctx, cancel := context.WithTimeout(ctx, c.timeout)
	defer cancel()

	resp, err := c.send(ctx, body)
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
	defer resp.conn.Close()

	data, err := resp.readBody(MaxResponseBytes + 1)
	if err != nil {
		err = orCtxErr(ctx, err)
		if errors.Is(err, context.DeadlineExceeded) || isTimeout(err) {
			// The header came, the rest of the answer not within the timeout: the daemon
			// did not answer in time, as when the header is late.
			return nil, types.NewError(types.ErrTryAgainLater,
				fmt.Sprintf("the ofsdn-node daemon on %s did not answer within %s", c.socketPath, c.timeout),
				err.Error())
		}
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
			fmt.Sprintf("cannot decode the answer of the ofsdn-node daemon on %s (HTTP %d)", c.socketPath, resp.status),
			fmt.Sprintf("%v; body %q", err, truncate(data, 256)))
	}
	if r.Error != nil {
		return nil, r.Error
	}
	if resp.status != statusOK {
		return nil, types.NewError(types.ErrInternal,
			fmt.Sprintf("the ofsdn-node daemon on %s answered HTTP %d without a CNI error", c.socketPath, resp.status), "")
	}
	if req.Command == CmdAdd && len(r.Result) == 0 {
		return nil, types.NewError(types.ErrInternal,
			fmt.Sprintf("the ofsdn-node daemon on %s answered ADD without a result: a successful ADD must return the pod's interfaces and IP addresses; the ADD is refused, see the daemon's log", c.socketPath), "")
	}
	return r.Result, nil
}

// statusOK is HTTP's 200 OK (RFC 9110 section 15.3.1).
const statusOK = 200

// response is the daemon's answer once its status line and header are read.
type response struct {
	conn   net.Conn
	br     *bufio.Reader
	status int
	// chunked: the body is in chunked transfer coding (RFC 9112 section 7.1);
	// otherwise length is its Content-Length, or -1 for "until the
	// connection ends" (RFC 9112 section 6.3).
	chunked bool
	length  int64
}

// send dials the daemon, writes "POST /cni" with body and reads the answer's
// status line and header. The connection's deadline is ctx's; a cancelled ctx
// ends the exchange at once. The caller closes resp.conn.
func (c *Client) send(ctx context.Context, body []byte) (*response, error) {
	var d net.Dialer
	conn, err := d.DialContext(ctx, "unix", c.socketPath)
	if err != nil {
		return nil, &dialError{err: err}
	}
	resp, err := exchange(ctx, conn, body)
	if err != nil {
		conn.Close()
		return nil, orCtxErr(ctx, err)
	}
	return resp, nil
}

// exchange writes the request with body on conn, under ctx's deadline, and
// reads the answer's status line and header (see send).
func exchange(ctx context.Context, conn net.Conn, body []byte) (*response, error) {
	if dl, ok := ctx.Deadline(); ok {
		if err := conn.SetDeadline(dl); err != nil {
			return nil, err
		}
	}
	// A context cancelled before its deadline ends the exchange through the
	// connection's deadline. (context.Background has no Done channel: this
	// starts no goroutine.)
	context.AfterFunc(ctx, func() { conn.SetDeadline(time.Unix(1, 0)) })

	var w bytes.Buffer
	w.Grow(len(body) + 128)
	w.WriteString("POST " + RequestPath + " HTTP/1.1\r\nHost: ofsdn-node\r\nContent-Type: application/json\r\nConnection: close\r\nContent-Length: ")
	w.WriteString(strconv.Itoa(len(body)))
	w.WriteString("\r\n\r\n")
	w.Write(body)
	// A server may answer before it has read the whole request, and close: the
	// daemon refuses a body over its limit so. Its answer is then read and
	// wins; the write's error counts only when there is none.
	_, werr := conn.Write(w.Bytes())
	resp, err := readAnswer(conn)
	if err != nil && werr != nil {
		return nil, werr
	}
	return resp, err
}

// readAnswer reads the status line and header of the answer on conn and
// returns it positioned at the body.
func readAnswer(conn net.Conn) (*response, error) {
	// The header is bounded (maxHeaderBytes); the body by readBody's limit.
	lr := &io.LimitedReader{R: conn, N: maxHeaderBytes}
	br := bufio.NewReader(lr)
	tp := textproto.NewReader(br)
	for {
		line, err := tp.ReadLine()
		if err != nil {
			return nil, headerErr(err)
		}
		status, err := parseStatusLine(line)
		if err != nil {
			return nil, err
		}
		hdr, err := tp.ReadMIMEHeader()
		if err != nil {
			return nil, headerErr(err)
		}
		if status >= 100 && status < 200 {
			continue // an interim answer (e.g. 100 Continue): the final one follows
		}
		lr.N = math.MaxInt64
		resp := &response{conn: conn, br: br, status: status, length: -1}
		if te := hdr.Values("Transfer-Encoding"); len(te) > 0 {
			if !strings.EqualFold(strings.TrimSpace(te[len(te)-1]), "chunked") {
				return nil, fmt.Errorf("unsupported Transfer-Encoding %q in the answer", te)
			}
			resp.chunked = true
		} else if cl := hdr.Get("Content-Length"); cl != "" {
			n, err := strconv.ParseInt(strings.TrimSpace(cl), 10, 64)
			if err != nil || n < 0 {
				return nil, fmt.Errorf("bad Content-Length %q in the answer", cl)
			}
			resp.length = n
		}
		if status == 204 || status == 304 {
			resp.chunked, resp.length = false, 0
		}
		return resp, nil
	}
}

// headerErr names an answer's header that ends early or is too large.
func headerErr(err error) error {
	if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
		return fmt.Errorf("the connection ended before the whole header of the HTTP answer (at most %d bytes) was read: %w", maxHeaderBytes, err)
	}
	return err
}

// parseStatusLine returns the status code of an HTTP/1.x status line
// ("HTTP/1.1 200 OK", RFC 9112 section 4).
func parseStatusLine(line string) (int, error) {
	proto, rest, _ := strings.Cut(line, " ")
	code, _, _ := strings.Cut(rest, " ")
	if !strings.HasPrefix(proto, "HTTP/1.") || len(code) != 3 {
		return 0, fmt.Errorf("malformed HTTP status line %q", truncate([]byte(line), 64))
	}
	n, err := strconv.Atoi(code)
	if err != nil || n < 100 {
		return 0, fmt.Errorf("malformed HTTP status code in %q", truncate([]byte(line), 64))
	}
	return n, nil
}

// readBody reads the answer's body, at most limit bytes of it: a longer body
// comes back cut at limit bytes, which the caller refuses.
func (r *response) readBody(limit int) ([]byte, error) {
	switch {
	case r.chunked:
		return readChunked(r.br, limit)
	case r.length >= 0:
		n := r.length
		if n > int64(limit) {
			n = int64(limit)
		}
		data := make([]byte, n)
		if _, err := io.ReadFull(r.br, data); err != nil {
			if errors.Is(err, io.EOF) {
				err = io.ErrUnexpectedEOF
			}
			return nil, err
		}
		return data, nil
	default:
		return io.ReadAll(io.LimitReader(r.br, int64(limit)))
	}
}

// readChunked reads a body in chunked transfer coding (RFC 9112 section 7.1):
// chunks of a hexadecimal size line (extensions ignored), the data and CRLF, up
// to the last chunk of size 0 and the trailer section, which is skipped. It
// stops at limit bytes of data.
func readChunked(br *bufio.Reader, limit int) ([]byte, error) {
	var out []byte
	for {
		line, err := readCRLFLine(br)
		if err != nil {
			return nil, err
		}
		size, _, _ := strings.Cut(line, ";")
		n, err := strconv.ParseUint(strings.TrimSpace(size), 16, 62)
		if err != nil {
			return nil, fmt.Errorf("malformed chunk size line %q", truncate([]byte(line), 64))
		}
		if n == 0 {
			for {
				trailer, err := readCRLFLine(br)
				if err != nil {
					return nil, err
				}
				if trailer == "" {
					return out, nil
				}
			}
		}
		take := min(n, uint64(limit-len(out)))
		start := len(out)
		out = append(out, make([]byte, take)...)
		if _, err := io.ReadFull(br, out[start:]); err != nil {
			return nil, chunkErr(err)
		}
		if take < n {
			return out, nil // over the limit
		}
		if crlf, err := readCRLFLine(br); err != nil {
			return nil, err
		} else if crlf != "" {
			return nil, fmt.Errorf("chunk of %d bytes not followed by CRLF", n)
		}
	}
}

// readCRLFLine reads one line of a chunked body without its line end; lines
// longer than br's buffer are an error.
func readCRLFLine(br *bufio.Reader) (string, error) {
	line, err := br.ReadSlice('\n')
	if err != nil {
		return "", chunkErr(err)
	}
	return strings.TrimSuffix(strings.TrimSuffix(string(line), "\n"), "\r"), nil
}

func chunkErr(err error) error {
	if errors.Is(err, io.EOF) {
		return io.ErrUnexpectedEOF
	}
	return err
}

// orCtxErr returns ctx's error when ctx ended (its deadline, or cancelled), else err.
func orCtxErr(ctx context.Context, err error) error {
	if ctx.Err() != nil {
		return fmt.Errorf("%w (%v)", ctx.Err(), err)
	}
	return err
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
