// Command ofsdn-ovs is the start of the Open vSwitch container of the ofsdn-node DaemonSet
// (deploy/ofsdn.yaml, `ovs: bundled`): it runs Open vSwitch's own daemons from the image,
// ovsdb-server and ovs-vswitchd, in the foreground, and stops them on SIGTERM. It is the
// one program of ofsdn that executes others, and it executes only these and ovsdb-tool
// (ovsPrograms); the daemon, ofsdn-node, still executes nothing.
//
//	ofsdn-ovs [-config /etc/ofsdn/config.yaml] [-db-dir /var/lib/ofsdn/ovs]
//	ofsdn-ovs -probe live|ready [-config ...]
//
// Start: the database DB-DIR/conf.db (a hostPath, so it survives the pod) is created with
// `ovsdb-tool create` and its root Open_vSwitch row inserted with `ovsdb-tool transact`
// when it does not exist, converted with `ovsdb-tool convert` when an image of another
// Open vSwitch version finds it in an older schema; then ovsdb-server serves it on
// OVS-RUN-DIR/db.sock and ovs-vswitchd runs on it, both logging to the container's
// standard error (INFO and above, no syslog, no log file), with OVS_RUNDIR set to the
// config's ovsRunDir: the run directory shared with the ofsdn-node container (db.sock,
// BRIDGE.mgmt, ovs-vswitchd.pid and its control socket). If either daemon exits, the
// other is stopped and ofsdn-ovs exits 1, so the kubelet restarts the container. A
// database that cannot be read ends it with an error naming the fix (delete DB-DIR/conf.db
// on the node and restart the pod). An ovsdb-server that already answers on the run
// directory's db.sock before ofsdn-ovs started one is the host's Open vSwitch: ofsdn-ovs
// exits 1 at once, naming `ovs: host`, instead of starting an ovsdb-server that would fail
// on the host's pid file.
//
// With the userspace datapath and ofsdn-node's underlayBridge (a bridge whose
// external_ids:ofsdn-underlay names the node's NIC, the node's addresses on it), ofsdn-ovs
// keeps the node's IPv4 and IPv6 addresses (not link-local) and routes on the NIC
// whenever its ovs-vswitchd is not forwarding, and on that bridge while it does: onto the
// bridge once ovs-vswitchd runs, back onto the NIC on every exit (SIGTERM, a daemon dead,
// an error) and at start when a crash left them on the bridge (underlay.go).
//
// A restart on a database whose bridge is on the kernel datapath first sets
// other_config:flow-restore-wait=true, as `ovs-ctl restart` does: the new ovs-vswitchd
// keeps the kernel's flows, forwarding with them, until ofsdn-node has replayed its own and
// removed the key (controller.FlowRestoreWaitKey). Not with the userspace datapath: its
// flows die with ovs-vswitchd, and the key would stop the underlay bridge, and with it the
// node's way to the API server, until ofsdn-node is back.
//
// SIGTERM or SIGINT: ovs-vswitchd first (TERM; with the kernel datapath the datapath and
// its flows stay in the kernel and keep forwarding), then ovsdb-server, each given
// stopGrace before KILL; exit 0.
//
// With `ovs: host` in the config (Open vSwitch managed on the host), it starts nothing and
// waits for SIGTERM; its liveness probe then always passes.
//
// Probes (exec probes of the container): -probe live passes when ovsdb-server answers an
// OVSDB echo on db.sock and ovs-vswitchd answers the control command "version"; -probe
// ready passes when, besides, the config's bridge (br-int) is in the database and
// ovs-vswitchd has made it (its datapath_id is set).
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"sigs.k8s.io/yaml"
)

// ovsPrograms are the only programs ofsdn-ovs executes, all from the image's Open vSwitch.
var ovsPrograms = map[string]bool{"ovsdb-tool": true, "ovsdb-server": true, "ovs-vswitchd": true}

// stopGrace bounds how long each daemon has to exit after SIGTERM before it is killed.
const stopGrace = 5 * time.Second

// settings are what ofsdn-ovs takes from ofsdn-node's config file.
type settings struct {
	// OVS is "bundled" (run Open vSwitch here) or "host" (it runs on the host).
	OVS string `json:"ovs"`
	// OVSDB is ovsdb-server's endpoint, "unix:PATH" (the only form served here).
	OVSDB string `json:"ovsdb"`
	// OVSRunDir is the run directory shared with ofsdn-node.
	OVSRunDir string `json:"ovsRunDir"`
	// Bridge is the integration bridge the readiness probe looks for.
	Bridge string `json:"bridge"`
}

func main() {
	os.Exit(run(os.Args[1:]))
}

