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

var (
	releaseOnce sync.Once
	releaseBin  string // the previous release's binaries (TestMain removes their parent)
	releaseErr  error
)

// previousReleaseBinaries builds cmd/ofsdn-node and cmd/ofsdn (static, as make build does)
// of commit previousRelease of this repository once per test binary and returns their
// directory. The commit is exported with git archive, so the repository must be a clone
// that holds it (a shallow clone does not): the test fails saying so otherwise.
func previousReleaseBinaries(t *testing.T) string {
	t.Helper()
	releaseOnce.Do(func() { releaseBin, releaseErr = buildRelease(previousRelease) })
	if releaseErr != nil {
		t.Fatal(releaseErr)
	}
	return releaseBin
}

func buildRelease(rev string) (string, error) {
	top, err := exec.Command("git", "rev-parse", "--show-toplevel").Output()
	if err != nil {
		return "", fmt.Errorf("the upgrade tests build the previous release from git: they must run inside the ofsdn git repository (git rev-parse --show-toplevel: %v)", err)
	}
	repo := strings.TrimSpace(string(top))
	if out, err := exec.Command("git", "-C", repo, "cat-file", "-e", rev+"^{commit}").CombinedOutput(); err != nil {
		return "", fmt.Errorf("commit %s (the previous release the upgrade tests start from) is not in the repository at %s: fetch the full history (git fetch --unshallow) (%v %s)", rev, repo, err, out)
	}
	dir, err := os.MkdirTemp("", "ofsdn-release-"+rev+"-")
	if err != nil {
		return "", err
	}
	src, bin := filepath.Join(dir, "src"), filepath.Join(dir, "bin")
	if err := os.Mkdir(src, 0o755); err != nil {
		return bin, err
	}
	var archErr strings.Builder
	archive := exec.Command("git", "-C", repo, "archive", rev)
	archive.Stderr = &archErr
	untar := exec.Command("tar", "-x", "-C", src)
	pipe, err := archive.StdoutPipe()
	if err != nil {
		return bin, err
	}
	untar.Stdin = pipe
	if err := untar.Start(); err != nil {
		return bin, err
	}
	if err := archive.Run(); err != nil {
		return bin, fmt.Errorf("git archive %s: %v\n%s", rev, err, archErr.String())
	}
	if err := untar.Wait(); err != nil {
		return bin, fmt.Errorf("untar git archive %s into %s: %v", rev, src, err)
	}
	for _, c := range []string{"ofsdn", "ofsdn-node"} {
		cmd := exec.Command("go", "build", "-buildvcs=false", "-o", filepath.Join(bin, c), "./cmd/"+c)
		cmd.Dir = src
		if c == "ofsdn" {
			cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
		}
		if out, err := cmd.CombinedOutput(); err != nil {
			return bin, fmt.Errorf("go build %s of commit %s: %v\n%s", c, rev, err, out)
		}
	}
	return bin, nil
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
	alone(t)
	const subnet = "10.157.0.0/24"
	gw := net.ParseIP("10.157.0.1")
	oldBin := previousReleaseBinaries(t)
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
	n.StartDaemon(daemonBinary(t), 60*time.Second, "--pod-subnet", subnet, "--log-level", "debug")
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
			for _, s := range missing {
				t.Logf("%s: %s", p.what, p.p.sentAround(s))
			}
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

// upgradeClusterNode stops cn's daemon (the previous release's) with SIGTERM and starts
// this build's on the same bridge, data directory, sockets and topology file, with this
// build's plugin from then on; it returns once CNI STATUS passes.
func upgradeClusterNode(t *testing.T, cn *clusterNode, newCNI *libcni.CNIConfig) {
	t.Helper()
	cn.TermDaemon(30 * time.Second)
	time.Sleep(500 * time.Millisecond) // pods forward on the old flows while no daemon runs
	cn.CNI = newCNI
	start := time.Now()
	cn.start()
	t.Logf("%s: this build's daemon ready %s after it was started", cn.name, time.Since(start).Round(time.Millisecond))
}

// TestUpgradeOverlayFromPreviousRelease: two nodes joined by VXLAN (topology files) run the
// previous release's daemon, with pods wired by its plugin. They are upgraded one after the
// other (SIGTERM, this build's daemon on the same bridge, data directory and sockets), so
// for a while node-a runs this build and node-b the previous one. Throughout, pods ping
// across nodes, within node-a and to node-a's gateway every 10 ms, and a TCP connection
// from node-a to node-b makes a round trip every 10 ms: no echo request may go unanswered,
// the connection must keep carrying data, and afterwards every flow of both nodes carries
// this build's PipelineVersion, of one generation that is not the old daemon's. Each old
// pod passes CNI CHECK through this build's plugin, each node's flows of its peer keep the
// owner id the previous release gave them (recorded now), and a new pod on node-a reaches
// the pod on node-b.
func TestUpgradeOverlayFromPreviousRelease(t *testing.T) {
	alone(t)
	oldBin := previousReleaseBinaries(t)
	ul := filepath.Base(newNetns(t, "ofsdn-ul-upg"))
	mustRun(t, "ip", "netns", "exec", ul, "ip", "link", "add", "br0", "type", "bridge")
	mustRun(t, "ip", "netns", "exec", ul, "ip", "link", "set", "br0", "up")
	a := startClusterNode(t, ul, "node-a", "172.30.0.81", "10.244.71.0/24", 1)
	b := startClusterNode(t, ul, "node-b", "172.30.0.82", "10.244.72.0/24", 2)
	writeTopology(t, a.topo, topologyYAML(a, []*clusterNode{b}))
	writeTopology(t, b.topo, topologyYAML(b, []*clusterNode{a}))
	newCNI := a.CNI
	oldGen := map[*clusterNode]uint16{}
	for _, cn := range []*clusterNode{a, b} {
		cn.CNI = libcni.NewCNIConfigWithCacheDir([]string{oldBin}, filepath.Join(cn.Dir, "cni-cache"), nil)
		cn.StartDaemon(filepath.Join(oldBin, "ofsdn-node"), 60*time.Second, "--log-level", "debug",
			"--topology-file", cn.topo, "--service-cidr", "10.96.0.0/12", "--mtu", "0")
	}
	a1, a2, b1 := a.addPod("ua1"), a.addPod("ua2"), b.addPod("ub1")
	gwA := net.ParseIP("10.244.71.1")
	for _, pr := range [][2]*testPod{{a1, b1}, {b1, a1}, {b1, a2}, {a2, a1}} {
		waitUntil(t, "ping "+pr[0].name+" → "+pr[1].name, 30*time.Second, func() error { return ping(pr[0].netns, pr[1].ip()) })
	}
	for _, cn := range []*clusterNode{a, b} {
		versions, gens, lines := cn.flowLayout(t)
		if len(versions) != 1 || versions[flows.PipelineVersion] != 0 || len(gens) != 1 {
			t.Fatalf("%s: flows of the previous release: pipeline versions %v, generations %v; want one version other than this build's %d, one generation:\n%s",
				cn.name, versions, gens, flows.PipelineVersion, strings.Join(lines, "\n"))
		}
		for g := range gens {
			oldGen[cn] = g
		}
		t.Logf("%s, previous release %s: %d flows, pipeline version %v, generation %d", cn.name, previousRelease, len(lines), versions, oldGen[cn])
	}

	type namedPing struct {
		what string
		p    *pingSeqs
	}
	pings := []namedPing{
		{"ua1 → ub1 (node-a → node-b)", startPings(t, a1.netns, b1.ip(), "0.01")},
		{"ub1 → ua2 (node-b → node-a)", startPings(t, b1.netns, a2.ip(), "0.01")},
		{"ua2 → ua1 (within node-a)", startPings(t, a2.netns, a1.ip(), "0.01")},
		{"ua2 → node-a's gateway", startPings(t, a2.netns, gwA, "0.01")},
	}
	stream := startTCPStream(t, a1, b1)
	time.Sleep(time.Second)
	var rounds []int
	for _, cn := range []*clusterNode{a, b} {
		upgradeClusterNode(t, cn, newCNI)
		r, _, _ := stream.state()
		rounds = append(rounds, r)
		time.Sleep(2 * time.Second) // traffic goes on under the new daemon's flows
	}

	for _, p := range pings {
		sent, lost, missing := p.p.stop(t)
		t.Logf("%s: %d echo requests every 10 ms across both upgrades, %d unanswered %v", p.what, sent, lost, missing)
		if sent < 100 {
			t.Errorf("%s: only %d echo requests answered or lost: the ping did not run", p.what, sent)
		}
		if lost > 0 {
			t.Errorf("%s: %d of %d echo requests lost across the upgrades (seq %v)", p.what, lost, sent, missing)
			for _, s := range missing {
				t.Logf("%s: %s", p.what, p.p.sentAround(s))
			}
		}
		if m := pingSummaryRe.FindStringSubmatch(p.p.out.String()); m == nil {
			t.Errorf("%s: no summary in ping's output:\n%s", p.what, p.p.out.String())
		} else if tx, _ := strconv.Atoi(m[1]); tx-sent > 10 {
			t.Errorf("%s: %d echo requests transmitted, the last %d unanswered", p.what, tx, tx-sent)
		}
	}
	total, maxGap, err := stream.state()
	stream.stop()
	t.Logf("TCP ua1 → ub1: %d round trips (%d when node-a was upgraded, %d when node-b was), longest gap %s",
		total, rounds[0], rounds[1], maxGap.Round(time.Millisecond))
	if err != nil {
		t.Errorf("TCP connection ua1 → ub1 broken across the upgrades: %v", err)
	} else if rounds[1]-rounds[0] < 20 || total-rounds[1] < 20 {
		t.Errorf("TCP connection ua1 → ub1: %d round trips after node-a's upgrade, %d after node-b's, want 20 or more each",
			rounds[1]-rounds[0], total-rounds[1])
	}

	for _, cn := range []*clusterNode{a, b} {
		versions, gens, lines := cn.flowLayout(t)
		if len(versions) != 1 || versions[flows.PipelineVersion] == 0 || len(gens) != 1 || gens[oldGen[cn]] != 0 || gens[0] != 0 {
			t.Errorf("%s: flows after the upgrade: pipeline versions %v, generations %v; want only version %d and one generation other than the previous release's %d:\n%s",
				cn.name, versions, gens, flows.PipelineVersion, oldGen[cn], strings.Join(lines, "\n"))
		}
		t.Logf("%s after the upgrade: %d flows, pipeline version %v, generations %v", cn.name, len(lines), versions, gens)
	}
	for _, pr := range [][2]*clusterNode{{a, b}, {b, a}} {
		if fs := pr[0].peerFlows(pr[1]); len(fs) != 3 {
			t.Errorf("%s holds %d flows of peer %s after the upgrade, want 3:\n%s", pr[0].name, len(fs), pr[1].name, strings.Join(fs, "\n"))
		}
		// The previous release derived a peer's owner id from its pod subnet; the upgraded
		// daemon, finding no record, keeps that id (and records it).
		_, sn, _ := net.ParseCIDR(pr[1].subnet)
		if got, want := pr[0].peerIDRecord(t)[pr[1].name], flows.LegacyPeerID(flows.Peer{PodSubnet: sn}); got != want {
			t.Errorf("%s records owner id %#x for peer %s after the upgrade, want the previous release's %#x", pr[0].name, got, pr[1].name, want)
		}
	}
	for _, pc := range []struct {
		cn *clusterNode
		p  *testPod
	}{{a, a1}, {a, a2}, {b, b1}} {
		if err := pc.cn.CNI.CheckNetworkList(context.Background(), pc.cn.Netconf, pc.p.rt); err != nil {
			t.Errorf("CHECK %s (wired by the previous release) through this build's plugin: %v", pc.p.name, err)
		}
	}
	p := a.addPod("ua3")
	if err := ping(p.netns, b1.ip()); err != nil {
		t.Errorf("new pod ua3 on node-a → ub1 on node-b: %v", err)
	}
	if err := ping(b1.netns, p.ip()); err != nil {
		t.Errorf("ub1 on node-b → new pod ua3 on node-a: %v", err)
	}
	if err := a.delPod(p); err != nil {
		t.Fatalf("DEL ua3: %v", err)
	}
	a.assertGone(t, p)
}
