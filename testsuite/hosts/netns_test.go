package hosts

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/wdc-runtime/wdc/api"
	"github.com/wdc-runtime/wdc/envelope"
	"github.com/wdc-runtime/wdc/resource"
)

// The hosts' private network: one /24 inside the namespaces only (no
// address on the bridge, no default route, IPv6 off), so their traffic
// reaches nothing but each other.
const (
	subnet     = "10.213.7."
	serverPort = "7233"
	storePort  = "7300" // start-dev's S3 endpoint
	// devPortBesideOfficial is start-dev's frontend port when the official
	// server has serverPort: wdc then uses only start-dev's S3 store.
	devPortBesideOfficial = "7250"
	// blackholeTable is the nft table (family inet) whose presence in a
	// host's namespace is a partition.
	blackholeTable = "wdc_blackhole"
)

// envRuns is how many times each test repeats its partition: default 1
// (`make test`), `make soak` 10.
const envRuns = "WDC_HOSTS_RUNS"

// runs is $WDC_HOSTS_RUNS, else 1; anything but a positive number fails
// the test.
func runs(t *testing.T) int {
	t.Helper()
	s := os.Getenv(envRuns)
	if s == "" {
		return 1
	}
	n, err := strconv.Atoi(s)
	if err != nil || n < 1 {
		t.Fatalf("%s=%q: want a positive number of runs", envRuns, s)
	}
	return n
}

// cluster is hosts on one bridge: a runs the dev server; in newCluster's
// three also a control plane, and b and c run agents (startRound).
type cluster struct {
	bin     string
	bridge  string
	a, b, c *host
	// all is every host, a first.
	all []*host
	// address is the frontend's host:port, on a's address.
	address string
	// s3Env is the artifact store's environment (WDC_BLOB_URL, AWS_*)
	// that every wdc process gets.
	s3Env []string
	// server is start-dev on a, started with serverArgs.
	server     *proc
	serverArgs []string
	// official is the official temporal-server on PostgreSQL that a runs
	// at address beside start-dev (its S3 store); nil: start-dev is the
	// Temporal server.
	official *officialServer
}

// host is one network namespace with its own address, directory (its
// HOME and data dir) and processes.
type host struct {
	c    *cluster
	name string // "a", "b", …
	ns   string
	veth string // the bridge's end of its veth pair
	peer string // the other end, eth0 in the namespace
	addr string
	dir  string
}

// proc is a long-running wdc process on a host: stdout to out, stderr to
// log.
type proc struct {
	h        *host
	name     string
	cmd      *exec.Cmd
	out, log string
	exited   chan struct{}
}

// newCluster builds the three hosts, starts the dev server and the
// control plane on a, and removes everything when the test ends. It fails
// the test without root, ip or nft, and when a name it would use exists.
func newCluster(t *testing.T) *cluster {
	t.Helper()
	c := newHosts(t, "a", "b", "c")
	cp := c.a.start(t, "control-plane", "control-plane", "--identity", "off", "--address", c.address)
	cp.waitOut(t, 60*time.Second, "control plane polling")
	return c
}

// newHosts builds hosts of these names (at least three; the first is a),
// starts the dev server on a, and removes everything when the test ends.
func newHosts(t *testing.T, names ...string) *cluster {
	t.Helper()
	return newHostsOn(t, false, names...)
}

// newHostsOn is newHosts with, if official, PostgreSQL and the official
// temporal-server on a as the Temporal server (start-dev then serves the
// S3 store only).
func newHostsOn(t *testing.T, official bool, names ...string) *cluster {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Fatal("hosts: network namespaces need root (CI runs as root): run as root, or skip the package with -short")
	}
	for _, tool := range []string{"ip", "nft"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Fatalf("hosts: %s not found (Debian: apt-get install iproute2 nftables; .ci/run installs them): %v", tool, err)
		}
	}
	bin, err := os.Executable()
	require.NoError(t, err)
	var rnd [3]byte
	_, err = rand.Read(rnd[:])
	require.NoError(t, err)
	prefix := "wh" + hex.EncodeToString(rnd[:])[:5] // interface names: 15 bytes at most
	c := &cluster{bin: bin, bridge: prefix + "-br"}
	root := t.TempDir()
	require.GreaterOrEqual(t, len(names), 3)
	for i, name := range names {
		h := &host{c: c, name: name, ns: prefix + "-" + name, veth: prefix + "-" + name + "br", peer: prefix + "-" + name + "ns",
			addr: subnet + strconv.Itoa(i+1), dir: filepath.Join(root, name)}
		require.NoError(t, os.MkdirAll(filepath.Join(h.dir, "tmp"), 0o755))
		c.all = append(c.all, h)
	}
	c.a, c.b, c.c = c.all[0], c.all[1], c.all[2]
	c.address = c.a.addr + ":" + serverPort
	c.checkUnused(t)
	t.Cleanup(func() { c.teardown(t) })
	t.Cleanup(func() { c.checkNoGoAway(t) }) // after the processes stop
	c.build(t)
	if official {
		c.official = &officialServer{}
	}
	c.startServer(t)
	if official {
		c.startOfficial(t)
	}
	return c
}

