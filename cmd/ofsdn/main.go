// Command ofsdn is the ofsdn CNI plugin: the binary the container runtime
// executes (installed as /opt/cni/bin/ofsdn) for every CNI operation on a
// pod. It does no networking itself; it forwards each operation to the
// ofsdn-node daemon over the daemon's root-only unix socket (netconf key
// "socket", default /var/run/ofsdn/cni.sock) and relays the answer.
//
// Protocol (CNI specification 1.1.0):
//   - SPEC.md "Section 2: Execution Protocol": parameters come from CNI_*
//     environment variables and the netconf from stdin; pkg/skel parses and
//     checks them (code 4 for missing variables, 1 for an unsupported
//     cniVersion) before this code runs.
//   - ADD: the daemon answers a CNI 1.1.0 result, which is checked
//     (cni.ResultForVersion: code 999 naming the fault if it is not a valid
//     result for the netconf's version), converted to the netconf's
//     cniVersion and printed on stdout (SPEC.md "Section 5: Result Types",
//     "ADD Success"; "Version").
//   - DEL, CHECK, GC, STATUS: no output on success. The whole netconf,
//     including prevResult and "cni.dev/valid-attachments", is forwarded
//     so the daemon can use them.
//   - VERSION: answered here; every version the CNI library knows, 0.1.0
//     through 1.1.0.
//   - Input is checked before anything is sent: stdin is read with a limit
//     (cni.MaxNetConfBytes; larger gives code 7) and a deadline
//     (StdinTimeout; a runtime that never closes stdin gives code 5), the
//     netconf is validated (cni.LoadNetConf: 6, 7, or 1 for a cniVersion
//     outside cni.SupportedVersions), CNI_ARGS must be KEY=VALUE pairs
//     (code 4), and for ADD CNI_NETNS must not be the plugin's own network
//     namespace (code 8).
//   - Errors are printed as CNI error JSON on stdout with exit status 1
//     (SPEC.md "Section 5: Result Types", "Error"). The daemon's error codes
//     are kept; a daemon that cannot be reached gives 11 (try again later),
//     or 50 (plugin not available) for STATUS, naming the socket.
//
// Start-up: the runtime executes the plugin once per operation, so its
// process cost is on every pod's ADD and DEL. main runs the Go scheduler
// with one P (runtime.GOMAXPROCS(1)) unless the GOMAXPROCS environment
// variable is set: the plugin does one request and waits, so a second P buys
// nothing, while (most likely) its goroutine hand-offs (stdin reader, and
// then net/http's transport) wake threads on the other cores that, on a busy
// node, wait for a CPU before the process can exit. Measured on a loaded
// 2-core node, one P took 4-5 ms off the ADD p50 through libcni
// (bench/RESULTS.md, "Full CNI path: where the hop goes"); in CPU per exec the
// call pays for itself (bench/RESULTS.md, "Plugin exec CPU").
//
// The plugin links no net/http: cni.Client speaks the little HTTP/1.1 the
// daemon needs itself. net/http's client, and the TLS, crypto, HTTP/2 and
// compression packages it brings, cost every exec 12-13% more CPU (package
// inits, twice the binary, page faults; bench/RESULTS.md, "Plugin exec CPU").
// TestPluginLinksNoHeavyPackages keeps them out.
//
// The plugin delegates to no other plugin (SPEC.md "Section 4: Plugin
// Delegation"): IPAM is done inside the daemon, so there is no "ipam" key to
// forward GC or STATUS to.
//
// The plugin runs on one P (main sets GOMAXPROCS 1) and for milliseconds: the runtime's
// reading of cgroup CPU limits at start (Go 1.25 containermaxprocs, a walk of
// /proc/self/mountinfo and the cgroup files) and its periodic GOMAXPROCS updates are
// work that decides nothing here.
//
//go:debug containermaxprocs=0
//go:debug updatemaxprocs=0
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"runtime"
	"time"

	"github.com/containernetworking/cni/pkg/ns"
	"github.com/containernetworking/cni/pkg/skel"
	"github.com/containernetworking/cni/pkg/types"
	"github.com/containernetworking/cni/pkg/utils"
	"github.com/containernetworking/cni/pkg/version"

	"github.com/ofsdn/ofsdn/cni"
)

// supportedVersions are the CNI spec versions the plugin accepts in a netconf
// and reports for VERSION: all those the CNI library can convert a 1.1.0
// result to.
var supportedVersions = version.PluginSupports(cni.SupportedVersions...)

