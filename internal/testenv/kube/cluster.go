package kubetest

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"encoding/hex"
	"encoding/pem"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"sync"
	"syscall"
	"time"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
)

// EnvTools overrides where the binaries are: a directory with bin/etcd,
// bin/kube-apiserver and bin/kube-controller-manager.
const EnvTools = "WDC_K8S_TOOLS"

// ErrNoBinaries: the control plane's binaries are not built.
var ErrNoBinaries = errors.New("kubetest: the Kubernetes binaries are missing; build them with tools/k8s/build.sh (make k8s-tools)")

// ToolsDir is where the binaries are looked for: $WDC_K8S_TOOLS, else
// ${XDG_CACHE_HOME:-$HOME/.cache}/wdc-tools/k8s (tools/k8s/build.sh's
// default).
func ToolsDir() string {
	if d := os.Getenv(EnvTools); d != "" {
		return d
	}
	cache := os.Getenv("XDG_CACHE_HOME")
	if cache == "" {
		home, _ := os.UserHomeDir()
		cache = filepath.Join(home, ".cache")
	}
	return filepath.Join(cache, "wdc-tools", "k8s")
}

// Binaries returns the paths of etcd, kube-apiserver and
// kube-controller-manager, or ErrNoBinaries (wrapped, with the one
// missing).
func Binaries() (etcd, apiserver, controllerManager string, err error) {
	bin := filepath.Join(ToolsDir(), "bin")
	paths := []string{filepath.Join(bin, "etcd"), filepath.Join(bin, "kube-apiserver"), filepath.Join(bin, "kube-controller-manager")}
	for _, p := range paths {
		if st, serr := os.Stat(p); serr != nil || st.Mode()&0o111 == 0 {
			return "", "", "", fmt.Errorf("%w (no executable %s)", ErrNoBinaries, p)
		}
	}
	return paths[0], paths[1], paths[2], nil
}

// Cluster is a running control plane.
type Cluster struct {
	// Dir holds the state, certificates, kubeconfig and logs.
	Dir string
	// Config is an admin (system:masters) client configuration.
	Config *rest.Config
	// Client is a clientset on Config.
	Client kubernetes.Interface
	// Kubeconfig is the path of an admin kubeconfig file for Config.
	Kubeconfig string

	procs []*process
}

type process struct {
	name string
	cmd  *exec.Cmd
	log  string
	done chan struct{}
}

// waitForBuild returns once no tools/k8s/build.sh holds the lock file
// beside ToolsDir (at once when there is none), or with ctx's error.
func waitForBuild(ctx context.Context) error {
	f, err := os.Open(ToolsDir() + ".lock")
	if err != nil {
		return nil // no build ever ran here
	}
	defer f.Close()
	for {
		// A shared lock is refused while build.sh holds its exclusive one.
		err := syscall.Flock(int(f.Fd()), syscall.LOCK_SH|syscall.LOCK_NB)
		if err == nil {
			return syscall.Flock(int(f.Fd()), syscall.LOCK_UN)
		}
		if !errors.Is(err, syscall.EWOULDBLOCK) {
			return fmt.Errorf("kubetest: lock %s: %w", f.Name(), err)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(time.Second):
		}
	}
}

