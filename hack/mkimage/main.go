// Command mkimage writes a single-platform container image as a docker-archive tarball (the
// format of `docker save`; `ctr images import`, `docker load`, `podman load` and
// `kind load image-archive` read it), offline: layers made of the given files on an empty
// base, with the platform, entrypoint and environment set in the image config. It uses
// github.com/google/go-containerregistry and needs no registry, daemon or root.
//
//	mkimage -o out.tar -t ofsdn.local/ofsdn:dev -entrypoint /usr/local/bin/ofsdn-node \
//	    -root bin/ovs-root -elf /usr/sbin/ovs-vswitchd -from /usr/share/openvswitch/vswitch.ovsschema \
//	    -dir /var/run/openvswitch:0755 -layer \
//	    -file /usr/local/bin/ofsdn-node=bin/ofsdn-node -file /usr/local/bin/ofsdn=bin/ofsdn
//
// The layer options are taken in their order on the command line:
//
//	-file IMAGE_PATH=LOCAL_PATH  a regular file (its permission bits kept)
//	-root DIR                    the tree the following -elf and -from read (e.g. Debian
//	                             packages unpacked with dpkg-deb -x into one directory)
//	-elf IMAGE_PATH              an ELF executable from the root, with its program
//	                             interpreter and every shared library it needs, transitively
//	                             (DT_NEEDED, looked up as ld.so does without a cache: in
//	                             -libpath), symlinks kept as symlinks
//	-from IMAGE_PATH             a file, symlink or whole directory from the root
//	-dir IMAGE_PATH[:MODE]       an empty directory, MODE octal (default 0755)
//	-symlink IMAGE_PATH=TARGET   a symbolic link
//	-layer                       what follows goes into a new layer
//
// Layers are reproducible: entries are sorted, owned by root, dated at the Unix epoch, so
// the same files give the same image digest. Parent directories not given with -dir are
// added with mode 0755. A path given twice in one layer is an error unless both are the
// same (the shared libraries of several -elf binaries).
//
// Why not `crane append` onto an empty base: it leaves the config's os and architecture
// empty and sets no entrypoint, so containerd refuses such an image as a pod sandbox.
package main

import (
	"archive/tar"
	"bytes"
	"debug/elf"
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"runtime"
	"sort"
	"strconv"
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

// op is one layer option, in command-line order.
type op struct{ kind, arg string }

// opFlag appends its kind's options to a shared ordered list.
type opFlag struct {
	kind string
	ops  *[]op
	bool bool
}

func (f opFlag) String() string     { return "" }
func (f opFlag) IsBoolFlag() bool   { return f.bool }
func (f opFlag) Set(v string) error { *f.ops = append(*f.ops, op{f.kind, v}); return nil }

func main() {
	if err := run(os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, "mkimage:", err)
		os.Exit(1)
	}
}

// libPaths are ld.so's system search directories per GOARCH (Debian's multiarch first).
var libPaths = map[string]string{
	"amd64": "/lib/x86_64-linux-gnu:/usr/lib/x86_64-linux-gnu:/lib:/usr/lib",
	"arm64": "/lib/aarch64-linux-gnu:/usr/lib/aarch64-linux-gnu:/lib:/usr/lib",
}

