package cni

import (
	"encoding/json"
	"errors"
	"reflect"
	"strings"
	"testing"

	"github.com/containernetworking/cni/pkg/types"
	types040 "github.com/containernetworking/cni/pkg/types/040"
	current "github.com/containernetworking/cni/pkg/types/100"
	"github.com/containernetworking/cni/pkg/version"
)

// cniCode returns the CNI error code of err, failing the test if err is not
// a *types.Error.
func cniCode(t *testing.T, err error) (uint, string) {
	t.Helper()
	var e *types.Error
	if !errors.As(err, &e) {
		t.Fatalf("error %v (%T) is not a *types.Error", err, err)
	}
	return e.Code, e.Msg
}

func TestParseArgs(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want map[string]string
	}{
		{"", map[string]string{}},
		{"IgnoreUnknown=1", map[string]string{"IgnoreUnknown": "1"}},
		{"IgnoreUnknown=1;K8S_POD_NAMESPACE=default;K8S_POD_NAME=web-0;K8S_POD_INFRA_CONTAINER_ID=abc123;K8S_POD_UID=u-1",
			map[string]string{"IgnoreUnknown": "1", "K8S_POD_NAMESPACE": "default", "K8S_POD_NAME": "web-0",
				"K8S_POD_INFRA_CONTAINER_ID": "abc123", "K8S_POD_UID": "u-1"}},
		{"A=;B=x=y;;", map[string]string{"A": "", "B": "x=y"}},
		{"A=1;A=2", map[string]string{"A": "2"}},
	} {
		got, err := ParseArgs(tc.in)
		if err != nil {
			t.Errorf("ParseArgs(%q): %v", tc.in, err)
			continue
		}
		if !reflect.DeepEqual(got, tc.want) {
			t.Errorf("ParseArgs(%q) = %v, want %v", tc.in, got, tc.want)
		}
	}
	for _, in := range []string{"FOO", "A=1;BAR", "=x", "A=1;=2"} {
		_, err := ParseArgs(in)
		if err == nil {
			t.Errorf("ParseArgs(%q) succeeded, want an error", in)
			continue
		}
		code, msg := cniCode(t, err)
		if code != types.ErrInvalidEnvironmentVariables || !strings.Contains(msg, "CNI_ARGS") {
			t.Errorf("ParseArgs(%q) error code %d msg %q, want code 4 naming CNI_ARGS", in, code, msg)
		}
	}
	_, err := ParseArgs("A=1;BAD;C=3")
	if _, msg := cniCode(t, err); !strings.Contains(msg, `"BAD"`) {
		t.Errorf("error %q does not name the bad pair \"BAD\"", msg)
	}
}

func TestPodIdentity(t *testing.T) {
	r := &Request{Args: "IgnoreUnknown=1;K8S_POD_NAMESPACE=kube-system;K8S_POD_NAME=coredns-1;K8S_POD_INFRA_CONTAINER_ID=c0ffee"}
	p, err := r.PodIdentity()
	if err != nil {
		t.Fatal(err)
	}
	want := PodIdentity{Namespace: "kube-system", Name: "coredns-1", InfraContainerID: "c0ffee"}
	if p != want || p.String() != "kube-system/coredns-1" || p.IsZero() {
		t.Errorf("PodIdentity = %+v (%q), want %+v", p, p, want)
	}
	p, err = (&Request{}).PodIdentity()
	if err != nil || !p.IsZero() || p.String() != "" {
		t.Errorf("empty CNI_ARGS: identity %+v, err %v; want zero", p, err)
	}
	if _, err := (&Request{Args: "junk"}).PodIdentity(); err == nil {
		t.Error("bad CNI_ARGS: no error")
	}
}

