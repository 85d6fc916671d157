package k8s

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/ofsdn/ofsdn/test/sandbox"
)

// Node is one kubelet node: a network namespace with the node IP on the underlay (on a
// private Open vSwitch's br-phy, or with Bundled on uplink0 until ofsdn moves it onto the
// DaemonSet's OVS), and node-init.sh as PID 1 of the node's PID and mount namespaces
// running containerd, the kubelet and kube-proxy.
type Node struct {
	// Name is the Node object's name.
	Name string
	// IP is the node's underlay address (its InternalIP), on br-phy.
	IP string
	// IPv6 is a dual-stack node's IPv6 underlay address (its second InternalIP, on
	// uplink0, then on br-phy with the IPv4 one); "" on a single-stack node.
	IPv6 string
	// OVS is the node's Open vSwitch; OVS.Netns is the node's network namespace.
	OVS *sandbox.OVS
	// Dir holds the node's configs, logs and state: cni-conf and cni-bin are its
	// /etc/cni/net.d and /opt/cni/bin, ofsdn-data its /var/lib/ofsdn, logs/ its logs.
	Dir string
	// CgroupRoot is the kubelet's cgroupRoot ("/ofsdn-k8s-PID-N/NAME").
	CgroupRoot string
	// Bundled is true on a node of ClusterConfig.OVS OVSBundled: OVS is the DaemonSet's,
	// OVS.Dir its run directory through node-init's root (/proc/PID/root/run/openvswitch),
	// OVS.Netns the node's namespace; nothing of test/sandbox runs.
	Bundled bool

	unshare *exec.Cmd
	done    chan struct{}
}

// CNIConfDir is the host path of the node's /etc/cni/net.d.
func (n *Node) CNIConfDir() string { return filepath.Join(n.Dir, "cni-conf") }

// CNIBinDir is the host path of the node's /opt/cni/bin.
func (n *Node) CNIBinDir() string { return filepath.Join(n.Dir, "cni-bin") }

// DataDir is the host path of the node's /var/lib/ofsdn (ofsdn-node's dataDir).
func (n *Node) DataDir() string { return filepath.Join(n.Dir, "ofsdn-data") }

// NetnsPath is the node's network namespace.
func (n *Node) NetnsPath() string { return n.OVS.NetnsPath() }

// Leases returns the node's IPAM leases (ofsdn's lease file, IP → container ID); none if
// the daemon has not written the file yet.
func (n *Node) Leases(t testing.TB) map[string]string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(n.DataDir(), "ipam", "leases.json"))
	if os.IsNotExist(err) {
		return map[string]string{}
	}
	if err != nil {
		t.Fatal(err)
	}
	var st struct {
		Leases map[string]struct {
			ContainerID string `json:"containerID"`
		} `json:"leases"`
	}
	if err := json.Unmarshal(b, &st); err != nil {
		t.Fatalf("%s: decode IP leases: %v\n%s", n.Name, err, b)
	}
	out := map[string]string{}
	for ip, l := range st.Leases {
		out[ip] = l.ContainerID
	}
	return out
}

// LeaseIPv6 returns a dual-stack node's IPAM leases as IPv4 → the lease's further
// addresses (its IPv6 one: ofsdn's lease file keeps one lease per pod, keyed by the IPv4
// address, moreIPs holding the IPv6); none if the daemon has not written the file yet.
func (n *Node) LeaseIPv6(t testing.TB) map[string][]string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(n.DataDir(), "ipam", "leases.json"))
	if os.IsNotExist(err) {
		return map[string][]string{}
	}
	if err != nil {
		t.Fatal(err)
	}
	var st struct {
		Leases map[string]struct {
			MoreIPs []string `json:"moreIPs"`
		} `json:"leases"`
	}
	if err := json.Unmarshal(b, &st); err != nil {
		t.Fatalf("%s: decode IP leases: %v\n%s", n.Name, err, b)
	}
	out := map[string][]string{}
	for ip, l := range st.Leases {
		out[ip] = l.MoreIPs
	}
	return out
}