func run(args []string) error {
	fs := flag.NewFlagSet("mkimage", flag.ContinueOnError)
	out := fs.String("o", "", "output tarball (docker-archive)")
	tag := fs.String("t", "", "image reference, e.g. ofsdn.local/ofsdn:dev")
	platform := fs.String("platform", "linux/"+runtime.GOARCH, "OS/architecture in the image config")
	libpath := fs.String("libpath", "", "colon-separated directories -elf looks up shared libraries in (default: ld.so's system directories for the platform's architecture)")
	var entrypoint, cmd, env listFlag
	var ops []op
	for _, k := range []string{"file", "root", "elf", "from", "dir", "symlink"} {
		fs.Var(opFlag{kind: k, ops: &ops}, k, "layer option (see the command's doc)")
	}
	fs.Var(opFlag{kind: "layer", ops: &ops, bool: true}, "layer", "start a new layer")
	fs.Var(&entrypoint, "entrypoint", "an entrypoint word (repeat for arguments)")
	fs.Var(&cmd, "cmd", "a cmd word (repeat)")
	fs.Var(&env, "env", "KEY=VALUE in the config's environment (repeat; PATH is set)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *out == "" || *tag == "" || len(ops) == 0 || fs.NArg() > 0 {
		return errors.New("usage: mkimage -o OUT.tar -t REF [-file IMAGE_PATH=LOCAL_PATH | -root DIR | -elf IMAGE_PATH | -from IMAGE_PATH | -dir IMAGE_PATH[:MODE] | -symlink IMAGE_PATH=TARGET | -layer]... [-entrypoint WORD...] [-cmd WORD...] [-env K=V...] [-platform OS/ARCH] [-libpath DIRS]")
	}
	osName, arch, ok := strings.Cut(*platform, "/")
	if !ok || osName == "" || arch == "" {
		return fmt.Errorf("-platform %q: want OS/ARCH, e.g. linux/amd64", *platform)
	}
	if *libpath == "" {
		*libpath = libPaths[arch]
	}
	ref, err := name.NewTag(*tag)
	if err != nil {
		return fmt.Errorf("-t %q: %w", *tag, err)
	}
	layerTars, err := buildLayers(ops, strings.Split(*libpath, ":"))
	if err != nil {
		return err
	}
	img := empty.Image
	for _, lt := range layerTars {
		lt := lt
		layer, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) {
			return io.NopCloser(bytes.NewReader(lt)), nil
		})
		if err != nil {
			return err
		}
		if img, err = mutate.AppendLayers(img, layer); err != nil {
			return err
		}
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
	var size int64
	for _, lt := range layerTars {
		size += int64(len(lt))
	}
	fmt.Printf("%s %s %s/%s\n", *out, ref, osName, arch)
	fmt.Printf("digest %s, %d layers, %d bytes uncompressed\n", d, len(layerTars), size)
	return nil
}

// entry is one tar entry of a layer.
type entry struct {
	typ    byte   // tar.TypeReg, TypeDir or TypeSymlink
	mode   int64  // permission bits
	src    string // local file (TypeReg)
	target string // link target (TypeSymlink)
}

// layer is the entries of one layer by their image path (clean, absolute).
type layer map[string]entry

func (l layer) add(p string, e entry) error {
	if old, ok := l[p]; ok {
		if old == e || old.typ == tar.TypeDir && e.typ == tar.TypeDir {
			return nil
		}
		return fmt.Errorf("%s is given twice in one layer (%+v and %+v)", p, old, e)
	}
	l[p] = e
	return nil
}

