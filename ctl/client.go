package ctl

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"time"
)

// DefaultClientTimeout bounds one request of a Client: 60 seconds (more than a flow dump's
// FlowDumpTimeout).
const DefaultClientTimeout = 60 * time.Second

// maxAnswerBytes bounds an answer the client reads: 64 MiB (a flow dump of many pods).
const maxAnswerBytes = 64 << 20

// Client talks to a daemon's inspection socket. It is safe for concurrent use.
type Client struct {
	path string
	http *http.Client
}

// NewClient returns a client for the inspection socket at path (DefaultSocketPath
// normally). timeout bounds each request; zero or negative means DefaultClientTimeout.
func NewClient(path string, timeout time.Duration) *Client {
	if timeout <= 0 {
		timeout = DefaultClientTimeout
	}
	d := &net.Dialer{}
	return &Client{path: path, http: &http.Client{Timeout: timeout, Transport: &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			return d.DialContext(ctx, "unix", path)
		},
		DisableKeepAlives: true,
	}}}
}

// Pods returns the daemon's local pods (GET /v1/pods).
func (c *Client) Pods(ctx context.Context) ([]Pod, error) {
	var out []Pod
	return out, c.get(ctx, PathPods, &out)
}

// Flows returns the switch's flows by stage (GET /v1/flows).
func (c *Client) Flows(ctx context.Context) ([]Stage, error) {
	var out []Stage
	return out, c.get(ctx, PathFlows, &out)
}

// Peers returns the daemon's peer nodes (GET /v1/peers).
func (c *Client) Peers(ctx context.Context) ([]Peer, error) {
	var out []Peer
	return out, c.get(ctx, PathPeers, &out)
}

// Services reports the Service ports load-balanced in the switch (GET /v1/services).
func (c *Client) Services(ctx context.Context) (ServiceReport, error) {
	var r ServiceReport
	err := c.get(ctx, PathServices, &r)
	return r, err
}

// get fetches path into v. Errors name the socket: cannot connect (is ofsdn-node running,
// are you root?), the daemon's own error message, or an undecodable answer.
// Policies reports the node's NetworkPolicy enforcement (PathPolicies).
func (c *Client) Policies(ctx context.Context) (PolicyReport, error) {
	var r PolicyReport
	err := c.get(ctx, PathPolicies, &r)
	return r, err
}

// PolicyStatus reports the node's NetworkPolicy enforcement without the per-pod detail
// (PathPolicyStatus): cheap enough to poll at scale.
func (c *Client) PolicyStatus(ctx context.Context) (PolicyReport, error) {
	var r PolicyReport
	err := c.get(ctx, PathPolicyStatus, &r)
	return r, err
}

func (c *Client) get(ctx context.Context, path string, v any) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://ofsdn-node"+path, nil)
	if err != nil {
		return err
	}
	resp, err := c.http.Do(req)
	if err != nil {
		return fmt.Errorf("ofsdn-node inspection socket %s: %w (is ofsdn-node running, and are you root?)", c.path, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, maxAnswerBytes))
	if err != nil {
		return fmt.Errorf("ofsdn-node inspection socket %s: reading the answer to %s: %w", c.path, path, err)
	}
	if resp.StatusCode != http.StatusOK {
		var e errorBody
		if json.Unmarshal(body, &e) == nil && e.Error != "" {
			return fmt.Errorf("ofsdn-node (%s): %s", resp.Status, e.Error)
		}
		return fmt.Errorf("ofsdn-node inspection socket %s: %s answered %s", c.path, path, resp.Status)
	}
	if err := json.Unmarshal(body, v); err != nil {
		return fmt.Errorf("ofsdn-node inspection socket %s: decoding the answer to %s: %w", c.path, path, err)
	}
	return nil
}