func TestLoadNetConf(t *testing.T) {
	conf, err := LoadNetConf([]byte(`{"cniVersion":"1.1.0","name":"ofsdn","type":"ofsdn"}`))
	if err != nil {
		t.Fatal(err)
	}
	if conf.Socket != DefaultSocketPath || conf.Name != "ofsdn" || conf.CNIVersion != "1.1.0" || conf.Type != "ofsdn" {
		t.Errorf("netconf %+v: want defaults applied", conf)
	}
	conf, err = LoadNetConf([]byte(`{"cniVersion":"0.4.0","name":"n","type":"ofsdn","socket":"/run/x/cni.sock"}`))
	if err != nil || conf.Socket != "/run/x/cni.sock" {
		t.Fatalf("socket override: %+v, %v", conf, err)
	}

	for _, tc := range []struct {
		in   string
		code uint
		key  string
	}{
		{`not json`, types.ErrDecodingFailure, ""},
		{`["a"]`, types.ErrDecodingFailure, ""},
		{`{"cniVersion":"1.1.0","name":7}`, types.ErrDecodingFailure, ""},
		{`{"cniVersion":"1.1.0"}`, types.ErrInvalidNetworkConfig, `"name"`},
		{`{"cniVersion":"1.1.0","name":"bad name"}`, types.ErrInvalidNetworkConfig, `"name"`},
		{`{"name":"n"}`, types.ErrInvalidNetworkConfig, `"cniVersion"`},
		{`{"name":"n","cniVersion":"one"}`, types.ErrInvalidNetworkConfig, `"cniVersion"`},
		{`{"name":"n","cniVersion":"1.1.0","socket":"run/cni.sock"}`, types.ErrInvalidNetworkConfig, `"socket"`},
		{`{"name":"n","cniVersion":"2.0.0"}`, types.ErrIncompatibleCNIVersion, `"2.0.0"`},
		{`{"name":"n","cniVersion":"1.2.0"}`, types.ErrIncompatibleCNIVersion, `1.1.0`},
		{`{"name":"n","cniVersion":"0.0.1"}`, types.ErrIncompatibleCNIVersion, `"cniVersion"`},
		{`{"name":"n","cniVersion":"1.1.0","prevResult":{"cniVersion":"1.1.0","ips":[{"address":"nope"}]}}`, types.ErrDecodingFailure, `"prevResult"`},
	} {
		_, err := LoadNetConf([]byte(tc.in))
		if err == nil {
			t.Errorf("LoadNetConf(%s) succeeded, want code %d", tc.in, tc.code)
			continue
		}
		code, msg := cniCode(t, err)
		if code != tc.code || !strings.Contains(msg, tc.key) {
			t.Errorf("LoadNetConf(%s): code %d msg %q, want code %d naming %s", tc.in, code, msg, tc.code, tc.key)
		}
	}
}

// TestLoadNetConfEveryVersion: every version the CNI library knows is
// accepted (SPEC.md "Section 1: Network configuration format", "cniVersion").
func TestLoadNetConfEveryVersion(t *testing.T) {
	for _, v := range version.All.SupportedVersions() {
		if _, err := LoadNetConf([]byte(`{"cniVersion":"` + v + `","name":"n"}`)); err != nil {
			t.Errorf("cniVersion %s: %v", v, err)
		}
	}
	if !reflect.DeepEqual(SupportedVersions, version.All.SupportedVersions()) {
		t.Errorf("SupportedVersions %v, the CNI library knows %v", SupportedVersions, version.All.SupportedVersions())
	}
}

func TestLoadNetConfPrevResult(t *testing.T) {
	// A 0.4.0 prevResult (as libcni caches it for a 0.4.0 network) is parsed
	// into the matching result type.
	conf, err := LoadNetConf([]byte(`{"cniVersion":"0.4.0","name":"n","type":"ofsdn","prevResult":{
		"cniVersion":"0.4.0","interfaces":[{"name":"eth0","mac":"0a:58:0a:f4:00:05","sandbox":"/var/run/netns/p"}],
		"ips":[{"version":"4","address":"10.244.0.5/24","gateway":"10.244.0.1","interface":0}]}}`))
	if err != nil {
		t.Fatal(err)
	}
	r, ok := conf.PrevResult.(*types040.Result)
	if !ok {
		t.Fatalf("prevResult is %T, want *types040.Result", conf.PrevResult)
	}
	if len(r.IPs) != 1 || r.IPs[0].Address.String() != "10.244.0.5/24" {
		t.Errorf("prevResult IPs %v", r.IPs)
	}
	cur, err := current.GetResult(conf.PrevResult)
	if err != nil || cur.Interfaces[0].Name != "eth0" {
		t.Errorf("prevResult as 1.1.0: %+v, %v", cur, err)
	}
}