func run(args []string) int {
	fs := flag.NewFlagSet("ofsdn-ovs", flag.ContinueOnError)
	config := fs.String("config", "/etc/ofsdn/config.yaml", "ofsdn-node's config file (keys ovs, ovsdb, ovsRunDir, bridge are read; a missing file means the defaults)")
	dbDir := fs.String("db-dir", "/var/lib/ofsdn/ovs", "directory of the Open vSwitch database conf.db (keep it on the host)")
	schema := fs.String("schema", "/usr/share/openvswitch/vswitch.ovsschema", "Open vSwitch's schema")
	probe := fs.String("probe", "", "run a probe and exit: live or ready")
	if err := fs.Parse(args); err != nil || fs.NArg() > 0 {
		return 2
	}
	log := slog.New(slog.NewTextHandler(os.Stdout, nil))
	s, err := loadSettings(*config)
	if err != nil {
		log.Error("config", "err", err)
		if *probe == "" {
			// This container will not run Open vSwitch until the config is fixed: the
			// node's addresses belong on its NIC meanwhile (underlay.go).
			underlayHome(log, s, *dbDir, false, "ofsdn-ovs exits on a config error")
		}
		return 2
	}
	if *probe != "" {
		ctx, cancel := context.WithTimeout(context.Background(), 4*time.Second)
		defer cancel()
		if err := runProbe(ctx, *probe, s); err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		return 0
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	if s.OVS == "host" {
		log.Info("ovs: host: Open vSwitch runs on the host; this container runs nothing", "ovsdb", s.OVSDB)
		<-ctx.Done()
		return 0
	}
	if err := runOVS(ctx, log, s, *dbDir, *schema); err != nil {
		log.Error("Open vSwitch stopped", "err", err)
		if !errors.Is(err, errHostOVS) {
			// No ovs-vswitchd of this container runs: the node's addresses belong on its NIC.
			underlayHome(log, s, *dbDir, false, "ofsdn-ovs exits on an error")
		}
		return 1
	}
	return 0
}

// errHostOVS is the error of runOVS when an ovsdb-server it did not start answers on the
// run directory's db.sock.
var errHostOVS = errors.New("the host's Open vSwitch runs on this node")

// underlayHome moves the node's addresses from the underlay bridge back onto its NIC
// (underlay.go), the bridge found from ovsdb-server on db.sock if live and it answers,
// else from underlayRecord or conf.db. Failures are logged.
func underlayHome(log *slog.Logger, s settings, dbDir string, live bool, why string) {
	var u underlay
	var ok bool
	var err error = errors.New("not asked")
	if live {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		u, ok, err = findUnderlay(ctx, filepath.Join(s.OVSRunDir, "db.sock"))
		cancel()
	}
	if err != nil {
		u, ok = knownUnderlay(s, dbDir)
	}
	if !ok {
		return
	}
	if err := underlayToNIC(log, u, why); err != nil {
		log.Error("node addresses not moved back onto the NIC", "bridge", u.bridge, "nic", u.nic, "err", err)
	}
}

// loadSettings reads the keys ofsdn-ovs needs from ofsdn-node's config file, with
// ofsdn-node's defaults. Other keys are ofsdn-node's business and ignored here.
func loadSettings(file string) (settings, error) {
	s := settings{OVS: "host", OVSDB: "unix:/var/run/openvswitch/db.sock", OVSRunDir: "/var/run/openvswitch", Bridge: "br-int"}
	b, err := os.ReadFile(file)
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return s, err
	}
	if err == nil {
		if err := yaml.Unmarshal(b, &s); err != nil {
			return s, fmt.Errorf("config file %s: %w", file, err)
		}
	}
	if s.OVS != "bundled" && s.OVS != "host" {
		return s, fmt.Errorf("config file %s: ovs %q: want bundled (Open vSwitch runs in this container) or host", file, s.OVS)
	}
	if s.OVS == "bundled" && s.OVSDB != "unix:"+filepath.Join(s.OVSRunDir, "db.sock") {
		return s, fmt.Errorf("config file %s: ovsdb %q with ovs: bundled: the bundled ovsdb-server serves unix:%s; set ovsdb to that", file, s.OVSDB, filepath.Join(s.OVSRunDir, "db.sock"))
	}
	return s, nil
}

// ovsCmd returns the command for one of ovsPrograms with OVS's directories set.
func ovsCmd(s settings, dbDir, name string, args ...string) *exec.Cmd {
	if !ovsPrograms[name] {
		panic("ofsdn-ovs executes only Open vSwitch's programs, not " + name)
	}
	cmd := exec.Command(name, args...)
	cmd.Env = append(os.Environ(), "OVS_RUNDIR="+s.OVSRunDir, "OVS_DBDIR="+dbDir, "OVS_LOGDIR="+s.OVSRunDir)
	return cmd
}