// StdinTimeout bounds how long the plugin waits for the runtime to write the
// netconf and close stdin: 10 seconds. Runtimes write it at once; a stdin
// that stays open would otherwise hang the plugin (and the runtime's pod
// sandbox operation) forever.
const StdinTimeout = 10 * time.Second

const about = "CNI plugin ofsdn: forwards CNI operations to the ofsdn-node daemon (Open vSwitch pod network)"

// logger writes warnings to stderr, which runtimes keep in their logs (SPEC.md
// "Section 5: Result Types", "Error": "stderr can be used for unstructured
// output such as logs"). stdout is reserved for the CNI result.
var logger = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))

func main() {
	if os.Getenv("GOMAXPROCS") == "" {
		runtime.GOMAXPROCS(1)
	}
	if cmd := os.Getenv("CNI_COMMAND"); cmd != "" && cmd != "VERSION" {
		e := checkEnv(cmd, os.Getenv)
		var data []byte
		if e == nil {
			data, e = bufferStdin(StdinTimeout)
		}
		if e == nil {
			// The netconf checks of forward, made before skel's so that
			// the messages name the key and the supported versions.
			if _, err := cni.LoadNetConf(data); err != nil {
				e = err.(*types.Error)
			}
		}
		if e != nil {
			if err := e.Print(); err != nil {
				logger.Error("cannot write the CNI error to stdout", "err", err)
			}
			os.Exit(1)
		}
	}
	skel.PluginMainFuncs(skel.CNIFuncs{
		Add:    cmdAdd,
		Del:    cmdDel,
		Check:  cmdCheck,
		Status: cmdStatus,
		GC:     cmdGC,
	}, supportedVersions, about)
}

// checkEnv validates CNI_CONTAINERID and CNI_IFNAME when set for ADD, DEL
// and CHECK, before skel does, so that the error names the variable as SPEC.md
// "Section 5: Result Types", "Error" requires for code 4 (skel's own messages,
// e.g. "interface name is too long", do not). Missing variables are left to
// skel, whose message lists them.
func checkEnv(cmd string, getenv func(string) string) *types.Error {
	if cmd != cni.CmdAdd && cmd != cni.CmdDel && cmd != cni.CmdCheck {
		return nil
	}
	if id := getenv("CNI_CONTAINERID"); id != "" {
		if e := utils.ValidateContainerID(id); e != nil {
			return types.NewError(types.ErrInvalidEnvironmentVariables,
				fmt.Sprintf("CNI_CONTAINERID %q is invalid: %s (want letters, digits, '_', '.' and '-', starting with a letter or digit)", id, e.Msg), "")
		}
	}
	if ifName := getenv("CNI_IFNAME"); ifName != "" {
		if e := utils.ValidateInterfaceName(ifName); e != nil {
			return types.NewError(types.ErrInvalidEnvironmentVariables,
				fmt.Sprintf("CNI_IFNAME %q is invalid: %s (want 1..15 bytes without '/', ':' or white space)", ifName, e.Msg), e.Details)
		}
	}
	return nil
}

// bufferStdin reads the whole netconf from stdin, at most cni.MaxNetConfBytes
// and within timeout, and replaces os.Stdin by a pipe that replays it for
// skel. Errors: code 7 (ErrInvalidNetworkConfig) when stdin holds more than
// cni.MaxNetConfBytes; code 5 (ErrIOFailure) when it cannot be read or is not
// closed within timeout.
func bufferStdin(timeout time.Duration) ([]byte, *types.Error) {
	type readResult struct {
		data []byte
		err  error
	}
	done := make(chan readResult, 1)
	go func() {
		data, err := io.ReadAll(io.LimitReader(os.Stdin, cni.MaxNetConfBytes+1))
		done <- readResult{data, err}
	}()
	var r readResult
	select {
	case r = <-done:
	case <-time.After(timeout):
		// The reading goroutine is abandoned: the process exits next.
		return nil, types.NewError(types.ErrIOFailure,
			fmt.Sprintf("the runtime did not write the netconf and close stdin within %s", timeout), "")
	}
	if r.err != nil {
		return nil, types.NewError(types.ErrIOFailure, "cannot read the netconf from stdin", r.err.Error())
	}
	if len(r.data) > cni.MaxNetConfBytes {
		return nil, types.NewError(types.ErrInvalidNetworkConfig,
			fmt.Sprintf("the netconf on stdin exceeds %d bytes: shorten the network configuration", cni.MaxNetConfBytes), "")
	}
	pr, pw, err := os.Pipe()
	if err != nil {
		return nil, types.NewError(types.ErrIOFailure, "cannot create a pipe to replay stdin", err.Error())
	}
	go func() {
		_, _ = pw.Write(r.data)
		pw.Close()
	}()
	os.Stdin = pr
	return r.data, nil
}

