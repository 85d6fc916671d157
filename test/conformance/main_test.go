package conformance

import (
	"os"
	"testing"

	"github.com/ofsdn/ofsdn/test/harness"

	"github.com/ofsdn/ofsdn/test/testenv"
)

// TestMain removes the binaries the tests built once the package's tests are done.
func TestMain(m *testing.M) {
	testenv.PrivilegedMain(m)
	code := m.Run()
	harness.RemoveBinaries()
	os.Exit(code)
}
