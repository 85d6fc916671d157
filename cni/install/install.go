// Package install puts the ofsdn CNI plugin where a container runtime finds it: the plugin
// binary into the runtime's CNI binary directory and the network configuration list
// (conflist) into its configuration directory, each written atomically. The node daemon
// calls it once it serves ADD, since the conflist's appearance is what tells the kubelet
// the network is ready.
//
// It is a package of its own, beside package cni rather than in it, so that the plugin
// binary (cmd/ofsdn), which imports cni, stays small: nothing here is linked into it.
package install

import (
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
)

// Options says what to install where.
type Options struct {
	// BinDir is the runtime's CNI binary directory (config cniBinDir, e.g. /opt/cni/bin);
	// "" installs no plugin binary.
	BinDir string
	// PluginBinary is the plugin binary to copy (config pluginBinary); "" = the file
	// "ofsdn" beside the running executable.
	PluginBinary string
	// ConfDir is the runtime's CNI configuration directory (config cniConfDir, e.g.
	// /etc/cni/net.d); "" writes no conflist.
	ConfDir string
	// Socket is the daemon's CNI socket the conflist names (config socket).
	Socket string
}

// Files installs the plugin binary into o.BinDir as "ofsdn" (mode 0755) and writes the
// conflist into o.ConfDir as ConfListName (mode 0644), each by writing a temporary file in
// the same directory, fsyncing it and renaming it over the final name, so a kubelet never
// sees a partial file; the directories are created if missing. Either directory may be
// unset (nothing written there). log gets one line per file written. Errors name the
// directory, and the pluginBinary setting when the plugin cannot be found.
func Files(o Options, log *slog.Logger) error {
	if o.BinDir != "" {
		src := o.PluginBinary
		if src == "" {
			self, err := os.Executable()
			if err != nil {
				return fmt.Errorf("install CNI plugin: find this executable: %w (set pluginBinary)", err)
			}
			src = filepath.Join(filepath.Dir(self), "ofsdn")
		}
		in, err := os.Open(src)
		if err != nil {
			return fmt.Errorf("install CNI plugin: %w (set pluginBinary to the ofsdn plugin)", err)
		}
		defer in.Close()
		if err := writeAtomic(filepath.Join(o.BinDir, "ofsdn"), 0o755, func(w io.Writer) error {
			_, err := io.Copy(w, in)
			return err
		}); err != nil {
			return fmt.Errorf("install CNI plugin into %s: %w", o.BinDir, err)
		}
		log.Info("CNI plugin installed", "path", filepath.Join(o.BinDir, "ofsdn"))
	}
	if o.ConfDir != "" {
		b := ConfList(o.Socket)
		path := filepath.Join(o.ConfDir, ConfListName)
		if err := writeAtomic(path, 0o644, func(w io.Writer) error {
			_, err := w.Write(b)
			return err
		}); err != nil {
			return fmt.Errorf("write CNI config into %s: %w", o.ConfDir, err)
		}
		log.Info("CNI config written", "path", path)
	}
	return nil
}

// ConfListName is the file the daemon writes into cniConfDir. Runtimes take the first
// configuration in lexical order, hence the "10-" prefix.
const ConfListName = "10-ofsdn.conflist"

// Versions in the written conflist (SPEC.md "Section 1: Network configuration format"):
// "cniVersions" (spec 1.1) lists every version the plugin offers, and a runtime whose CNI
// library reads it (containernetworking/cni v1.2.0 and later) picks the highest it
// implements, 1.1.0 with STATUS and GC; older libraries (v1.1.x, e.g. containerd 1.7,
// Podman 4) ignore it and use "cniVersion", so that must be one they can parse results
// of: 1.0.0 (a 1.1.0 result makes them refuse every ADD, "unsupported CNI result version").
const confListCNIVersion = "1.0.0"

var confListCNIVersions = []string{"1.0.0", "1.1.0"}

// ConfList returns the network configuration list the daemon writes (SPEC.md "Section 1:
// Network configuration format"): network "ofsdn", one ofsdn plugin on socket, cniVersion
// 1.0.0 and cniVersions [1.0.0, 1.1.0], indented JSON ending in a newline.
func ConfList(socket string) []byte {
	conf := struct {
		CNIVersion  string           `json:"cniVersion"`
		CNIVersions []string         `json:"cniVersions"`
		Name        string           `json:"name"`
		Plugins     []map[string]any `json:"plugins"`
	}{confListCNIVersion, confListCNIVersions, "ofsdn", []map[string]any{{"type": "ofsdn", "socket": socket}}}
	b, _ := json.MarshalIndent(conf, "", "  ")
	return append(b, '\n')
}

// writeAtomic writes path through a temporary file in its directory, fsyncs it, sets
// mode and renames it over path (rename(2) is atomic within a file system).
func writeAtomic(path string, mode os.FileMode, fill func(io.Writer) error) error {
	dir := filepath.Dir(path)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	tmp, err := os.CreateTemp(dir, "."+filepath.Base(path)+".tmp-*")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name()) // no-op after the rename
	if err := fill(tmp); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Chmod(mode); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Sync(); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	return os.Rename(tmp.Name(), path)
}
