package e2e

// The upgrade of a running node (issue 21): pods wired by the previous release's daemon and
// plugin, the daemon replaced by this build's, traffic watched throughout.

import (
	"context"
	"encoding/binary"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/containernetworking/cni/libcni"

	"github.com/ofsdn/ofsdn/flows"
	"github.com/ofsdn/ofsdn/test/harness"
)

// previousRelease is the last commit of the previous release: cookie layout of
// PipelineVersion 3 (version 8 | generation 16 | owner kind 4 | stage 4 | owner id 32), the
// flow store inside the controller, one IPv4 address per pod.
const previousRelease = "ce8289d"

// buildRelease builds cmd/ofsdn-node and cmd/ofsdn (static, as make build does) of commit
// rev of this repository into a temporary directory (removed when the test ends) and
// returns it. The commit is exported with git archive, so the repository must be a clone
// that holds it (a shallow clone does not): the test fails saying so otherwise.
func buildRelease(t *testing.T, rev string) string {
	t.Helper()
	top, err := exec.Command("git", "rev-parse", "--show-toplevel").Output()
	if err != nil {
		t.Fatalf("the upgrade test builds the previous release from git: this test must run inside the ofsdn git repository (git rev-parse --show-toplevel: %v)", err)
	}
	repo := strings.TrimSpace(string(top))
	if out, err := exec.Command("git", "-C", repo, "cat-file", "-e", rev+"^{commit}").CombinedOutput(); err != nil {
		t.Fatalf("commit %s (the previous release the upgrade test starts from) is not in the repository at %s: fetch the full history (git fetch --unshallow) (%v %s)", rev, repo, err, out)
	}
	dir := t.TempDir()
	src := filepath.Join(dir, "src")
	if err := os.Mkdir(src, 0o755); err != nil {
		t.Fatal(err)
	}
	archive := exec.Command("git", "-C", repo, "archive", rev)
	untar := exec.Command("tar", "-x", "-C", src)
	pipe, err := archive.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	untar.Stdin = pipe
	var archErr strings.Builder
	archive.Stderr = &archErr
	if err := untar.Start(); err != nil {
		t.Fatal(err)
	}
	if err := archive.Run(); err != nil {
		t.Fatalf("git archive %s: %v\n%s", rev, err, archErr.String())
	}
	if err := untar.Wait(); err != nil {
		t.Fatalf("untar git archive %s: %v", rev, err)
	}
	bin := filepath.Join(dir, "bin")
	for _, c := range []string{"ofsdn", "ofsdn-node"} {
		cmd := exec.Command("go", "build", "-buildvcs=false", "-o", filepath.Join(bin, c), "./cmd/"+c)
		cmd.Dir = src
		if c == "ofsdn" {
			cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
		}
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("go build %s of commit %s: %v\n%s", c, rev, err, out)
		}
	}
	return bin
}

var pingSummaryRe = regexp.MustCompile(`(\d+) packets transmitted`)

// tcpStream is a long-lived TCP connection from one pod to another on which the client
// sends an 8-byte sequence number every 10 ms and the server echoes it.
type tcpStream struct {
	mu       sync.Mutex
	rounds   int           // echoes received intact
	maxGap   time.Duration // longest time between two echoes
	err      error         // the first failure; the stream stops on it
	stopping bool
	conn     net.Conn
	srv      net.Conn
	ln       net.Listener
	done     chan struct{}
}

func startTCPStream(t *testing.T, from, to *testPod) *tcpStream {
	t.Helper()
	s := &tcpStream{done: make(chan struct{})}
	inNetns(t, to.netns, func() (err error) {
		s.ln, err = net.Listen("tcp", net.JoinHostPort(to.ip().String(), "0"))
		return err
	})
	accepted := make(chan net.Conn, 1)
	go func() {
		c, err := s.ln.Accept()
		if err != nil {
			accepted <- nil
			return
		}
		accepted <- c
		_, _ = io.Copy(c, c) // echo until the client closes
	}()
	inNetns(t, from.netns, func() (err error) {
		s.conn, err = net.DialTimeout("tcp", s.ln.Addr().String(), 5*time.Second)
		return err
	})
	if s.srv = <-accepted; s.srv == nil {
		t.Fatal("TCP server: no connection accepted")
	}
	t.Cleanup(func() { s.stop() })
	go s.run()
	return s
}