func (c *cluster) hosts() []*host { return c.all }

// checkUnused fails the test if a namespace, veth or bridge of a name it
// would create exists: it is someone else's.
func (c *cluster) checkUnused(t *testing.T) {
	t.Helper()
	out, err := exec.Command("ip", "netns", "list").CombinedOutput()
	require.NoError(t, err, "ip netns list: %s", out)
	for _, h := range c.hosts() {
		for _, line := range strings.Split(string(out), "\n") {
			if f := strings.Fields(line); len(f) > 0 && f[0] == h.ns {
				t.Fatalf("hosts: network namespace %s exists and is not this test's", h.ns)
			}
		}
	}
	links := []string{c.bridge}
	for _, h := range c.hosts() {
		links = append(links, h.veth, h.peer)
	}
	for _, link := range links {
		if exec.Command("ip", "link", "show", "dev", link).Run() == nil {
			t.Fatalf("hosts: network interface %s exists and is not this test's", link)
		}
	}
}

// ip runs `ip args…` and fails the test on error.
func ip(t *testing.T, args ...string) {
	t.Helper()
	out, err := exec.Command("ip", args...).CombinedOutput()
	require.NoError(t, err, "ip %s: %s", strings.Join(args, " "), out)
}

// noIPv6 turns IPv6 off on interface dev (in namespace ns, "" for the
// root namespace) before it comes up, so it gets no link-local address.
func noIPv6(t *testing.T, ns, dev string) {
	t.Helper()
	path := "/proc/sys/net/ipv6/conf/" + dev + "/disable_ipv6"
	if _, err := os.Stat("/proc/sys/net/ipv6"); err != nil {
		return // no IPv6 in this kernel
	}
	args := []string{"sh", "-c", "echo 1 > " + path}
	if ns != "" {
		args = append([]string{"ip", "netns", "exec", ns}, args...)
	}
	out, err := exec.Command(args[0], args[1:]...).CombinedOutput()
	require.NoError(t, err, "%s: %s", strings.Join(args, " "), out)
}

// build creates the bridge and each host's namespace and veth pair.
func (c *cluster) build(t *testing.T) {
	t.Helper()
	ip(t, "link", "add", c.bridge, "type", "bridge")
	noIPv6(t, "", c.bridge)
	ip(t, "link", "set", c.bridge, "up")
	for _, h := range c.hosts() {
		ip(t, "netns", "add", h.ns)
		ip(t, "link", "add", h.veth, "type", "veth", "peer", "name", h.peer)
		noIPv6(t, "", h.veth)
		ip(t, "link", "set", h.veth, "master", c.bridge, "up")
		ip(t, "link", "set", h.peer, "netns", h.ns)
		ip(t, "-n", h.ns, "link", "set", h.peer, "name", "eth0")
		noIPv6(t, h.ns, "eth0")
		ip(t, "-n", h.ns, "addr", "add", h.addr+"/24", "dev", "eth0")
		ip(t, "-n", h.ns, "link", "set", "eth0", "up")
		ip(t, "-n", h.ns, "link", "set", "lo", "up")
	}
}

