package main

import (
	"archive/tar"
	"bytes"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
)

// entries lists a layer tar: path → "TYPEFLAG MODE" or "TYPEFLAG -> TARGET".
func entries(t *testing.T, b []byte) map[string]string {
	t.Helper()
	out := map[string]string{}
	tr := tar.NewReader(bytes.NewReader(b))
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return out
		}
		if err != nil {
			t.Fatal(err)
		}
		v := string(h.Typeflag)
		switch h.Typeflag {
		case tar.TypeSymlink:
			v += " -> " + h.Linkname
		case tar.TypeDir, tar.TypeReg:
			v += fmt.Sprintf(" %04o", h.Mode)
		}
		out["/"+strings.TrimSuffix(h.Name, "/")] = v
	}
}

// TestLayersELFClosure: -elf of a dynamically linked binary brings its interpreter and
// shared libraries (here from the build machine's own tree, a Debian), symlinks kept as
// symlinks; -dir, -symlink and -layer do what they say, in command-line order.
func TestLayersELFClosure(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("needs a Linux tree to read ELF binaries from")
	}
	bin := "/usr/bin/true"
	if _, err := os.Stat(bin); err != nil {
		t.Skip(bin, "missing")
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
	if runtime.GOOS != "linux" {
		t.Skip("needs a Linux tree")
	}
	b, err := os.ReadFile("/usr/bin/true")
	if err != nil {
		t.Skip(err)
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
