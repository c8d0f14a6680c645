package ray

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/spiffe/go-spiffe/v2/spiffeid"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/wdc-runtime/wdc/api"
	"github.com/wdc-runtime/wdc/envelope"
	"github.com/wdc-runtime/wdc/identity"
	"github.com/wdc-runtime/wdc/internal/blobstore"
	"github.com/wdc-runtime/wdc/internal/executor"
	raytest "github.com/wdc-runtime/wdc/internal/testenv/ray"
	"github.com/wdc-runtime/wdc/launchers"
	"github.com/wdc-runtime/wdc/launchers/external"
	"github.com/wdc-runtime/wdc/lease"
)

// fakeControl holds one task's lease and records failure reports.
type fakeControl struct {
	mu      sync.Mutex
	lease   lease.Lease
	reports []api.AttemptFailedSignal
}

func (f *fakeControl) Heartbeat(context.Context, api.LeaseHeartbeatSignal) error { return nil }

// HeartbeatByID finds no lease activity: heartbeats go as signals.
func (f *fakeControl) HeartbeatByID(context.Context, api.LeaseHeartbeatSignal) error {
	return executor.ErrNoLeaseActivity
}

func (f *fakeControl) Lease(_ context.Context, taskID string) (api.TaskView, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	l := f.lease
	return api.TaskView{TaskID: taskID, Lease: &l}, nil
}

func (f *fakeControl) SubmitResult(context.Context, api.SubmitResultInput, func()) (api.SubmitResultResult, error) {
	return api.SubmitResultResult{}, nil
}

func (f *fakeControl) ReportFailure(_ context.Context, s api.AttemptFailedSignal) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.reports = append(f.reports, s)
	return nil
}

func (f *fakeControl) setState(s lease.State) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.lease.State = s
}

func (f *fakeControl) reported() []api.AttemptFailedSignal {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]api.AttemptFailedSignal(nil), f.reports...)
}

// rig is a launcher against the emulator whose "wdc" binary is a shell
// script running $FAKE_WDC (set in the emulated node's environment).
type rig struct {
	emu  *raytest.Emulator
	l    *Launcher
	ctl  *fakeControl
	att  launchers.Attempt
	logs *strings.Builder
}

func newRig(t *testing.T, behaviour string, opts raytest.Options, tweak func(*Options)) *rig {
	t.Helper()
	dir := t.TempDir()
	bin := filepath.Join(dir, "fake-wdc")
	require.NoError(t, os.WriteFile(bin, []byte("#!/bin/sh\neval \"$FAKE_WDC\"\n"), 0o755))
	opts.NodeEnv = append(opts.NodeEnv, "PATH=/usr/bin:/bin", "FAKE_WDC="+behaviour)
	if opts.StopWait == 0 {
		opts.StopWait = 300 * time.Millisecond
	}
	emu, err := raytest.Start(opts)
	require.NoError(t, err)
	t.Cleanup(emu.Close)
	client, err := NewClient(ClientOptions{Address: emu.URL(), Timeout: 5 * time.Second, Backoff: 10 * time.Millisecond})
	require.NoError(t, err)
	store, err := blobstore.OpenDir(context.Background(), dir)
	require.NoError(t, err)
	t.Cleanup(func() { store.Close() })
	env := envelope.Envelope{TaskID: "t1", RunID: "r1", WorldID: "w1", Command: []string{"true"}}
	env.Normalize()
	digest, err := env.Digest()
	require.NoError(t, err)
	l1 := lease.Lease{TaskID: "t1", WorkerID: "ray-a", Attempt: 1, Fence: 1, EnvelopeDigest: digest, State: lease.Active, TTL: 10 * time.Second}
	ctl := &fakeControl{lease: l1}
	o := Options{WorkerID: "ray-a", Client: client, Fields: LatestFields, Blobs: store, Control: ctl,
		Target: external.Target{Binary: bin, Address: "127.0.0.1:1"}, PollInterval: 50 * time.Millisecond}
	if tweak != nil {
		tweak(&o)
	}
	l, err := New(o)
	require.NoError(t, err)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		l.Shutdown(ctx, "test over")
	})
	return &rig{emu: emu, l: l, ctl: ctl, att: launchers.Attempt{Envelope: env, Lease: l1}}
}

func (r *rig) submit(t *testing.T) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	sub, err := r.l.Submit(ctx, r.att)
	require.NoError(t, err)
	assert.Equal(t, r.emu.URL()+"/api/jobs/t1-a1-f1", sub.TaskDir)
}

