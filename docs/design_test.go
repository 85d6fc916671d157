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
