package bench

import (
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"sync"
	"time"

	"golang.org/x/sys/unix"
)

// NewNetns creates the named network namespace (under /var/run/netns, as `ip netns add`
// does, the way a container runtime pre-creates a pod's namespace) and returns its path.
func NewNetns(name string) (string, error) {
	if out, err := exec.Command("ip", "netns", "add", name).CombinedOutput(); err != nil {
		return "", fmt.Errorf("ip netns add %s: %v: %s", name, err, out)
	}
	return "/var/run/netns/" + name, nil
}

// DelNetns deletes the named network namespace and every interface left in it.
func DelNetns(name string) { _ = exec.Command("ip", "netns", "del", name).Run() }

// lockInto locks the calling goroutine to its OS thread and moves that thread into the
// network namespace at path. The goroutine must never unlock: when it exits, the Go
// runtime terminates the thread instead of reusing it in the wrong namespace.
func lockInto(path string) error {
	runtime.LockOSThread()
	fd, err := unix.Open(path, unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("open netns %s: %w", path, err)
	}
	defer unix.Close(fd)
	if err := unix.Setns(fd, unix.CLONE_NEWNET); err != nil {
		return fmt.Errorf("setns %s: %w", path, err)
	}
	return nil
}

// RunIn runs fn on a fresh OS thread inside the network namespace at path and returns its
// error. The thread is discarded afterwards.
func RunIn(path string, fn func() error) error {
	errc := make(chan error, 1)
	go func() {
		if err := lockInto(path); err != nil {
			errc <- err
			return
		}
		errc <- fn()
	}()
	return <-errc
}

// Sample is the outcome of one timed operation.
type Sample struct {
	// D is the operation's latency.
	D time.Duration
	// Err is the operation's error, "" on success.
	Err string
}

// runBatch runs op(i) for i in 0..n-1 on conc goroutines, each on an OS thread locked into
// the network namespace at nsPath, and times each call. wall runs from the moment every
// worker is ready until the last call returns (thread set-up is not counted).
func runBatch(nsPath string, n, conc int, op func(i int) error) (samples []Sample, wall time.Duration, err error) {
	if conc < 1 {
		conc = 1
	}
	if conc > n {
		conc = n
	}
	samples = make([]Sample, n)
	jobs := make(chan int, n)
	for i := 0; i < n; i++ {
		jobs <- i
	}
	close(jobs)
	var ready, done sync.WaitGroup
	start := make(chan struct{})
	setupErr := make(chan error, conc)
	ready.Add(conc)
	done.Add(conc)
	for w := 0; w < conc; w++ {
		go func() {
			defer done.Done()
			if err := lockInto(nsPath); err != nil {
				setupErr <- err
				ready.Done()
				return
			}
			ready.Done()
			<-start
			for i := range jobs {
				t0 := time.Now()
				err := op(i)
				samples[i].D = time.Since(t0)
				if err != nil {
					samples[i].Err = err.Error()
				}
			}
		}()
	}
	ready.Wait()
	select {
	case err := <-setupErr:
		close(start)
		done.Wait()
		return nil, 0, err
	default:
	}
	t0 := time.Now()
	close(start)
	done.Wait()
	return samples, time.Since(t0), nil
}

// netnsPool is a set of empty pod namespaces reused across the run: a pod's namespace is
// made by the runtime before CNI ADD, so making it is not part of what is measured.
type netnsPool struct {
	names []string
	paths []string
}

func newNetnsPool(prefix string, n int) (*netnsPool, error) {
	p := &netnsPool{}
	for i := 0; i < n; i++ {
		name := fmt.Sprintf("%s-%d", prefix, i)
		path, err := NewNetns(name)
		if err != nil {
			p.close()
			return nil, err
		}
		p.names = append(p.names, name)
		p.paths = append(p.paths, path)
	}
	return p, nil
}

func (p *netnsPool) close() {
	for _, n := range p.names {
		DelNetns(n)
	}
	p.names, p.paths = nil, nil
}

// exists reports whether path exists.
func exists(path string) bool {
	_, err := os.Stat(path)
	return err == nil
}
