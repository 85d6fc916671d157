package harness

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/containernetworking/plugins/pkg/ns"

	"github.com/ofsdn/ofsdn/test/testenv"
)

// NewNetns creates a network namespace named name plus a random suffix (`ip netns add`),
// brings its loopback up, deletes it when the test ends, and returns its path under
// /var/run/netns. The suffix keeps tests that run at once (in one test binary or in
// several) from asking for the same name.
func NewNetns(t testing.TB, name string) string {
	t.Helper()
	testenv.Privileged(t)
	b := make([]byte, 4)
	_, _ = rand.Read(b)
	full := name + "-" + hex.EncodeToString(b)
	if out, err := exec.Command("ip", "netns", "add", full).CombinedOutput(); err != nil {
		t.Fatalf("ip netns add %s: %v\n%s", full, err, out)
	}
	_ = exec.Command("ip", "netns", "exec", full, "ip", "link", "set", "lo", "up").Run()
	t.Cleanup(func() { _ = exec.Command("ip", "netns", "del", full).Run() })
	return "/var/run/netns/" + full
}

// Ping sends 2 pings 0.2 seconds apart to dst from netns (a path or a name under
// /var/run/netns), waiting up to 2 seconds for each reply, with extra ping options before
// the destination. It returns nil if ping succeeded, else an error with ping's output.
func Ping(netns string, dst net.IP, extra ...string) error {
	name := filepath.Base(netns)
	args := append([]string{"netns", "exec", name, "ping", "-c", "2", "-i", "0.2", "-W", "2"}, extra...)
	args = append(args, dst.String())
	out, err := exec.Command("ip", args...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("ping %s from %s: %v\n%s", dst, name, err, out)
	}
	return nil
}

// InNetns runs f inside the network namespace at path (sockets made there stay there) and
// fails the test if entering it or f fails.
func InNetns(t testing.TB, path string, f func() error) {
	t.Helper()
	netns, err := ns.GetNS(path)
	if err != nil {
		t.Fatal(err)
	}
	defer netns.Close()
	if err := netns.Do(func(ns.NetNS) error { return f() }); err != nil {
		t.Fatal(err)
	}
}