func (r *rig) waitReports(t *testing.T, n int) []api.AttemptFailedSignal {
	t.Helper()
	require.Eventually(t, func() bool { return len(r.ctl.reported()) >= n }, 15*time.Second, 20*time.Millisecond, "%d report(s)", n)
	return r.ctl.reported()
}

func (r *rig) waitJob(t *testing.T, what string, cond func(raytest.Job) bool) raytest.Job {
	t.Helper()
	var j raytest.Job
	require.Eventually(t, func() bool {
		var ok bool
		j, ok = r.emu.Job("t1-a1-f1")
		return ok && cond(j)
	}, 15*time.Second, 20*time.Millisecond, what)
	return j
}

// A job that fails without a result is reported infra_killed with the
// last lines of its log.
func TestFailedJobIsReportedInfraKilledWithItsLog(t *testing.T) {
	r := newRig(t, `for i in 1 2 3 4 5; do echo line $i; done; echo "killed by the OOM killer" >&2; exit 137`, raytest.Options{}, func(o *Options) { o.LogLines = 3 })
	r.submit(t)
	reps := r.waitReports(t, 1)
	require.Len(t, reps, 1)
	assert.Equal(t, lease.ReasonInfraKilled, reps[0].Reason)
	assert.Equal(t, lease.ClaimOf(r.att.Lease), reps[0].Claim)
	assert.Contains(t, reps[0].Detail, "ray job t1-a1-f1 FAILED (driver exit code 137)")
	assert.Contains(t, reps[0].Detail, "last log lines:\nline 4\nline 5\nkilled by the OOM killer")
	assert.NotContains(t, reps[0].Detail, "line 3")
	require.Eventually(t, func() bool { return r.l.Running() == 0 }, 5*time.Second, 20*time.Millisecond)
}

// A job that exits 0 without a result is launch_failed; one whose result
// was accepted is not reported at all.
func TestSucceededJobWithoutAResultIsLaunchFailed(t *testing.T) {
	r := newRig(t, `echo "not really wdc"`, raytest.Options{}, nil)
	r.submit(t)
	reps := r.waitReports(t, 1)
	assert.Equal(t, lease.ReasonLaunchFailed, reps[0].Reason)
	assert.Contains(t, reps[0].Detail, "SUCCEEDED")
	assert.Contains(t, reps[0].Detail, "without a result")
	assert.Contains(t, reps[0].Detail, "not really wdc")

	r2 := newRig(t, `exit 0`, raytest.Options{}, nil)
	r2.ctl.setState(lease.Completed) // the result was accepted
	r2.submit(t)
	r2.waitJob(t, "job succeeded", func(j raytest.Job) bool { return j.Status == raytest.Succeeded })
	require.Eventually(t, func() bool { return r2.l.Running() == 0 }, 5*time.Second, 20*time.Millisecond)
	assert.Empty(t, r2.ctl.reported(), "an accepted attempt is not reported")
}

// A job that stays PENDING past the bound is stopped, reported
// launch_failed, and deleted.
func TestPendingPastTheBoundIsStoppedAndLaunchFailed(t *testing.T) {
	r := newRig(t, `exit 0`, raytest.Options{HoldPending: func(string) bool { return true }}, func(o *Options) { o.PendingTimeout = 300 * time.Millisecond })
	r.submit(t)
	reps := r.waitReports(t, 1)
	assert.Equal(t, lease.ReasonLaunchFailed, reps[0].Reason)
	assert.Contains(t, reps[0].Detail, "still PENDING after 300ms")
	j := r.waitJob(t, "job stopped and deleted", func(j raytest.Job) bool { return j.Deleted })
	assert.Equal(t, raytest.Stopped, j.Status)
}

