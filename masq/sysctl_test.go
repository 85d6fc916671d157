package masq

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestCheckIPForward(t *testing.T) {
	dir := t.TempDir()
	for _, c := range []struct {
		content string
		warn    bool
	}{{"1\n", false}, {"0\n", true}, {"0", true}} {
		p := filepath.Join(dir, "ip_forward")
		if err := os.WriteFile(p, []byte(c.content), 0o644); err != nil {
			t.Fatal(err)
		}
		w, err := CheckIPForward(p)
		if err != nil {
			t.Fatal(err)
		}
		if (w != "") != c.warn || (c.warn && !strings.Contains(w, "net.ipv4.ip_forward=1")) {
			t.Errorf("ip_forward %q: warning %q", c.content, w)
		}
	}
	if _, err := CheckIPForward(filepath.Join(dir, "absent")); err == nil {
		t.Error("missing file: no error")
	}
	// The real file is readable (the daemon reads it at every start).
	if _, err := CheckIPForward(IPForwardSysctl); err != nil {
		t.Error(err)
	}
}

// TestCheckIPv6Forward: IPv6 forwarding off is a warning naming
// net.ipv6.conf.all.forwarding and its fix (and not IPv4's sysctl); on, none.
func TestCheckIPv6Forward(t *testing.T) {
	dir := t.TempDir()
	for _, c := range []struct {
		content string
		warn    bool
	}{{"1\n", false}, {"0\n", true}} {
		p := filepath.Join(dir, "forwarding")
		if err := os.WriteFile(p, []byte(c.content), 0o644); err != nil {
			t.Fatal(err)
		}
		w, err := CheckIPv6Forward(p)
		if err != nil {
			t.Fatal(err)
		}
		if (w != "") != c.warn || (c.warn && (!strings.Contains(w, "net.ipv6.conf.all.forwarding=1") || strings.Contains(w, "ipv4"))) {
			t.Errorf("forwarding %q: warning %q", c.content, w)
		}
	}
	if _, err := CheckIPv6Forward(filepath.Join(dir, "absent")); err == nil {
		t.Error("missing file: no error")
	}
	if _, err := CheckIPv6Forward(IPv6ForwardSysctl); err != nil {
		t.Error(err)
	}
}
