package switchstate

// Helpers of the tests against a real, private Open vSwitch (test/sandbox).

import (
	"context"
	"fmt"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/ofsdn/ofsdn/flows"
	"github.com/ofsdn/ofsdn/openflow"
	"github.com/ofsdn/ofsdn/test/sandbox"
)

// cookieCounts counts flows per cookie.
func cookieCounts(fs []flows.Flow) map[uint64]int {
	m := map[uint64]int{}
	for _, f := range fs {
		m[uint64(f.Cookie)]++
	}
	return m
}

// ofTestBridge starts a sandbox with bridge br-int (userspace datapath, OpenFlow 1.3 only,
// fail_mode=secure so it starts with no flows) and returns it with a connection to it.
func ofTestBridge(t *testing.T, opts openflow.Options) (*sandbox.OVS, *openflow.Conn) {
	t.Helper()
	ovs := sandbox.Start(t)
	ovs.Vsctl(t, "add-br", "br-int", "--", "set", "bridge", "br-int",
		"datapath_type=netdev", "protocols=OpenFlow13", "fail_mode=secure")
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	sw, err := openflow.Dial(ctx, ovs.MgmtSocket("br-int"), opts)
	if err != nil {
		t.Fatalf("openflow.Dial: %v", err)
	}
	t.Cleanup(func() { sw.Close() })
	return ovs, sw
}

// ofDumpLines returns the flow lines of ovs-ofctl dump-flows of br-int.
func ofDumpLines(t *testing.T, ovs *sandbox.OVS) []string {
	t.Helper()
	var lines []string
	for _, l := range strings.Split(ovs.Ofctl(t, "dump-flows", ovs.MgmtSocket("br-int")), "\n") {
		if strings.Contains(l, "cookie=") {
			lines = append(lines, strings.TrimSpace(l))
		}
	}
	return lines
}

var reCookie = regexp.MustCompile(`cookie=(0x[0-9a-f]+)`)

// switchCookieCounts counts the switch's flows per cookie, from ovs-ofctl dump-flows.
func switchCookieCounts(t *testing.T, ovs *sandbox.OVS) map[uint64]int {
	t.Helper()
	m := map[uint64]int{}
	for _, l := range ofDumpLines(t, ovs) {
		c, err := strconv.ParseUint(reCookie.FindStringSubmatch(l)[1], 0, 64)
		if err != nil {
			t.Fatal(err)
		}
		m[c]++
	}
	return m
}

func sameCounts(a, b map[uint64]int) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if b[k] != v {
			return false
		}
	}
	return true
}

func fmtCounts(m map[uint64]int) string {
	keys := make([]uint64, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, j int) bool { return keys[i] < keys[j] })
	s := ""
	for _, k := range keys {
		s += fmt.Sprintf("  %#x: %d\n", k, m[k])
	}
	return s
}
