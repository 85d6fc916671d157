package e2e

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/ofsdn/ofsdn/test/harness"

	"github.com/ofsdn/ofsdn/test/testenv"
)

// TestMain raises -parallel for the lanes (lanes_test.go) and removes the binaries the
// tests built once the package's tests are done.
func TestMain(m *testing.M) {
	testenv.PrivilegedMain(m)
	raiseParallel()
	code := m.Run()
	harness.RemoveBinaries()
	for _, dir := range []string{dirOf(raceBin), dirOf(ctlBin), dirOf(releaseBin)} {
		if dir != "" {
			_ = os.RemoveAll(dir)
		}
	}
	os.Exit(code)
}

func dirOf(path string) string {
	if path == "" {
		return ""
	}
	return filepath.Dir(path)
}