func (s *tcpStream) run() {
	defer close(s.done)
	buf, echo := make([]byte, 8), make([]byte, 8)
	last := time.Now()
	for seq := uint64(1); ; seq++ {
		s.mu.Lock()
		stopping := s.stopping
		s.mu.Unlock()
		if stopping {
			return
		}
		binary.BigEndian.PutUint64(buf, seq)
		// A generous deadline: retransmissions after a lost segment take 200 ms and more;
		// the test wants the connection kept, which a reset or a stall of 10 s would break.
		_ = s.conn.SetDeadline(time.Now().Add(10 * time.Second))
		_, err := s.conn.Write(buf)
		if err == nil {
			_, err = io.ReadFull(s.conn, echo)
		}
		if err == nil && binary.BigEndian.Uint64(echo) != seq {
			err = fmt.Errorf("echo %d, sent %d", binary.BigEndian.Uint64(echo), seq)
		}
		now := time.Now()
		s.mu.Lock()
		if err != nil {
			if !s.stopping {
				s.err = fmt.Errorf("round trip %d: %w", seq, err)
			}
			s.mu.Unlock()
			return
		}
		s.rounds++
		s.maxGap = max(s.maxGap, now.Sub(last))
		s.mu.Unlock()
		last = now
		time.Sleep(10 * time.Millisecond)
	}
}

// state returns the echoes received so far, the longest gap between two and the first error.
func (s *tcpStream) state() (int, time.Duration, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.rounds, s.maxGap, s.err
}

func (s *tcpStream) stop() {
	s.mu.Lock()
	already := s.stopping
	s.stopping = true
	s.mu.Unlock()
	if already {
		return
	}
	<-s.done
	_ = s.conn.Close()
	_ = s.srv.Close()
	_ = s.ln.Close()
}

// flowLayout counts the bridge's flows by cookie pipeline version (bits 63..56) and by
// generation (bits 55..40, the same bits in every layout so far).
func (n *testNode) flowLayout(t *testing.T) (versions map[uint8]int, gens map[uint16]int, lines []string) {
	t.Helper()
	versions, gens = map[uint8]int{}, map[uint16]int{}
	lines = n.flowSet(t)
	for _, l := range lines {
		m := cookieRe.FindStringSubmatch(l)
		c := uint64(0)
		if m != nil {
			var err error
			if c, err = strconv.ParseUint(m[1], 0, 64); err != nil {
				t.Fatalf("cookie in %q: %v", l, err)
			}
		}
		versions[uint8(c>>56)]++
		gens[flows.Cookie(c).Generation()]++
	}
	return versions, gens, lines
}