// Cancel (the lease ended) stops the job — SIGTERM, SIGKILL after the
// stop wait — and deletes it once terminal; nothing is reported.
func TestCancelStopsThenDeletes(t *testing.T) {
	r := newRig(t, `trap "" TERM; echo up; while :; do sleep 0.05; done`, raytest.Options{}, nil)
	r.submit(t)
	r.waitJob(t, "running", func(j raytest.Job) bool { return j.Status == raytest.Running && j.Logs() == "up\n" })
	st, err := r.l.Status(context.Background(), lease.ClaimOf(r.att.Lease))
	require.NoError(t, err)
	assert.Equal(t, launchers.PhaseRunning, st.Phase)
	r.ctl.setState(lease.Expired)
	require.NoError(t, r.l.Cancel(context.Background(), lease.ClaimOf(r.att.Lease), "lease_expired"))
	j := r.waitJob(t, "stopped and deleted", func(j raytest.Job) bool { return j.Deleted })
	assert.Equal(t, raytest.Stopped, j.Status)
	assert.Empty(t, r.ctl.reported())
	_, err = r.l.Status(context.Background(), lease.ClaimOf(r.att.Lease))
	assert.ErrorIs(t, err, launchers.ErrUnknownAttempt)
	require.NoError(t, r.l.Cancel(context.Background(), lease.ClaimOf(r.att.Lease), "again"), "an unknown job is not an error")
}

// A running job whose attempt lost its fence is stopped by the watcher.
func TestFenceLossStopsTheJob(t *testing.T) {
	r := newRig(t, `sleep 60`, raytest.Options{}, nil)
	r.submit(t)
	r.waitJob(t, "running", func(j raytest.Job) bool { return j.Status == raytest.Running })
	r.ctl.mu.Lock()
	r.ctl.lease.Fence, r.ctl.lease.Attempt = 2, 2
	r.ctl.mu.Unlock()
	j := r.waitJob(t, "stopped and deleted", func(j raytest.Job) bool { return j.Deleted })
	assert.Equal(t, raytest.Stopped, j.Status)
	assert.Empty(t, r.ctl.reported())
}

// A resubmission of the same attempt (Ray says "already exists") and a
// submit whose answer was cut both end with the one job, not a failure.
func TestSubmitIsIdempotent(t *testing.T) {
	var cut sync.Map
	r := newRig(t, `sleep 60`, raytest.Options{DropSubmitResponse: func(id string) bool {
		_, seen := cut.LoadOrStore(id, true)
		return !seen // cut the first answer only
	}}, nil)
	r.submit(t)
	r.submit(t) // the agent's activity retried, say
	jobs := r.emu.Jobs()
	require.Len(t, jobs, 1)
	assert.Equal(t, "t1-a1-f1", jobs[0].SubmissionID)
	assert.Equal(t, 2, r.emu.Submits(), "the cut submit was followed by a GET, not a second POST")
}

// Submit refuses: another worker's attempt, a past deadline, a digest
// that is not the lease's, and Ray's own refusal (HTTP status and message).
func TestSubmitRefusals(t *testing.T) {
	r := newRig(t, `exit 0`, raytest.Options{RayVersion: "2.5.0"}, func(o *Options) { o.Fields = LatestFields })
	other := r.att
	other.Lease.WorkerID = "elsewhere"
	_, err := r.l.Submit(context.Background(), other)
	assert.ErrorContains(t, err, `attempt is for worker "elsewhere"`)

	ctx, cancel := context.WithDeadline(context.Background(), time.Now().Add(-time.Second))
	defer cancel()
	_, err = r.l.Submit(ctx, r.att)
	assert.ErrorIs(t, err, launchers.ErrLaunchExpired)

	bad := r.att
	bad.Lease.EnvelopeDigest = "sha256:" + strings.Repeat("0", 64)
	_, err = r.l.Submit(context.Background(), bad)
	assert.ErrorContains(t, err, "does not match the lease's")

	// Fields of a newer Ray than the cluster's: Ray says 400.
	mem := r.att
	mem.Envelope.Resources.MemoryBytes = 1 << 20
	mem.Lease.EnvelopeDigest = mustDigest(t, mem.Envelope)
	_, err = r.l.Submit(context.Background(), mem)
	assert.ErrorContains(t, err, "HTTP 400")
	assert.ErrorContains(t, err, "entrypoint_memory")
	assert.Zero(t, r.l.Running())
}

func mustDigest(t *testing.T, env envelope.Envelope) string {
	d, err := env.Digest()
	require.NoError(t, err)
	return d
}

// Shutdown stops the running jobs and reports each infra_killed.
func TestShutdownStopsJobsAndReportsThem(t *testing.T) {
	r := newRig(t, `sleep 60`, raytest.Options{}, nil)
	r.submit(t)
	r.waitJob(t, "running", func(j raytest.Job) bool { return j.Status == raytest.Running })
	assert.Equal(t, 1, r.l.Running())
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	r.l.Shutdown(ctx, "agent stopping")
	reps := r.ctl.reported()
	require.Len(t, reps, 1)
	assert.Equal(t, lease.ReasonInfraKilled, reps[0].Reason)
	assert.Contains(t, reps[0].Detail, "agent stopping")
	j := r.waitJob(t, "stopped", func(j raytest.Job) bool { return j.Status == raytest.Stopped })
	assert.True(t, j.Deleted)
}

