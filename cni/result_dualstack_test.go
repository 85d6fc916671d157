package cni

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/containernetworking/cni/pkg/types"
	types020 "github.com/containernetworking/cni/pkg/types/020"
	types040 "github.com/containernetworking/cni/pkg/types/040"
	current "github.com/containernetworking/cni/pkg/types/100"
)

// dualResult is what the daemon sends for a dual-stack pod.
const dualResult = `{"cniVersion":"1.1.0",
 "interfaces":[{"name":"ofs0123456789ab","mac":"aa:bb:cc:00:00:01"},{"name":"eth0","mac":"0a:58:0a:f4:01:05","sandbox":"/var/run/netns/p","mtu":1450}],
 "ips":[{"interface":1,"address":"10.244.1.5/24","gateway":"10.244.1.1"},{"interface":1,"address":"fd00:10:244:1::5/64","gateway":"fd00:10:244:1::1"}],
 "routes":[{"dst":"0.0.0.0/0","gw":"10.244.1.1"},{"dst":"::/0","gw":"fd00:10:244:1::1"}]}`

// TestResultDualStack: a dual-stack pod's result converts to every supported version
// with both addresses, in order, each with its gateway (0.1.0/0.2.0: ip4 and ip6); a
// result with two addresses of one family is refused for 0.1.0/0.2.0 with code 1.
func TestResultDualStack(t *testing.T) {
	for _, v := range SupportedVersions {
		res, err := ResultForVersion(json.RawMessage(dualResult), v, "eth0", "/var/run/netns/p")
		if err != nil {
			t.Errorf("cniVersion %s: %v", v, err)
			continue
		}
		var addrs, gws []string
		switch r := res.(type) {
		case *types020.Result:
			if r.IP4 == nil || r.IP6 == nil {
				t.Errorf("cniVersion %s: ip4 %v ip6 %v, want both", v, r.IP4, r.IP6)
				continue
			}
			addrs = []string{r.IP4.IP.String(), r.IP6.IP.String()}
			gws = []string{r.IP4.Gateway.String(), r.IP6.Gateway.String()}
		case *types040.Result:
			for _, ip := range r.IPs {
				addrs, gws = append(addrs, ip.Address.String()), append(gws, ip.Gateway.String())
			}
		case *current.Result:
			for _, ip := range r.IPs {
				addrs, gws = append(addrs, ip.Address.String()), append(gws, ip.Gateway.String())
			}
		default:
			t.Fatalf("cniVersion %s: result type %T", v, res)
		}
		if strings.Join(addrs, " ") != "10.244.1.5/24 fd00:10:244:1::5/64" || strings.Join(gws, " ") != "10.244.1.1 fd00:10:244:1::1" {
			t.Errorf("cniVersion %s: addresses %v gateways %v, want 10.244.1.5/24 fd00:10:244:1::5/64 via 10.244.1.1 fd00:10:244:1::1", v, addrs, gws)
		}
	}
	two := strings.Replace(dualResult, `"fd00:10:244:1::5/64","gateway":"fd00:10:244:1::1"`, `"10.244.1.6/24","gateway":"10.244.1.1"`, 1)
	for _, v := range []string{"0.1.0", "0.2.0"} {
		_, err := ResultForVersion(json.RawMessage(two), v, "eth0", "/var/run/netns/p")
		var te *types.Error
		if !errors.As(err, &te) || te.Code != types.ErrIncompatibleCNIVersion || !strings.Contains(te.Msg, "set cniVersion 0.3.0 or later") {
			t.Errorf("two IPv4 addresses at cniVersion %s: %v, want code 1 naming cniVersion 0.3.0", v, err)
		}
	}
	if _, err := ResultForVersion(json.RawMessage(two), "0.3.1", "eth0", "/var/run/netns/p"); err != nil {
		t.Errorf("two IPv4 addresses at 0.3.1: %v", err)
	}
}

// v6OnlyResult is what the daemon sends for an IPv6-only node's pod: one IPv6 address.
const v6OnlyResult = `{"cniVersion":"1.1.0",
 "interfaces":[{"name":"ofs0123456789ab","mac":"aa:bb:cc:00:00:01"},{"name":"eth0","mac":"0a:58:00:00:00:05","sandbox":"/var/run/netns/p","mtu":1430}],
 "ips":[{"interface":1,"address":"fd00:10:244:1::5/64","gateway":"fd00:10:244:1::1"}],
 "routes":[{"dst":"::/0","gw":"fd00:10:244:1::1"}]}`

// TestResultIPv6Only: an IPv6-only pod's result (no IPv4 address) converts to every
// supported version with its one address (0.1.0/0.2.0: ip6 alone); a result without any
// address is still refused.
func TestResultIPv6Only(t *testing.T) {
	for _, v := range SupportedVersions {
		res, err := ResultForVersion(json.RawMessage(v6OnlyResult), v, "eth0", "/var/run/netns/p")
		if err != nil {
			t.Errorf("cniVersion %s: %v", v, err)
			continue
		}
		var addrs []string
		switch r := res.(type) {
		case *types020.Result:
			if r.IP4 != nil || r.IP6 == nil {
				t.Errorf("cniVersion %s: ip4 %v ip6 %v, want ip6 alone", v, r.IP4, r.IP6)
				continue
			}
			addrs = []string{r.IP6.IP.String()}
		case *types040.Result:
			for _, ip := range r.IPs {
				addrs = append(addrs, ip.Address.String())
			}
		case *current.Result:
			for _, ip := range r.IPs {
				addrs = append(addrs, ip.Address.String())
			}
		}
		if strings.Join(addrs, " ") != "fd00:10:244:1::5/64" {
			t.Errorf("cniVersion %s: addresses %v, want fd00:10:244:1::5/64", v, addrs)
		}
	}
	none := strings.Replace(v6OnlyResult, `{"interface":1,"address":"fd00:10:244:1::5/64","gateway":"fd00:10:244:1::1"}`, ``, 1)
	if _, err := ResultForVersion(json.RawMessage(none), "1.1.0", "eth0", "/var/run/netns/p"); err == nil || !strings.Contains(err.Error(), "has no IP address") {
		t.Errorf("a result without addresses: %v, want it refused", err)
	}
}
