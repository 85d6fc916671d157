// Package testenv is the one rule that splits ofsdn's tests into tiers. A test that needs
// root and what only root has here (network namespaces, veth pairs, netlink changes,
// nftables, a private Open vSwitch, a real Kubernetes) calls Privileged first, or its
// package's TestMain calls PrivilegedMain; every other test is a unit test and runs
// anywhere, without root, on a laptop.
//
// The tier is chosen by the environment variable TierEnv: "unit" (make unit, and the race
// pass of make test) skips the privileged tests; unset or "all" (make test, CI) runs them,
// and a privileged test run without root fails at once instead of skipping, so a CI run
// can never pass by skipping them.
package testenv

import (
	"fmt"
	"os"
	"testing"
)

// TierEnv is the environment variable that selects the test tier: "unit" or "all"
// (the default when unset).
const TierEnv = "OFSDN_TEST_TIER"

// Unit reports whether only unit tests run (TierEnv is "unit").
func Unit() bool { return os.Getenv(TierEnv) == "unit" }

// Privileged marks t as needing root (and, through it, network namespaces, netlink,
// nftables or Open vSwitch). In the unit tier it skips t; otherwise it fails t at once when
// the process is not root, naming the fix.
func Privileged(t testing.TB) {
	t.Helper()
	if Unit() {
		t.Skipf("needs root, network namespaces or Open vSwitch: skipped in the unit tier (%s=unit); make test runs it", TierEnv)
	}
	if os.Geteuid() != 0 {
		t.Fatalf("needs root, network namespaces or Open vSwitch: run it as root (make test), or set %s=unit to run only the unit tests", TierEnv)
	}
}

// PrivilegedMain is Privileged for a package whose every test is privileged, called by its
// TestMain before m.Run: in the unit tier it prints why and exits 0 without running any
// test; otherwise it exits 1 when the process is not root, naming the fix. It returns when
// the tests may run.
func PrivilegedMain(m *testing.M) {
	if Unit() {
		fmt.Fprintf(os.Stderr, "every test here needs root, network namespaces or Open vSwitch: none run in the unit tier (%s=unit); make test runs them\n", TierEnv)
		os.Exit(0)
	}
	if os.Geteuid() != 0 {
		fmt.Fprintf(os.Stderr, "every test here needs root, network namespaces or Open vSwitch: run them as root (make test), or set %s=unit to run only the unit tests\n", TierEnv)
		os.Exit(1)
	}
}
