package e2e

// How the package's tests share the machine. The tests are mostly waiting (on daemons,
// OVS, timeouts that prove a packet is dropped), not computing, so they need not run one
// after the other. These lanes run side by side:
//
//   - TestNetworkPolicy (two clusters, each its own kube-apiserver and etcd, two sandbox
//     nodes and nine pods; its upstream cases run on both at once, see there) runs in a
//     lane of its own, and TestServiceProxyNodePort (its own API server and two nodes,
//     mostly waiting on Service syncs) in another;
//   - every other test calls serial, and these run one at a time, as the whole package
//     did before, in whatever order they get the lane; the dual-stack and IPv6 tests
//     (their own nodes, pods and underlays, no echo counted across a replacement) call
//     serialIPv6 instead: a second serial lane beside the first, so that the two lanes
//     and TestNetworkPolicy take about the same time and none of them alone sets the
//     package's;
//   - the tests that count every echo request across a daemon replacement (no ping lost
//     at 10 ms intervals: TestUpgradeFromPreviousRelease,
//     TestUpgradeOverlayFromPreviousRelease, TestMultiNodeRestarts) call alone: they are
//     not parallel, so go test runs them one after the other before any lane starts
//     (parallel tests wait until every sequential top-level test has returned). Beside
//     TestNetworkPolicy's clusters on 2 cores the userspace datapath, which runs in
//     ovs-vswitchd's main thread, was seen to lose a single request (1 of 382, CI) in a
//     window these tests cannot tell from a loss the daemon caused; what they measure is
//     the daemon's replacement, so they measure it on a machine that runs nothing else of
//     this package.
//
// Nothing the two lanes make is shared: every node is a sandbox of its own (test/sandbox:
// its own OVS, run directory and network namespace, random names), pods are network
// namespaces named with a random suffix (harness.NewNetns), underlays and API servers live
// in namespaces of the test's own, so the same addresses and ports in two tests never meet.
//
// A test waiting for the serial lane holds one of go test's -parallel slots (GOMAXPROCS by
// default, 2 here), which could keep TestNetworkPolicy from starting until most of the
// serial lane has run; TestMain therefore raises -parallel (raiseParallel) unless it was
// given. -parallel 1 still runs every test one at a time.

import (
	"flag"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"strings"
	"sync"
	"testing"
)

// serialLane is held by the test running in the serial lane.
var serialLane sync.Mutex

// serial makes t a parallel test that runs alone in the serial lane: it returns once no
// other serial test is running, and t keeps the lane until it and its subtests are done.
func serial(t *testing.T) { inLane(t, &serialLane) }

// serialIPv6Lane is held by the test running in the dual-stack and IPv6 tests' lane.
var serialIPv6Lane sync.Mutex

// serialIPv6 is serial for the dual-stack and IPv6 tests: they run one at a time in a
// lane of their own, beside the serial lane (see the top of this file).
func serialIPv6(t *testing.T) { inLane(t, &serialIPv6Lane) }

// inLane makes t a parallel test that holds lane from when it is free until t and its
// subtests are done.
func inLane(t *testing.T, lane *sync.Mutex) {
	t.Helper()
	t.Parallel()
	lane.Lock()
	t.Cleanup(lane.Unlock)
}

// alone marks t as one of the tests that run before the lanes, with no other test of the
// package beside them (see the top of this file). It does nothing else: such a test is not
// parallel, which is what keeps every lane waiting until it has returned.
func alone(t *testing.T) { t.Helper() }

// beside makes t a parallel test outside the serial lane: it runs beside the serial
// tests (see the top of this file for what it must not share with them).
func beside(t *testing.T) {
	t.Helper()
	t.Parallel()
}

// laneSlots is the -parallel TestMain sets unless given: enough for every test of the
// package and every upstream case of TestNetworkPolicy to hold a slot while it waits for
// its lane or its cluster.
const laneSlots = 128

// raiseParallel sets -test.parallel to laneSlots unless it was set on the command line.
// It parses the flags (m.Run would), so call it first in TestMain.
func raiseParallel() {
	if !flag.Parsed() {
		flag.Parse()
	}
	given := false
	flag.Visit(func(f *flag.Flag) {
		if f.Name == "test.parallel" {
			given = true
		}
	})
	if !given {
		if err := flag.Set("test.parallel", fmt.Sprint(laneSlots)); err != nil {
			panic(err)
		}
	}
}

// TestEveryTestHasALane: each top-level test of the package starts with serial(t),
// serialIPv6(t), beside(t) or alone(t). A test with neither would run beside the serial lane's tests without anyone
// having checked that it shares nothing with them (see the top of this file).
func TestEveryTestHasALane(t *testing.T) {
	fset := token.NewFileSet()
	pkgs, err := parser.ParseDir(fset, ".", func(fi fs.FileInfo) bool { return strings.HasSuffix(fi.Name(), "_test.go") }, 0)
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, pkg := range pkgs {
		for _, f := range pkg.Files {
			for _, d := range f.Decls {
				fn, ok := d.(*ast.FuncDecl)
				if !ok || fn.Recv != nil || !strings.HasPrefix(fn.Name.Name, "Test") || fn.Name.Name == "TestMain" ||
					fn.Name.Name == "TestEveryTestHasALane" || len(fn.Type.Params.List) != 1 {
					continue
				}
				n++
				if !startsWithLane(fn) {
					t.Errorf("%s (%s): its first statement must be serial(t), serialIPv6(t), beside(t) or alone(t)", fn.Name.Name, fset.Position(fn.Pos()))
				}
			}
		}
	}
	if n < 30 {
		t.Errorf("found %d tests, want the package's 30 or more: is the parse looking at the right files?", n)
	}
}

func startsWithLane(fn *ast.FuncDecl) bool {
	if fn.Body == nil || len(fn.Body.List) == 0 {
		return false
	}
	es, ok := fn.Body.List[0].(*ast.ExprStmt)
	if !ok {
		return false
	}
	call, ok := es.X.(*ast.CallExpr)
	if !ok {
		return false
	}
	id, ok := call.Fun.(*ast.Ident)
	return ok && (id.Name == "serial" || id.Name == "serialIPv6" || id.Name == "beside" || id.Name == "alone")
}
