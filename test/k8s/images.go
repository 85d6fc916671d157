package k8s

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/ofsdn/ofsdn/test/testenv"
)

// Image references the tests use. OfsdnImage is also in test/k8s/overlay.
const (
	// OfsdnImage is `make image` built for the test (deploy/ofsdn.yaml's image, replaced by
	// the overlay).
	OfsdnImage = "ofsdn.test/ofsdn:dev"
	// TestImage runs test/k8s/testbin: entrypoint /testbin, cmd serve.
	TestImage = "ofsdn.test/testbin:1"
	// PauseImage is containerd's sandbox image: /testbin pause.
	PauseImage = "ofsdn.test/pause:1"
)

// BuildImages writes the three images' tarballs into dir: `make image` (IMAGE=OfsdnImage),
// and TestImage and PauseImage from test/k8s/testbin, all with hack/mkimage. It returns
// how long that took.
func BuildImages(t testing.TB, dir string) time.Duration {
	t.Helper()
	testenv.Privileged(t)
	start := time.Now()
	root := RepoRoot()
	bin := filepath.Join(dir, "bin")
	must(t, os.MkdirAll(bin, 0o755))
	runIn := func(env []string, name string, args ...string) {
		t.Helper()
		cmd := exec.Command(name, args...)
		cmd.Dir = root
		cmd.Env = append(os.Environ(), env...)
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("%s %v: %v\n%s", name, args, err, out)
		}
	}
	runIn(nil, "make", "--no-print-directory", "image", "IMAGE="+OfsdnImage,
		"IMAGE_TAR="+filepath.Join(dir, "ofsdn.tar"), "IMAGE_BIN="+bin)
	runIn([]string{"CGO_ENABLED=0"}, "go", "build", "-trimpath", "-ldflags", "-s -w",
		"-o", filepath.Join(bin, "testbin"), "./test/k8s/testbin")
	runIn(nil, "go", "build", "-o", filepath.Join(bin, "mkimage"), "./hack/mkimage")
	mk := filepath.Join(bin, "mkimage")
	file := "/testbin=" + filepath.Join(bin, "testbin")
	runIn(nil, mk, "-o", filepath.Join(dir, "testbin.tar"), "-t", TestImage, "-file", file,
		"-entrypoint", "/testbin", "-cmd", "serve")
	runIn(nil, mk, "-o", filepath.Join(dir, "pause.tar"), "-t", PauseImage, "-file", file,
		"-entrypoint", "/testbin", "-entrypoint", "pause")
	if err := os.RemoveAll(bin); err != nil {
		t.Fatal(fmt.Errorf("remove %s: %w", bin, err))
	}
	return time.Since(start)
}