// InitPID is the host PID of node-init.sh (PID 1 of the node's PID namespace), 0 if gone.
func (n *Node) InitPID() int {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/task/%d/children", n.unshare.Process.Pid, n.unshare.Process.Pid))
	if err != nil {
		return 0
	}
	pid, _ := strconv.Atoi(strings.Fields(string(b) + " 0")[0])
	return pid
}

// RestartKubelet stops the node's kubelet and starts it again (containerd and the pods go
// on running), as a kubelet upgrade or crash does.
func (n *Node) RestartKubelet(t testing.TB) {
	t.Helper()
	marker := filepath.Join(n.Dir, "kubelet-restarted")
	_ = os.Remove(marker)
	pid := n.InitPID()
	if pid == 0 {
		t.Fatalf("%s: node-init is not running", n.Name)
	}
	if err := syscall.Kill(pid, syscall.SIGUSR1); err != nil {
		t.Fatal(err)
	}
	WaitFor(t, n.Name+": kubelet restarted", 60*time.Second, func() error {
		_, err := os.Stat(marker)
		return err
	})
}

// LogTail returns the last lines of one of the node's logs (kubelet, containerd,
// kube-proxy, init, import).
func (n *Node) LogTail(name string, lines int) string {
	return tail(filepath.Join(n.Dir, "logs", name+".log"), lines)
}

// OVSLogTail returns the last lines of the node's ovs-vswitchd log (on a Bundled node,
// the ovs container's log: ovsdb-server's and ovs-vswitchd's lines).
func (n *Node) OVSLogTail(lines int) string {
	if n.Bundled {
		logs, _ := filepath.Glob(filepath.Join(n.Dir, "pod-logs", "kube-system_ofsdn-node-*", "ovs", "*.log"))
		sort.Strings(logs)
		if len(logs) == 0 {
			return "(no ovs container log under " + filepath.Join(n.Dir, "pod-logs") + ")"
		}
		return tail(logs[len(logs)-1], lines)
	}
	return tail(filepath.Join(n.OVS.Dir, "ovs-vswitchd.log"), lines)
}

// Ofctl runs `ovs-ofctl -O OpenFlow13 COMMAND BR-INT ARGS...` against the node's br-int
// and returns the output.
func (n *Node) Ofctl(t testing.TB, command string, args ...string) string {
	t.Helper()
	return n.OVS.Ofctl(t, append([]string{command, n.OVS.MgmtSocket("br-int")}, args...)...)
}

// stop ends the node: SIGTERM to node-init (kube-proxy, kubelet, containerd stop), then
// SIGKILL of node-init after a grace period, which ends every process in the node's PID
// namespace.
func (n *Node) stop() {
	if pid := n.InitPID(); pid != 0 {
		_ = syscall.Kill(pid, syscall.SIGTERM)
	}
	select {
	case <-n.done:
		return
	case <-time.After(20 * time.Second):
	}
	if pid := n.InitPID(); pid != 0 {
		_ = syscall.Kill(pid, syscall.SIGKILL)
	}
	select {
	case <-n.done:
	case <-time.After(10 * time.Second):
		_ = n.unshare.Process.Kill()
		<-n.done
	}
}

// cgroupHierarchies returns the mounted cgroup v1 hierarchies (/sys/fs/cgroup/NAME) and,
// with v2, the cgroup2 one of a hybrid host (/sys/fs/cgroup/unified), where the kubelet
// makes its pod cgroups too.
func cgroupHierarchies(v2 bool) ([]string, error) {
	b, err := os.ReadFile("/proc/self/mounts")
	if err != nil {
		return nil, err
	}
	var out []string
	v1 := 0
	for _, l := range strings.Split(string(b), "\n") {
		f := strings.Fields(l)
		if len(f) >= 3 && (f[2] == "cgroup" || v2 && f[2] == "cgroup2") {
			out = append(out, f[1])
			if f[2] == "cgroup" {
				v1++
			}
		}
	}
	if v1 == 0 {
		return nil, fmt.Errorf("no cgroup v1 hierarchy is mounted: the test cluster needs cgroup v1 or hybrid")
	}
	return out, nil
}

