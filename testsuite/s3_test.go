package testsuite

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.temporal.io/sdk/client"

	"github.com/wdc-runtime/wdc/api"
	wdcclient "github.com/wdc-runtime/wdc/client"
	"github.com/wdc-runtime/wdc/envelope"
	"github.com/wdc-runtime/wdc/fleet"
	"github.com/wdc-runtime/wdc/internal/blobstore"
	"github.com/wdc-runtime/wdc/internal/executor"
	s3test "github.com/wdc-runtime/wdc/internal/testenv/s3"
	"github.com/wdc-runtime/wdc/lease"
	"github.com/wdc-runtime/wdc/resource"
	"github.com/wdc-runtime/wdc/worker"
)

// Namespaces of the no-shared-directory tests: each runs its own control
// plane on its own bucket, apart from the suite's.
const (
	nsS3Demo   = "wdc-s3-demo"
	nsS3Big    = "wdc-s3-big"
	nsS3Outage = "wdc-s3-outage"
)

// s3Setup is a bucket of the embedded S3 server and directories that share
// nothing: one per process, none under another.
type s3Setup struct {
	url     string
	secret  string
	env     []string // for subprocesses: the credentials, nothing of wdc's
	nsc     client.Client
	wc      *wdcclient.Client
	ns      string
	cpDir   string
	baseDir string
}

func newS3Setup(t *testing.T, ns string) *s3Setup {
	t.Helper()
	url := s3test.Bucket(t)
	srv, err := s3test.Start()
	require.NoError(t, err)
	s := &s3Setup{url: url, secret: srv.SecretKey, ns: ns, nsc: dialNamespace(t, ns), baseDir: t.TempDir()}
	s.wc = &wdcclient.Client{C: s.nsc}
	for _, kv := range os.Environ() {
		if k, _, _ := strings.Cut(kv, "="); k == "WDC_BLOB_URL" || k == "WDC_DATA_DIR" || strings.HasPrefix(k, "AWS_") {
			continue
		}
		s.env = append(s.env, kv)
	}
	for k, v := range srv.Env() {
		s.env = append(s.env, k+"="+v)
	}
	s.env = append(s.env, envRunCLI+"=1")
	s.cpDir = s.dir(t, "control-plane")
	return s
}

// dir makes a data directory of its own for one process.
func (s *s3Setup) dir(t *testing.T, name string) string {
	d := filepath.Join(s.baseDir, name)
	require.NoError(t, os.Mkdir(d, 0o700))
	return d
}

// spawn runs this binary as `wdc ARGS…` in the test's namespace with the
// S3 credentials only; its output goes to a log kept with a failed test.
func (s *s3Setup) spawn(t *testing.T, name string, args ...string) (*exec.Cmd, string) {
	t.Helper()
	logPath := filepath.Join(t.TempDir(), name+".log")
	logFile, err := os.Create(logPath)
	require.NoError(t, err)
	c := exec.Command(os.Args[0], append(args, "--address", suite.srv.FrontendHostPort(), "-n", s.ns, "--log-level", "info")...)
	c.Env = s.env
	c.Stdout, c.Stderr = logFile, logFile
	c.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	require.NoError(t, c.Start())
	stopAtCleanup(t, c, 10*time.Second, func() {
		logFile.Close()
		if t.Failed() {
			b, _ := os.ReadFile(logPath)
			t.Logf("%s log:\n%s", name, b)
		}
	})
	return c, logPath
}

// startControlPlane runs `wdc control-plane` with its own data dir, the
// bucket and the extra flags (identity flags among them; none: --identity
// off), and waits until it polls.
func (s *s3Setup) startControlPlane(t *testing.T, extra ...string) string {
	t.Helper()
	if len(extra) == 0 {
		extra = []string{"--identity", "off"}
	}
	_, log := s.spawn(t, "control-plane", append([]string{"control-plane", "--data-dir", s.cpDir, "--blob-url", s.url}, extra...)...)
	waitFor(t, 20*time.Second, "the control plane polling wdc-control", func() bool {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		return s.wc.RequirePoller(ctx, api.ControlTaskQueue) == nil
	})
	return log
}

