package e2e

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestSecondDaemonWaitsForTheBridge: a second ofsdn-node started on a bridge that a running
// daemon controls (a DaemonSet rollout overlap, or someone debugging by hand) must not replace
// the first one's flows: it waits, pods keep forwarding, and it takes over once the first
// daemon is gone.
func TestSecondDaemonWaitsForTheBridge(t *testing.T) {
	serial(t)
	n := startNode(t, "10.143.0.0/24")
	a, b := n.addPod("la"), n.addPod("lb")
	flowsBefore := n.OVS.Ofctl(t, "dump-flows", "--no-stats", n.mgmt())

	logPath := filepath.Join(n.Dir, "second.log")
	logf, err := os.Create(logPath)
	if err != nil {
		t.Fatal(err)
	}
	defer logf.Close()
	second := exec.Command("ip", "netns", "exec", n.OVS.Netns, filepath.Join(buildBinaries(t), "ofsdn-node"),
		"--ovsdb", n.OVS.OVSDBEndpoint(), "--ovs-rundir", n.Dir, "--datapath-type", "netdev",
		"--socket", filepath.Join(n.Dir, "second", "cni.sock"), "--data-dir", filepath.Join(n.Dir, "second-data"),
		"--pod-subnet", n.Subnet, "--metrics-address", "")
	second.Stdout, second.Stderr = logf, logf
	if err := second.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = second.Process.Kill(); _ = second.Wait() }()

	// Wait until the second daemon says it is waiting (or give up after a while).
	deadline := time.Now().Add(20 * time.Second)
	for {
		b, _ := os.ReadFile(logPath)
		if strings.Contains(string(b), "another ofsdn-node controls this bridge") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("second daemon did not report waiting for the bridge:\n%s", b)
		}
		time.Sleep(100 * time.Millisecond)
	}
	time.Sleep(time.Second) // had it not waited, it would have re-synced the bridge by now
	if err := ping(a.netns, b.ip()); err != nil {
		t.Errorf("pods stopped forwarding while a second daemon started: %v", err)
	}
	if after := n.OVS.Ofctl(t, "dump-flows", "--no-stats", n.mgmt()); after != flowsBefore {
		t.Errorf("the second daemon changed the flow table while the first ran:\nbefore:\n%s\nafter:\n%s", flowsBefore, after)
	}

	// The first daemon exits: the second one gets the bridge and becomes ready.
	n.stopDaemon()
	sock := filepath.Join(n.Dir, "second", "cni.sock")
	deadline = time.Now().Add(30 * time.Second)
	for {
		if _, err := os.Stat(sock); err == nil {
			b, _ := os.ReadFile(logPath)
			if strings.Contains(string(b), "serving CNI requests") || strings.Contains(string(b), "node ready") {
				break
			}
		}
		if time.Now().After(deadline) {
			b, _ := os.ReadFile(logPath)
			t.Fatalf("second daemon never took over the bridge after the first exited:\n%s", b)
		}
		time.Sleep(100 * time.Millisecond)
	}
}
