package podnet

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/vishvananda/netlink"
)

// TestGatewayRedirectsOff: ConfigureGateway leaves the gateway with no ICMP redirects in
// the kernel's sense (all OR own = 0) and every other interface as it was (all OR own
// unchanged), in a namespace of the test's own. The traffic side (no IcmpOutRedirects,
// Service rejects on the first SYN) is test/e2e TestServiceRejectNotDelayedByRedirects.
func TestGatewayRedirectsOff(t *testing.T) {
	n := newNS(t)
	in(t, n, func() error {
		write := func(dev, v string) {
			t.Helper()
			if err := os.WriteFile(filepath.Join(procIPv4Conf, dev, "send_redirects"), []byte(v), 0o644); err != nil {
				t.Fatal(err)
			}
		}
		read := func(dev string) int {
			t.Helper()
			v, err := readDevconf(dev, "send_redirects")
			if err != nil {
				t.Fatal(err)
			}
			return v
		}
		if err := netlink.LinkAdd(newTap("ofsgw9")); err != nil {
			return err
		}
		if err := netlink.LinkAdd(&netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: "ofsa"}, PeerName: "ofsb"}); err != nil {
			return err
		}
		write("all", "1")
		write("ofsa", "0") // sends redirects only because all is 1
		write("ofsb", "1")
		effective := func(dev string) int { return read("all") | read(dev) }
		before := map[string]int{"ofsa": effective("ofsa"), "ofsb": effective("ofsb"), "lo": effective("lo")}
		for i := 0; i < 2; i++ { // the second time: idempotent, all is already 0
			if _, err := ConfigureGateway(context.Background(), "ofsgw9", cidr(t, "10.202.0.1/24"), 0); err != nil {
				return err
			}
			if e := effective("ofsgw9"); e != 0 {
				t.Errorf("run %d: the gateway sends redirects: all %d, own %d", i, read("all"), read("ofsgw9"))
			}
			for dev, want := range before {
				if got := effective(dev); got != want {
					t.Errorf("run %d: interface %s: send_redirects in effect %d, was %d (all %d, own %d)", i, dev, got, want, read("all"), read(dev))
				}
			}
		}
		return nil
	})
}