// Start starts etcd, kube-apiserver and kube-controller-manager under
// dir (created when missing) and waits until the API server is ready and
// the controllers run. When the binaries are missing while
// tools/k8s/build.sh is building them (make test builds them in the
// background), it waits for that build first. On error everything
// started is stopped; the error holds the end of the failing process's
// log.
func Start(ctx context.Context, dir string) (*Cluster, error) {
	etcdBin, apiBin, kcmBin, err := Binaries()
	if errors.Is(err, ErrNoBinaries) {
		if werr := waitForBuild(ctx); werr != nil {
			return nil, errors.Join(err, werr)
		}
		etcdBin, apiBin, kcmBin, err = Binaries()
	}
	if err != nil {
		return nil, err
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	c := &Cluster{Dir: dir}
	ok := false
	defer func() {
		if !ok {
			c.Stop()
		}
	}()
	ports, err := freePorts(3)
	if err != nil {
		return nil, err
	}
	etcdURL := "http://127.0.0.1:" + strconv.Itoa(ports[0])
	peerURL := "http://127.0.0.1:" + strconv.Itoa(ports[1])
	if err := c.start("etcd", etcdBin, "--name", "kubetest", "--data-dir", filepath.Join(dir, "etcd"),
		"--listen-client-urls", etcdURL, "--advertise-client-urls", etcdURL,
		"--listen-peer-urls", peerURL, "--initial-advertise-peer-urls", peerURL,
		"--initial-cluster", "kubetest="+peerURL, "--unsafe-no-fsync", "--log-level", "warn"); err != nil {
		return nil, err
	}

	if err := writeServiceAccountKeys(dir); err != nil {
		return nil, err
	}
	token := randomHex(16)
	if err := os.WriteFile(filepath.Join(dir, "tokens.csv"), []byte(token+",kubetest-admin,kubetest-admin,system:masters\n"), 0o600); err != nil {
		return nil, err
	}
	certDir := filepath.Join(dir, "certs")
	if err := c.start("kube-apiserver", apiBin,
		"--etcd-servers", etcdURL, "--bind-address", "127.0.0.1", "--advertise-address", "127.0.0.1",
		"--secure-port", strconv.Itoa(ports[2]), "--cert-dir", certDir,
		// A single local API server has no endpoints to reconcile.
		"--endpoint-reconciler-type", "none",
		"--service-account-issuer", "https://kubernetes.default.svc",
		"--service-account-key-file", filepath.Join(dir, "sa.pub"),
		"--service-account-signing-key-file", filepath.Join(dir, "sa.key"),
		"--token-auth-file", filepath.Join(dir, "tokens.csv"),
		"--authorization-mode", "RBAC", "--service-cluster-ip-range", "10.0.0.0/24",
		// Pods are created without service-account tokens (no token
		// controller runs here).
		"--disable-admission-plugins", "ServiceAccount"); err != nil {
		return nil, err
	}
	host := "https://127.0.0.1:" + strconv.Itoa(ports[2])
	c.Config = &rest.Config{Host: host, BearerToken: token, QPS: 200, Burst: 400,
		TLSClientConfig: rest.TLSClientConfig{CAFile: filepath.Join(certDir, "apiserver.crt")}}
	if err := c.waitReady(ctx, "kube-apiserver"); err != nil {
		return nil, err
	}
	if c.Client, err = kubernetes.NewForConfig(c.Config); err != nil {
		return nil, err
	}
	c.Kubeconfig = filepath.Join(dir, "admin.kubeconfig")
	if err := WriteKubeconfig(c.Kubeconfig, c.Config, "default"); err != nil {
		return nil, err
	}
	if err := c.start("kube-controller-manager", kcmBin, "--kubeconfig", c.Kubeconfig,
		"--controllers", "job-controller,ttl-after-finished-controller,garbage-collector-controller",
		"--leader-elect=false", "--secure-port=0", "--concurrent-job-syncs=5"); err != nil {
		return nil, err
	}
	// The controllers need a moment to list what they watch; one
	// process that stays up past it is as ready as it gets.
	select {
	case <-c.procs[len(c.procs)-1].done:
		return nil, c.procErr(c.procs[len(c.procs)-1], errors.New("exited at start"))
	case <-time.After(time.Second):
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	ok = true
	return c, nil
}

// WriteKubeconfig writes a kubeconfig for cfg (bearer token, CA file)
// with one context whose namespace is ns.
func WriteKubeconfig(path string, cfg *rest.Config, ns string) error {
	kc := clientcmdapi.NewConfig()
	kc.Clusters["kubetest"] = &clientcmdapi.Cluster{Server: cfg.Host, CertificateAuthority: cfg.CAFile}
	kc.AuthInfos["kubetest"] = &clientcmdapi.AuthInfo{Token: cfg.BearerToken}
	kc.Contexts["kubetest"] = &clientcmdapi.Context{Cluster: "kubetest", AuthInfo: "kubetest", Namespace: ns}
	kc.CurrentContext = "kubetest"
	return clientcmd.WriteToFile(*kc, path)
}

func (c *Cluster) start(name, bin string, args ...string) error {
	logPath := filepath.Join(c.Dir, name+".log")
	f, err := os.Create(logPath)
	if err != nil {
		return err
	}
	cmd := exec.Command(bin, args...)
	cmd.Stdout, cmd.Stderr = f, f
	// Its own process group; and killed with the test binary.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := startLocked(cmd); err != nil {
		f.Close()
		return fmt.Errorf("kubetest: start %s: %w", name, err)
	}
	p := &process{name: name, cmd: cmd, log: logPath, done: make(chan struct{})}
	go func() { _ = cmd.Wait(); f.Close(); close(p.done) }()
	c.procs = append(c.procs, p)
	return nil
}

// waitReady polls /readyz (the API server's own readiness endpoint) until
// it answers ok, the process exits, or 90 s pass.
func (c *Cluster) waitReady(ctx context.Context, name string) error {
	p := c.procs[len(c.procs)-1]
	var rc *rest.RESTClient
	deadline := time.Now().Add(90 * time.Second)
	var last error
	for time.Now().Before(deadline) {
		select {
		case <-p.done:
			return c.procErr(p, errors.New("exited before it was ready"))
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
		if rc == nil {
			// The API server writes its self-signed certificate first.
			if _, err := os.Stat(c.Config.CAFile); err != nil {
				last = err
				continue
			}
			var err error
			if rc, err = rest.UnversionedRESTClientFor(withNegotiation(c.Config)); err != nil {
				return err
			}
		}
		rctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		body, err := rc.Get().AbsPath("/readyz").DoRaw(rctx)
		cancel()
		if err == nil && bytes.Equal(bytes.TrimSpace(body), []byte("ok")) {
			return nil
		}
		last = err
	}
	return c.procErr(p, fmt.Errorf("not ready after 90 s: %v", last))
}

func withNegotiation(cfg *rest.Config) *rest.Config {
	out := rest.CopyConfig(cfg)
	out.GroupVersion = nil
	out.NegotiatedSerializer = clientNegotiator
	return out
}

// procErr is err with the end of p's log.
func (c *Cluster) procErr(p *process, err error) error {
	return fmt.Errorf("kubetest: %s: %w; the end of %s:\n%s", p.name, err, p.log, tail(p.log, 4000))
}

// Logs returns the end of every process's log, for a failed test.
func (c *Cluster) Logs() string {
	var b bytes.Buffer
	for _, p := range c.procs {
		fmt.Fprintf(&b, "--- %s (%s)\n%s\n", p.name, p.log, tail(p.log, 4000))
	}
	return b.String()
}

// Stop kills the processes (in reverse order) and waits for them.
func (c *Cluster) Stop() {
	for i := len(c.procs) - 1; i >= 0; i-- {
		p := c.procs[i]
		_ = syscall.Kill(-p.cmd.Process.Pid, syscall.SIGTERM)
		select {
		case <-p.done:
		case <-time.After(10 * time.Second):
			_ = syscall.Kill(-p.cmd.Process.Pid, syscall.SIGKILL)
			<-p.done
		}
	}
	c.procs = nil
}

func tail(path string, n int) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return err.Error()
	}
	if len(b) > n {
		b = b[len(b)-n:]
	}
	return string(b)
}