// teardown kills every process in the namespaces (by PID), then removes
// the namespaces, veths and bridge this test created. Errors are logged.
func (c *cluster) teardown(t *testing.T) {
	for _, h := range c.hosts() {
		for range 50 {
			out, err := exec.Command("ip", "netns", "pids", h.ns).Output()
			if err != nil || len(bytes.TrimSpace(out)) == 0 {
				break
			}
			for _, f := range strings.Fields(string(out)) {
				if pid, err := strconv.Atoi(f); err == nil && pid > 1 {
					_ = syscall.Kill(pid, syscall.SIGKILL)
				}
			}
			time.Sleep(100 * time.Millisecond)
		}
		if out, err := exec.Command("ip", "netns", "del", h.ns).CombinedOutput(); err != nil && !strings.Contains(string(out), "No such file") {
			t.Logf("hosts: ip netns del %s: %v: %s", h.ns, err, out)
		}
		// Gone with its peer when the namespace went; deleting it is for
		// a build that stopped half-way.
		_ = exec.Command("ip", "link", "del", h.veth).Run()
	}
	if out, err := exec.Command("ip", "link", "del", c.bridge).CombinedOutput(); err != nil && !strings.Contains(string(out), "Cannot find device") {
		t.Logf("hosts: ip link del %s: %v: %s", c.bridge, err, out)
	}
}

// checkNoGoAway fails the test if the frontend closed a wdc process's
// connection for pinging more often than its keepalive policy allows
// (worker.KeepAlive must suit a stock server): gRPC logs that at error
// level, which every process's environment turns on.
func (c *cluster) checkNoGoAway(t *testing.T) {
	for _, h := range c.hosts() {
		logs, _ := filepath.Glob(filepath.Join(h.dir, "*.log"))
		for _, f := range logs {
			b, _ := os.ReadFile(f)
			if bytes.Contains(b, []byte("too_many_pings")) {
				t.Errorf("host %s: %s: the server sent GOAWAY too_many_pings: the keepalive pings too often", h.name, filepath.Base(f))
			}
		}
	}
}

// startServer runs `wdc server start-dev` on a, bound to a's address
// only, with its S3 endpoint and its state in a's SQLite file (so that it
// can start again where it stopped), and reads the store's environment
// from its JSON.
func (c *cluster) startServer(t *testing.T) {
	t.Helper()
	key := make([]byte, 16)
	_, err := rand.Read(key)
	require.NoError(t, err)
	c.serverArgs = []string{"server", "start-dev", "--ip", c.a.addr, "--port", c.devPort(), "--s3-port", storePort, "--headless",
		"--db-filename", filepath.Join(c.a.dir, "temporal.db"),
		"--s3-access-key", "hosts", "--s3-secret-key", hex.EncodeToString(key), "-o", "json"}
	c.server = c.restartServer(t, "start-dev")
}

// restartServer starts the dev server (name: its log files) and waits
// until it prints its address; the first start reads the store's
// environment.
func (c *cluster) restartServer(t *testing.T, name string) *proc {
	t.Helper()
	srv, err := c.startServerOnce(t, name)
	require.NoError(t, err)
	return srv
}

// startServerOnce is restartServer with its failure returned (start-dev
// exited, or not ready within 2 minutes), for callers off the test's
// goroutine.
func (c *cluster) startServerOnce(t *testing.T, name string) (*proc, error) {
	srv := c.a.start(t, name, c.serverArgs...)
	var info struct {
		Address string `json:"address"`
		S3      struct {
			Env map[string]string `json:"env"`
		} `json:"s3"`
	}
	err := srv.waitReady("start-dev", 200*time.Millisecond, func() error {
		b, _ := os.ReadFile(srv.out)
		if json.Unmarshal(b, &info) != nil || info.Address == "" {
			return errors.New("no address printed yet")
		}
		return nil
	})
	if err != nil {
		return srv, err
	}
	if want := c.a.addr + ":" + c.devPort(); info.Address != want || info.S3.Env["WDC_BLOB_URL"] == "" {
		srv.stop()
		return srv, fmt.Errorf("start-dev at %q (want %q), S3 environment %v", info.Address, want, info.S3.Env)
	}
	if c.s3Env == nil {
		for k, v := range info.S3.Env {
			c.s3Env = append(c.s3Env, k+"="+v)
		}
	}
	return srv, nil
}

// devPort is start-dev's frontend port.
func (c *cluster) devPort() string {
	if c.official != nil {
		return devPortBesideOfficial
	}
	return serverPort
}