// assertApart checks that the directories are distinct, none inside
// another, and that none holds a file:// artifact store (blobs/): nothing
// went through a shared path.
func assertApart(t *testing.T, dirs ...string) {
	t.Helper()
	for i, a := range dirs {
		for j, b := range dirs {
			if i != j {
				rel, err := filepath.Rel(a, b)
				require.NoError(t, err)
				require.True(t, strings.HasPrefix(rel, ".."), "%s is inside %s", b, a)
			}
		}
		assert.NoDirExists(t, filepath.Join(a, "blobs"), "no file:// store in %s", a)
	}
}

// bucketKeys lists the bucket's keys under prefix.
func bucketKeys(t *testing.T, store *blobstore.Store, prefix string) []string {
	t.Helper()
	keys, err := store.List(context.Background(), prefix)
	require.NoError(t, err)
	return keys
}

// The reference scenario with nothing shared but an S3 endpoint: the
// control plane (a `wdc control-plane` process) and two agents each have a
// data directory of their own, and artifacts pass only through a bucket of
// the embedded S3 server. Attempt 1's executor is frozen after its command
// ran (the agents run in this process for that fault hook; each with its
// own work dir and its own store client), its lease expires, attempt 2 on
// the other worker is accepted; attempt 1 then wakes up, stages its
// outputs in the bucket and submits: refused with stale_fence, its staged
// objects are deleted and never promoted.
func TestNoSharedDirectoryDemoOverS3(t *testing.T) {
	s := newS3Setup(t, nsS3Demo)
	s.startControlPlane(t)
	ctx := context.Background()
	label := map[string]string{"suite-test": testLabel(t)}
	thaw := make(chan struct{})
	var thawed bool
	release := func() {
		if !thawed {
			thawed = true
			close(thaw)
		}
	}
	t.Cleanup(release)
	reports := make(chan executor.Report, 4)
	staleDigest := make(chan string, 1)
	dirs := map[string]string{}
	for _, id := range []string{"s3demo-a", "s3demo-b"} {
		dataDir := s.dir(t, id)
		dirs[id] = dataDir
		store, err := blobstore.Open(ctx, s.url)
		require.NoError(t, err)
		t.Cleanup(func() { store.Close() })
		a, err := worker.StartAgent(ctx, s.nsc, worker.AgentOptions{
			Registration: fleet.Registration{
				WorkerID: id, Capacity: resource.List{CPUMillis: 2000, MemoryBytes: 1 << 30}, Labels: label,
				StaleAfter: 15 * time.Second, OfflineAfter: 60 * time.Second,
			},
			WorkDir: filepath.Join(dataDir, "work", id), Blobs: store,
			Faults: executor.Faults{Freeze: func(c lease.Claim) {
				if c.Attempt != 1 {
					return
				}
				out := filepath.Join(executor.TaskDir(filepath.Join(dirs[c.WorkerID], "work", c.WorkerID), c), "outputs", "summary.txt")
				d, _, err := blobstore.HashFile(out)
				if err == nil {
					staleDigest <- d
				}
				<-thaw
			}},
			OnReport: func(r executor.Report) { reports <- r },
		})
		require.NoError(t, err)
		t.Cleanup(func() {
			sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			a.Stop(sctx)
		})
	}
	waitFor(t, 15*time.Second, "both workers ACTIVE", func() bool {
		views, err := s.wc.ListWorkers(ctx, string(fleet.Active))
		return err == nil && len(views) >= 2
	})

	admin, err := blobstore.Open(ctx, s.url)
	require.NoError(t, err)
	defer admin.Close()
	dataDigest, dataSize, err := admin.Put(ctx, strings.NewReader("station,temp\nA,12.5\nB,13.0\n"))
	require.NoError(t, err)
	env := envelope.Envelope{
		TaskID: "s3demo-task", RunID: "s3demo-run", WorldID: "suite",
		Command:   []string{"/bin/sh", "-c", `{ echo "fence $WDC_FENCE"; sha256sum inputs/data.csv; wc -l < inputs/data.csv; } > outputs/summary.txt`},
		Env:       map[string]string{"PATH": "/usr/bin:/bin", "LC_ALL": "C"},
		Inputs:    []envelope.Input{{Name: "data.csv", Digest: dataDigest, SizeBytes: dataSize}},
		Resources: resource.List{CPUMillis: 500},
		Selector:  label,
	}
	env.Normalize()
	require.NoError(t, env.Validate(true))
	_, err = s.wc.SubmitTask(ctx, env, api.TaskOptions{
		LeaseTTL: 3 * time.Second, MaxAttempts: 3, SelectInterval: 200 * time.Millisecond,
		Backoff: lease.Backoff{Initial: 200 * time.Millisecond, Max: time.Second},
	})
	require.NoError(t, err)

	wctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	out, err := s.wc.WaitTask(wctx, env.TaskID)
	require.NoError(t, err)
	require.Equal(t, api.TaskCompleted, out.State)
	view, err := s.wc.Task(ctx, env.TaskID)
	require.NoError(t, err)
	require.Len(t, view.Leases, 2)
	first, second := view.Leases[0], view.Leases[1]
	assert.Equal(t, [2]int64{1, 1}, [2]int64{first.Attempt, first.Fence})
	assert.Equal(t, [2]int64{2, 2}, [2]int64{second.Attempt, second.Fence})
	assert.Equal(t, lease.Expired, first.State)
	assert.NotEqual(t, first.WorkerID, second.WorkerID, "attempt 2 runs on the other worker")
	assert.Equal(t, first.EnvelopeDigest, second.EnvelopeDigest)
	require.Len(t, view.Directives, 1)
	assert.Equal(t, lease.ReasonLeaseExpired, view.Directives[0].Reason)
	require.NotNil(t, view.Result)
	require.Len(t, view.Result.Artifacts, 1)
	accepted := view.Result.Artifacts[0].Digest
	assert.True(t, strings.HasPrefix(view.AttemptDir, dirs[second.WorkerID]+"/"), "attempt 2 ran in its worker's own dir: %s", view.AttemptDir)

	var stale string
	select {
	case stale = <-staleDigest:
	case <-time.After(5 * time.Second):
		t.Fatal("attempt 1 never froze")
	}
	require.NotEqual(t, accepted, stale, "the attempts' summaries differ (they name their fence)")
	// The accepted summary is in the bucket, read back through S3.
	assert.Contains(t, bucketKeys(t, admin, "sha256/"), "sha256/"+strings.TrimPrefix(accepted, "sha256:"))

	// Attempt 1 wakes up, stages and submits: refused by the fence.
	release()
	var rep executor.Report
	for rep.Claim.Attempt != 1 {
		select {
		case rep = <-reports:
		case <-time.After(30 * time.Second):
			t.Fatal("attempt 1 never reported after waking up")
		}
	}
	assert.Equal(t, executor.OutcomeRejected, rep.Outcome)
	assert.Equal(t, string(lease.RejectStaleFence), rep.Reason, rep.Message)
	require.Len(t, rep.Artifacts, 1, "attempt 1 did stage its output in the bucket")
	assert.Equal(t, stale, rep.Artifacts[0].Digest)
	assert.True(t, strings.HasPrefix(rep.Claim.WorkerID, "s3demo-"))

	assert.Empty(t, bucketKeys(t, admin, "staging/"), "the stale attempt's staged objects are deleted")
	contents := bucketKeys(t, admin, "sha256/")
	assert.NotContains(t, contents, "sha256/"+strings.TrimPrefix(stale, "sha256:"), "and never promoted")
	want := []string{"sha256/" + strings.TrimPrefix(dataDigest, "sha256:"), "sha256/" + strings.TrimPrefix(accepted, "sha256:")}
	for _, l := range view.Result.Logs {
		want = append(want, "sha256/"+strings.TrimPrefix(l.Digest, "sha256:"))
	}
	assert.ElementsMatch(t, dedupe(want), contents, "the input, the accepted output and its logs: nothing else")

	// Each attempt ran in its own worker's directory; nothing used a
	// file:// store or another process's directory.
	for _, l := range view.Leases {
		dir := executor.TaskDir(filepath.Join(dirs[l.WorkerID], "work", l.WorkerID), lease.ClaimOf(l))
		assert.FileExists(t, filepath.Join(dir, "result.json"), "attempt %d in %s", l.Attempt, dir)
		other := dirs[map[string]string{"s3demo-a": "s3demo-b", "s3demo-b": "s3demo-a"}[l.WorkerID]]
		assert.NoDirExists(t, filepath.Join(other, "work", l.WorkerID), "worker %s never wrote into %s", l.WorkerID, other)
	}
	assertApart(t, s.cpDir, dirs["s3demo-a"], dirs["s3demo-b"])
	entries, err := os.ReadDir(s.cpDir)
	require.NoError(t, err)
	assert.Empty(t, entries, "the control plane wrote nothing to its data dir: ingest went through S3")
}

