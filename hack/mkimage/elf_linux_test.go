//go:build linux

package main

// The -elf tests read the build machine's own ELF binaries and libraries: Linux only (the
// image is linux/GOARCH), by build constraint rather than a skip.

import (
	"archive/tar"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
)

// TestLayersELFClosure: -elf of a dynamically linked binary brings its interpreter and
// shared libraries (here from the build machine's own tree, a Debian), symlinks kept as
// symlinks; -dir, -symlink and -layer do what they say, in command-line order.
func TestLayersELFClosure(t *testing.T) {
	bin := "/usr/bin/true" // coreutils: on every Debian, as every machine that builds the image
	if _, err := os.Stat(bin); err != nil {
		t.Fatalf("%s: %v (these tests read the build machine's own ELF binaries and libraries)", bin, err)
	}
	local := filepath.Join(t.TempDir(), "f")
	if err := os.WriteFile(local, []byte("x"), 0o640); err != nil {
		t.Fatal(err)
	}
	layers, err := buildLayers([]op{
		{"root", "/"}, {"elf", bin}, {"dir", "/var/run/openvswitch"}, {"dir", "/tmp:1777"},
		{"symlink", "/usr/sbin/x=/usr/bin/true"},
		{"layer", ""}, {"file", "/usr/local/bin/f=" + local},
	}, strings.Split(libPaths[runtime.GOARCH], ":"))
	if err != nil {
		t.Fatal(err)
	}
	if len(layers) != 2 {
		t.Fatalf("%d layers, want 2", len(layers))
	}
	first, second := entries(t, layers[0]), entries(t, layers[1])
	var libc, interp bool
	for p, v := range first {
		if strings.HasSuffix(p, "/libc.so.6") && v[0] == tar.TypeReg {
			libc = true
		}
		if strings.Contains(p, "/ld-linux") && v[0] == tar.TypeReg {
			interp = true
		}
	}
	if !libc || !interp {
		t.Errorf("layer 1 has libc.so.6 %v, the ELF interpreter %v; want both:\n%v", libc, interp, first)
	}
	for p, want := range map[string]string{
		"/var/run/openvswitch": "5 0755",
		"/tmp":                 "5 1777",
		"/usr/sbin/x":          "2 -> /usr/bin/true",
	} {
		if first[p] != want {
			t.Errorf("layer 1 %s: %q, want %q", p, first[p], want)
		}
	}
	if second["/usr/local/bin/f"] != "0 0640" || len(second) != 4 { // /usr, /usr/local, /usr/local/bin, f
		t.Errorf("layer 2: %v, want only /usr/local/bin/f (mode 0640) and its parents", second)
	}
}

// TestLayersMissingLibrary: a binary whose library the tree lacks is refused, naming the
// library, the binary and the fix.
func TestLayersMissingLibrary(t *testing.T) {
	b, err := os.ReadFile("/usr/bin/true")
	if err != nil {
		t.Fatalf("%v (these tests read the build machine's own ELF binaries)", err)
	}
	root := t.TempDir()
	if err := os.MkdirAll(filepath.Join(root, "usr/bin"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(root, "usr/bin/true"), b, 0o755); err != nil {
		t.Fatal(err)
	}
	_, err = buildLayers([]op{{"root", root}, {"elf", "/usr/bin/true"}}, strings.Split(libPaths[runtime.GOARCH], ":"))
	if err == nil || !strings.Contains(err.Error(), "Debian package") {
		t.Fatalf("err %v, want one naming the missing file and the Debian package to add", err)
	}
}
