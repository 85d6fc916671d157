package k8s

import (
	"context"
	"crypto/tls"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/ofsdn/ofsdn/test/testenv"
)

// ControlPlaneConfig says where and how the control plane runs.
type ControlPlaneConfig struct {
	// Dir holds the PKI, etcd's data and the logs; "" = a directory of the test's.
	Dir string
	// Netns is the network namespace (path) the servers run in; "" = the test's own, where
	// they bind 127.0.0.1 on free ports.
	Netns string
	// Address is the API server's advertised address inside Netns (it binds every address
	// of that namespace); "" = 127.0.0.1.
	Address string
	// ServiceCIDR is the service IP range, or two (one per family, comma-separated, the
	// API server's dual-stack form; the IPv4 one first); "" = 10.96.0.0/16.
	ServiceCIDR string
	// ClusterCIDR, when set, starts kube-controller-manager allocating node pod CIDRs
	// (/24s) from it, and kube-scheduler. Dual-stack: IPv4 and IPv6 comma-separated, IPv4
	// first; every node then gets a /24 and a /64 (--node-cidr-mask-size-ipv4/-ipv6).
	ClusterCIDR string
}

// ControlPlane is a running etcd and kube-apiserver (and kube-controller-manager and
// kube-scheduler with a ClusterCIDR).
type ControlPlane struct {
	// Config is the configuration it was started with, defaults filled in.
	Config ControlPlaneConfig
	// PKI is the CA and the certificates made at start.
	PKI *PKI
	// Server is the API server's URL as reached inside Config.Netns.
	Server string
	// AdminKubeconfig is a system:masters kubeconfig for Server.
	AdminKubeconfig string
	// Rest is the admin client config; it dials inside Config.Netns.
	Rest *rest.Config
	// Client is the admin clientset on Rest.
	Client kubernetes.Interface
	// Processes are the servers, in start order.
	Processes []*Process
	// Ready is how long the start took, to /readyz (and the controllers' /healthz).
	Ready time.Duration
}

// Ports inside a namespace of the test's own (fixed: nothing else binds there).
const (
	apiserverPort = 6443
	etcdPort      = 2379
	etcdPeerPort  = 2380
	kcmPort       = 10257
	schedulerPort = 10259
)