func dedupe(keys []string) []string {
	seen := map[string]bool{}
	var out []string
	for _, k := range keys {
		if !seen[k] {
			seen[k] = true
			out = append(out, k)
		}
	}
	return out
}

// One task with a 100 MiB input and a 100 MiB output, every process apart:
// `wdc control-plane`, one `wdc agent` and the submitting CLI each have
// their own data directory, and the bytes travel only through the S3
// endpoint: `tasks submit` uploads the input, the agent downloads it,
// transforms it and stages the output, ingest re-hashes it into the bucket
// and `tasks result --output-dir` copies it out, verified. The S3 secret
// appears in no log and no workflow history.
func TestHundredMiBThroughS3WithoutASharedDirectory(t *testing.T) {
	s := newS3Setup(t, nsS3Big)
	cpLog := s.startControlPlane(t)
	agentDir, submitDir := s.dir(t, "agent"), s.dir(t, "submitter")
	_, agentLog := s.spawn(t, "agent", "agent", "--identity", "off", "--worker-id", "s3big-a", "--cpu", "1", "--memory", "1Gi",
		"--label", "suite-test="+testLabel(t), "--data-dir", agentDir, "--blob-url", s.url)
	waitFor(t, 20*time.Second, "the agent ACTIVE", func() bool {
		v, err := s.wc.Worker(context.Background(), "s3big-a")
		return err == nil && v.State == fleet.Active
	})

	const size = 100 << 20
	in := filepath.Join(submitDir, "input.bin")
	f, err := os.Create(in)
	require.NoError(t, err)
	rng := rand.NewChaCha8([32]byte{7})
	inHash, outHash := sha256.New(), sha256.New()
	buf := make([]byte, 1<<20)
	for range size / len(buf) {
		_, _ = rng.Read(buf)
		_, err := f.Write(buf)
		require.NoError(t, err)
		inHash.Write(buf)
		for i, b := range buf { // what `tr a-z A-Z` makes of it
			if b >= 'a' && b <= 'z' {
				buf[i] = b - 'a' + 'A'
			}
		}
		outHash.Write(buf)
	}
	require.NoError(t, f.Close())
	wantIn, wantOut := "sha256:"+hex.EncodeToString(inHash.Sum(nil)), "sha256:"+hex.EncodeToString(outHash.Sum(nil))
	task := filepath.Join(submitDir, "task.json")
	require.NoError(t, os.WriteFile(task, []byte(fmt.Sprintf(`{"task_id":"s3big-task","run_id":"s3big-run","world_id":"suite",
		"command":["/bin/sh","-c","tr a-z A-Z < inputs/input.bin > outputs/output.bin"],
		"env":{"PATH":"/usr/bin:/bin","LC_ALL":"C"},
		"inputs":[{"name":"input.bin","path":"input.bin"}],
		"resources":{"cpu_millis":500},"selector":{"suite-test":%q}}`, testLabel(t))), 0o644))

	began := time.Now()
	code, stdout, stderr := cli(t, "tasks", "submit", task, "--wait", "-n", s.ns, "--data-dir", submitDir, "--blob-url", s.url, "--lease-ttl", "20s")
	require.Equal(t, 0, code, "stdout:\n%s\nstderr:\n%s", stdout, stderr)
	submitted := time.Since(began)

	outDir := filepath.Join(submitDir, "out")
	code, stdout, stderr = cli(t, "tasks", "result", "s3big-task", "-n", s.ns, "--data-dir", submitDir, "--blob-url", s.url, "--output-dir", outDir, "-o", "json")
	require.Equal(t, 0, code, stderr)
	var res api.TaskResult
	require.NoError(t, json.Unmarshal([]byte(stdout), &res), stdout)
	require.Len(t, res.Artifacts, 1)
	assert.Equal(t, "output.bin", res.Artifacts[0].Name)
	assert.Equal(t, wantOut, res.Artifacts[0].Digest)
	assert.Equal(t, int64(size), res.Artifacts[0].SizeBytes)
	assert.Equal(t, 0, res.ExitCode)
	d, n, err := blobstore.HashFile(filepath.Join(outDir, "output.bin"))
	require.NoError(t, err)
	assert.Equal(t, [2]any{wantOut, int64(size)}, [2]any{d, n}, "copied out whole and verified")
	t.Logf("100 MiB in, 100 MiB out: submit to COMPLETED in %.1fs, result copied out in %.1fs", submitted.Seconds(), (time.Since(began) - submitted).Seconds())

	store, err := blobstore.Open(context.Background(), s.url)
	require.NoError(t, err)
	defer store.Close()
	for _, dg := range []string{wantIn, wantOut} {
		sz, err := store.Size(context.Background(), "sha256/"+strings.TrimPrefix(dg, "sha256:"))
		require.NoError(t, err, dg)
		assert.Equal(t, int64(size), sz)
	}
	assert.Empty(t, bucketKeys(t, store, "staging/"))
	assert.Empty(t, bucketKeys(t, store, "tmp/"))

	// The attempt ran in the agent's own directory; nothing else has one.
	attemptDir := filepath.Join(agentDir, "work", "s3big-a", "s3big-task", "1-1")
	assert.FileExists(t, filepath.Join(attemptDir, "result.json"))
	assertApart(t, s.cpDir, agentDir, submitDir)
	entries, err := os.ReadDir(s.cpDir)
	require.NoError(t, err)
	assert.Empty(t, entries, "the control plane wrote nothing to its data dir")

	// Credentials reach processes through their environment only.
	for _, log := range []string{cpLog, agentLog} {
		b, err := os.ReadFile(log)
		require.NoError(t, err)
		assert.NotContains(t, string(b), s.secret, "the S3 secret in %s", filepath.Base(log))
	}
	for _, wf := range []string{api.TaskWorkflowID("s3big-task"), api.RunWorkflowID("s3big-run"), api.WorkerWorkflowID("s3big-a")} {
		assert.NotContains(t, historyText(t, s.nsc, wf), s.secret, "the S3 secret in %s's history", wf)
	}
}