// runTool runs ovsdb-tool and returns its trimmed output.
func runTool(s settings, dbDir string, args ...string) (string, error) {
	out, err := ovsCmd(s, dbDir, "ovsdb-tool", args...).CombinedOutput()
	if err != nil {
		return "", fmt.Errorf("ovsdb-tool %s: %w: %s", strings.Join(args, " "), err, strings.TrimSpace(string(out)))
	}
	return strings.TrimSpace(string(out)), nil
}

// prepareDB creates the database, or converts it to the image's schema.
func prepareDB(log *slog.Logger, s settings, dbDir, schema string) error {
	db := filepath.Join(dbDir, "conf.db")
	if err := os.MkdirAll(dbDir, 0o750); err != nil {
		return err
	}
	unreadable := func(err error) error {
		return fmt.Errorf("database %s cannot be read (%w): delete it on the node (%s, the hostPath of the DaemonSet's ovs-db volume) and restart the pod; ofsdn-ovs creates it anew and ofsdn-node makes its bridges and ports again", db, err, db)
	}
	if _, err := os.Stat(db); errors.Is(err, os.ErrNotExist) {
		// Made aside and renamed, so a crash never leaves a database without its root row.
		tmp := db + ".new"
		_ = os.Remove(tmp)
		if _, err := runTool(s, dbDir, "create", tmp, schema); err != nil {
			return err
		}
		if _, err := runTool(s, dbDir, "transact", tmp, `["Open_vSwitch",{"op":"insert","table":"Open_vSwitch","row":{}}]`); err != nil {
			return err
		}
		if err := os.Rename(tmp, db); err != nil {
			return err
		}
		log.Info("database created", "db", db, "schema", schema)
		return nil
	} else if err != nil {
		return err
	}
	need, err := runTool(s, dbDir, "needs-conversion", db, schema)
	if err != nil {
		return unreadable(err)
	}
	if need == "yes" {
		if _, err := runTool(s, dbDir, "convert", db, schema); err != nil {
			return unreadable(err)
		}
		log.Info("database converted to the image's schema", "db", db, "schema", schema)
	}
	return nil
}

