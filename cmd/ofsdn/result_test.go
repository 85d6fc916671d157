package main

// TestInvalidDaemonResults runs the real plugin binary against a fake daemon socket that
// answers ADD with each kind of broken result, at every cniVersion the plugin supports:
// every one must be refused (exit 1, CNI error 999 naming the fault), and good results
// must still pass (issue 20, item 4).

import (
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/containernetworking/cni/pkg/types"
	"github.com/containernetworking/cni/pkg/version"

	"github.com/ofsdn/ofsdn/cni"
)

// rawDaemon serves POST /cni on a unix socket, answering each ADD with the body bodies
// holds for the request's container ID, with NETNS replaced by the request's CNI_NETNS.
func rawDaemon(t *testing.T, bodies map[string]string) string {
	t.Helper()
	sock := filepath.Join(t.TempDir(), "cni.sock")
	l, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var req cni.Request
		if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		mu.Lock()
		body, ok := bodies[req.ContainerID]
		mu.Unlock()
		if !ok {
			http.Error(w, "unknown case "+req.ContainerID, http.StatusNotFound)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(strings.ReplaceAll(body, "NETNS", req.Netns)))
	})}
	go func() { _ = srv.Serve(l) }()
	t.Cleanup(func() { srv.Close() })
	return sock
}

// resultTemplate is a daemon answer shaped as handler.go's resultFor builds it, with the
// parts a case replaces as %s: interfaces, ips, the rest (routes, dns).
const resultTemplate = `{"result":{"cniVersion":"1.1.0","interfaces":%s,"ips":%s%s}}`

const (
	goodIfaces = `[{"name":"ofs1a2b3c4d5e6f","mac":"5e:00:00:00:00:01"},{"name":"eth0","mac":"0a:58:0a:f4:01:05","mtu":1450,"sandbox":"NETNS"}]`
	goodIPs    = `[{"interface":1,"address":"10.244.1.5/24","gateway":"10.244.1.1"}]`
	goodRest   = `,"routes":[{"dst":"0.0.0.0/0","gw":"10.244.1.1"}]`
)

func result(ifaces, ips, rest string) string {
	return fmt.Sprintf(resultTemplate, ifaces, ips, rest)
}

