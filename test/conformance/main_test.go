package conformance

import (
	"os"
	"testing"
)

// TestMain removes the binaries the tests built once the package's tests are done.
func TestMain(m *testing.M) {
	code := m.Run()
	if binDir != "" {
		_ = os.RemoveAll(binDir)
	}
	os.Exit(code)
}
