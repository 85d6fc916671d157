package bench

import (
	"os"
	"os/exec"
	"runtime"
	"strings"

	"golang.org/x/sys/unix"
)

// Machine describes where a run happened.
type Machine struct {
	CPUModel     string `json:"cpu_model"`
	Cores        int    `json:"cores"`
	Kernel       string `json:"kernel"`
	OVSVersion   string `json:"ovs_version"`
	DatapathType string `json:"datapath_type"`
	GoVersion    string `json:"go_version"`
	MemTotalMB   int64  `json:"mem_total_mb"`
	LoadAvg      string `json:"load_avg_at_start"`
	Hostname     string `json:"hostname"`
}

// DescribeMachine reads the CPU model, core count, kernel, OVS version and load.
func DescribeMachine() Machine {
	m := Machine{Cores: runtime.NumCPU(), DatapathType: "netdev (userspace; the kernel has no openvswitch module)",
		GoVersion: runtime.Version()}
	if b, err := os.ReadFile("/proc/cpuinfo"); err == nil {
		for _, l := range strings.Split(string(b), "\n") {
			if strings.HasPrefix(l, "model name") {
				if i := strings.IndexByte(l, ':'); i >= 0 {
					m.CPUModel = strings.TrimSpace(l[i+1:])
					break
				}
			}
		}
	}
	var u unix.Utsname
	if unix.Uname(&u) == nil {
		m.Kernel = unix.ByteSliceToString(u.Release[:])
	}
	if out, err := exec.Command("ovs-vswitchd", "--version").Output(); err == nil {
		m.OVSVersion = strings.SplitN(strings.TrimSpace(string(out)), "\n", 2)[0]
	}
	if b, err := os.ReadFile("/proc/loadavg"); err == nil {
		m.LoadAvg = strings.Join(strings.Fields(string(b))[:3], " ")
	}
	var si unix.Sysinfo_t
	if unix.Sysinfo(&si) == nil {
		m.MemTotalMB = int64(si.Totalram) * int64(si.Unit) >> 20
	}
	m.Hostname, _ = os.Hostname()
	return m
}