// buildLayers returns one uncompressed tar per layer.
func buildLayers(ops []op, libpath []string) ([][]byte, error) {
	var layers []layer
	cur := layer{}
	root := ""
	for _, o := range ops {
		var err error
		switch o.kind {
		case "layer":
			if len(cur) == 0 {
				return nil, errors.New("-layer: the layer before it is empty")
			}
			layers, cur = append(layers, cur), layer{}
		case "root":
			if st, e := os.Stat(o.arg); e != nil || !st.IsDir() {
				return nil, fmt.Errorf("-root %q: not a directory", o.arg)
			}
			root = o.arg
		case "file":
			dst, src, ok := strings.Cut(o.arg, "=")
			if !ok || !path.IsAbs(dst) || src == "" {
				return nil, fmt.Errorf("-file %q: want /IMAGE/PATH=LOCAL_PATH", o.arg)
			}
			st, e := os.Stat(src)
			if e != nil {
				return nil, fmt.Errorf("-file %q: %w", o.arg, e)
			}
			err = cur.add(path.Clean(dst), entry{typ: tar.TypeReg, mode: int64(st.Mode().Perm()), src: src})
		case "dir":
			p, m, hasMode := strings.Cut(o.arg, ":")
			mode := int64(0o755)
			if hasMode {
				v, e := strconv.ParseInt(m, 8, 32)
				if e != nil || v < 0 || v > 0o7777 {
					return nil, fmt.Errorf("-dir %q: mode %q is not an octal permission (e.g. 0755)", o.arg, m)
				}
				mode = v
			}
			if !path.IsAbs(p) {
				return nil, fmt.Errorf("-dir %q: want an absolute image path", o.arg)
			}
			p = path.Clean(p)
			if old, ok := cur[p]; ok && old.typ == tar.TypeDir {
				old.mode = mode
				cur[p] = old
			} else {
				err = cur.add(p, entry{typ: tar.TypeDir, mode: mode})
			}
		case "symlink":
			p, target, ok := strings.Cut(o.arg, "=")
			if !ok || !path.IsAbs(p) || target == "" {
				return nil, fmt.Errorf("-symlink %q: want /IMAGE/PATH=TARGET", o.arg)
			}
			err = cur.add(path.Clean(p), entry{typ: tar.TypeSymlink, mode: 0o777, target: target})
		case "elf", "from":
			if root == "" {
				return nil, fmt.Errorf("-%s %s: give -root DIR before it", o.kind, o.arg)
			}
			if !path.IsAbs(o.arg) {
				return nil, fmt.Errorf("-%s %q: want an absolute image path", o.kind, o.arg)
			}
			r := rootReader{root: root, l: cur}
			if o.kind == "from" {
				err = r.addTree(path.Clean(o.arg))
			} else {
				err = r.addELF(path.Clean(o.arg), libpath, nil)
			}
		}
		if err != nil {
			return nil, err
		}
	}
	if len(cur) == 0 {
		return nil, errors.New("the last layer is empty")
	}
	layers = append(layers, cur)
	var out [][]byte
	for _, l := range layers {
		b, err := l.tar()
		if err != nil {
			return nil, err
		}
		out = append(out, b)
	}
	return out, nil
}

// rootReader adds entries read from an unpacked tree to a layer.
type rootReader struct {
	root string
	l    layer
}

func (r rootReader) local(p string) string { return filepath.Join(r.root, filepath.FromSlash(p)) }

// resolve adds p as it is in the root (each symlink on the way, in any path component, as
// a symlink entry) and returns the path it finally names, whose type is fi.
func (r rootReader) resolve(p string) (string, fs.FileInfo, error) {
	for hops := 0; hops < 40; hops++ {
		// The first symlink component of p, if any.
		parts := strings.Split(strings.TrimPrefix(p, "/"), "/")
		cur := ""
		linked := false
		for i, part := range parts {
			cur += "/" + part
			fi, err := os.Lstat(r.local(cur))
			if err != nil {
				return "", nil, fmt.Errorf("%s is not in %s (%w): add the Debian package holding it", p, r.root, err)
			}
			if fi.Mode()&fs.ModeSymlink == 0 {
				if i == len(parts)-1 {
					return p, fi, nil
				}
				continue
			}
			target, err := os.Readlink(r.local(cur))
			if err != nil {
				return "", nil, err
			}
			if err := r.l.add(cur, entry{typ: tar.TypeSymlink, mode: 0o777, target: target}); err != nil {
				return "", nil, err
			}
			if !path.IsAbs(target) {
				target = path.Join(path.Dir(cur), target)
			}
			p = path.Clean(path.Join(append([]string{target}, parts[i+1:]...)...))
			linked = true
			break
		}
		if !linked {
			return p, nil, fmt.Errorf("%s: empty path", p)
		}
	}
	return "", nil, fmt.Errorf("%s: too many levels of symbolic links in %s", p, r.root)
}

// addFile adds the file p (following symlinks, each kept) and returns the real path.
func (r rootReader) addFile(p string) (string, error) {
	real, fi, err := r.resolve(p)
	if err != nil {
		return "", err
	}
	if !fi.Mode().IsRegular() {
		return "", fmt.Errorf("%s (%s in %s) is not a regular file", p, real, r.root)
	}
	return real, r.l.add(real, entry{typ: tar.TypeReg, mode: int64(fi.Mode().Perm()), src: r.local(real)})
}

