package main

import (
	"bytes"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestCheckForwardingFamily: the start-up forwarding warning is about the family the
// node's pods use: IPv4's net.ipv4.ip_forward on a node with an IPv4 pod subnet (as
// before, dual-stack included), IPv6's net.ipv6.conf.all.forwarding on an IPv6-only node,
// never IPv4's there; none when the sysctl is on.
func TestCheckForwardingFamily(t *testing.T) {
	dir := t.TempDir()
	write := func(name, v string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(v+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	v4Off, v6Off := write("ip_forward", "0"), write("forwarding", "0")
	v4On, v6On := write("ip_forward_on", "1"), write("forwarding_on", "1")
	for _, c := range []struct {
		name          string
		ipv4          bool
		v4, v6        string
		want, notWant string
	}{
		{"IPv4 or dual-stack node, both off", true, v4Off, v6Off, "net.ipv4.ip_forward is 0", "ipv6"},
		{"IPv6-only node, both off", false, v4Off, v6Off, "net.ipv6.conf.all.forwarding is 0", "ipv4"},
		{"IPv6-only node, IPv6 on", false, v4Off, v6On, "", "forwarding"},
		{"IPv4 node, IPv4 on", true, v4On, v6Off, "", "forwarding"},
		{"IPv6-only node, unreadable", false, v4On, filepath.Join(dir, "absent"), "cannot check IPv6 forwarding", "ipv4"},
	} {
		var buf bytes.Buffer
		checkForwarding(slog.New(slog.NewTextHandler(&buf, nil)), c.ipv4, c.v4, c.v6)
		got := buf.String()
		if c.want != "" && !strings.Contains(got, c.want) {
			t.Errorf("%s: log %q does not say %q", c.name, got, c.want)
		}
		if c.want == "" && got != "" || strings.Contains(got, c.notWant) {
			t.Errorf("%s: log %q, want nothing about %q", c.name, got, c.notWant)
		}
	}
}