func TestNetConfMarshalKeepsSocket(t *testing.T) {
	conf, err := LoadNetConf([]byte(`{"cniVersion":"1.1.0","name":"n","type":"ofsdn","socket":"/run/o/cni.sock"}`))
	if err != nil {
		t.Fatal(err)
	}
	data, err := json.Marshal(conf)
	if err != nil {
		t.Fatal(err)
	}
	back, err := LoadNetConf(data)
	if err != nil {
		t.Fatalf("re-load %s: %v", data, err)
	}
	if back.Socket != "/run/o/cni.sock" || back.Name != "n" || back.Type != "ofsdn" {
		t.Errorf("round trip through %s lost fields: %+v", data, back)
	}
}

func TestRequestJSONRoundTrip(t *testing.T) {
	in := Request{Command: CmdAdd, ContainerID: "c1", Netns: "/var/run/netns/p", IfName: "eth0",
		Args: "K8S_POD_NAME=a", Path: "/opt/cni/bin", Config: []byte("{\"name\":\"n\"}\n\x00\xff")}
	data, err := json.Marshal(&in)
	if err != nil {
		t.Fatal(err)
	}
	var out Request
	if err := json.Unmarshal(data, &out); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(in, out) {
		t.Errorf("round trip: got %+v, want %+v", out, in)
	}
}

func FuzzParseArgs(f *testing.F) {
	for _, s := range []string{"", "IgnoreUnknown=1;K8S_POD_NAMESPACE=ns;K8S_POD_NAME=p", "A", "=", ";;", "A==B;C=", "a=1;a=2"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		m, err := ParseArgs(s)
		if err != nil {
			if code, _ := cniCode(t, err); code != types.ErrInvalidEnvironmentVariables {
				t.Fatalf("ParseArgs(%q): code %d, want 4", s, code)
			}
			return
		}
		// Every key and value came from the input; re-joining them parses
		// to the same map.
		var parts []string
		for k, v := range m {
			if k == "" || strings.ContainsAny(k, ";=") || strings.Contains(v, ";") {
				t.Fatalf("ParseArgs(%q) gave bad pair %q=%q", s, k, v)
			}
			parts = append(parts, k+"="+v)
		}
		m2, err := ParseArgs(strings.Join(parts, ";"))
		if err != nil || !reflect.DeepEqual(m, m2) {
			t.Fatalf("ParseArgs(%q) = %v, re-parse %v, %v", s, m, m2, err)
		}
	})
}

func FuzzLoadNetConf(f *testing.F) {
	for _, s := range []string{
		`{"cniVersion":"1.1.0","name":"ofsdn","type":"ofsdn"}`,
		`{"cniVersion":"0.4.0","name":"n","socket":"/run/x.sock","prevResult":{"cniVersion":"0.4.0","ips":[{"version":"4","address":"10.0.0.2/24"}]}}`,
		`{"cniVersion":"1.1.0","name":"n","cni.dev/valid-attachments":[{"containerID":"c","ifname":"eth0"}]}`,
		`{"name":""}`, `null`, `{}`, `[`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		conf, err := LoadNetConf(data)
		if err != nil {
			code, _ := cniCode(t, err)
			if code != types.ErrDecodingFailure && code != types.ErrInvalidNetworkConfig && code != types.ErrIncompatibleCNIVersion {
				t.Fatalf("LoadNetConf(%q): code %d, want 1, 6 or 7", data, code)
			}
			return
		}
		if conf.Name == "" || conf.CNIVersion == "" || conf.Socket == "" || conf.Socket[0] != '/' {
			t.Fatalf("LoadNetConf(%q) accepted an invalid netconf: %+v", data, conf)
		}
	})
}