// addTree adds p from the root: a file, a symlink and what it names, or a directory with
// everything under it.
func (r rootReader) addTree(p string) error {
	real, fi, err := r.resolve(p)
	if err != nil {
		return err
	}
	if !fi.IsDir() {
		_, err := r.addFile(real)
		return err
	}
	return filepath.WalkDir(r.local(real), func(lp string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(r.root, lp)
		ip := "/" + filepath.ToSlash(rel)
		info, err := d.Info()
		if err != nil {
			return err
		}
		switch {
		case d.IsDir():
			return r.l.add(ip, entry{typ: tar.TypeDir, mode: int64(info.Mode().Perm())})
		case info.Mode()&fs.ModeSymlink != 0:
			target, err := os.Readlink(lp)
			if err != nil {
				return err
			}
			return r.l.add(ip, entry{typ: tar.TypeSymlink, mode: 0o777, target: target})
		case info.Mode().IsRegular():
			return r.l.add(ip, entry{typ: tar.TypeReg, mode: int64(info.Mode().Perm()), src: lp})
		}
		return fmt.Errorf("%s: neither file, directory nor symlink", lp)
	})
}

// addELF adds the ELF file p, its program interpreter and the shared libraries it needs,
// transitively. done holds the libraries already followed.
func (r rootReader) addELF(p string, libpath []string, done map[string]bool) error {
	if done == nil {
		done = map[string]bool{}
	}
	real, err := r.addFile(p)
	if err != nil {
		return err
	}
	if done[real] {
		return nil
	}
	done[real] = true
	f, err := elf.Open(r.local(real))
	if err != nil {
		return fmt.Errorf("%s: %w", p, err)
	}
	defer f.Close()
	for _, prog := range f.Progs {
		if prog.Type != elf.PT_INTERP {
			continue
		}
		b, err := io.ReadAll(prog.Open())
		if err != nil {
			return fmt.Errorf("%s: interpreter: %w", p, err)
		}
		interp := strings.TrimRight(string(b), "\x00")
		if err := r.addELF(interp, libpath, done); err != nil {
			return fmt.Errorf("%s's interpreter: %w", p, err)
		}
	}
	libs, err := f.ImportedLibraries()
	if err != nil {
		return fmt.Errorf("%s: %w", p, err)
	}
	for _, lib := range libs {
		found := ""
		for _, d := range libpath {
			if _, err := os.Stat(r.local(path.Join(d, lib))); err == nil {
				found = path.Join(d, lib)
				break
			}
		}
		if found == "" {
			return fmt.Errorf("%s, needed by %s, is in none of %s under %s: add the Debian package holding it (dpkg -S %s)",
				lib, p, strings.Join(libpath, ":"), r.root, lib)
		}
		if err := r.addELF(found, libpath, done); err != nil {
			return err
		}
	}
	return nil
}

// tar returns the layer as an uncompressed tar, parents before children.
func (l layer) tar() ([]byte, error) {
	for p := range l {
		for d := path.Dir(p); d != "/"; d = path.Dir(d) {
			if e, ok := l[d]; ok {
				if e.typ != tar.TypeDir {
					return nil, fmt.Errorf("%s is under %s, which is not a directory in the layer", p, d)
				}
				continue
			}
			l[d] = entry{typ: tar.TypeDir, mode: 0o755}
		}
	}
	var paths []string
	for p := range l {
		paths = append(paths, p)
	}
	sort.Strings(paths) // a parent sorts before its children
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	epoch := time.Unix(0, 0)
	for _, p := range paths {
		e := l[p]
		name := strings.TrimPrefix(p, "/")
		h := &tar.Header{Typeflag: e.typ, Name: name, Mode: e.mode, ModTime: epoch, Format: tar.FormatPAX}
		var b []byte
		switch e.typ {
		case tar.TypeDir:
			h.Name += "/"
		case tar.TypeSymlink:
			h.Linkname = e.target
		case tar.TypeReg:
			var err error
			if b, err = os.ReadFile(e.src); err != nil {
				return nil, err
			}
			h.Size = int64(len(b))
		}
		if err := tw.WriteHeader(h); err != nil {
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
