package podnet

// MoveAddresses between two links of a namespace, as `ip` shows them to a user, for an
// IPv4-only, a dual-stack and an IPv6-only NIC (all IPv6 ULA): an address's peer,
// lifetimes (dynamic, permanent, deprecated), flags and label, IPv6 addresses without
// duplicate address detection yet without a nodad they did not have, each link's own
// link-local address left in place, routes of other tables, multipath routes, an IPv6
// default route via a link-local next hop and on-link prefix routes, and arp_ignore all
// move with the addresses and come back with them, also from a link that lost its
// carrier.

import (
	"fmt"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/containernetworking/plugins/pkg/ns"

	"github.com/ofsdn/ofsdn/test/testenv"
)

func TestMoveAddressesKeepsDetails(t *testing.T) {
	for _, tc := range []struct {
		name     string
		ipv4     bool
		ipv6     bool
		nickname string
	}{
		{"IPv4", true, false, "mv4"},
		{"dual-stack", true, true, "mv46"},
		{"IPv6-only", false, true, "mv6"},
	} {
		t.Run(tc.name, func(t *testing.T) { testMoveAddresses(t, tc.nickname, tc.ipv4, tc.ipv6) })
	}
}

func testMoveAddresses(t *testing.T, nick string, ipv4, ipv6 bool) {
	testenv.Privileged(t)
	name := fmt.Sprintf("ofsdn-%s-%d", nick, os.Getpid())
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
	if ipv4 {
		ip("addr", "add", "192.168.91.11/24", "brd", "+", "dev", "nic0", "valid_lft", "3600", "preferred_lft", "1800")
		ip("addr", "add", "192.168.91.12/24", "dev", "nic0", "label", "nic0:1")
		ip("addr", "add", "192.168.92.2", "peer", "192.168.92.1", "dev", "nic0")
		ip("addr", "add", "192.168.93.5/24", "dev", "nic0", "noprefixroute")
		ip("addr", "add", "192.168.94.5/24", "dev", "other0")
		ip("route", "add", "default", "via", "192.168.91.1", "dev", "nic0", "metric", "100")
		ip("route", "add", "10.20.0.0/16", "nexthop", "via", "192.168.91.1", "dev", "nic0", "nexthop", "via", "192.168.92.1", "dev", "nic0")
		ip("route", "add", "default", "via", "192.168.91.1", "dev", "nic0", "table", "100")
		ip("route", "add", "10.30.0.0/16", "via", "192.168.94.1", "dev", "other0")
	}
	if ipv6 {
		ip("addr", "add", "fd00:91::11/64", "dev", "nic0", "valid_lft", "3600", "preferred_lft", "1800")
		ip("addr", "add", "fd00:91::12/64", "dev", "nic0")
		ip("addr", "add", "fd00:92::2", "peer", "fd00:92::1", "dev", "nic0", "nodad")
		ip("addr", "add", "fd00:93::5/64", "dev", "nic0", "noprefixroute", "nodad")
		ip("addr", "add", "fd00:94::5/64", "dev", "nic0", "preferred_lft", "0")
		ip("addr", "add", "fd00:96::5/64", "dev", "nic0", "mngtmpaddr")
		ip("addr", "add", "fd00:98::5/64", "dev", "other0", "nodad")
		ip("-6", "route", "add", "default", "via", "fe80::1", "dev", "nic0", "metric", "100")
		ip("-6", "route", "add", "fd00:20::/48", "nexthop", "via", "fd00:91::1", "dev", "nic0", "nexthop", "via", "fe80::2", "dev", "nic0")
		ip("-6", "route", "add", "default", "via", "fd00:91::1", "dev", "nic0", "table", "100")
		ip("-6", "route", "add", "fd00:97::/64", "dev", "nic0", "metric", "100")
		ip("-6", "route", "add", "fd00:30::/48", "via", "fd00:98::1", "dev", "other0")
	}
	exec.Command("ip", "netns", "exec", name, "sysctl", "-qw", "net.ipv4.conf.nic0.arp_ignore=2").Run()
	arpIgnore := func(dev string) string {
		b, _ := exec.Command("ip", "netns", "exec", name, "cat", "/proc/sys/net/ipv4/conf/"+dev+"/arp_ignore").Output()
		return strings.TrimSpace(string(b))
	}
	// Each link's own link-local address, once duplicate address detection is done with
	// every address (the moved ones must not need it again).
	linkLocal := map[string]string{}
	deadline := time.Now().Add(10 * time.Second)
	for _, l := range []string{"nic0", "brx0"} {
		for ipv6 {
			if strings.TrimSpace(ip("-6", "-o", "addr", "show", "dev", l, "tentative")) != "" && time.Now().Before(deadline) {
				time.Sleep(100 * time.Millisecond)
				continue
			}
			m := regexp.MustCompile(`inet6 (fe80::[0-9a-f:]+/64) scope link`).FindStringSubmatch(ip("-6", "addr", "show", "dev", l))
			if m == nil {
				t.Fatalf("%s has no link-local address", l)
			}
			linkLocal[l] = m[1]
			break
		}
	}
	move := func(from, to string) {
		t.Helper()
		var m Moved
		err := ns.WithNetNSPath("/var/run/netns/"+name, func(ns.NetNS) error {
			var err error
			m, err = MoveAddresses(from, to)
			return err
		})
		if err != nil {
			t.Fatal(err)
		}
		if m.AnnounceErr != nil {
			t.Errorf("move %s → %s: IPv6 addresses not announced: %v", from, to, m.AnnounceErr)
		}
	}
	check := func(from, to string) {
		t.Helper()
		if a := ip("-4", "-o", "addr", "show", "dev", from); strings.TrimSpace(a) != "" {
			t.Errorf("after the move %s → %s, %s still has\n%s", from, to, from, a)
		}
		if a := ip("-6", "-o", "addr", "show", "dev", from, "scope", "global"); strings.TrimSpace(a) != "" {
			t.Errorf("after the move %s → %s, %s still has\n%s", from, to, from, a)
		}
		a := ip("addr", "show", "dev", to)
		var want []string
		if ipv4 {
			want = append(want,
				`inet 192\.168\.91\.11/24 brd 192\.168\.91\.255 scope global dynamic `+to+`\n\s+valid_lft 3[0-9]{3}sec preferred_lft 1[0-9]{3}sec`,
				`inet 192\.168\.91\.12/24 scope global secondary `+to+`:1\n\s+valid_lft forever`,
				`inet 192\.168\.92\.2 peer 192\.168\.92\.1/32 scope global `+to+`\n`,
				`inet 192\.168\.93\.5/24 scope global noprefixroute `+to+`\n`)
		}
		if ipv6 {
			want = append(want,
				`inet6 fd00:91::11/64 scope global dynamic \n\s+valid_lft 3[0-9]{3}sec preferred_lft 1[0-9]{3}sec`,
				`inet6 fd00:91::12/64 scope global \n\s+valid_lft forever preferred_lft forever`,
				`inet6 fd00:92::2 peer fd00:92::1/128 scope global nodad \n`,
				`inet6 fd00:93::5/64 scope global nodad noprefixroute \n`,
				`inet6 fd00:94::5/64 scope global deprecated \n\s+valid_lft forever preferred_lft 0sec`,
				`inet6 fd00:96::5/64 scope global mngtmpaddr \n`,
				`inet6 `+regexp.QuoteMeta(linkLocal[to])+` scope link`)
		}
		for _, w := range want {
			if !regexp.MustCompile(w).MatchString(a) {
				t.Errorf("after the move %s → %s: addresses of %s\n%s\nwant /%s/", from, to, to, a, w)
			}
		}
		if ipv6 {
			if a := ip("-6", "addr", "show", "dev", from); !strings.Contains(a, "inet6 "+linkLocal[from]+" scope link") || strings.Contains(a, linkLocal[to]) {
				t.Errorf("after the move %s → %s: addresses of %s\n%s\nwant its own link-local address %s alone", from, to, from, a, linkLocal[from])
			}
		}
		r := ip("route", "show", "table", "all") + ip("-6", "route", "show", "table", "all")
		want = nil
		if ipv4 {
			want = append(want,
				"default via 192.168.91.1 dev "+to+" table 100",
				"default via 192.168.91.1 dev "+to+" metric 100",
				"10.20.0.0/16 \n\tnexthop via 192.168.91.1 dev "+to+" weight 1 \n\tnexthop via 192.168.92.1 dev "+to+" weight 1",
				"10.30.0.0/16 via 192.168.94.1 dev other0")
		}
		if ipv6 {
			want = append(want,
				"default via fd00:91::1 dev "+to+" table 100",
				"default via fe80::1 dev "+to+" metric 100",
				"fd00:20::/48 metric 1024 pref medium\n\tnexthop via fd00:91::1 dev "+to+" weight 1 \n\tnexthop via fe80::2 dev "+to+" weight 1",
				"fd00:97::/64 dev "+to+" metric 100",
				"fd00:91::/64 dev "+to+" proto kernel",
				"fd00:30::/48 via fd00:98::1 dev other0")
		}
		for _, w := range want {
			if !strings.Contains(r, w) {
				t.Errorf("after the move %s → %s: routes\n%s\nwant %q", from, to, r, w)
			}
		}
		for _, line := range strings.Split(r, "\n") {
			// The kernel's routes of from's own link-local address and multicast stay.
			if strings.HasPrefix(line, "fe80::/64 dev "+from+" ") || strings.HasPrefix(line, "multicast ff00::/8 dev "+from+" ") ||
				strings.HasPrefix(line, "local "+strings.TrimSuffix(linkLocal[from], "/64")+" dev "+from+" ") {
				continue
			}
			if strings.Contains(line+" ", "dev "+from+" ") || strings.Contains(line, "192.168.93.0/24") || strings.Contains(line, "fd00:93::/64") {
				t.Errorf("after the move %s → %s: routes\n%s\nwant none through %s (but its link-local ones) and no prefix route for the noprefixroute address (%q)", from, to, r, from, line)
			}
		}
		if ipv4 {
			if f, tv := arpIgnore(from), arpIgnore(to); f != "8" || tv != "2" {
				t.Errorf("after the move %s → %s: arp_ignore %s %s, %s %s; want 8 and the node's 2", from, to, from, f, to, tv)
			}
		} else if n, b := arpIgnore("nic0"), arpIgnore("brx0"); n != "2" || b != "0" {
			t.Errorf("after the move %s → %s (IPv6 only): arp_ignore nic0 %s, brx0 %s; want them left alone (2, 0)", from, to, n, b)
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
