package topology

import (
	"os"
	"reflect"
	"strings"
	"testing"
)

// TestREADMENamesFileSpecKeys: the README's config table row for topologyFile lists every
// key of the topology file (FileSpec, and each peer's, FilePeer), so a key added to the
// file is documented where users look for it.
func TestREADMENamesFileSpecKeys(t *testing.T) {
	b, err := os.ReadFile("../README.md")
	if err != nil {
		t.Fatal(err)
	}
	var row string
	for _, line := range strings.Split(string(b), "\n") {
		if strings.HasPrefix(line, "| `-topology-file` / `topologyFile` |") {
			row = line
		}
	}
	if row == "" {
		t.Fatal("README.md has no config table row for `-topology-file` / `topologyFile`")
	}
	keys := func(v any) []string {
		var out []string
		typ := reflect.TypeOf(v)
		for i := 0; i < typ.NumField(); i++ {
			out = append(out, strings.Split(typ.Field(i).Tag.Get("json"), ",")[0])
		}
		return out
	}
	for _, k := range keys(FileSpec{}) {
		if k == "peers" {
			k = "peers:"
		}
		if !strings.Contains(row, "`"+k) {
			t.Errorf("README.md's topologyFile row does not name the topology file's key %q", k)
		}
	}
	_, peers, ok := strings.Cut(row, "`peers: [{")
	peers, _, _ = strings.Cut(peers, "}]`")
	if !ok {
		t.Fatal("README.md's topologyFile row has no `peers: [{...}]`")
	}
	for _, k := range keys(FilePeer{}) {
		if !strings.Contains(peers, k) {
			t.Errorf("README.md's topologyFile row does not name the peer key %q in peers: [{%s}]", k, peers)
		}
	}
}
