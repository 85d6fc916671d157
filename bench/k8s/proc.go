package benchk8s

// What the benchmarks read of a process and of the machine (proc(5)), and a bounded
// worker pool for their API writes: shared by bench/k8s, bench/nodescale and the others
// so each reads them the same way.

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
)

// RSSMiB returns process pid's resident set (VmRSS of /proc/PID/status) in MiB, 0 when
// it cannot be read.
func RSSMiB(pid int) float64 {
	b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	for _, l := range strings.Split(string(b), "\n") {
		if strings.HasPrefix(l, "VmRSS:") {
			kb, _ := strconv.ParseFloat(strings.Fields(l)[1], 64)
			return kb / 1024
		}
	}
	return 0
}

// CPUSeconds returns process pid's CPU time so far, user + system (utime + stime of
// /proc/PID/stat, in clock ticks of 1/100 s), in seconds; 0 when it cannot be read.
func CPUSeconds(pid int) float64 {
	b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 || i+2 > len(s) {
		return 0
	}
	f := strings.Fields(s[i+2:])
	if len(f) < 13 {
		return 0
	}
	u, _ := strconv.ParseFloat(f[11], 64)
	st, _ := strconv.ParseFloat(f[12], 64)
	return (u + st) / 100
}

// LoadAvg returns the machine's 1, 5 and 15 minute load averages as /proc/loadavg gives
// them ("1.20 0.80 0.50"), "" when it cannot be read.
func LoadAvg() string {
	b, _ := os.ReadFile("/proc/loadavg")
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return ""
	}
	return strings.Join(f[:3], " ")
}

// Parallel calls f(0) .. f(n-1) on workers goroutines (at least 1) and returns the first
// error any call returned, after every call has returned.
func Parallel(n, workers int, f func(i int) error) error {
	var wg sync.WaitGroup
	var mu sync.Mutex
	var first error
	next := make(chan int)
	for w := 0; w < max(workers, 1); w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range next {
				if err := f(i); err != nil {
					mu.Lock()
					if first == nil {
						first = err
					}
					mu.Unlock()
				}
			}
		}()
	}
	for i := 0; i < n; i++ {
		next <- i
	}
	close(next)
	wg.Wait()
	return first
}

// EnvStr returns environment variable name, or def when it is unset or empty (the
// benchmarks' size and output settings).
func EnvStr(name, def string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return def
}

// EnvInt returns environment variable name as a positive integer, or def when it is
// unset, not an integer or not above 0.
func EnvInt(name string, def int) int {
	if v, err := strconv.Atoi(os.Getenv(name)); err == nil && v > 0 {
		return v
	}
	return def
}