// runOVS runs ovsdb-server and ovs-vswitchd until ctx ends (nil) or one of them exits.
func runOVS(ctx context.Context, log *slog.Logger, s settings, dbDir, schema string) error {
	if err := os.MkdirAll(s.OVSRunDir, 0o755); err != nil {
		return err
	}
	sock := filepath.Join(s.OVSRunDir, "db.sock")
	// The run directory is the host's /var/run/openvswitch: an ovsdb-server answering there
	// now is not ours (ours died with the container) but the host's Open vSwitch.
	ectx, ecancel := context.WithTimeout(ctx, time.Second)
	err := ovsdbEcho(ectx, sock)
	ecancel()
	if err == nil {
		return fmt.Errorf("%w: an ovsdb-server answers on %s before this container started one, so none is started here: set ovs: host in the ConfigMap ofsdn-config (Open vSwitch managed on the host), or stop the host's Open vSwitch to use the bundled one", errHostOVS, sock)
	}
	// No ovs-vswitchd forwards yet: the node's addresses on its NIC, if a crash (ovs-vswitchd
	// or this container killed) left them on the underlay bridge.
	underlayHome(log, s, dbDir, false, "ovs-vswitchd not running yet (a crash left them on the bridge)")
	if err := prepareDB(log, s, dbDir, schema); err != nil {
		return err
	}
	logArgs := []string{"-vconsole:info", "-vsyslog:off", "-vfile:off"}
	dbsrv := ovsCmd(s, dbDir, "ovsdb-server", append([]string{filepath.Join(dbDir, "conf.db"),
		"--remote=punix:" + sock, "--remote=db:Open_vSwitch,Open_vSwitch,manager_options",
		"--pidfile=" + filepath.Join(s.OVSRunDir, "ovsdb-server.pid"),
		"--unixctl=" + filepath.Join(s.OVSRunDir, "ovsdb-server.ctl")}, logArgs...)...)
	vswitchd := ovsCmd(s, dbDir, "ovs-vswitchd", append([]string{"unix:" + sock,
		"--pidfile=" + filepath.Join(s.OVSRunDir, "ovs-vswitchd.pid")}, logArgs...)...)
	type exit struct {
		name string
		err  error
	}
	exited := make(chan exit, 2)
	start := func(name string, cmd *exec.Cmd) error {
		cmd.Stdout, cmd.Stderr = os.Stdout, os.Stderr
		if err := cmd.Start(); err != nil {
			return fmt.Errorf("start %s: %w", name, err)
		}
		log.Info("started", "program", name, "pid", cmd.Process.Pid)
		go func() { exited <- exit{name, cmd.Wait()} }()
		return nil
	}
	running := map[string]*exec.Cmd{}
	stopAll := func() {
		for _, name := range []string{"ovs-vswitchd", "ovsdb-server"} {
			cmd := running[name]
			if cmd == nil {
				continue
			}
			_ = cmd.Process.Signal(syscall.SIGTERM)
			select {
			case e := <-exited:
				log.Info("stopped", "program", e.name, "exit", fmt.Sprint(e.err))
				delete(running, e.name)
			case <-time.After(stopGrace):
				log.Warn("did not exit after SIGTERM: killed", "program", name, "grace", stopGrace)
				_ = cmd.Process.Kill()
				e := <-exited
				delete(running, e.name)
			}
		}
	}
	if err := start("ovsdb-server", dbsrv); err != nil {
		return err
	}
	running["ovsdb-server"] = dbsrv
	// ovs-vswitchd retries its database connection, but starting it once the socket
	// answers keeps its log free of connection errors.
	wctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	err = waitFor(wctx, func() error {
		select {
		case e := <-exited:
			delete(running, e.name)
			cancel()
			return fmt.Errorf("ovsdb-server exited (%v) before it answered: if its log above says the database cannot be read, delete %s on the node (the hostPath of the DaemonSet's ovs-db volume) and restart the pod", e.err, filepath.Join(dbDir, "conf.db"))
		default:
		}
		return ovsdbEcho(wctx, sock)
	})
	cancel()
	if err != nil {
		stopAll()
		if ctx.Err() != nil {
			return nil
		}
		return fmt.Errorf("ovsdb-server on %s: %w", sock, err)
	}
	if err := holdKernelFlows(ctx, log, sock, s.Bridge); err != nil {
		log.Warn("flow-restore-wait not set", "err", err)
	}
	if err := start("ovs-vswitchd", vswitchd); err != nil {
		stopAll()
		return err
	}
	running["ovs-vswitchd"] = vswitchd
	// The node IP back on the underlay bridge (userspace datapath, underlayBridge), if an
	// earlier run moved it off before stopping.
	qctx, qcancel := context.WithTimeout(ctx, 5*time.Second)
	u, hasUnderlay, err := findUnderlay(qctx, sock)
	qcancel()
	if err != nil {
		log.Warn("underlay bridge not looked up", "err", err)
	} else if err := saveUnderlay(dbDir, u, hasUnderlay); err != nil {
		log.Warn("underlay bridge not recorded", "file", filepath.Join(dbDir, underlayRecord), "err", err)
	}
	if hasUnderlay {
		uctx, ucancel := context.WithTimeout(ctx, 30*time.Second)
		if err := underlayToBridge(uctx, log, u); err != nil {
			log.Error("node addresses not moved onto the underlay bridge", "bridge", u.bridge, "nic", u.nic, "err", err)
		}
		ucancel()
	}
	// The underlay bridge recorded while it runs (ofsdn-node makes it after this start),
	// for the exits where the database cannot tell (underlay.go).
	tick := time.NewTicker(2 * time.Second)
	defer tick.Stop()
	for {
		select {
		case <-tick.C:
			qctx, qcancel := context.WithTimeout(ctx, time.Second)
			u, ok, err := findUnderlay(qctx, sock)
			qcancel()
			if err == nil {
				if err := saveUnderlay(dbDir, u, ok); err != nil {
					log.Warn("underlay bridge not recorded", "file", filepath.Join(dbDir, underlayRecord), "err", err)
				}
			}
		case <-ctx.Done():
			log.Info("stopping Open vSwitch", "signal", "SIGTERM")
			// The bridge stops forwarding with ovs-vswitchd: the node keeps its addresses
			// on the NIC meanwhile (ofsdn-node moved them onto the bridge: underlayBridge).
			underlayHome(log, s, dbDir, true, "ovs-vswitchd stops (SIGTERM)")
			stopAll()
			return nil
		case e := <-exited:
			delete(running, e.name)
			// ovs-vswitchd dead, or about to be stopped: the bridge forwards no more.
			underlayHome(log, s, dbDir, true, e.name+" exited")
			stopAll()
			return fmt.Errorf("%s exited (%v): stopped the other daemon, so the container restarts", e.name, e.err)
		}
	}
}

// waitFor calls f every 100 ms until it succeeds or ctx ends (then its last error).
func waitFor(ctx context.Context, f func() error) error {
	for {
		err := f()
		if err == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return err
		case <-time.After(100 * time.Millisecond):
		}
	}
}
