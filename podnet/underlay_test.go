package podnet

// MoveIPv4 between two links of a namespace, as `ip` shows them to a user: an address's
// peer, lifetimes, flags and label, routes of other tables and multipath routes, and
// arp_ignore all move with the addresses and come back with them, also from a link that
// lost its carrier.

import (
	"fmt"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"testing"

	"github.com/containernetworking/plugins/pkg/ns"

	"github.com/ofsdn/ofsdn/test/testenv"
)

func TestMoveIPv4KeepsDetails(t *testing.T) {
	testenv.Privileged(t)
	name := fmt.Sprintf("ofsdn-mv4-%d", os.Getpid())
	ip := func(args ...string) string {
		t.Helper()
		b, err := exec.Command("ip", append([]string{"-n", name}, args...)...).CombinedOutput()
		if err != nil {
			t.Fatalf("ip %s: %v\n%s", strings.Join(args, " "), err, b)
		}
		return string(b)
	}
	if b, err := exec.Command("ip", "netns", "add", name).CombinedOutput(); err != nil {
		t.Fatalf("ip netns add: %v\n%s", err, b)
	}
	t.Cleanup(func() { _ = exec.Command("ip", "netns", "del", name).Run() })
	for _, l := range []string{"nic0", "brx0", "other0"} {
		ip("link", "add", l, "type", "veth", "peer", "name", l+"p")
		ip("link", "set", l, "up")
		ip("link", "set", l+"p", "up")
	}
	ip("addr", "add", "192.168.91.11/24", "brd", "+", "dev", "nic0", "valid_lft", "3600", "preferred_lft", "1800")
	ip("addr", "add", "192.168.91.12/24", "dev", "nic0", "label", "nic0:1")
	ip("addr", "add", "192.168.92.2", "peer", "192.168.92.1", "dev", "nic0")
	ip("addr", "add", "192.168.93.5/24", "dev", "nic0", "noprefixroute")
	ip("addr", "add", "192.168.94.5/24", "dev", "other0")
	ip("route", "add", "default", "via", "192.168.91.1", "dev", "nic0", "metric", "100")
	ip("route", "add", "10.20.0.0/16", "nexthop", "via", "192.168.91.1", "dev", "nic0", "nexthop", "via", "192.168.92.1", "dev", "nic0")
	ip("route", "add", "default", "via", "192.168.91.1", "dev", "nic0", "table", "100")
	ip("route", "add", "10.30.0.0/16", "via", "192.168.94.1", "dev", "other0")
	exec.Command("ip", "netns", "exec", name, "sysctl", "-qw", "net.ipv4.conf.nic0.arp_ignore=2").Run()
	arpIgnore := func(dev string) string {
		b, _ := exec.Command("ip", "netns", "exec", name, "cat", "/proc/sys/net/ipv4/conf/"+dev+"/arp_ignore").Output()
		return strings.TrimSpace(string(b))
	}
	move := func(from, to string) {
		t.Helper()
		err := ns.WithNetNSPath("/var/run/netns/"+name, func(ns.NetNS) error {
			_, err := MoveIPv4(from, to)
			return err
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	check := func(from, to string) {
		t.Helper()
		if a := ip("-4", "-o", "addr", "show", "dev", from); strings.TrimSpace(a) != "" {
			t.Errorf("after the move %s → %s, %s still has\n%s", from, to, from, a)
		}
		a := ip("-4", "addr", "show", "dev", to)
		for _, want := range []string{
			`inet 192\.168\.91\.11/24 brd 192\.168\.91\.255 scope global dynamic ` + to + `\n\s+valid_lft 3[0-9]{3}sec preferred_lft 1[0-9]{3}sec`,
			`inet 192\.168\.91\.12/24 scope global secondary ` + to + `:1\n\s+valid_lft forever`,
			`inet 192\.168\.92\.2 peer 192\.168\.92\.1/32 scope global ` + to + `\n`,
			`inet 192\.168\.93\.5/24 scope global noprefixroute ` + to + `\n`,
		} {
			if !regexp.MustCompile(want).MatchString(a) {
				t.Errorf("after the move %s → %s: addresses of %s\n%s\nwant /%s/", from, to, to, a, want)
			}
		}
		r := ip("-4", "route", "show", "table", "all")
		for _, want := range []string{
			"default via 192.168.91.1 dev " + to + " table 100",
			"default via 192.168.91.1 dev " + to + " metric 100",
			"10.20.0.0/16 \n\tnexthop via 192.168.91.1 dev " + to + " weight 1 \n\tnexthop via 192.168.92.1 dev " + to + " weight 1",
			"10.30.0.0/16 via 192.168.94.1 dev other0",
		} {
			if !strings.Contains(r, want) {
				t.Errorf("after the move %s → %s: routes\n%s\nwant %q", from, to, r, want)
			}
		}
		if strings.Contains(r, "dev "+from) || strings.Contains(r, "192.168.93.0/24") {
			t.Errorf("after the move %s → %s: routes\n%s\nwant none through %s and no prefix route for the noprefixroute address", from, to, r, from)
		}
		if f, tv := arpIgnore(from), arpIgnore(to); f != "8" || tv != "2" {
			t.Errorf("after the move %s → %s: arp_ignore %s %s, %s %s; want 8 and the node's 2", from, to, from, f, to, tv)
		}
	}
	move("nic0", "brx0")
	check("nic0", "brx0")
	// Back from a link without carrier (an OVS bridge's tap device whose ovs-vswitchd
	// died): its routes are "linkdown", a flag of the kernel's that moves not.
	ip("link", "set", "brx0p", "down")
	move("brx0", "nic0")
	check("brx0", "nic0")
}
