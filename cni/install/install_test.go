package install

import (
	"encoding/json"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/containernetworking/cni/libcni"
)

// TestFiles: the plugin binary and the conflist land complete, with their modes, and
// no temporary file is left beside them.
func TestFiles(t *testing.T) {
	dir := t.TempDir()
	plugin := filepath.Join(dir, "src-ofsdn")
	if err := os.WriteFile(plugin, []byte("#!/bin/sh\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	bin, conf := filepath.Join(dir, "bin"), filepath.Join(dir, "net.d")
	cfg := Options{BinDir: bin, ConfDir: conf, PluginBinary: plugin, Socket: "/var/run/ofsdn/cni.sock"}
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	for range 2 { // idempotent
		if err := Files(cfg, log); err != nil {
			t.Fatal(err)
		}
	}
	st, err := os.Stat(filepath.Join(bin, "ofsdn"))
	if err != nil || st.Mode().Perm() != 0o755 || st.Size() != int64(len("#!/bin/sh\n")) {
		t.Fatalf("installed plugin: %v %v", st, err)
	}
	b, err := os.ReadFile(filepath.Join(conf, "10-ofsdn.conflist"))
	if err != nil {
		t.Fatal(err)
	}
	var cl struct {
		CNIVersion  string           `json:"cniVersion"`
		CNIVersions []string         `json:"cniVersions"`
		Name        string           `json:"name"`
		Plugins     []map[string]any `json:"plugins"`
	}
	if err := json.Unmarshal(b, &cl); err != nil || cl.Name != "ofsdn" || len(cl.Plugins) != 1 ||
		cl.Plugins[0]["type"] != "ofsdn" || cl.Plugins[0]["socket"] != cfg.Socket {
		t.Fatalf("conflist %s (%v)", b, err)
	}
	// Every runtime generation can use it: libcni 1.1.x reads cniVersion, later ones the
	// highest of cniVersions (test/compat drives it through each).
	if cl.CNIVersion != "1.0.0" || strings.Join(cl.CNIVersions, ",") != "1.0.0,1.1.0" {
		t.Errorf("conflist versions %q %q, want cniVersion 1.0.0 and cniVersions [1.0.0 1.1.0]:\n%s", cl.CNIVersion, cl.CNIVersions, b)
	}
	list, err := libcni.ConfListFromBytes(b)
	if err != nil || list.CNIVersion != "1.1.0" {
		t.Errorf("libcni v1.3 reads the conflist as %+v (%v), want version 1.1.0", list, err)
	}
	for _, d := range []string{bin, conf} {
		entries, _ := os.ReadDir(d)
		if len(entries) != 1 {
			t.Errorf("%s holds %d files, want 1 (no temporaries left)", d, len(entries))
		}
	}
}