// makeCgroup creates rel (e.g. /ofsdn-k8s-1-1/n1) in every v1 hierarchy; cpuset needs
// cpus and mems copied down each level.
func makeCgroup(rel string) error {
	hs, err := cgroupHierarchies(false)
	if err != nil {
		return err
	}
	for _, h := range hs {
		if err := os.MkdirAll(filepath.Join(h, rel), 0o755); err != nil {
			return err
		}
		if filepath.Base(h) != "cpuset" {
			continue
		}
		parts := strings.Split(strings.Trim(rel, "/"), "/")
		for i := range parts {
			dir := filepath.Join(append([]string{h}, parts[:i+1]...)...)
			parent := filepath.Dir(dir)
			for _, f := range []string{"cpuset.cpus", "cpuset.mems"} {
				b, err := os.ReadFile(filepath.Join(parent, f))
				if err != nil {
					return err
				}
				if err := os.WriteFile(filepath.Join(dir, f), b, 0o644); err != nil {
					return fmt.Errorf("%s: %w", filepath.Join(dir, f), err)
				}
			}
		}
	}
	return nil
}

// removeCgroup removes rel and everything under it from every hierarchy (v1 and the
// hybrid cgroup2 one), deepest first, retrying while the kernel still counts exiting tasks
// in them.
func removeCgroup(rel string) error {
	hs, err := cgroupHierarchies(true)
	if err != nil {
		return err
	}
	return poll(30*time.Second, 200*time.Millisecond, func() error {
		var left []string
		for _, h := range hs {
			root := filepath.Join(h, rel)
			var dirs []string
			_ = filepath.WalkDir(root, func(p string, d os.DirEntry, err error) error {
				if err == nil && d.IsDir() {
					dirs = append(dirs, p)
				}
				return nil
			})
			for i := len(dirs) - 1; i >= 0; i-- {
				if err := syscall.Rmdir(dirs[i]); err != nil && !os.IsNotExist(err) {
					left = append(left, fmt.Sprintf("%s: %v", dirs[i], err))
				}
			}
		}
		if len(left) > 0 {
			return fmt.Errorf("cgroups left: %s", strings.Join(left, "; "))
		}
		return nil
	})
}

// ProcessPID returns the host PID of the process in the node's network namespace whose
// command line starts with cmd (e.g. "/usr/local/bin/ofsdn-node", a container's process),
// failing the test unless there is exactly one.
func (n *Node) ProcessPID(t testing.TB, cmd string) int {
	t.Helper()
	pids := n.processes(cmd)
	if len(pids) != 1 {
		t.Fatalf("%s: %d processes %s in the node's network namespace (%v), want 1", n.Name, len(pids), cmd, pids)
	}
	return pids[0]
}

// processes returns the host PIDs of the processes in the node's network namespace whose
// command line's first word is cmd (or, for a name without a slash, ends in /cmd); exec
// probes (a "-probe" argument) are left out.
func (n *Node) processes(cmd string) []int {
	var st syscall.Stat_t
	if err := syscall.Stat(n.NetnsPath(), &st); err != nil {
		return nil
	}
	want := fmt.Sprintf("net:[%d]", st.Ino)
	ents, _ := os.ReadDir("/proc")
	var out []int
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if l, err := os.Readlink(fmt.Sprintf("/proc/%d/ns/net", pid)); err != nil || l != want {
			continue
		}
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
		if err != nil {
			continue
		}
		arg0, _, _ := strings.Cut(string(b), "\x00")
		if strings.Contains(string(b), "\x00-probe\x00") {
			continue // an exec probe (ofsdn-ovs -probe), not the container's process
		}
		if arg0 == cmd || !strings.Contains(cmd, "/") && strings.HasSuffix(arg0, "/"+cmd) {
			out = append(out, pid)
		}
	}
	return out
}

// OVSProcesses returns the host PIDs of ovsdb-server and ovs-vswitchd processes in the
// node's network namespace.
func (n *Node) OVSProcesses() []int {
	return append(n.processes("ovsdb-server"), n.processes("ovs-vswitchd")...)
}
