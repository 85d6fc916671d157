package main

import (
	"bytes"
	"encoding/json"
	"log/slog"
	"net"
	"strings"
	"testing"
)

// TestLogMACsAsText: a MAC (and any byte-slice Stringer) passed to the daemon's logger as
// itself prints as aa:bb:cc:dd:ee:ff in text and JSON lines, also inside a With and a
// group; IPs keep their text form, plain byte slices are untouched.
func TestLogMACsAsText(t *testing.T) {
	mac := net.HardwareAddr{0x5a, 0x2d, 0x11, 0x97, 0xc9, 0xc3}
	for _, format := range []string{"text", "json"} {
		var buf bytes.Buffer
		opts := &slog.HandlerOptions{ReplaceAttr: textAttr}
		var h slog.Handler = slog.NewTextHandler(&buf, opts)
		if format == "json" {
			h = slog.NewJSONHandler(&buf, opts)
		}
		log := slog.New(h)
		log.With("gateway_mac", mac).Info("x", "gateway_mac_was", mac, "none", net.HardwareAddr(nil),
			"mask", net.CIDRMask(24, 32), "ip", net.IPv4(10, 0, 0, 1), slog.Group("g", "mac", mac))
		out := buf.String()
		if strings.Count(out, "5a:2d:11:97:c9:c3") != 3 || strings.Contains(out, "Z-") || strings.Contains(out, "Wi0R") {
			t.Errorf("%s: MACs not printed as text:\n%s", format, out)
		}
		if !strings.Contains(out, "ffffff00") || !strings.Contains(out, "10.0.0.1") {
			t.Errorf("%s: mask or IP not printed as text:\n%s", format, out)
		}
		if format == "json" && !json.Valid(bytes.TrimSpace(buf.Bytes())) {
			t.Errorf("invalid JSON line: %s", out)
		}
	}
}
