package topology

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"
)

const specAB = `clusterCIDR: 10.244.0.0/16
nodeName: a
podSubnet: 10.244.1.0/24
nodeIP: 172.16.0.1
peers:
- {name: b, podSubnet: 10.244.2.0/24, nodeIP: 172.16.0.2}
- {name: c, podSubnet: 10.244.3.0/24, nodeIP: 172.16.0.3}
`

// writeAtomic replaces the file as editors and ConfigMap volumes do (write, rename).
func writeAtomic(t *testing.T, path, content string) {
	t.Helper()
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
}

func TestFileSourceReloads(t *testing.T) {
	path := filepath.Join(t.TempDir(), "topology.yaml")
	writeAtomic(t, path, specAB)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	src := NewFile(path)
	src.PollInterval = time.Hour // change notifications only
	done := make(chan error, 1)
	go func() { done <- src.Run(ctx) }()
	evs := src.Events()

	e := next(t, evs)
	if e.Kind != EventLocal || e.Local.Name != "a" || e.Local.PodSubnet.String() != "10.244.1.0/24" ||
		e.Local.ClusterCIDR.String() != "10.244.0.0/16" || e.Local.NodeIP.String() != "172.16.0.1" {
		t.Fatalf("first event: %s %+v", e.Kind, e)
	}
	got := map[string]Peer{}
	for range 2 {
		e := next(t, evs)
		if e.Kind != EventPeerAdded {
			t.Fatalf("want peer-added, got %s %+v", e.Kind, e)
		}
		got[e.Peer.Name] = e.Peer
	}
	if got["b"].NodeIP.String() != "172.16.0.2" || got["c"].PodSubnet.String() != "10.244.3.0/24" {
		t.Fatalf("peers %v", got)
	}

	t.Run("peer removed", func(t *testing.T) {
		writeAtomic(t, path, specAB[:len(specAB)-len("- {name: c, podSubnet: 10.244.3.0/24, nodeIP: 172.16.0.3}\n")])
		if e := next(t, evs); e.Kind != EventPeerDeleted || e.Peer.Name != "c" {
			t.Fatalf("want peer-deleted c, got %s %+v", e.Kind, e)
		}
	})
	t.Run("broken file keeps the last topology", func(t *testing.T) {
		writeAtomic(t, path, "nodeName: a\npodSubnet: not-a-cidr\n")
		none(t, evs)
	})
	t.Run("peer added back and IP changed", func(t *testing.T) {
		writeAtomic(t, path, `clusterCIDR: 10.244.0.0/16
nodeName: a
podSubnet: 10.244.1.0/24
nodeIP: 172.16.0.1
peers:
- {name: b, podSubnet: 10.244.2.0/24, nodeIP: 172.16.0.22}
- {name: c, podSubnet: 10.244.3.0/24, nodeIP: 172.16.0.3}
`)
		kinds := map[EventKind]Event{}
		for range 2 {
			e := next(t, evs)
			kinds[e.Kind] = e
		}
		if e, ok := kinds[EventPeerAdded]; !ok || e.Peer.Name != "c" {
			t.Errorf("want peer-added c, got %+v", kinds)
		}
		if e, ok := kinds[EventPeerUpdated]; !ok || e.Peer.Name != "b" || e.Peer.NodeIP.String() != "172.16.0.22" || e.Old.NodeIP.String() != "172.16.0.2" {
			t.Errorf("want peer-updated b → 172.16.0.22, got %+v", kinds)
		}
	})
	cancel()
	if err := <-done; err != context.Canceled {
		t.Fatalf("Run returned %v", err)
	}
}

func TestFileSourceFirstReadError(t *testing.T) {
	src := NewFile(filepath.Join(t.TempDir(), "missing.yaml"))
	if err := src.Run(context.Background()); err == nil {
		t.Fatal("Run on a missing file succeeded")
	}
}

func TestParseFileSpecRejects(t *testing.T) {
	for name, s := range map[string]string{
		"unknown key":      "nodeName: a\npodSubnet: 10.244.1.0/24\nbogus: 1\n",
		"no name":          "podSubnet: 10.244.1.0/24\n",
		"ipv6 subnet":      "nodeName: a\npodSubnet: fd00::/64\n",
		"peer without ip":  "nodeName: a\npodSubnet: 10.244.1.0/24\npeers:\n- {name: b, podSubnet: 10.244.2.0/24}\n",
		"peer named as me": "nodeName: a\npodSubnet: 10.244.1.0/24\npeers:\n- {name: a, podSubnet: 10.244.2.0/24, nodeIP: 1.2.3.4}\n",
		"duplicate peer":   "nodeName: a\npodSubnet: 10.244.1.0/24\npeers:\n- {name: b, podSubnet: 10.244.2.0/24, nodeIP: 172.16.0.2}\n- {name: b, podSubnet: 10.244.3.0/24, nodeIP: 172.16.0.3}\n",
	} {
		if _, _, err := ParseFileSpec([]byte(s)); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
	// JSON is YAML too.
	if _, peers, err := ParseFileSpec([]byte(`{"nodeName":"a","podSubnet":"10.244.1.0/24","peers":[{"name":"b","podSubnet":"10.244.2.0/24","nodeIP":"172.16.0.2"}]}`)); err != nil || len(peers) != 1 {
		t.Errorf("JSON spec: %v %v", peers, err)
	}
}

func TestFlannelSubnetEnv(t *testing.T) {
	// As flanneld writes /run/flannel/subnet.env.
	env := "FLANNEL_NETWORK=10.244.0.0/16\nFLANNEL_SUBNET=10.244.1.1/24\nFLANNEL_MTU=1450\nFLANNEL_IPMASQ=true\n"
	path := filepath.Join(t.TempDir(), "subnet.env")
	writeAtomic(t, path, env)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	src := NewFile(path)
	go func() { _ = src.Run(ctx) }()
	e := next(t, src.Events())
	l := e.Local
	if e.Kind != EventLocal || l.PodSubnet.String() != "10.244.1.0/24" || l.ClusterCIDR.String() != "10.244.0.0/16" ||
		l.MTU != 1450 || l.IPMasq == nil || !*l.IPMasq || l.NodeIP != nil {
		t.Fatalf("subnet.env gave %s %+v", e.Kind, l)
	}
	for name, s := range map[string]string{
		"no subnet": "FLANNEL_NETWORK=10.244.0.0/16\n",
		"bad mtu":   "FLANNEL_SUBNET=10.244.1.1/24\nFLANNEL_MTU=big\n",
		"bad masq":  "FLANNEL_SUBNET=10.244.1.1/24\nFLANNEL_IPMASQ=maybe\n",
		"no equals": "FLANNEL_SUBNET\n",
	} {
		if _, err := ParseFlannelEnv([]byte(s)); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
}