// env is the whole environment of a wdc process on h: nothing of the
// test's, gRPC's error log on (checkNoGoAway), and h's clock offset.
func (h *host) env() []string {
	return append([]string{"HOME=" + h.dir, "TMPDIR=" + filepath.Join(h.dir, "tmp"), "PATH=/usr/sbin:/usr/bin:/sbin:/bin",
		envRunCLI + "=1", "GRPC_GO_LOG_SEVERITY_LEVEL=error", envClockFile + "=" + h.clockFile()}, h.c.s3Env...)
}

// clockFile says how far h's clock is off (envClockFile).
func (h *host) clockFile() string { return filepath.Join(h.dir, "clock-offset") }

// command is `wdc args…` run in h's namespace with h's environment only.
func (h *host) command(ctx context.Context, args ...string) *exec.Cmd {
	return h.commandWith(ctx, h.env(), args...)
}

// commandWith is `wdc args…` run in h's namespace with the environment env only.
func (h *host) commandWith(ctx context.Context, env []string, args ...string) *exec.Cmd {
	return h.commandOf(ctx, env, h.c.bin, args...)
}

// commandOf is the program exe run in h's namespace with the environment
// env only.
func (h *host) commandOf(ctx context.Context, env []string, exe string, args ...string) *exec.Cmd {
	argv := append([]string{"netns", "exec", h.ns, "env", "-i"}, env...)
	argv = append(append(argv, exe), args...)
	cmd := exec.CommandContext(ctx, "ip", argv...)
	cmd.Dir = h.dir
	return cmd
}

// start runs a long-running wdc process on h (ip and env exec it, so its
// PID is wdc's), killed by PID when the test ends.
func (h *host) start(t *testing.T, name string, args ...string) *proc {
	t.Helper()
	return h.startCmd(t, name, h.command(context.Background(), args...))
}

// startCmd is start for any command run in h's namespace.
func (h *host) startCmd(t *testing.T, name string, cmd *exec.Cmd) *proc {
	t.Helper()
	p := &proc{h: h, name: name, out: filepath.Join(h.dir, name+".out"), log: filepath.Join(h.dir, name+".log"), exited: make(chan struct{})}
	out, err := os.Create(p.out)
	require.NoError(t, err)
	log, err := os.Create(p.log)
	require.NoError(t, err)
	p.cmd = cmd
	p.cmd.Stdout, p.cmd.Stderr = out, log
	p.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	require.NoError(t, p.cmd.Start())
	go func() {
		_ = p.cmd.Wait()
		out.Close()
		log.Close()
		close(p.exited)
	}()
	t.Cleanup(func() {
		p.stop()
		if t.Failed() {
			t.Logf("host %s: %s:\n%s", h.name, name, p.tail())
		}
	})
	return p
}

// waitReady polls ready every poll until it returns nil, for up to two
// minutes; it stops the process and says why when it exits or the time
// runs out (name names the process in the error).
func (p *proc) waitReady(name string, poll time.Duration, ready func() error) error {
	deadline := time.Now().Add(2 * time.Minute)
	for {
		err := ready()
		if err == nil {
			return nil
		}
		select {
		case <-p.exited:
			return fmt.Errorf("%s exited: %s", name, p.tail())
		default:
		}
		if time.Now().After(deadline) {
			p.stop()
			return fmt.Errorf("%s not ready within 2m (%v): %s", name, err, p.tail())
		}
		time.Sleep(poll)
	}
}

// stop kills the process (SIGKILL, by PID) and waits for it.
func (p *proc) stop() {
	_ = p.cmd.Process.Kill()
	<-p.exited
}

// tail is the end of the process's stdout and stderr.
func (p *proc) tail() string {
	var s strings.Builder
	for _, f := range []string{p.out, p.log} {
		b, _ := os.ReadFile(f)
		if len(b) > 6000 {
			b = b[len(b)-6000:]
		}
		fmt.Fprintf(&s, "--- %s\n%s\n", filepath.Base(f), b)
	}
	return s.String()
}