func TestInvalidDaemonResults(t *testing.T) {
	bad := []struct {
		name, body, want string
	}{
		{"result null", `{"result":null}`, `is missing ("null")`},
		{"result missing", `{}`, "without a result"},
		{"result empty object", `{"result":{}}`, "lists no interfaces"},
		{"result an array", `{"result":[]}`, "is not a JSON object"},
		{"result a string", `{"result":"ok"}`, "is not a JSON object"},
		{"result of another version", `{"result":{"cniVersion":"0.4.0","interfaces":` + goodIfaces + `,"ips":` + goodIPs + `}}`, `cniVersion "0.4.0"`},
		{"interface index 99", result(goodIfaces, `[{"interface":99,"address":"10.244.1.5/24","gateway":"10.244.1.1"}]`, goodRest), "interface index 99, outside interfaces"},
		{"interface index -1", result(goodIfaces, `[{"interface":-1,"address":"10.244.1.5/24","gateway":"10.244.1.1"}]`, goodRest), "interface index -1, outside interfaces"},
		{"ip without interface", result(goodIfaces, `[{"address":"10.244.1.5/24","gateway":"10.244.1.1"}]`, goodRest), "names no interface"},
		{"ip on the host veth", result(goodIfaces, `[{"interface":0,"address":"10.244.1.5/24","gateway":"10.244.1.1"}]`, goodRest), "not in the pod's sandbox"},
		{"no ips", result(goodIfaces, `[]`, goodRest), "has no IP address"},
		{"ips null", result(goodIfaces, `null`, goodRest), "has no IP address"},
		{"ip null", result(goodIfaces, `[null]`, goodRest), "ips[0] is null"},
		{"ip without address", result(goodIfaces, `[{"interface":1,"gateway":"10.244.1.1"}]`, goodRest), "ips[0] has address"},
		{"address not a CIDR", result(goodIfaces, `[{"interface":1,"address":"10.244.1.5"}]`, goodRest), "cannot be decoded"},
		{"address prefix too long", result(goodIfaces, `[{"interface":1,"address":"10.244.1.5/33"}]`, goodRest), "cannot be decoded"},
		{"address unspecified", result(goodIfaces, `[{"interface":1,"address":"0.0.0.0/24"}]`, goodRest), "unspecified address"},
		{"gateway of another family", result(goodIfaces, `[{"interface":1,"address":"10.244.1.5/24","gateway":"fd00::1"}]`, goodRest), "another address family"},
		{"gateway is the address", result(goodIfaces, `[{"interface":1,"address":"10.244.1.5/24","gateway":"10.244.1.5"}]`, goodRest), "has gateway 10.244.1.5"},
		{"no interfaces", result(`[]`, goodIPs, goodRest), "lists no interfaces"},
		{"interface null", result(`[null,{"name":"eth0","sandbox":"NETNS"}]`, goodIPs, goodRest), "interfaces[0] is null"},
		{"interface without name", result(`[{"mac":"5e:00:00:00:00:01"},{"name":"eth0","sandbox":"NETNS"}]`, goodIPs, goodRest), "interfaces[0] has no name"},
		{"interface bad mac", result(`[{"name":"ofs1"},{"name":"eth0","mac":"zz:00","sandbox":"NETNS"}]`, goodIPs, goodRest), `mac "zz:00"`},
		{"interface negative mtu", result(`[{"name":"ofs1"},{"name":"eth0","mtu":-1,"sandbox":"NETNS"}]`, goodIPs, goodRest), "mtu -1"},
		{"pod interface missing", result(`[{"name":"ofs1"},{"name":"net1","sandbox":"NETNS"}]`, goodIPs, goodRest), "no interface eth0 with sandbox"},
		{"pod interface in another netns", result(`[{"name":"ofs1"},{"name":"eth0","sandbox":"/var/run/netns/other"}]`, goodIPs, goodRest), "not in CNI_NETNS"},
		{"route without dst", result(goodIfaces, goodIPs, `,"routes":[{"gw":"10.244.1.1"}]`), "routes[0] has dst"},
		{"route null", result(goodIfaces, goodIPs, `,"routes":[null]`), "routes[0] is null"},
		{"route gw of another family", result(goodIfaces, goodIPs, `,"routes":[{"dst":"0.0.0.0/0","gw":"fd00::1"}]`), "another address family"},
		{"route negative mtu", result(goodIfaces, goodIPs, `,"routes":[{"dst":"0.0.0.0/0","gw":"10.244.1.1","mtu":-5}]`), "negative mtu"},
		{"route scope 300", result(goodIfaces, goodIPs, `,"routes":[{"dst":"0.0.0.0/0","gw":"10.244.1.1","scope":300}]`), "scope 300"},
		{"dns nameserver not an IP", result(goodIfaces, goodIPs, goodRest+`,"dns":{"nameservers":["dns.example"]}`), `"dns.example", not an IP address`},
	}
	good := []struct {
		name, body string
	}{
		{"daemon's result", result(goodIfaces, goodIPs, goodRest)},
		{"without cniVersion, with dns", `{"result":{"interfaces":` + goodIfaces + `,"ips":` + goodIPs + goodRest + `,"dns":{"nameservers":["10.96.0.10"],"search":["svc.cluster.local"]}}}`},
		{"without gateway and routes", result(goodIfaces, `[{"interface":1,"address":"10.244.1.5/24"}]`, ``)},
		{"IPv4 and IPv6", result(goodIfaces, `[{"interface":1,"address":"10.244.1.5/24","gateway":"10.244.1.1"},{"interface":1,"address":"fd00::5/64","gateway":"fd00::1"}]`, goodRest)},
		{"only IPv6 (an IPv6-only node's pod)", result(goodIfaces, `[{"interface":1,"address":"fd00::5/64","gateway":"fd00::1"}]`, `,"routes":[{"dst":"::/0","gw":"fd00::1"}]`)},
	}
	bodies := map[string]string{}
	id := func(kind string, i int) string { return fmt.Sprintf("%s-%d", kind, i) }
	for i, c := range bad {
		bodies[id("bad", i)] = c.body
	}
	for i, c := range good {
		bodies[id("good", i)] = c.body
	}
	sock := rawDaemon(t, bodies)
	env := func(containerID string) []string {
		return []string{"CNI_COMMAND=ADD", "CNI_CONTAINERID=" + containerID, "CNI_NETNS=/var/run/netns/ofsdn-result-test",
			"CNI_IFNAME=eth0", "CNI_PATH=" + binDir}
	}
	for _, v := range cni.SupportedVersions {
		conf := fmt.Sprintf(`{"cniVersion":%q,"name":"ofsdn-test","type":"ofsdn","socket":%q}`, v, sock)
		t.Run(v, func(t *testing.T) {
			for i, c := range bad {
				t.Run(c.name, func(t *testing.T) {
					out, status := runPlugin(t, env(id("bad", i)), &conf)
					var e types.Error
					if err := json.Unmarshal([]byte(out), &e); err != nil || e.Code == 0 {
						t.Fatalf("exit %d, stdout %q: not a CNI error (%v); the broken result was accepted", status, out, err)
					}
					if status != 1 || e.Code != types.ErrInternal || !strings.Contains(e.Msg, c.want) || !strings.Contains(e.Msg, "ofsdn-node daemon") {
						t.Errorf("exit %d, CNI error %d %q; want exit 1, code 999 naming the daemon and containing %q", status, e.Code, e.Msg, c.want)
					}
					if v == "1.1.0" {
						t.Logf("| %s | %d | `%s` |", c.name, e.Code, e.Msg)
					}
				})
			}
			for i, c := range good {
				t.Run("good "+c.name, func(t *testing.T) {
					out, status := runPlugin(t, env(id("good", i)), &conf)
					if status != 0 {
						t.Fatalf("exit %d, stdout %q; want the result", status, out)
					}
					res, err := version.NewResult(v, []byte(out))
					if err != nil {
						t.Fatalf("stdout %q is not a %s result: %v", out, v, err)
					}
					if res.Version() != v || (!strings.Contains(out, "10.244.1.5/24") && !strings.Contains(out, "fd00::5/64")) {
						t.Errorf("result %s, want version %s with 10.244.1.5/24 (or, IPv6-only, fd00::5/64)", out, v)
					}
				})
			}
		})
	}
}