func TestNewRequiresItsParts(t *testing.T) {
	_, err := New(Options{})
	assert.ErrorContains(t, err, "worker ID")
	_, err = New(Options{WorkerID: "w"})
	assert.ErrorContains(t, err, "client")
	c, _ := NewClient(ClientOptions{Address: "http://x:1"})
	_, err = New(Options{WorkerID: "w", Client: c})
	assert.ErrorContains(t, err, "blob store")
	_, err = New(Options{WorkerID: "w", Client: c, Blobs: &blobstore.Store{}})
	assert.ErrorContains(t, err, "control")
}

func TestLastLines(t *testing.T) {
	assert.Equal(t, "", lastLines("", 3, 100))
	assert.Equal(t, "b\nc", lastLines("a\nb\nc\n", 2, 100))
	assert.Equal(t, "…789", lastLines("123456789", 5, 3))
	assert.Equal(t, fmt.Sprint("x"), lastLines("x", 1, 10))
}

var _ executor.Control = (*fakeControl)(nil)

// pythonExecutable is the real interpreter behind python3 (not a shim),
// so that a job's shell finds it with the emulated node's PATH.
func pythonExecutable(t *testing.T) string {
	t.Helper()
	python, err := exec.LookPath("python3")
	require.NoError(t, err, "python3 is needed to run the placement-group driver (Debian: apt-get install python3)")
	out, err := exec.Command(python, "-c", "import sys; print(sys.executable)").Output()
	require.NoError(t, err)
	return strings.TrimSpace(string(out))
}

// A placement-group attempt end to end through the emulator: the
// entrypoint is the embedded driver run by python3 -c, which (against a
// stub ray package on the node's PYTHONPATH) creates the group with the
// envelope's bundles and strategy, waits for it, runs `wdc exec` in bundle
// 0 with bundle 0's resources and removes the group. A group never placed
// ends launch_failed, and `wdc exec` never runs.
func TestPlacementGroupJobRunsTheDriver(t *testing.T) {
	stub, err := filepath.Abs(filepath.Join("testdata", "stubray"))
	require.NoError(t, err)
	python := pythonExecutable(t)
	pg := &envelope.PlacementGroup{Bundles: []map[string]float64{{"CPU": 2, "accel": 1}, {"GPU": 1}}, Strategy: "STRICT_SPREAD", TimeoutSeconds: 9}
	withPG := func(r *rig) {
		r.att.Envelope.Launcher = envelope.LauncherRay
		r.att.Envelope.Ray = &envelope.RayOptions{PlacementGroup: pg}
		r.att.Lease.EnvelopeDigest = mustDigest(t, r.att.Envelope)
		r.ctl.mu.Lock()
		r.ctl.lease.EnvelopeDigest = r.att.Lease.EnvelopeDigest
		r.ctl.mu.Unlock()
	}
	nodeEnv := []string{"PYTHONPATH=" + stub, "PYTHONDONTWRITEBYTECODE=1"}

	r := newRig(t, `echo "wdc exec ran as $WDC_EXEC_TASK_ID/$WDC_EXEC_FENCE"`, raytest.Options{NodeEnv: nodeEnv}, func(o *Options) { o.Python = python })
	withPG(r)
	r.submit(t)
	j := r.waitJob(t, "job succeeded", func(j raytest.Job) bool { return raytest.Terminal(j.Status) })
	require.Equal(t, raytest.Succeeded, j.Status, j.Logs())
	assert.Equal(t, "exec "+python+` -c "$WDC_RAY_DRIVER"`, j.Entrypoint)
	logs := j.Logs()
	for _, want := range []string{
		`stub-ray ["init"]`,
		`stub-ray ["placement_group", [{"CPU": 2, "accel": 1}, {"GPU": 1}], "STRICT_SPREAD", "t1-a1-f1"]`,
		`stub-ray ["wait", 9.0]`,
		`stub-ray ["options", {"max_retries": 0, "num_cpus": 2, "resources": {"accel": 1}}, 0, true]`,
		"wdc exec ran as t1/1",
		`stub-ray ["remove_placement_group"]`,
	} {
		assert.Contains(t, logs, want+"\n")
	}
	assert.Less(t, strings.Index(logs, "wdc exec ran"), strings.Index(logs, "remove_placement_group"), "removed after the run")
	reps := r.waitReports(t, 1) // exited 0 without a result (the fake wdc)
	assert.Equal(t, lease.ReasonLaunchFailed, reps[0].Reason)

	never := newRig(t, `echo "wdc exec ran"`, raytest.Options{NodeEnv: append(nodeEnv, "STUB_RAY_NEVER_READY=1")}, func(o *Options) { o.Python = python })
	withPG(never)
	never.submit(t)
	reps = never.waitReports(t, 1)
	assert.Equal(t, lease.ReasonLaunchFailed, reps[0].Reason, "a group never placed is a launch failure")
	assert.Contains(t, reps[0].Detail, "FAILED (driver exit code 3)")
	assert.Contains(t, reps[0].Detail, placementTimeoutMarker+" within 9s")
	j, _ = never.emu.Job("t1-a1-f1")
	assert.NotContains(t, j.Logs(), "wdc exec ran")
	assert.Contains(t, j.Logs(), `stub-ray ["remove_placement_group"]`)
}