// waitOut waits until the process's stdout contains want.
func (p *proc) waitOut(t *testing.T, within time.Duration, want string) {
	t.Helper()
	deadline := time.Now().Add(within)
	for {
		b, _ := os.ReadFile(p.out)
		if bytes.Contains(b, []byte(want)) {
			return
		}
		select {
		case <-p.exited:
			t.Fatalf("host %s: %s exited before printing %q:\n%s", p.h.name, p.name, want, p.tail())
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("host %s: %s did not print %q within %s:\n%s", p.h.name, p.name, want, within, p.tail())
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// cli runs a short wdc command on h against the frontend and returns its
// stdout, or an error with its stderr.
func (h *host) cli(args ...string) ([]byte, error) {
	return h.output("wdc", h.env(), append(args, "--address", h.c.address)...)
}

// output runs this binary as name (with env) on h, within 30 s, and
// returns its stdout, or an error with its stderr.
func (h *host) output(name string, env []string, args ...string) ([]byte, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cmd := h.commandWith(ctx, env, args...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return out, fmt.Errorf("%s %s: %w: %s", name, strings.Join(args, " "), err, bytes.TrimSpace(stderr.Bytes()))
	}
	return out, nil
}

// cut blackholes h: every packet in or out of its link is dropped, its
// sockets stay open.
func (h *host) cut(t *testing.T) {
	t.Helper()
	require.NoError(t, h.partition(blackholeRules))
}

// heal ends h's partition.
func (h *host) heal(t *testing.T) {
	t.Helper()
	require.NoError(t, h.unpartition())
}

// blackholeRules drop every packet on a host's link (table
// blackholeTable, so that unpartition removes them).
var blackholeRules = fmt.Sprintf(`table inet %s {
	chain input { type filter hook input priority -10; policy accept; iifname "eth0" drop; }
	chain output { type filter hook output priority -10; policy accept; oifname "eth0" drop; }
}
`, blackholeTable)

// partition loads nft rules (a table named blackholeTable) into h's
// namespace.
func (h *host) partition(rules string) error {
	cmd := exec.Command("ip", "netns", "exec", h.ns, "nft", "-f", "-")
	cmd.Stdin = strings.NewReader(rules)
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("nft on host %s: %w: %s", h.name, err, out)
	}
	return nil
}

// unpartition removes h's partition table.
func (h *host) unpartition() error {
	if out, err := exec.Command("ip", "netns", "exec", h.ns, "nft", "delete", "table", "inet", blackholeTable).CombinedOutput(); err != nil {
		return fmt.Errorf("nft on host %s: %w: %s", h.name, err, out)
	}
	return nil
}

// round is one repetition of a test: an agent on b and one on c, with
// worker IDs and a label of their own, so that the round's task runs on
// them only.
type round struct {
	c      *cluster
	label  string
	agents map[string]*host // by worker ID
	procs  []*proc
}

// startRound starts the round's agents (default stale window and
// heartbeat, unless agentFlags say otherwise) and waits for both to
// register.
func (c *cluster) startRound(t *testing.T, label string, agentFlags ...string) *round {
	t.Helper()
	r := &round{c: c, label: label, agents: map[string]*host{}}
	for _, h := range []*host{c.b, c.c} {
		id := h.name + "-" + label
		args := append([]string{"agent", "--identity", "off", "--worker-id", id, "--cpu", "1", "--memory", "1Gi", "--label", "hosts-round=" + label,
			"--data-dir", filepath.Join(h.dir, "data"), "--address", c.address, "--log-level", "info"}, agentFlags...)
		p := h.start(t, "agent-"+id, args...)
		r.agents[id], r.procs = h, append(r.procs, p)
	}
	for _, p := range r.procs {
		p.waitOut(t, 60*time.Second, "registered (incarnation")
	}
	return r
}

// stop kills the round's agents.
func (r *round) stop() {
	for _, p := range r.procs {
		p.stop()
	}
}

// submit submits task id: a bash script that appends "<unix time>
// <attempt> <what>" lines to the returned trace file every 0.1 s. Attempt
// 1 runs until the stop file exists, later attempts for 1 s.
func (r *round) submit(t *testing.T, id string, ttl time.Duration) (trace, stop string) {
	t.Helper()
	dir := t.TempDir()
	trace, stop = filepath.Join(dir, "trace"), filepath.Join(dir, "stop")
	script := `t() { echo "$EPOCHREALTIME $WDC_ATTEMPT $1" >> "$TRACE"; }
t start; n=0
while if [ "$WDC_ATTEMPT" = 1 ]; then [ ! -e "$STOP" ]; else [ $n -lt 10 ]; fi; do t tick; sleep 0.1; n=$((n+1)); done
t end; echo ok > outputs/ok`
	env := envelope.Envelope{
		TaskID: id, RunID: "run-" + id, WorldID: "hosts",
		Command:   []string{"/bin/bash", "-c", script},
		Env:       map[string]string{"PATH": "/usr/bin:/bin", "TRACE": trace, "STOP": stop},
		Resources: resource.List{CPUMillis: 100},
		Selector:  map[string]string{"hosts-round": r.label},
	}
	env.Normalize()
	require.NoError(t, env.Validate(true))
	b, err := json.Marshal(env)
	require.NoError(t, err)
	path := filepath.Join(dir, "envelope.json")
	require.NoError(t, os.WriteFile(path, b, 0o644))
	_, err = r.c.a.cli("tasks", "submit", path, "--lease-ttl", ttl.String(), "--backoff-initial", "100ms", "--backoff-max", "1s", "-o", "json")
	require.NoError(t, err)
	return trace, stop
}

// status is the task's view (`wdc tasks status -o json` on a).
func (c *cluster) status(id string) (api.TaskView, error) {
	var v api.TaskView
	out, err := c.a.cli("tasks", "status", id, "-o", "json")
	if err != nil {
		return v, err
	}
	return v, json.Unmarshal(out, &v)
}

// waitHolder waits until attempt n of task id runs and returns the host
// and worker ID holding its lease.
func (r *round) waitHolder(t *testing.T, id string, n int64) (*host, string) {
	t.Helper()
	var v api.TaskView
	waitFor(t, 60*time.Second, fmt.Sprintf("attempt %d of %s running", n, id), func() (bool, error) {
		var err error
		v, err = r.c.status(id)
		return err == nil && v.AttemptDir != "" && v.Lease != nil && v.Lease.Attempt == n, err
	})
	h := r.agents[v.Lease.WorkerID]
	require.NotNil(t, h, "lease held by %s, not one of the round's agents", v.Lease.WorkerID)
	return h, v.Lease.WorkerID
}

// waitEnded waits until task id is in a terminal state.
func (c *cluster) waitEnded(t *testing.T, id string, within time.Duration) api.TaskView {
	t.Helper()
	var v api.TaskView
	waitFor(t, within, id+" ended", func() (bool, error) {
		var err error
		v, err = c.status(id)
		return err == nil && v.State.Terminal(), err
	})
	return v
}

// waitFor polls cond every 0.5 s until it holds, failing the test after
// within with cond's last error.
func waitFor(t *testing.T, within time.Duration, what string, cond func() (bool, error)) {
	t.Helper()
	deadline := time.Now().Add(within)
	for {
		ok, err := cond()
		if ok {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within %s (last error: %v)", what, within, err)
		}
		time.Sleep(500 * time.Millisecond)
	}
}

// report is the part of an executor's result.json these tests read.
type report struct {
	Outcome    string    `json:"outcome"`
	Reason     string    `json:"reason"`
	Message    string    `json:"message"`
	StartedAt  time.Time `json:"started_at"`
	FinishedAt time.Time `json:"finished_at"`
}

// readReport waits for the result.json the executor on h wrote for
// worker's attempt of task id with fence.
func readReport(t *testing.T, h *host, worker, id string, attempt, fence int64, within time.Duration) report {
	t.Helper()
	path := filepath.Join(h.dir, "data", "work", worker, id, fmt.Sprintf("%d-%d", attempt, fence), "result.json")
	var rep report
	waitFor(t, within, "host "+h.name+": "+path, func() (bool, error) {
		b, err := os.ReadFile(path)
		if err != nil {
			return false, err
		}
		return true, json.Unmarshal(b, &rep)
	})
	return rep
}

// readTrace parses a trace file into each attempt's times, in order.
func readTrace(t *testing.T, path string) map[int64][]time.Time {
	t.Helper()
	b, err := os.ReadFile(path)
	require.NoError(t, err)
	out := map[int64][]time.Time{}
	for _, line := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		f := strings.Fields(line)
		require.GreaterOrEqual(t, len(f), 3, "trace line %q", line)
		secs, micros, ok := strings.Cut(f[0], ".")
		require.True(t, ok, "trace line %q", line)
		s, err1 := strconv.ParseInt(secs, 10, 64)
		us, err2 := strconv.ParseInt(micros, 10, 64)
		attempt, err3 := strconv.ParseInt(f[1], 10, 64)
		require.NoError(t, errors.Join(err1, err2, err3), "trace line %q", line)
		out[attempt] = append(out[attempt], time.Unix(s, us*1000))
	}
	return out
}