func writeServiceAccountKeys(dir string) error {
	key, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		return err
	}
	pub, err := x509.MarshalPKIXPublicKey(&key.PublicKey)
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, "sa.key"), pem.EncodeToMemory(&pem.Block{Type: "RSA PRIVATE KEY", Bytes: x509.MarshalPKCS1PrivateKey(key)}), 0o600); err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(dir, "sa.pub"), pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: pub}), 0o600)
}

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

var (
	starterOnce sync.Once
	starter     chan func()
)

// startLocked starts cmd from one OS thread that never exits: Pdeathsig
// fires when the thread that started the child ends, not the process, and
// Go may end idle threads.
func startLocked(cmd *exec.Cmd) error {
	starterOnce.Do(func() {
		starter = make(chan func())
		go func() {
			runtime.LockOSThread()
			for f := range starter {
				f()
			}
		}()
	})
	errc := make(chan error, 1)
	starter <- func() { errc <- cmd.Start() }
	return <-errc
}

var portMu sync.Mutex

// freePorts finds n free TCP ports on 127.0.0.1.
func freePorts(n int) ([]int, error) {
	portMu.Lock()
	defer portMu.Unlock()
	var ls []net.Listener
	defer func() {
		for _, l := range ls {
			l.Close()
		}
	}()
	var out []int
	for range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, err
		}
		ls = append(ls, l)
		out = append(out, l.Addr().(*net.TCPAddr).Port)
	}
	return out, nil
}