// StartControlPlane starts etcd and kube-apiserver (RBAC and Node authorization on, a CA
// made now) and, with a ClusterCIDR, kube-controller-manager and kube-scheduler; it waits
// until they are ready and stops them when the test ends, logging their log tails if the
// test failed.
func StartControlPlane(t testing.TB, cfg ControlPlaneConfig) *ControlPlane {
	t.Helper()
	testenv.Privileged(t)
	etcd, apiserver := Bin(t, "etcd"), Bin(t, "kube-apiserver")
	if cfg.Dir == "" {
		cfg.Dir = t.TempDir()
	}
	if cfg.ServiceCIDR == "" {
		cfg.ServiceCIDR = "10.96.0.0/16"
	}
	addr := cfg.Address
	if addr == "" {
		addr = "127.0.0.1"
	}
	ports := map[string]int{"api": apiserverPort, "etcd": etcdPort, "peer": etcdPeerPort, "kcm": kcmPort, "sched": schedulerPort}
	if cfg.Netns == "" {
		// Hold every listener until all ports are chosen, so no two are the same.
		var ls []net.Listener
		for k := range ports {
			l, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			ls = append(ls, l)
			ports[k] = l.Addr().(*net.TCPAddr).Port
		}
		for _, l := range ls {
			l.Close()
		}
	}
	logs := filepath.Join(cfg.Dir, "logs")
	if err := os.MkdirAll(logs, 0o755); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	pki, err := NewPKI(filepath.Join(cfg.Dir, "pki"))
	if err != nil {
		t.Fatal(err)
	}
	// A dual-stack range ("10.96.0.0/16,fd00:96::/108") names its primary family first;
	// the kubernetes Service's ClusterIP is of that one.
	primary, _, _ := strings.Cut(cfg.ServiceCIDR, ",")
	_, svc, err := net.ParseCIDR(primary)
	if err != nil {
		t.Fatal(err)
	}
	svcIP := append(net.IP{}, svc.IP.To4()...)
	if len(svcIP) == 0 { // an IPv6-only cluster's
		svcIP = append(net.IP{}, svc.IP.To16()...)
	}
	svcIP[len(svcIP)-1]++ // the kubernetes Service's ClusterIP
	must(t, pki.Cert("apiserver", "kube-apiserver", nil,
		[]net.IP{net.ParseIP("127.0.0.1"), net.ParseIP(addr), svcIP},
		[]string{"localhost", "kubernetes", "kubernetes.default", "kubernetes.default.svc", "kubernetes.default.svc.cluster.local"}))
	must(t, pki.Cert("apiserver-kubelet-client", "kube-apiserver-kubelet-client", []string{"system:masters"}, nil, nil))
	must(t, pki.Cert("admin", "ofsdn-test-admin", []string{"system:masters"}, nil, nil))
	local := fmt.Sprintf("https://127.0.0.1:%d", ports["api"])
	admin, err := pki.Kubeconfig("admin", local)
	must(t, err)

	cp := &ControlPlane{Config: cfg, PKI: pki, Server: local, AdminKubeconfig: admin}
	t.Cleanup(func() {
		for i := len(cp.Processes) - 1; i >= 0; i-- {
			cp.Processes[i].Stop(15 * time.Second)
		}
		if t.Failed() {
			for _, p := range cp.Processes {
				t.Logf("---- %s log (last 30 lines) ----\n%s", p.Name, p.LogTail(30))
			}
		}
	})
	startProc := func(name, bin string, args ...string) {
		t.Helper()
		p, err := StartProcess(logs, name, cfg.Netns, bin, args, nil)
		if err != nil {
			t.Fatal(err)
		}
		cp.Processes = append(cp.Processes, p)
	}
	dial := NetnsDialer(cfg.Netns)
	httpc := &http.Client{Timeout: 2 * time.Second, Transport: &http.Transport{DialContext: dial,
		TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}} // health endpoints only
	healthy := func(p *Process, url string) func() error {
		return func() error {
			if p.Exited() {
				return Permanent(fmt.Errorf("%s exited:\n%s", p.Name, p.LogTail(20)))
			}
			r, err := httpc.Get(url)
			if err != nil {
				return err
			}
			r.Body.Close()
			if r.StatusCode != http.StatusOK {
				return fmt.Errorf("%s: %s", url, r.Status)
			}
			return nil
		}
	}

	etcdURL := fmt.Sprintf("http://127.0.0.1:%d", ports["etcd"])
	peerURL := fmt.Sprintf("http://127.0.0.1:%d", ports["peer"])
	startProc("etcd", etcd, "--name=ofsdn-test", "--data-dir="+filepath.Join(cfg.Dir, "etcd"),
		"--listen-client-urls="+etcdURL, "--advertise-client-urls="+etcdURL,
		"--listen-peer-urls="+peerURL, "--initial-advertise-peer-urls="+peerURL,
		"--initial-cluster=ofsdn-test="+peerURL, "--unsafe-no-fsync", "--log-level=warn")
	WaitFor(t, "etcd /health", 60*time.Second, healthy(cp.Processes[0], etcdURL+"/health"))

	// In a namespace of the test's own the server binds every address there and advertises
	// Address (the kubernetes Service's endpoint). In the test's namespace it binds
	// 127.0.0.1 only, which the endpoint reconciler refuses to advertise: no reconciler.
	listen := []string{"--bind-address=0.0.0.0", "--advertise-address=" + addr}
	if cfg.Netns == "" {
		listen = []string{"--bind-address=127.0.0.1", "--endpoint-reconciler-type=none"}
	}
	startProc("kube-apiserver", apiserver, append(listen, "--etcd-servers="+etcdURL,
		fmt.Sprintf("--secure-port=%d", ports["api"]),
		"--tls-cert-file="+pki.Path("apiserver.crt"), "--tls-private-key-file="+pki.Path("apiserver.key"),
		"--client-ca-file="+pki.Path("ca.crt"),
		"--kubelet-client-certificate="+pki.Path("apiserver-kubelet-client.crt"),
		"--kubelet-client-key="+pki.Path("apiserver-kubelet-client.key"),
		"--kubelet-preferred-address-types=InternalIP", // no DNS here
		"--service-account-key-file="+pki.Path("sa.pub"), "--service-account-signing-key-file="+pki.Path("sa.key"),
		"--service-account-issuer=https://kubernetes.default.svc.cluster.local",
		"--service-cluster-ip-range="+cfg.ServiceCIDR,
		"--authorization-mode=Node,RBAC", "--enable-admission-plugins=NodeRestriction",
		"--allow-privileged=true", "--profiling=false", "--cert-dir="+filepath.Join(cfg.Dir, "apiserver-certs"))...)
	rc, err := clientcmd.BuildConfigFromFlags("", admin)
	must(t, err)
	rc.Dial = dial
	rc.Timeout = 30 * time.Second
	cp.Rest = rc
	cs, err := kubernetes.NewForConfig(rc)
	must(t, err)
	cp.Client = cs
	WaitFor(t, "kube-apiserver /readyz", 120*time.Second, func() error {
		if p := cp.Processes[1]; p.Exited() {
			return Permanent(fmt.Errorf("kube-apiserver exited:\n%s", p.LogTail(20)))
		}
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		b, err := cs.Discovery().RESTClient().Get().AbsPath("/readyz").DoRaw(ctx)
		if err != nil {
			return err
		}
		if string(b) != "ok" {
			return fmt.Errorf("/readyz: %s", b)
		}
		return nil
	})

	if cfg.ClusterCIDR != "" {
		kcm, sched := Bin(t, "kube-controller-manager"), Bin(t, "kube-scheduler")
		must(t, pki.Cert("kcm", "system:kube-controller-manager", nil, nil, nil))
		must(t, pki.Cert("scheduler", "system:kube-scheduler", nil, nil, nil))
		kcmKC, err := pki.Kubeconfig("kcm", local)
		must(t, err)
		schedKC, err := pki.Kubeconfig("scheduler", local)
		must(t, err)
		// One mask for a single-stack cluster; a dual-stack one takes one per family.
		masks := []string{"--node-cidr-mask-size=24"}
		if strings.Contains(cfg.ClusterCIDR, ":") { // IPv6-only: /64s
			masks = []string{"--node-cidr-mask-size=64"}
		}
		if strings.Contains(cfg.ClusterCIDR, ",") {
			masks = []string{"--node-cidr-mask-size-ipv4=24", "--node-cidr-mask-size-ipv6=64"}
		}
		startProc("kube-controller-manager", kcm, append(masks, "--kubeconfig="+kcmKC,
			"--authentication-kubeconfig="+kcmKC, "--authorization-kubeconfig="+kcmKC,
			"--bind-address=127.0.0.1", fmt.Sprintf("--secure-port=%d", ports["kcm"]), "--leader-elect=false",
			"--use-service-account-credentials=true",
			"--service-account-private-key-file="+pki.Path("sa.key"), "--root-ca-file="+pki.Path("ca.crt"),
			"--allocate-node-cidrs=true", "--cluster-cidr="+cfg.ClusterCIDR,
			"--service-cluster-ip-range="+cfg.ServiceCIDR, "--profiling=false")...)
		startProc("kube-scheduler", sched, "--kubeconfig="+schedKC,
			"--authentication-kubeconfig="+schedKC, "--authorization-kubeconfig="+schedKC,
			"--bind-address=127.0.0.1", fmt.Sprintf("--secure-port=%d", ports["sched"]), "--leader-elect=false",
			"--profiling=false")
		var wg sync.WaitGroup
		errs := make([]error, 2)
		for i, c := range []struct {
			p   *Process
			url string
		}{{cp.Processes[2], fmt.Sprintf("https://127.0.0.1:%d/healthz", ports["kcm"])},
			{cp.Processes[3], fmt.Sprintf("https://127.0.0.1:%d/healthz", ports["sched"])}} {
			wg.Add(1)
			go func() {
				defer wg.Done()
				errs[i] = poll(120*time.Second, 200*time.Millisecond, healthy(c.p, c.url))
			}()
		}
		wg.Wait()
		for i, err := range errs {
			if err != nil {
				t.Fatalf("%s /healthz: %v", cp.Processes[2+i].Name, err)
			}
		}
	}
	cp.Ready = time.Since(start)
	return cp
}

func must(t testing.TB, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}
