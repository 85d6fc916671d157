package unixctl

import (
	"context"
	"errors"
	"os/exec"
	"strings"
	"testing"

	"github.com/ofsdn/ofsdn/test/sandbox"
)

// TestCallRealVswitchd calls a real ovs-vswitchd (a private sandbox; the test fails where
// Open vSwitch is missing, as every sandbox test does) and compares with what ovs-appctl
// prints for the same command.
func TestCallRealVswitchd(t *testing.T) {
	ovs := sandbox.Start(t)
	dir := ovs.Dir

	path, err := SocketPath(dir)
	if err != nil {
		t.Fatal(err)
	}
	got, err := Call(context.Background(), path, "version")
	if err != nil {
		t.Fatal(err)
	}
	want, err := exec.Command("ovs-appctl", "-t", path, "version").Output()
	if err != nil {
		t.Fatal(err)
	}
	if strings.TrimSpace(got) != strings.TrimSpace(string(want)) || !strings.Contains(got, "ovs-vswitchd") {
		t.Errorf("version = %q, ovs-appctl says %q", got, want)
	}
	if _, err := Call(context.Background(), path, "revalidator/purge"); err != nil {
		t.Errorf("revalidator/purge: %v", err)
	}
	if _, err := Call(context.Background(), path, "no/such-command"); !errors.Is(err, ErrCommand) {
		t.Errorf("unknown command: err = %v, want ErrCommand", err)
	}
	if _, err := SocketPath(t.TempDir()); err == nil || !strings.Contains(err.Error(), "ovs-vswitchd.pid") {
		t.Errorf("SocketPath of an empty dir: %v", err)
	}
}