// historyText is a workflow's whole history (every run) as text.
func historyText(t *testing.T, c client.Client, wfID string) string {
	t.Helper()
	var b strings.Builder
	iter := c.GetWorkflowHistory(context.Background(), wfID, "", false, 0)
	for iter.HasNext() {
		ev, err := iter.Next()
		require.NoError(t, err)
		b.WriteString(ev.String())
	}
	return b.String()
}

// startS3Agent runs an agent in this process with its own data dir and its
// own client of the store at url.
func (s *s3Setup) startS3Agent(t *testing.T, id, url string) {
	t.Helper()
	store, err := blobstore.Open(context.Background(), url)
	require.NoError(t, err)
	t.Cleanup(func() { store.Close() })
	a, err := worker.StartAgent(context.Background(), s.nsc, worker.AgentOptions{
		Registration: fleet.Registration{
			WorkerID: id, Capacity: resource.List{CPUMillis: 2000, MemoryBytes: 1 << 30},
			Labels: map[string]string{"suite-test": testLabel(t)},
		},
		WorkDir: filepath.Join(s.dir(t, id), "work", id), Blobs: store,
	})
	require.NoError(t, err)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		a.Stop(ctx)
	})
	waitFor(t, 15*time.Second, id+" ACTIVE", func() bool {
		v, err := s.wc.Worker(context.Background(), id)
		return err == nil && v.State == fleet.Active
	})
}

