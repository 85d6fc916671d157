// Command mkimage writes a single-platform container image as a docker-archive tarball (the
// format of `docker save`; `ctr images import`, `docker load`, `podman load` and
// `kind load image-archive` read it), offline: one layer made of the given files on an
// empty base, with the platform, entrypoint and environment set in the image config. It
// uses github.com/google/go-containerregistry and needs no registry, daemon or root.
//
//	mkimage -o out.tar -t ofsdn.local/ofsdn:dev -entrypoint /usr/local/bin/ofsdn-node \
//	    -file /usr/local/bin/ofsdn-node=bin/ofsdn-node -file /usr/local/bin/ofsdn=bin/ofsdn
//
// The layer is reproducible: entries are sorted, owned by root, dated at the Unix epoch, so
// the same files give the same image digest. Files keep their permission bits; parent
// directories are added with mode 0755.
//
// Why not `crane append` onto an empty base: it leaves the config's os and architecture
// empty and sets no entrypoint, so containerd refuses such an image as a pod sandbox.
package main

import (
	"archive/tar"
	"bytes"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path"
	"runtime"
	"sort"
	"strings"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
)

// listFlag collects a repeated flag.
type listFlag []string

func (l *listFlag) String() string     { return strings.Join(*l, " ") }
func (l *listFlag) Set(v string) error { *l = append(*l, v); return nil }

func main() {
	if err := run(os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, "mkimage:", err)
		os.Exit(1)
	}
}

func run(args []string) error {
	fs := flag.NewFlagSet("mkimage", flag.ContinueOnError)
	out := fs.String("o", "", "output tarball (docker-archive)")
	tag := fs.String("t", "", "image reference, e.g. ofsdn.local/ofsdn:dev")
	platform := fs.String("platform", "linux/"+runtime.GOARCH, "OS/architecture in the image config")
	var files, entrypoint, cmd, env listFlag
	fs.Var(&files, "file", "IMAGE_PATH=LOCAL_PATH, a file for the layer (repeat)")
	fs.Var(&entrypoint, "entrypoint", "an entrypoint word (repeat for arguments)")
	fs.Var(&cmd, "cmd", "a cmd word (repeat)")
	fs.Var(&env, "env", "KEY=VALUE in the config's environment (repeat; PATH is set)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *out == "" || *tag == "" || len(files) == 0 || fs.NArg() > 0 {
		return errors.New("usage: mkimage -o OUT.tar -t REF -file IMAGE_PATH=LOCAL_PATH... [-entrypoint WORD...] [-cmd WORD...] [-env K=V...] [-platform OS/ARCH]")
	}
	osName, arch, ok := strings.Cut(*platform, "/")
	if !ok || osName == "" || arch == "" {
		return fmt.Errorf("-platform %q: want OS/ARCH, e.g. linux/amd64", *platform)
	}
	ref, err := name.NewTag(*tag)
	if err != nil {
		return fmt.Errorf("-t %q: %w", *tag, err)
	}
	layerTar, err := buildLayer(files)
	if err != nil {
		return err
	}
	layer, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) {
		return io.NopCloser(bytes.NewReader(layerTar)), nil
	})
	if err != nil {
		return err
	}
	img, err := mutate.AppendLayers(empty.Image, layer)
	if err != nil {
		return err
	}
	cf, err := img.ConfigFile()
	if err != nil {
		return err
	}
	cf = cf.DeepCopy()
	cf.OS, cf.Architecture = osName, arch
	cf.Created = v1.Time{Time: time.Unix(0, 0).UTC()}
	cf.Config.Entrypoint = entrypoint
	cf.Config.Cmd = cmd
	cf.Config.Env = append([]string{"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"}, env...)
	if img, err = mutate.ConfigFile(img, cf); err != nil {
		return err
	}
	if err := tarball.WriteToFile(*out, ref, img); err != nil {
		return fmt.Errorf("write %s: %w", *out, err)
	}
	d, _ := img.Digest()
	fmt.Printf("%s %s %s/%s\n", *out, ref, osName, arch)
	fmt.Printf("digest %s\n", d)
	return nil
}

// buildLayer returns an uncompressed tar holding the files (IMAGE_PATH=LOCAL_PATH) and
// their parent directories.
func buildLayer(files []string) ([]byte, error) {
	type entry struct{ dst, src string }
	var entries []entry
	dirs := map[string]bool{}
	for _, f := range files {
		dst, src, ok := strings.Cut(f, "=")
		if !ok || !path.IsAbs(dst) || src == "" {
			return nil, fmt.Errorf("-file %q: want /IMAGE/PATH=LOCAL_PATH", f)
		}
		dst = path.Clean(dst)
		entries = append(entries, entry{dst, src})
		for d := path.Dir(dst); d != "/"; d = path.Dir(d) {
			dirs[d] = true
		}
	}
	sort.Slice(entries, func(i, j int) bool { return entries[i].dst < entries[j].dst })
	var sortedDirs []string
	for d := range dirs {
		sortedDirs = append(sortedDirs, d)
	}
	sort.Strings(sortedDirs) // a parent sorts before its children
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	epoch := time.Unix(0, 0)
	for _, d := range sortedDirs {
		if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeDir, Name: strings.TrimPrefix(d, "/") + "/",
			Mode: 0o755, ModTime: epoch, Format: tar.FormatPAX}); err != nil {
			return nil, err
		}
	}
	for _, e := range entries {
		b, err := os.ReadFile(e.src)
		if err != nil {
			return nil, err
		}
		st, err := os.Stat(e.src)
		if err != nil {
			return nil, err
		}
		if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: strings.TrimPrefix(e.dst, "/"),
			Mode: int64(st.Mode().Perm()), Size: int64(len(b)), ModTime: epoch, Format: tar.FormatPAX}); err != nil {
			return nil, err
		}
		if _, err := tw.Write(b); err != nil {
			return nil, err
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}