// A launcher started after another one (the agent restarted) finds the
// worker's running job: while its lease is current it is adoptable and
// watched once adopted; once the lease moved on it is stopped and
// deleted, not adopted.
func TestRunningJobIsAdoptableAfterARestart(t *testing.T) {
	r := newRig(t, "sleep 30", raytest.Options{}, nil)
	r.submit(t)
	r.waitJob(t, "running", func(j raytest.Job) bool { return j.Status == raytest.Running })
	ctx := context.Background()

	again, err := New(r.l.opts)
	require.NoError(t, err)
	defer again.Shutdown(ctx, "test over")
	claims, err := again.Adoptable(ctx)
	require.NoError(t, err)
	assert.Equal(t, []lease.Claim{r.att.Claim()}, claims)
	again.Adopt(ctx, claims, nil)
	assert.Equal(t, 1, again.Running(), "the adopted job is watched")

	r.ctl.mu.Lock()
	r.ctl.lease.Fence, r.ctl.lease.Attempt = 2, 2
	r.ctl.mu.Unlock()
	third, err := New(r.l.opts)
	require.NoError(t, err)
	defer third.Shutdown(ctx, "test over")
	claims, err = third.Adoptable(ctx)
	require.NoError(t, err)
	assert.Empty(t, claims, "a job whose lease moved on is not adoptable")
	r.waitJob(t, "stopped and deleted", func(j raytest.Job) bool { return j.Status == raytest.Stopped && j.Deleted })
}

// With a Signer, the job carries a key delegated to its attempt alone
// (runtime_env.env_vars), and the launcher's own report of the job's end
// is signed by a key delegated to that attempt, as the control plane's
// verifier checks it.
func TestSignedJobCarriesItsAttemptKeyAndItsReportIsSigned(t *testing.T) {
	td := spiffeid.RequireTrustDomainFromString(identity.DefaultTrustDomain)
	iss, err := identity.NewIssuer(td)
	require.NoError(t, err)
	svid, err := iss.IssueWorker("ray-a", time.Hour)
	require.NoError(t, err)
	signer, err := identity.NewSigner(svid)
	require.NoError(t, err)
	r := newRig(t, `exit 137`, raytest.Options{}, func(o *Options) { o.Signer = signer })
	r.submit(t)
	reps := r.waitReports(t, 1)

	claim := lease.ClaimOf(r.att.Lease)
	job, _ := r.emu.Job("t1-a1-f1")
	var data string
	for _, kv := range job.Env {
		if v, ok := strings.CutPrefix(kv, external.EnvAttemptKeyData+"="); ok {
			data = v
		}
	}
	require.NotEmpty(t, data, "the job's environment holds the attempt's key")
	_, err = external.ParseAttemptKey([]byte(data), claim, "the job's key")
	require.NoError(t, err)

	v, err := identity.NewVerifier(identity.ModeRequired, td, iss.Bundle())
	require.NoError(t, err)
	rep := reps[0]
	require.NotNil(t, rep.Proof, "the report is signed")
	unsigned := rep
	unsigned.Proof = nil
	_, rej := v.Attempt(time.Now(), api.SignalAttemptFailed, claim, time.Time{}, unsigned, rep.Proof)
	require.Nil(t, rej)
}
