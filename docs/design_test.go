// Package docs holds the repository's design documents; this test keeps design.md's
// package map true: the import rules it states are checked against `go list`.
package docs

import (
	"bufio"
	"encoding/json"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"
)

const module = "github.com/ofsdn/ofsdn"

// rules reads the package map of design.md: package → the module packages it may import.
func rules(t *testing.T) map[string]map[string]bool {
	t.Helper()
	f, err := os.Open("design.md")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	row := regexp.MustCompile("^\\| `([^`]+)` \\| ([^|]*) \\|")
	ident := regexp.MustCompile("`([^`]+)`")
	out := map[string]map[string]bool{}
	in := false
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		l := sc.Text()
		if strings.HasPrefix(l, "## ") {
			in = strings.HasPrefix(l, "## Packages and what each may import")
			continue
		}
		m := row.FindStringSubmatch(l)
		if !in || m == nil {
			continue
		}
		if _, dup := out[m[1]]; dup {
			t.Errorf("design.md lists package %s twice", m[1])
		}
		may := map[string]bool{}
		for _, d := range ident.FindAllStringSubmatch(m[2], -1) {
			may[d[1]] = true
		}
		if len(may) == 0 && strings.TrimSpace(m[2]) != "—" {
			t.Errorf("design.md: package %s: may-import cell %q is neither a list of packages nor —", m[1], m[2])
		}
		out[m[1]] = may
	}
	if len(out) == 0 {
		t.Fatal("design.md has no package map under \"## Packages and what each may import\"")
	}
	return out
}

type listed struct {
	ImportPath string
	Imports    []string
	Deps       []string
}

// goList runs `go list -json` with args in the module's root and decodes its output.
func goList(t *testing.T, args ...string) []listed {
	t.Helper()
	goBin, err := exec.LookPath("go")
	if err != nil {
		goBin = "/usr/local/go/bin/go"
	}
	cmd := exec.Command(goBin, append([]string{"list", "-json"}, args...)...)
	cmd.Dir = ".."
	cmd.Stderr = os.Stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list %v: %v", args, err)
	}
	var pkgs []listed
	dec := json.NewDecoder(strings.NewReader(string(out)))
	for {
		var p listed
		if err := dec.Decode(&p); err == io.EOF {
			break
		} else if err != nil {
			t.Fatal(err)
		}
		pkgs = append(pkgs, p)
	}
	return pkgs
}

// local returns path relative to the module, and whether it is a module package.
func local(path string) (string, bool) {
	if !strings.HasPrefix(path, module+"/") {
		return "", false
	}
	return strings.TrimPrefix(path, module+"/"), true
}

// TestImportRules: every package of the module is in design.md's package map, and its
// non-test code imports only the module packages its row allows.
func TestImportRules(t *testing.T) {
	may := rules(t)
	seen := map[string]bool{}
	for _, p := range goList(t, "./...") {
		name, ok := local(p.ImportPath)
		if !ok {
			continue
		}
		seen[name] = true
		allowed, ok := may[name]
		if !ok {
			t.Errorf("package %s is not in design.md's package map: add its row (what it is, what it may import)", name)
			continue
		}
		for _, imp := range p.Imports {
			dep, ok := local(imp)
			if ok && !allowed[dep] {
				t.Errorf("package %s imports %s, which design.md does not allow: move the code or change the rule (and say why)", name, dep)
			}
		}
	}
	var stale []string
	for name := range may {
		if !seen[name] {
			stale = append(stale, name)
		}
	}
	sort.Strings(stale)
	for _, name := range stale {
		if _, err := os.Stat(filepath.Join("..", name)); err != nil {
			t.Errorf("design.md lists package %s, which does not exist", name)
		}
	}
}

// TestOpenFlowStandsAlone: the OpenFlow connection depends on no other package of ofsdn,
// directly or not (go list -deps), so it can be read, tested and reused on its own.
func TestOpenFlowStandsAlone(t *testing.T) {
	for _, p := range goList(t, "-deps", "./openflow") {
		if name, ok := local(p.ImportPath); ok && name != "openflow" {
			t.Errorf("openflow depends on %s", name)
		}
	}
}

// codecRules reads design.md's "Which packages speak the wire codecs" list: one line per
// third-party codec, "- `MODULE` (...): `pkg`, `pkg`, ...", the module's import path
// first and then the packages of ofsdn whose non-test code may import it.
func codecRules(t *testing.T) map[string]map[string]bool {
	t.Helper()
	b, err := os.ReadFile("design.md")
	if err != nil {
		t.Fatal(err)
	}
	ident := regexp.MustCompile("`([^`]+)`")
	out := map[string]map[string]bool{}
	in := false
	for _, l := range strings.Split(string(b), "\n") {
		if strings.HasPrefix(l, "Which packages speak the wire codecs") {
			in = true
			continue
		}
		if !in {
			continue
		}
		if !strings.HasPrefix(l, "- ") {
			if len(out) > 0 {
				break
			}
			continue
		}
		ids := ident.FindAllStringSubmatch(l, -1)
		if len(ids) < 2 {
			t.Fatalf("design.md codec line %q: want the module and at least one package", l)
		}
		may := map[string]bool{}
		for _, id := range ids[1:] {
			may[id[1]] = true
		}
		out[ids[0][1]] = may
	}
	if len(out) == 0 {
		t.Fatal(`design.md has no list after "Which packages speak the wire codecs"`)
	}
	return out
}

// TestCodecImports: the OpenFlow codec (libOpenflow) and the OVSDB library (libovsdb) are
// imported only by the packages design.md names for them, so the controller, say, cannot
// start building OpenFlow messages or OVSDB operations itself again.
func TestCodecImports(t *testing.T) {
	rules := codecRules(t)
	for _, mod := range []string{"github.com/contiv/libOpenflow", "github.com/ovn-kubernetes/libovsdb"} {
		if _, ok := rules[mod]; !ok {
			t.Errorf("design.md's codec list has no line for %s", mod)
		}
	}
	for _, p := range goList(t, "./...") {
		name, ok := local(p.ImportPath)
		if !ok {
			continue
		}
		for _, imp := range p.Imports {
			for mod, may := range rules {
				if (imp == mod || strings.HasPrefix(imp, mod+"/")) && !may[name] {
					t.Errorf("package %s imports %s, but design.md lets only %v use %s: go through those packages", name, imp, keys(may), mod)
				}
			}
		}
	}
}

func keys(m map[string]bool) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}