// A worker whose artifact store is unreachable cannot stage its outputs:
// that is infrastructure trouble, not the task's result. The attempt is
// reported infra_killed, the task retries on a worker that reaches the
// store, and only that attempt's output is in the bucket.
func TestUnreachableStoreOnAWorkerIsRetriedElsewhere(t *testing.T) {
	s := newS3Setup(t, nsS3Outage)
	s.startControlPlane(t)
	bucket := strings.TrimPrefix(strings.SplitN(s.url, "?", 2)[0], "s3://")
	s.startS3Agent(t, "outage-cut", "s3://"+bucket+"?endpoint=http://127.0.0.1:1&use_path_style=true&region=us-east-1&disable_https=true")
	env := taskEnvelope(t, "outage-task", `echo "attempt $WDC_ATTEMPT" > outputs/out.txt`)
	_, err := s.wc.SubmitTask(context.Background(), env, api.TaskOptions{
		LeaseTTL: 10 * time.Second, Backoff: lease.Backoff{Initial: 100 * time.Millisecond, Max: time.Second},
	})
	require.NoError(t, err)
	waitFor(t, 15*time.Second, "attempt 1 leased to the cut-off worker", func() bool {
		v, err := s.wc.Task(context.Background(), env.TaskID)
		return err == nil && v.Lease != nil && v.Lease.Attempt == 1
	})
	s.startS3Agent(t, "outage-ok", s.url)

	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	out, err := s.wc.WaitTask(ctx, env.TaskID)
	require.NoError(t, err)
	require.Equal(t, api.TaskCompleted, out.State)
	view, err := s.wc.Task(context.Background(), env.TaskID)
	require.NoError(t, err)
	require.Len(t, view.Leases, 2)
	assert.Equal(t, "outage-cut", view.Leases[0].WorkerID)
	assert.Equal(t, "outage-ok", view.Leases[1].WorkerID)
	require.Len(t, view.Directives, 1)
	assert.Equal(t, lease.ReasonInfraKilled, view.Directives[0].Reason)
	assert.Contains(t, view.Directives[0].Detail, "artifact store")
	require.NotNil(t, view.Result)
	assert.Empty(t, view.Result.OutputError)
	require.Len(t, view.Result.Artifacts, 1)

	store, err := blobstore.Open(context.Background(), s.url)
	require.NoError(t, err)
	defer store.Close()
	r, err := store.Open(context.Background(), view.Result.Artifacts[0].Digest)
	require.NoError(t, err)
	b, _ := io.ReadAll(r)
	r.Close()
	assert.Equal(t, "attempt 2\n", string(b))
	assert.Empty(t, bucketKeys(t, store, "staging/"))
}
