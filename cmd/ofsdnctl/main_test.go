package main

import (
	"bytes"
	"context"
	"encoding/json"
	"path/filepath"
	"strings"
	"testing"

	"github.com/ofsdn/ofsdn/ctl"

	"github.com/ofsdn/ofsdn/test/testenv"
)

type src struct{}

func (src) Pods() ([]ctl.Pod, error) {
	return []ctl.Pod{{ContainerID: "abc123", IfName: "eth0", Namespace: "default", Name: "web", IP: "10.128.0.2/24",
		IPs: []string{"10.128.0.2/24", "fd00:128::2/64"}, MAC: "0a:58:0a:80:00:02", OFPort: 2, OwnerID: 4711, HostVeth: "ofs0123456789ab", Isolation: "ingress"}}, nil
}

func (src) Policies(context.Context) (ctl.PolicyReport, error) {
	return ctl.PolicyReport{Enabled: true, Synced: true, Policies: 1, Rules: 1, RuleFlows: map[string]int{"ingress": 3},
		PodPolicies: []ctl.PodPolicy{{Namespace: "default", Name: "web", IngressIsolated: true, IngressPolicies: []string{"allow-b"},
			Denied: map[string]uint64{"ingress": 4}, Rules: []ctl.PolicyRule{{Rule: "default/allow-b ingress[0]", Group: "*", ConjID: 7, Allowed: 2,
				Flows: []ctl.Flow{{Packets: 2, Flow: `cookie=0x1, table="ingress_rules", priority=200,conj_id=7,ip actions=goto_table:"conntrack_commit"`}}}}}}}, nil
}

func (s src) PolicyStatus() (ctl.PolicyReport, error) {
	r, err := s.Policies(context.Background())
	r.PodPolicies = []ctl.PodPolicy{}
	return r, err
}

func (src) Flows(context.Context) ([]ctl.Stage, error) {
	return []ctl.Stage{
		{Table: 0, Name: "classifier", Flows: []ctl.Flow{{Priority: 100, Cookie: "0x1", Packets: 7, Bytes: 700,
			Flow: `cookie=0x1, table=classifier, priority=100,in_port=2 actions=goto_table:"spoof_guard"`, Desired: true}}},
		{Table: 50, Name: "l3_forwarding", Flows: []ctl.Flow{{Priority: 5, Cookie: "0x0", Flow: "priority=5 actions=drop"}},
			Missing: []string{"cookie=0x2, table=l3_forwarding, priority=100,ip,nw_dst=10.128.0.2 actions=drop"}},
	}, nil
}

func (src) Peers() ([]ctl.Peer, error) { return []ctl.Peer{}, nil }

func (src) Services(context.Context) (ctl.ServiceReport, error) {
	return ctl.ServiceReport{Enabled: true, Rejected: 3, Ports: []ctl.ServicePort{
		{Namespace: "default", Name: "web", Port: "http", Protocol: "TCP", Frontend: "10.96.0.10:80",
			Frontends: []string{"10.96.0.10:80", "172.30.0.71:30080"}, OwnerID: 1, GroupID: 1048577,
			Verdict: "forward", Endpoints: []string{"10.128.0.2:8080", "10.128.1.3:8080"}, Connections: 12},
		{Namespace: "default", Name: "empty", Port: "", Protocol: "UDP", Frontend: "10.96.0.11:53", OwnerID: 2, GroupID: 1048578,
			Verdict: "reject", Endpoints: []string{}, Connections: -1}}}, nil
}

func ofsdnctl(t *testing.T, args ...string) (int, string, string) {
	t.Helper()
	var out, errb bytes.Buffer
	code := run(args, &out, &errb)
	return code, out.String(), errb.String()
}