// forward loads the netconf, sends the operation to the daemon and returns
// the netconf and the daemon's result bytes (ADD only). Errors are
// *types.Error, which skel prints with their code.
func forward(command string, args *skel.CmdArgs) (*cni.NetConf, []byte, error) {
	conf, err := cni.LoadNetConf(args.StdinData)
	if err != nil {
		return nil, nil, err
	}
	if _, err := cni.ParseArgs(args.Args); err != nil {
		return nil, nil, err
	}
	req := &cni.Request{
		Command:     command,
		ContainerID: args.ContainerID,
		Netns:       args.Netns,
		IfName:      args.IfName,
		Args:        args.Args,
		Path:        args.Path,
		Config:      args.StdinData,
	}
	res, err := cni.NewClient(conf.Socket, cni.DefaultTimeout).Do(context.Background(), req)
	if err != nil {
		// The runtime polls STATUS, through the daemon's start-up too (not ready, or its
		// socket not there yet): a failed STATUS goes to stderr at debug level (below the
		// logger's), not as a warning per poll. Its CNI error, the answer to STATUS, is
		// printed as for any command; the daemon logs an outage itself, once.
		lvl := slog.LevelWarn
		if command == cni.CmdStatus {
			lvl = slog.LevelDebug
		}
		logger.Log(context.Background(), lvl, "ofsdn-node did not carry out the CNI operation", "command", command,
			"containerID", args.ContainerID, "ifName", args.IfName, "socket", conf.Socket, "err", err)
		return conf, nil, err
	}
	return conf, res, nil
}

// cmdAdd forwards ADD and prints the daemon's result converted from CNI
// 1.1.0 to the netconf's cniVersion (SPEC.md "Section 5: Result Types"),
// once cni.ResultForVersion has found it valid for that version: a result
// that is not (null, no IPv4 address, an interface index outside
// interfaces, ...) is refused with code 999 naming what is wrong, and the
// pod's ADD fails instead of starting it without a network.
func cmdAdd(args *skel.CmdArgs) error {
	// skel makes this check only after cmdAdd returns, when the daemon would
	// already have wired the plugin's own namespace.
	if own, e := ns.CheckNetNS(args.Netns); e != nil {
		return e
	} else if own {
		return types.NewError(types.ErrInvalidNetNS,
			fmt.Sprintf("CNI_NETNS %s is the plugin's own network namespace, not a pod's", args.Netns), "")
	}
	conf, raw, err := forward(cni.CmdAdd, args)
	if err != nil {
		return err
	}
	converted, err := cni.ResultForVersion(raw, conf.CNIVersion, args.IfName, args.Netns)
	if err != nil {
		logger.Error("ofsdn-node's ADD result refused", "containerID", args.ContainerID, "ifName", args.IfName,
			"socket", conf.Socket, "err", err, "result", string(raw))
		return err
	}
	if err := converted.Print(); err != nil {
		return types.NewError(types.ErrIOFailure, "cannot write the ADD result to stdout", err.Error())
	}
	return nil
}

// cmdDel forwards DEL (SPEC.md "Section 2: Execution Protocol", "DEL"). An
// unreachable daemon is an error (code 11, so the runtime retries):
// succeeding would leak the pod's port, flows and IP.
func cmdDel(args *skel.CmdArgs) error {
	_, _, err := forward(cni.CmdDel, args)
	return err
}

// cmdCheck forwards CHECK with the netconf's prevResult (SPEC.md "Section 2:
// Execution Protocol", "CHECK").
func cmdCheck(args *skel.CmdArgs) error {
	_, _, err := forward(cni.CmdCheck, args)
	return err
}

// cmdGC forwards GC with "cni.dev/valid-attachments" (SPEC.md "Section 2:
// Execution Protocol", "GC").
func cmdGC(args *skel.CmdArgs) error {
	_, _, err := forward(cni.CmdGC, args)
	return err
}

// cmdStatus forwards STATUS (SPEC.md "Section 2: Execution Protocol",
// "STATUS"). A daemon that cannot be reached (or does not answer in time)
// means the plugin cannot serve ADD: code 50 (ErrPluginNotAvailable) naming
// the socket.
func cmdStatus(args *skel.CmdArgs) error {
	conf, _, err := forward(cni.CmdStatus, args)
	var e *types.Error
	if err != nil && errors.As(err, &e) && e.Code == types.ErrTryAgainLater && conf != nil {
		return types.NewError(types.ErrPluginNotAvailable,
			fmt.Sprintf("ofsdn plugin not available: %s", e.Msg), e.Details)
	}
	return err
}
