//go:build benchservices

package benchservices

import (
	"os"
	"regexp"
	"strings"
	"testing"
)

// TestLiveIptablesEndpoints reads a trimmed iptables-save of kube-proxy v1.37.2 in
// iptables mode at 1000x10 (largeClusterMode), taken right after endpoint 10.250.19.112
// of svc/s-00461 went not ready: its KUBE-SEP chain is still in the table, jumped to by
// nothing, so the plain text search the bench used before reports it present; the
// ClusterIP reaches only the other nine.
func TestLiveIptablesEndpoints(t *testing.T) {
	b, err := os.ReadFile("testdata/iptables-save-stale-sep.txt")
	if err != nil {
		t.Fatal(err)
	}
	save := string(b)
	const gone = "10.250.19.112:8080"
	if !regexp.MustCompile(`[^0-9.]` + regexp.QuoteMeta(gone)).MatchString(save) {
		t.Fatalf("fixture: %s should still be in the text (a stale KUBE-SEP chain)", gone)
	}
	live, stale := liveIptablesEndpoints(save)
	if live[gone] || !stale[gone] || len(stale) != 1 {
		t.Errorf("%s: live %v, stale %v; want only stale", gone, live[gone], stale)
	}
	if len(live) != 9 {
		t.Errorf("live endpoints %d, want the 9 the KUBE-SVC chain jumps to: %v", len(live), live)
	}
	for _, ip := range []string{"10.250.19.111", "10.250.19.113", "10.250.19.120"} {
		if !live[ip+":8080"] {
			t.Errorf("%s:8080 not live", ip)
		}
	}
	// Without the KUBE-SERVICES rule nothing is reached: the check can say "missing".
	var cut []string
	for _, l := range strings.Split(save, "\n") {
		if !strings.HasPrefix(l, "-A KUBE-SERVICES ") {
			cut = append(cut, l)
		}
	}
	if live, _ := liveIptablesEndpoints(strings.Join(cut, "\n")); len(live) != 0 {
		t.Errorf("no KUBE-SERVICES jump: live %v, want none", live)
	}
	// A jump from the service chain makes the chain live again.
	if live, _ := liveIptablesEndpoints(save + "-A KUBE-SVC-KJQO3XWHWKZHNKJG -j KUBE-SEP-HWL4MF3I42C4XDLE\n"); !live[gone] {
		t.Errorf("%s jumped to from KUBE-SVC-KJQO3XWHWKZHNKJG: not live", gone)
	}
}