func TestCommands(t *testing.T) {
	testenv.Privileged(t)
	sock := filepath.Join(t.TempDir(), "ctl.sock")
	s := ctl.NewServer(sock, src{}, nil)
	if err := s.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Shutdown(context.Background()) })

	code, out, errs := ofsdnctl(t, "-socket", sock, "pods")
	if code != 0 || !strings.Contains(out, "default/web") || !strings.Contains(out, "abc123") || !strings.Contains(out, "ofs0123456789ab") {
		t.Errorf("pods: %d\n%s%s", code, out, errs)
	}
	code, out, _ = ofsdnctl(t, "pods", "-socket", sock, "-o", "json")
	var pods []ctl.Pod
	if code != 0 || json.Unmarshal([]byte(out), &pods) != nil || len(pods) != 1 || pods[0].OFPort != 2 {
		t.Errorf("pods -o json (flags after the command): %d\n%s", code, out)
	}
	_, out, _ = ofsdnctl(t, "-socket", sock, "pods")
	if !strings.Contains(strings.Split(out, "\n")[0], "ISOLATION") || !strings.Contains(out, "ingress") {
		t.Errorf("pods table has no ISOLATION column:\n%s", out)
	}
	// Every address of the pod, and its flow owner id (to find its flows by cookie).
	if head := strings.Split(out, "\n")[0]; !strings.Contains(head, "OWNER ID") || !strings.Contains(head, "IPS") ||
		!strings.Contains(out, "10.128.0.2/24,fd00:128::2/64") || !strings.Contains(out, " 4711 ") {
		t.Errorf("pods table lacks the addresses or the owner id:\n%s", out)
	}
	code, out, errs = ofsdnctl(t, "-socket", sock, "policies")
	for _, want := range []string{"1 policies", "default/web", "allow-b", "rule default/allow-b ingress[0]", "conj 7", "allowed 2", "priority=200,conj_id=7,ip"} {
		if code != 0 || !strings.Contains(out, want) {
			t.Errorf("policies lacks %q: %d\n%s%s", want, code, out, errs)
		}
	}
	code, out, errs = ofsdnctl(t, "-socket", sock, "services")
	for _, want := range []string{"2 ports; rejected 3", "CONNECTIONS", "default/web:http/TCP", "10.96.0.10:80,172.30.0.71:30080", "forward",
		"10.128.0.2:8080,10.128.1.3:8080", "1048577", " 12", "default/empty:/UDP", "reject", "?"} {
		if code != 0 || !strings.Contains(out, want) {
			t.Errorf("services lacks %q: %d\n%s%s", want, code, out, errs)
		}
	}
	code, out, _ = ofsdnctl(t, "-socket", sock, "flows")
	for _, want := range []string{"classifier", `priority=100,in_port=2 actions=goto_table:"spoof_guard"`, "(not ofsdn's) priority=5", "MISSING on the switch: priority=100,ip,nw_dst=10.128.0.2"} {
		if code != 0 || !strings.Contains(out, want) {
			t.Errorf("flows lacks %q:\n%s", want, out)
		}
	}
	code, out, _ = ofsdnctl(t, "-socket", sock, "flows", "-stage", "classifier")
	if code != 0 || strings.Contains(out, "l3_forwarding") || !strings.Contains(out, "classifier") {
		t.Errorf("flows -stage classifier: %d\n%s", code, out)
	}
	if code, _, errs := ofsdnctl(t, "-socket", sock, "flows", "-stage", "nope"); code != 1 || !strings.Contains(errs, "classifier, l3_forwarding") {
		t.Errorf("flows -stage nope: %d %s", code, errs)
	}
	if code, out, _ := ofsdnctl(t, "-socket", sock, "-o", "json", "peers"); code != 0 || strings.TrimSpace(out) != "[]" {
		t.Errorf("peers -o json: %d %q", code, out)
	}
	for _, bad := range [][]string{{}, {"frobnicate"}, {"-o", "yaml", "pods"}, {"pods", "extra"}} {
		if code, _, _ := ofsdnctl(t, append([]string{"-socket", sock}, bad...)...); code != 2 {
			t.Errorf("%v: exit %d, want 2", bad, code)
		}
	}
	missing := filepath.Join(t.TempDir(), "none.sock")
	if code, _, errs := ofsdnctl(t, "-socket", missing, "pods"); code != 1 || !strings.Contains(errs, missing) {
		t.Errorf("no daemon: exit %d %s, want 1 naming the socket", code, errs)
	}
}