// TestUpgradeFromPreviousRelease: a node runs the previous release's daemon (cookie layout
// of PipelineVersion 3, built from git at previousRelease) with three pods wired by the
// previous release's plugin. While pod 1 pings pod 2 and pod 3 pings the gateway every
// 10 ms and pod 1 holds a TCP connection to pod 3 with a round trip every 10 ms, the daemon
// is stopped with SIGTERM and this build's daemon is started on the same bridge, data
// directory and sockets. No echo request may go unanswered, the TCP connection must still
// carry data afterwards, and every flow on the switch must carry this build's
// PipelineVersion in its cookie, all of one generation that is not the old daemon's. CNI
// CHECK of each old pod passes through this build's plugin, and a pod added by the new
// daemon reaches the old ones and is deleted without leaving anything.
func TestUpgradeFromPreviousRelease(t *testing.T) {
	const subnet = "10.157.0.0/24"
	gw := net.ParseIP("10.157.0.1")
	oldBin := buildRelease(t, previousRelease)
	n := &testNode{harness.NewNode(t, subnet, "ofsdn-e2e")}
	newCNI := n.CNI
	n.CNI = libcni.NewCNIConfigWithCacheDir([]string{oldBin}, filepath.Join(n.Dir, "cni-cache"), nil)
	n.Name = "ofsdn-node (" + previousRelease + ", then this build)"
	n.StartDaemon(filepath.Join(oldBin, "ofsdn-node"), 60*time.Second, "--pod-subnet", subnet, "--log-level", "debug")

	pods := []*testPod{n.addPod("u1"), n.addPod("u2"), n.addPod("u3")}
	if d := allPairsPing(t, pods, gw, 30*time.Second); d < 0 {
		t.Fatal("pods wired by the previous release do not reach each other and the gateway")
	}
	versions, gens, lines := n.flowLayout(t)
	if len(versions) != 1 || versions[flows.PipelineVersion] != 0 || len(gens) != 1 {
		t.Fatalf("flows of the previous release: pipeline versions %v, generations %v; want one version other than this build's %d, one generation:\n%s",
			versions, gens, flows.PipelineVersion, strings.Join(lines, "\n"))
	}
	var oldGen uint16
	for g := range gens {
		oldGen = g
	}
	t.Logf("previous release %s: %d flows, pipeline version %v, generation %d", previousRelease, len(lines), versions, oldGen)

	pingPod := startPings(t, pods[0].netns, pods[1].ip(), "0.01")
	pingGw := startPings(t, pods[2].netns, gw, "0.01")
	stream := startTCPStream(t, pods[0], pods[2])
	time.Sleep(time.Second)

	n.TermDaemon(30 * time.Second)
	time.Sleep(500 * time.Millisecond) // pods forward on the old flows while no daemon runs
	n.CNI = newCNI
	upgraded := time.Now()
	n.StartDaemon(filepath.Join(buildBinaries(t), "ofsdn-node"), 60*time.Second, "--pod-subnet", subnet, "--log-level", "debug")
	t.Logf("this build's daemon ready %s after it was started", time.Since(upgraded).Round(time.Millisecond))
	rounds, _, _ := stream.state()
	time.Sleep(2 * time.Second) // traffic goes on under the new daemon's flows

	for _, p := range []struct {
		what string
		p    *pingSeqs
	}{{"u1 → u2", pingPod}, {"u3 → gateway", pingGw}} {
		sent, lost, missing := p.p.stop(t)
		t.Logf("%s: %d echo requests every 10 ms across the upgrade, %d unanswered %v", p.what, sent, lost, missing)
		if sent < 100 {
			t.Errorf("%s: only %d echo requests answered or lost: the ping did not run", p.what, sent)
		}
		if lost > 0 {
			t.Errorf("%s: %d of %d echo requests lost across the upgrade (seq %v)", p.what, lost, sent, missing)
		}
		// stop counts up to the last answer: the answers must go on to the end.
		if m := pingSummaryRe.FindStringSubmatch(p.p.out.String()); m == nil {
			t.Errorf("%s: no summary in ping's output:\n%s", p.what, p.p.out.String())
		} else if tx, _ := strconv.Atoi(m[1]); tx-sent > 10 {
			t.Errorf("%s: %d echo requests transmitted, the last %d unanswered", p.what, tx, tx-sent)
		}
	}
	after, maxGap, err := stream.state()
	stream.stop()
	t.Logf("TCP u1 → u3: %d round trips, %d of them after the new daemon was ready, longest gap %s",
		after, after-rounds, maxGap.Round(time.Millisecond))
	if err != nil {
		t.Errorf("TCP connection u1 → u3 broken across the upgrade: %v", err)
	} else if after-rounds < 20 {
		t.Errorf("TCP connection u1 → u3: only %d round trips in the 2 s after the upgrade", after-rounds)
	}

	versions, gens, lines = n.flowLayout(t)
	if len(versions) != 1 || versions[flows.PipelineVersion] == 0 || len(gens) != 1 || gens[oldGen] != 0 || gens[0] != 0 {
		t.Errorf("flows after the upgrade: pipeline versions %v, generations %v; want only version %d and one generation other than the previous release's %d:\n%s",
			versions, gens, flows.PipelineVersion, oldGen, strings.Join(lines, "\n"))
	}
	t.Logf("after the upgrade: %d flows, pipeline version %v, generations %v", len(lines), versions, gens)

	for _, p := range pods {
		if err := n.CNI.CheckNetworkList(context.Background(), n.Netconf, p.rt); err != nil {
			t.Errorf("CHECK %s (wired by the previous release) through this build's plugin: %v", p.name, err)
		}
	}
	p := n.addPod("u4")
	for _, q := range pods {
		if err := ping(p.netns, q.ip()); err != nil {
			t.Errorf("new pod u4 → %s: %v", q.name, err)
		}
		if err := ping(q.netns, p.ip()); err != nil {
			t.Errorf("%s → new pod u4: %v", q.name, err)
		}
	}
	if err := n.delPod(p); err != nil {
		t.Fatalf("DEL u4: %v", err)
	}
	n.assertGone(t, p)
	if d := allPairsPing(t, pods, gw, 10*time.Second); d < 0 {
		t.Error("old pods do not reach each other and the gateway after u4 came and went")
	}
}
