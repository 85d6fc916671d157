package e2e

import (
	"os"
	"path/filepath"
	"testing"
)

// TestMain removes the binaries the tests built once the package's tests are done.
func TestMain(m *testing.M) {
	code := m.Run()
	for _, dir := range []string{binDir, dirOf(raceBin), dirOf(ctlBin)} {
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
