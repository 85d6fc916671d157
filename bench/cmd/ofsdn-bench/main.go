// Command ofsdn-bench measures how fast ofsdn wires pods, against a shell-out baseline and
// the floor of the design, in one interleaved run on private Open vSwitch instances.
//
// Usage (as root, Open vSwitch installed, binaries built with make build):
//
//	ofsdn-bench [-quick] [-bin bin] [-out DIR] [-modes m1,m2] [-fill 10,100,1000]
//
// It prints the markdown tables on stdout and writes DIR/results.md, DIR/results.json (raw
// samples, machine) and DIR/cpu.pprof. Exit status 1 when any timed operation or set-up
// step failed (never because of a timing).
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"

	"github.com/ofsdn/ofsdn/bench"
)

func main() {
	quick := flag.Bool("quick", false, "small run for CI (every mode and phase, a few pods; under a minute)")
	bin := flag.String("bin", "bin", "directory holding the ofsdn and ofsdn-node binaries")
	out := flag.String("out", filepath.Join(os.TempDir(), "ofsdn-bench"), "directory for results.md, results.json and cpu.pprof")
	modes := flag.String("modes", "", "comma-separated modes (default all: "+strings.Join(bench.AllModes, ",")+")")
	script := flag.String("sandbox", "", "path of test/sandbox.sh (default: from the source tree)")
	fill := flag.String("fill", "", "comma-separated numbers of pods already on the bridge at which ADD/DEL are timed, ascending (default 10,100,500; quick 10)")
	seq := flag.Int("seq", 0, "only the concurrency-1 phase, with this many rounds of ADDs then DELs per mode (plus the plugin exec timing); no concurrency, fill, profile or flow-scale phases: for A/B runs of one change")
	flag.Parse()
	if os.Geteuid() != 0 {
		fmt.Fprintln(os.Stderr, "ofsdn-bench: must run as root (network namespaces, veths, OVS)")
		os.Exit(2)
	}
	cfg := bench.Full()
	if *quick {
		cfg = bench.Quick()
	}
	if *seq > 0 {
		cfg.Name += fmt.Sprintf("-seq%d", *seq)
		cfg.SeqRounds = *seq
		cfg.Conc, cfg.ConcPods, cfg.FillLevels = nil, nil, nil
		cfg.ProfileOps, cfg.ScalePods = 0, 0
	}
	abs, err := filepath.Abs(*bin)
	if err != nil {
		fmt.Fprintln(os.Stderr, "ofsdn-bench:", err)
		os.Exit(2)
	}
	cfg.BinDir, cfg.Out, cfg.Script, cfg.Progress = abs, *out, *script, os.Stderr
	if *modes != "" {
		cfg.Modes = strings.Split(*modes, ",")
	}
	if *fill != "" {
		cfg.FillLevels = nil
		for _, f := range strings.Split(*fill, ",") {
			n, err := strconv.Atoi(strings.TrimSpace(f))
			if err != nil || n < 1 || (len(cfg.FillLevels) > 0 && n <= cfg.FillLevels[len(cfg.FillLevels)-1]) {
				fmt.Fprintf(os.Stderr, "ofsdn-bench: -fill %q: want ascending positive pod counts, e.g. 10,100,1000\n", *fill)
				os.Exit(2)
			}
			cfg.FillLevels = append(cfg.FillLevels, n)
		}
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	res, err := bench.Run(ctx, cfg, "ofsdn-bench "+strings.Join(os.Args[1:], " "))
	if res != nil {
		fmt.Println(res.Markdown())
		fmt.Fprintf(os.Stderr, "results: %s/results.md, %s/results.json\n", cfg.Out, cfg.Out)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "ofsdn-bench:", err)
		os.Exit(1)
	}
	if res.Failures > 0 {
		fmt.Fprintf(os.Stderr, "ofsdn-bench: %d operations failed\n", res.Failures)
		os.Exit(1)
	}
}
