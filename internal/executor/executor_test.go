package executor

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/wdc-runtime/wdc/api"
	"github.com/wdc-runtime/wdc/envelope"
	"github.com/wdc-runtime/wdc/internal/blobstore"
	"github.com/wdc-runtime/wdc/launchers"
	"github.com/wdc-runtime/wdc/lease"
)

// fakeControl records what the executor sends and answers lease queries
// with a lease it can change.
type fakeControl struct {
	mu        sync.Mutex
	lease     *lease.Lease
	hbErr     error
	queryErr  error
	submitErr error
	// submitDelay holds a submission before it is accepted.
	submitDelay time.Duration
	heartbeats  []api.LeaseHeartbeatSignal
	// hang makes heartbeats and queries block until their context ends
	// (a connection that silently drops everything).
	hang bool
	// replyDelay delays the answer to a heartbeat Temporal already took;
	// queryDelay the answer to a lease query (a busy control plane).
	replyDelay, queryDelay time.Duration
	// tries are the times of every heartbeat call, accepted or not;
	// acceptedAt those of the accepted ones.
	tries, acceptedAt []time.Time
	// expiresAt is when the control plane would expire the lease (renewed
	// TTL after each accepted heartbeat); lapses counts heartbeats that
	// arrived after it (the lease would have expired).
	expiresAt time.Time
	lapses    int
	// queries counts answered lease queries.
	queries int
	// options are the task options the lease query reports.
	options   api.TaskOptions
	submitted []api.SubmitResultInput
	failures  []api.AttemptFailedSignal
	// held: the task holds a started lease activity, which HeartbeatByID
	// heartbeats (byID records them); heldCancelled: the task cancelled
	// it. Without held, HeartbeatByID finds none.
	held, heldCancelled bool
	byID                []api.LeaseHeartbeatSignal
}

// sent counts the heartbeat signals and heartbeats by ID taken.
func (f *fakeControl) sent() (signals, byID int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.heartbeats), len(f.byID)
}

func (f *fakeControl) HeartbeatByID(ctx context.Context, hb api.LeaseHeartbeatSignal) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	switch {
	case f.hang:
		f.tries = append(f.tries, time.Now())
		f.mu.Unlock()
		<-ctx.Done()
		f.mu.Lock()
		return ctx.Err()
	case f.hbErr != nil:
		f.tries = append(f.tries, time.Now())
		return f.hbErr
	case !f.held:
		return fmt.Errorf("%w: lease-%d", ErrNoLeaseActivity, hb.Fence)
	case f.heldCancelled:
		return ErrLeaseEnded
	}
	now := time.Now()
	f.tries = append(f.tries, now)
	f.byID = append(f.byID, hb)
	f.acceptedAt = append(f.acceptedAt, now)
	f.expiresAt = now.Add(f.lease.TTL)
	return nil
}

func (f *fakeControl) Heartbeat(ctx context.Context, hb api.LeaseHeartbeatSignal) error {
	f.mu.Lock()
	now := time.Now()
	f.tries = append(f.tries, now)
	hang, delay, err := f.hang, f.replyDelay, f.hbErr
	if !hang && err == nil {
		// Temporal takes the signal now; the lease is renewed now.
		f.heartbeats = append(f.heartbeats, hb)
		f.acceptedAt = append(f.acceptedAt, now)
		if !f.expiresAt.IsZero() && now.After(f.expiresAt) {
			f.lapses++
		}
		f.expiresAt = now.Add(f.lease.TTL)
	}
	f.mu.Unlock()
	switch {
	case hang:
		<-ctx.Done()
		return ctx.Err()
	case err != nil:
		return err
	}
	select {
	case <-time.After(delay):
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (f *fakeControl) Lease(ctx context.Context, taskID string) (api.TaskView, error) {
	f.mu.Lock()
	hang, delay := f.hang, f.queryDelay
	f.mu.Unlock()
	if hang {
		<-ctx.Done()
		return api.TaskView{}, ctx.Err()
	}
	select {
	case <-time.After(delay):
	case <-ctx.Done():
		return api.TaskView{}, ctx.Err()
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.hbErr != nil {
		return api.TaskView{}, f.hbErr
	}
	if f.queryErr != nil {
		return api.TaskView{}, f.queryErr
	}
	f.queries++
	l := *f.lease
	return api.TaskView{TaskID: taskID, State: api.TaskLeased, Lease: &l, Options: f.options}, nil
}

func (f *fakeControl) SubmitResult(ctx context.Context, in api.SubmitResultInput, onAccepted func()) (api.SubmitResultResult, error) {
	f.mu.Lock()
	delay := f.submitDelay
	f.mu.Unlock()
	select {
	case <-time.After(delay):
	case <-ctx.Done():
		return api.SubmitResultResult{}, ctx.Err()
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.submitted = append(f.submitted, in)
	if f.submitErr != nil {
		return api.SubmitResultResult{}, f.submitErr
	}
	if onAccepted != nil {
		onAccepted()
	}
	return api.SubmitResultResult{Accepted: true, Result: api.TaskResult{TaskID: in.TaskID, Fence: in.Fence, Artifacts: in.Artifacts}}, nil
}

func (f *fakeControl) ReportFailure(ctx context.Context, fl api.AttemptFailedSignal) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.failures = append(f.failures, fl)
	return nil
}

func (f *fakeControl) set(edit func(*fakeControl)) {
	f.mu.Lock()
	defer f.mu.Unlock()
	edit(f)
}

func (f *fakeControl) setLease(edit func(*lease.Lease)) {
	f.mu.Lock()
	defer f.mu.Unlock()
	edit(f.lease)
}

type fixture struct {
	t     *testing.T
	blobs *blobstore.Store
	root  string
	ctl   *fakeControl
	env   envelope.Envelope
	lease lease.Lease
}

func newFixture(t *testing.T, script string, inputs map[string]string) *fixture {
	t.Helper()
	blobs, err := blobstore.OpenDir(context.Background(), t.TempDir())
	require.NoError(t, err)
	env := envelope.Envelope{
		TaskID: "t1", RunID: "r1", WorldID: "w1",
		Command: []string{"/bin/sh", "-c", script},
		Env:     map[string]string{"PATH": "/usr/bin:/bin", "GREETING": "hi"},
	}
	for name, content := range inputs {
		d, n, err := blobs.Put(context.Background(), strings.NewReader(content))
		require.NoError(t, err)
		env.Inputs = append(env.Inputs, envelope.Input{Name: name, Digest: d, SizeBytes: n})
	}
	env.Normalize()
	digest, err := env.Digest()
	require.NoError(t, err)
	l := lease.Lease{TaskID: "t1", EnvelopeDigest: digest, WorkerID: "w-a", Attempt: 1, Fence: 1, State: lease.Active, TTL: 3 * time.Second}
	lc := l
	return &fixture{t: t, blobs: blobs, root: t.TempDir(), ctl: &fakeControl{lease: &lc}, env: env, lease: l}
}

// assertNothingStaged: no staged object of the attempt is left.
func (f *fixture) assertNothingStaged() {
	f.t.Helper()
	keys, err := f.blobs.List(context.Background(), blobstore.StagingPrefix("t1", 1, 1))
	require.NoError(f.t, err)
	assert.Empty(f.t, keys)
}

func (f *fixture) start(mod func(*Options)) *Execution {
	f.t.Helper()
	opts := Options{
		Attempt: launchers.Attempt{Envelope: f.env, Lease: f.lease, HeartbeatInterval: 100 * time.Millisecond},
		Root:    f.root, Blobs: f.blobs, Control: f.ctl,
	}
	if mod != nil {
		mod(&opts)
	}
	f.ctl.mu.Lock()
	f.ctl.expiresAt = time.Now().Add(f.lease.TTL) // granted now
	f.ctl.mu.Unlock()
	ex, err := Start(opts)
	require.NoError(f.t, err)
	return ex
}

func (f *fixture) wait(ex *Execution) Report {
	f.t.Helper()
	select {
	case <-ex.Done():
		return ex.Report()
	case <-time.After(20 * time.Second):
		f.t.Fatal("attempt did not end")
		return Report{}
	}
}

func TestRunsWithOnlyTheEnvelopeEnvironment(t *testing.T) {
	t.Setenv("WDC_TEST_SECRET", "hunter2")
	f := newFixture(t, `env | sort > outputs/env.txt; cat inputs/data/obs.csv > outputs/copy.csv`, map[string]string{"data/obs.csv": "a,b\n1,2\n"})
	rep := f.wait(f.start(nil))
	require.Equal(t, OutcomeAccepted, rep.Outcome, "%+v", rep)

	dir := TaskDir(f.root, claimOf(f.lease))
	envTxt, err := os.ReadFile(filepath.Join(dir, "outputs", "env.txt"))
	require.NoError(t, err)
	assert.NotContains(t, string(envTxt), "hunter2", "the agent's environment must not leak into the task")
	for _, want := range []string{"GREETING=hi", "WDC_TASK_ID=t1", "WDC_ATTEMPT=1", "WDC_FENCE=1", "WDC_TASK_DIR=" + dir} {
		assert.Contains(t, string(envTxt), want)
	}
	copyCSV, _ := os.ReadFile(filepath.Join(dir, "outputs", "copy.csv"))
	assert.Equal(t, "a,b\n1,2\n", string(copyCSV), "inputs are staged from the blob store")
	for _, name := range []string{"envelope.json", "result.json", "stdout.log", "stderr.log"} {
		assert.FileExists(t, filepath.Join(dir, name))
	}

	require.Len(t, f.ctl.submitted, 1)
	sub := f.ctl.submitted[0]
	assert.Equal(t, claimOf(f.lease), sub.Claim)
	require.Len(t, sub.Artifacts, 2)
	assert.Equal(t, "copy.csv", sub.Artifacts[0].Name)
	ok, err := f.blobs.Exists(context.Background(), blobstore.StagingPrefix("t1", 1, 1)+"copy.csv")
	require.NoError(t, err)
	assert.True(t, ok, "outputs are staged for ingest")
}

// The first heartbeat is due an interval after the grant, so an attempt
// that ends within its first interval costs its task no heartbeat.
// Without a usable grant time (a clock too far from the control plane's)
// the self-fencing deadline counts from the executor's start, so the first
// heartbeat goes at once.
func TestAShortAttemptSendsNoHeartbeat(t *testing.T) {
	for _, tc := range []struct {
		name      string
		grantedAt time.Time
		beats     int
	}{
		{"granted just now", time.Now(), 0},
		{"no grant time", time.Time{}, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t, `true`, nil)
			f.lease.GrantedAt = tc.grantedAt
			ex := f.start(func(o *Options) { o.Attempt.HeartbeatInterval = 2 * time.Second })
			rep := f.wait(ex)
			assert.Equal(t, OutcomeAccepted, rep.Outcome, "%+v", rep)
			f.ctl.mu.Lock()
			defer f.ctl.mu.Unlock()
			assert.Len(t, f.ctl.heartbeats, tc.beats)
			require.Len(t, f.ctl.submitted, 1)
		})
	}
}

func TestNonZeroExitIsAResult(t *testing.T) {
	f := newFixture(t, `echo partial > outputs/p.txt; exit 3`, nil)
	rep := f.wait(f.start(nil))
	assert.Equal(t, OutcomeAccepted, rep.Outcome)
	assert.Equal(t, 3, rep.ExitCode)
	require.Len(t, f.ctl.submitted, 1)
	assert.Equal(t, 3, f.ctl.submitted[0].ExitCode)
}

func TestOutputRulesRejectSymlinksAndOversize(t *testing.T) {
	tests := map[string]struct {
		script string
		limits OutputLimits
		want   string
	}{
		"symlink to a file": {`ln -s /etc/passwd outputs/link`, OutputLimits{}, "outputs/link: is a symlink"},
		"symlink to a dir":  {`mkdir outputs/d; ln -s .. outputs/d/up`, OutputLimits{}, "outputs/d/up: is a symlink"},
		"fifo":              {`mkfifo outputs/pipe`, OutputLimits{}, "not a regular file"},
		"file too big":      {`head -c 2048 /dev/zero > outputs/big`, OutputLimits{MaxFileBytes: 1024}, "over the 1024-byte cap"},
		"too many files":    {`touch outputs/a outputs/b outputs/c`, OutputLimits{MaxFiles: 2}, "over the cap of 2 files"},
		"total too big":     {`head -c 600 /dev/zero > outputs/a; head -c 600 /dev/zero > outputs/b`, OutputLimits{MaxTotalBytes: 1000}, "total cap"},
		"artifact list too big": {`d=outputs/$(printf %0200d 0)/$(printf %0200d 1)/$(printf %0200d 2)/$(printf %0200d 3); mkdir -p $d
			i=0; while [ $i -lt 600 ]; do : > $d/$(printf %08d $i); i=$((i+1)); done`, OutputLimits{MaxFiles: 5000}, "cap of a result"},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			f := newFixture(t, tc.script, nil)
			rep := f.wait(f.start(func(o *Options) { o.Limits = tc.limits }))
			require.Len(t, f.ctl.submitted, 1, "the program's outcome is still a result")
			sub := f.ctl.submitted[0]
			assert.Contains(t, sub.OutputError, tc.want)
			assert.Empty(t, sub.Artifacts, "nothing is half-staged")
			f.assertNothingStaged()
			assert.Contains(t, rep.OutputError, tc.want)
		})
	}
}

// With LeaseCheckInterval (wdc exec: nothing may be able to cancel it) the
// executor finds a lost fence by itself, within that interval.
func TestSelfFencesWhenTheLeaseMovesOn(t *testing.T) {
	f := newFixture(t, `sleep 30 & echo $! > child.pid; wait`, nil)
	ex := f.start(func(o *Options) { o.LeaseCheckInterval = 300 * time.Millisecond })
	time.Sleep(300 * time.Millisecond)
	moved := time.Now()
	f.ctl.setLease(func(l *lease.Lease) { l.Fence, l.Attempt, l.WorkerID = 2, 2, "w-b" })
	rep := f.wait(ex)
	assert.Equal(t, OutcomeSelfFenced, rep.Outcome)
	assert.Contains(t, rep.Message, "stale_fence")
	assert.Less(t, time.Since(moved), 3*time.Second, "found within the check interval (plus a beat), not at the TTL")
	assert.Empty(t, f.ctl.submitted)
	assertGroupDead(t, f, ex)
}

// Heartbeats by ID cost no lease query: only the signal that a beat
// falls back to (the first one, before the task holds a lease activity)
// is confirmed with one, and the periodic check adds one per
// LeaseCheckInterval when set.
func TestHeartbeatsByIDSendNoLeaseQueries(t *testing.T) {
	for name, tc := range map[string]struct {
		interval   time.Duration
		maxQueries int
	}{
		"no check":          {0, 1},
		"check every 500ms": {500 * time.Millisecond, 5},
	} {
		t.Run(name, func(t *testing.T) {
			f := newFixture(t, `sleep 1.5; echo ok > outputs/ok`, nil)
			f.ctl.held = true
			rep := f.wait(f.start(func(o *Options) { o.LeaseCheckInterval = tc.interval }))
			require.Equal(t, OutcomeAccepted, rep.Outcome, "%+v", rep)
			f.ctl.mu.Lock()
			defer f.ctl.mu.Unlock()
			require.Len(t, f.ctl.heartbeats, 1, "one signal, then by ID")
			assert.GreaterOrEqual(t, len(f.ctl.byID), 10, "a beat every 100 ms for 1.5 s")
			assert.LessOrEqual(t, f.ctl.queries, tc.maxQueries, "lease queries besides %d heartbeats", len(f.ctl.byID)+1)
			if tc.interval > 0 {
				assert.GreaterOrEqual(t, f.ctl.queries, 2, "the periodic check runs")
			}
		})
	}
}

// A heartbeat signal that Temporal delivers while the task's lease has
// moved on (the task counts it and ignores it) is not an accepted
// heartbeat: the lease query that confirms it fences the executor at
// that beat, with no cancel and no periodic check. This is the executor
// that was frozen through its lease's revocation, or whose cancel was
// lost: its heartbeat by ID finds no lease activity and falls back to a
// signal.
func TestAStaleSignalIsNotAnAcceptedHeartbeat(t *testing.T) {
	f := newFixture(t, `sleep 30 & echo $! > child.pid; wait`, nil)
	f.ctl.held = true
	ex := f.start(nil)
	waitUntil(t, 5*time.Second, "heartbeats by ID", func() bool { _, b := f.ctl.sent(); return b >= 2 })
	moved := time.Now()
	f.ctl.set(func(c *fakeControl) { c.held = false })
	f.ctl.setLease(func(l *lease.Lease) { l.Fence, l.Attempt, l.WorkerID = 2, 2, "w-b" })
	rep := f.wait(ex)
	assert.Equal(t, OutcomeSelfFenced, rep.Outcome)
	assert.Contains(t, rep.Message, "stale_fence")
	assert.Less(t, time.Since(moved), 500*time.Millisecond, "fenced at the next beat (100 ms), not at the TTL (3 s)")
	assert.Empty(t, f.ctl.submitted)
	assertGroupDead(t, f, ex)
}

// A signal delivered while the lease query goes unanswered is not
// counted either: an executor that cannot confirm its lease for a whole
// TTL fences itself, though Temporal took every signal.
func TestAnUnconfirmedSignalIsNotARenewal(t *testing.T) {
	f := newFixture(t, `sleep 30`, nil)
	f.lease.TTL = time.Second
	f.ctl.lease.TTL = time.Second
	f.ctl.queryErr = errors.New("context deadline exceeded")
	began := time.Now()
	rep := f.wait(f.start(nil))
	assert.Equal(t, OutcomeSelfFenced, rep.Outcome)
	assert.Contains(t, rep.Message, ErrLeaseUnverified.Error())
	assert.Less(t, time.Since(began), 3*time.Second)
	signals, _ := f.ctl.sent()
	assert.Greater(t, signals, 3, "the signals were delivered (retried every interval/4)")
}

// A lease query that a busy control plane answers after the heartbeat's
// retry period, but within the TTL, still confirms the delivered signal:
// the attempt keeps its lease instead of self-fencing.
func TestASlowLeaseQueryStillConfirmsADeliveredSignal(t *testing.T) {
	f := newFixture(t, `sleep 2.5; echo ok > outputs/ok`, nil)
	f.lease.TTL = 2 * time.Second
	f.ctl.lease.TTL = 2 * time.Second
	f.ctl.queryDelay = 700 * time.Millisecond // interval 500 ms, retry 125 ms
	rep := f.wait(f.start(nil))
	assert.Equal(t, OutcomeAccepted, rep.Outcome, rep.Message)
}

func TestSelfFencesWhenUnreachableForATTL(t *testing.T) {
	f := newFixture(t, `sleep 30`, nil)
	f.lease.TTL = time.Second
	f.ctl.lease.TTL = time.Second
	ex := f.start(nil)
	f.ctl.mu.Lock()
	f.ctl.hbErr = errors.New("connection refused")
	f.ctl.mu.Unlock()
	began := time.Now()
	rep := f.wait(ex)
	assert.Equal(t, OutcomeSelfFenced, rep.Outcome)
	assert.Contains(t, rep.Message, "unreachable")
	assert.Less(t, time.Since(began), 5*time.Second)
}

func TestCancelKillsTheProcessGroup(t *testing.T) {
	f := newFixture(t, `sleep 30 & echo $! > child.pid; wait`, nil)
	ex := f.start(nil)
	time.Sleep(300 * time.Millisecond)
	ex.Cancel("lease expired")
	rep := f.wait(ex)
	assert.Equal(t, OutcomeCancelled, rep.Outcome)
	assert.Empty(t, f.ctl.submitted)
	assertGroupDead(t, f, ex)
}

func TestExecutionTimeoutIsExit124(t *testing.T) {
	f := newFixture(t, `sleep 30`, nil)
	f.env.Timeouts.ExecutionSeconds = 1
	d, _ := f.env.Digest()
	f.lease.EnvelopeDigest = d
	f.ctl.lease.EnvelopeDigest = d
	rep := f.wait(f.start(nil))
	assert.Equal(t, OutcomeAccepted, rep.Outcome)
	assert.Equal(t, ExitTimedOut, rep.ExitCode)
}

func TestRejectedSubmissionRemovesStaging(t *testing.T) {
	f := newFixture(t, `echo x > outputs/x`, nil)
	f.ctl.submitErr = &Rejected{Reason: string(lease.RejectStaleFence), Message: "fence 1 is not the current fence 2"}
	rep := f.wait(f.start(nil))
	assert.Equal(t, OutcomeRejected, rep.Outcome)
	assert.Equal(t, "stale_fence", rep.Reason)
	f.assertNothingStaged() // a refused attempt's outputs never linger
}

func TestFreezeDelaysSubmissionButNotTheCommand(t *testing.T) {
	f := newFixture(t, `echo done > outputs/done`, nil)
	thaw := make(chan struct{})
	frozen := make(chan struct{})
	ex := f.start(func(o *Options) {
		o.Faults.Freeze = func(lease.Claim) { close(frozen); <-thaw }
	})
	<-frozen
	time.Sleep(300 * time.Millisecond)
	f.ctl.mu.Lock()
	n := len(f.ctl.submitted)
	f.ctl.mu.Unlock()
	assert.Equal(t, 0, n, "a frozen executor submits nothing")
	ex.Cancel("too late")
	close(thaw)
	rep := f.wait(ex)
	assert.Equal(t, OutcomeAccepted, rep.Outcome, "a cancel after the command exited does not stop the submission; the fence decides")
}

func TestStartFailuresLeaveNothingRunning(t *testing.T) {
	f := newFixture(t, `true`, nil)
	f.env.Command = []string{"no-such-program-xyz"}
	d, _ := f.env.Digest()
	f.lease.EnvelopeDigest = d
	_, err := Start(Options{Attempt: launchers.Attempt{Envelope: f.env, Lease: f.lease, HeartbeatInterval: time.Second}, Root: f.root, Blobs: f.blobs, Control: f.ctl})
	require.Error(t, err)
	assert.Contains(t, err.Error(), "command[0]")

	g := newFixture(t, `true`, nil)
	g.lease.EnvelopeDigest = "sha256:" + strings.Repeat("0", 64)
	_, err = Start(Options{Attempt: launchers.Attempt{Envelope: g.env, Lease: g.lease, HeartbeatInterval: time.Second}, Root: g.root, Blobs: g.blobs, Control: g.ctl})
	require.Error(t, err)
	assert.Contains(t, err.Error(), "does not match the envelope")
	assert.NoDirExists(t, TaskDir(g.root, claimOf(g.lease)), "no half-made task dir")
}

func assertGroupDead(t *testing.T, f *fixture, ex *Execution) {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(ex.Dir(), "child.pid"))
	require.NoError(t, err)
	var pid int
	_, _ = fmt.Sscan(strings.TrimSpace(string(b)), &pid)
	require.NotZero(t, pid)
	deadline := time.Now().Add(2 * time.Second)
	for syscall.Kill(pid, 0) == nil {
		require.True(t, time.Now().Before(deadline), "child %d of the process group survived", pid)
		time.Sleep(20 * time.Millisecond)
	}
}

// A control plane that does not answer lease queries (it is down) while
// Temporal takes the heartbeats does not make the executor kill its
// command: the lease cannot expire without the control plane either.
func TestQueryOutageDoesNotSelfFence(t *testing.T) {
	f := newFixture(t, `sleep 2; echo ok > outputs/ok`, nil)
	f.lease.TTL = time.Second
	f.ctl.lease.TTL = time.Second
	f.ctl.held = true
	ex := f.start(func(o *Options) {
		o.Attempt.HeartbeatInterval = 200 * time.Millisecond
		o.LeaseCheckInterval = 200 * time.Millisecond
	})
	waitUntil(t, 5*time.Second, "the first heartbeat confirmed", func() bool { _, b := f.ctl.sent(); return b >= 1 })
	f.ctl.set(func(c *fakeControl) { c.queryErr = errors.New("context deadline exceeded") })
	rep := f.wait(ex)
	assert.Equal(t, OutcomeAccepted, rep.Outcome, "%+v", rep)
}

// A slow submission keeps heartbeating, so a finished attempt's lease does
// not expire while its result is handed over; heartbeats stop once the
// result is accepted.
func TestHeartbeatsContinueWhileSubmitting(t *testing.T) {
	f := newFixture(t, `echo ok > outputs/ok`, nil)
	f.ctl.submitDelay = 800 * time.Millisecond
	ex := f.start(nil)
	<-ex.Done()
	f.ctl.mu.Lock()
	defer f.ctl.mu.Unlock()
	assert.Equal(t, OutcomeAccepted, ex.Report().Outcome)
	var afterExit int
	for _, hb := range f.ctl.heartbeats {
		if hb.Seq > 1 {
			afterExit++
		}
	}
	assert.GreaterOrEqual(t, afterExit, 4, "heartbeats every 100 ms during an 800 ms submission")
}

func TestKillReportsInfraKilled(t *testing.T) {
	f := newFixture(t, `sleep 30`, nil)
	ex := f.start(nil)
	time.Sleep(200 * time.Millisecond)
	ex.Kill("agent stopping")
	rep := f.wait(ex)
	assert.Equal(t, OutcomeInfraKilled, rep.Outcome)
	require.Len(t, f.ctl.failures, 1)
	assert.Equal(t, lease.ReasonInfraKilled, f.ctl.failures[0].Reason)
	assert.Equal(t, "agent stopping", f.ctl.failures[0].Detail)
	assert.Empty(t, f.ctl.submitted)
}

// A child that leaves the process group (setsid) still dies with its
// attempt: it carries the attempt's WDC_TASK_DIR.
func TestNothingOutlivesTheAttempt(t *testing.T) {
	f := newFixture(t, `setsid sleep 60 & echo $! > child.pid; echo done > outputs/x`, nil)
	ex := f.start(nil)
	rep := f.wait(ex)
	assert.Equal(t, OutcomeAccepted, rep.Outcome)
	assertGroupDead(t, f, ex)
}

// A connection that silently drops everything for a while shorter than
// TTL − 2 × interval costs nothing: heartbeats are retried every
// interval/4 (each try cut off after interval/4), so the first one after
// the heal renews the lease before the control plane would expire it.
func TestShortOutageIsRiddenOut(t *testing.T) {
	f := newFixture(t, `sleep 2.6; echo ok > outputs/ok`, nil)
	f.lease.TTL = 2 * time.Second
	f.ctl.lease.TTL = 2 * time.Second
	interval := 400 * time.Millisecond
	ex := f.start(func(o *Options) { o.Attempt.HeartbeatInterval = interval })
	time.Sleep(500 * time.Millisecond)
	f.ctl.set(func(c *fakeControl) { c.hang = true })
	cut := time.Now()
	time.Sleep(time.Second) // < TTL − 2 × interval = 1.2 s
	f.ctl.set(func(c *fakeControl) { c.hang = false })
	healed := time.Now()
	rep := f.wait(ex)
	assert.Equal(t, OutcomeAccepted, rep.Outcome, "%+v", rep)

	f.ctl.mu.Lock()
	defer f.ctl.mu.Unlock()
	assert.Zero(t, f.ctl.lapses, "the lease would have expired during the outage")
	during := 0
	for _, at := range f.ctl.tries {
		if at.After(cut) && at.Before(healed) {
			during++
		}
	}
	// Every 100 ms: about 10 tries; retrying once an interval after a
	// timed-out try would make 1 or 2.
	assert.GreaterOrEqual(t, during, 4, "heartbeat tries during a 1 s outage")
	var recovered time.Time
	for _, at := range f.ctl.acceptedAt {
		if at.After(healed) {
			recovered = at
			break
		}
	}
	require.False(t, recovered.IsZero())
	t.Logf("%d tries during the outage; first heartbeat accepted %s after the heal", during, recovered.Sub(healed).Round(time.Millisecond))
}

// The self-fencing deadline counts from the send time of the last accepted
// heartbeat, not from when its answer came back: with slow answers the
// command is still killed no later than the control plane would expire the
// lease (a TTL after Temporal took that heartbeat).
func TestSelfFenceCountsFromTheSendTime(t *testing.T) {
	f := newFixture(t, `sleep 30`, nil)
	ttl := 3 * time.Second
	f.lease.TTL = ttl
	f.ctl.lease.TTL = ttl
	f.ctl.replyDelay = 400 * time.Millisecond // within a try (interval/4 = 500 ms)
	ex := f.start(func(o *Options) { o.Attempt.HeartbeatInterval = 2 * time.Second })
	time.Sleep(4700 * time.Millisecond) // two heartbeats accepted (at 2 s and 4 s)
	f.ctl.set(func(c *fakeControl) { c.hang = true })
	rep := f.wait(ex)
	assert.Equal(t, OutcomeSelfFenced, rep.Outcome, "%+v", rep)
	assert.Contains(t, rep.Message, "Temporal unreachable")

	f.ctl.mu.Lock()
	defer f.ctl.mu.Unlock()
	require.GreaterOrEqual(t, len(f.ctl.acceptedAt), 2)
	expiry := f.ctl.acceptedAt[len(f.ctl.acceptedAt)-1].Add(ttl)
	// Counting from the answer would kill 400 ms after the expiry at the
	// earliest; 200 ms absorbs scheduling delays on a busy machine.
	assert.True(t, rep.FinishedAt.Before(expiry.Add(200*time.Millisecond)),
		"command ended %s after the lease would have expired", rep.FinishedAt.Sub(expiry))
	t.Logf("command ended %s relative to the expiry", rep.FinishedAt.Sub(expiry).Round(time.Millisecond))
}

// An executor frozen after its command exited for longer than the lease
// TTL still submits the result when it thaws: nothing is left to fence,
// and the control plane's fence check gives the answer (here: accepted).
func TestFrozenPastTheTTLStillSubmits(t *testing.T) {
	f := newFixture(t, `echo done > outputs/done`, nil)
	f.lease.TTL = time.Second
	f.ctl.lease.TTL = time.Second
	rep := f.wait(f.start(func(o *Options) {
		o.Faults.Freeze = func(lease.Claim) { time.Sleep(1500 * time.Millisecond) }
	}))
	assert.Equal(t, OutcomeAccepted, rep.Outcome, "%+v", rep)
	f.ctl.mu.Lock()
	defer f.ctl.mu.Unlock()
	assert.Len(t, f.ctl.submitted, 1)
}

// A result that could not be handed over (Temporal unreachable until the
// executor gave up) keeps its staged outputs: the submission may still be
// delivered when the control plane is back, and its ingest needs them.
func TestUndeliveredResultKeepsItsStaging(t *testing.T) {
	f := newFixture(t, `echo hi > outputs/a.txt`, nil)
	f.lease.TTL = time.Second
	f.ctl.lease.TTL = time.Second
	f.ctl.mu.Lock()
	f.ctl.hbErr = errors.New("connection refused")
	f.ctl.submitErr = errors.New("connection refused")
	f.ctl.mu.Unlock()
	rep := f.wait(f.start(nil))
	assert.Equal(t, OutcomeSubmitFailed, rep.Outcome)
	keys, err := f.blobs.List(context.Background(), blobstore.StagingPrefix(f.lease.TaskID, f.lease.Attempt, f.lease.Fence))
	require.NoError(t, err)
	assert.Equal(t, []string{blobstore.StagingPrefix(f.lease.TaskID, f.lease.Attempt, f.lease.Fence) + "a.txt"}, keys, "the staged output is kept")
}

// An artifact store that cannot take the outputs is infrastructure
// trouble, not the program's result: the attempt is reported infra_killed
// (retried) and nothing is submitted.
func TestStoreFailureWhileStagingIsInfraKilled(t *testing.T) {
	t.Setenv("AWS_ACCESS_KEY_ID", "unused")
	t.Setenv("AWS_SECRET_ACCESS_KEY", "unused")
	gone, err := blobstore.Open(context.Background(), "s3://gone?endpoint=http://127.0.0.1:1&use_path_style=true&region=us-east-1&disable_https=true")
	require.NoError(t, err)
	f := newFixture(t, `echo data > outputs/result.txt`, nil)
	ex := f.start(func(o *Options) { o.Blobs = gone })
	rep := f.wait(ex)
	assert.Equal(t, OutcomeInfraKilled, rep.Outcome)
	assert.Equal(t, string(lease.ReasonInfraKilled), rep.Reason)
	assert.Contains(t, rep.Message, "artifact store: blob store s3://gone?endpoint=")
	require.Len(t, f.ctl.failures, 1)
	assert.Equal(t, lease.ReasonInfraKilled, f.ctl.failures[0].Reason)
	assert.Empty(t, f.ctl.submitted, "no result without its outputs")
}

// Once its first heartbeat signal was accepted, the executor heartbeats
// the task's lease activity by ID; when the task holds none (not started,
// timed out) the same beat goes as a signal; when the task cancelled it
// (the lease ended) the executor fences itself at once.
func TestHeartbeatsGoByIDToTheLeaseActivity(t *testing.T) {
	f := newFixture(t, `sleep 30 & echo $! > child.pid; wait`, nil)
	ex := f.start(nil)
	waitUntil(t, 5*time.Second, "the first heartbeat signal", func() bool { s, _ := f.ctl.sent(); return s >= 1 })
	f.ctl.set(func(c *fakeControl) { c.held = true })
	waitUntil(t, 5*time.Second, "five heartbeats by ID", func() bool { _, b := f.ctl.sent(); return b >= 5 })
	signals, _ := f.ctl.sent()

	// The activity timed out (or was never started): back to signals.
	f.ctl.set(func(c *fakeControl) { c.held = false })
	waitUntil(t, 5*time.Second, "signals again", func() bool { s, _ := f.ctl.sent(); return s >= signals+3 })
	f.ctl.set(func(c *fakeControl) { c.held = true })
	waitUntil(t, 5*time.Second, "by ID again", func() bool { _, b := f.ctl.sent(); return b >= 8 })

	cancelled := time.Now()
	f.ctl.set(func(c *fakeControl) { c.heldCancelled = true })
	rep := f.wait(ex)
	assert.Equal(t, OutcomeSelfFenced, rep.Outcome)
	assert.Contains(t, rep.Message, ErrLeaseEnded.Error())
	assert.Less(t, time.Since(cancelled), 2*time.Second, "fenced at the next beat, not at the TTL")
	assert.Empty(t, f.ctl.submitted)
	assertGroupDead(t, f, ex)

	f.ctl.mu.Lock()
	defer f.ctl.mu.Unlock()
	seqs := map[int64]bool{}
	for _, hb := range append(append([]api.LeaseHeartbeatSignal{}, f.ctl.heartbeats...), f.ctl.byID...) {
		assert.False(t, seqs[hb.Seq], "seq %d sent once", hb.Seq)
		seqs[hb.Seq] = true
		assert.Equal(t, lease.ClaimOf(f.lease), hb.Claim)
	}
	assert.Equal(t, len(f.ctl.heartbeats), f.ctl.queries, "one lease query per signal, none per heartbeat by ID")
}

// The submission reports how many heartbeats the attempt sent, signals
// and heartbeats by ID alike.
func TestSubmissionReportsTheHeartbeatsSent(t *testing.T) {
	f := newFixture(t, `sleep 1; echo ok > outputs/ok`, nil)
	f.ctl.held = true
	rep := f.wait(f.start(nil))
	require.Equal(t, OutcomeAccepted, rep.Outcome, "%+v", rep)
	f.ctl.mu.Lock()
	defer f.ctl.mu.Unlock()
	require.Len(t, f.ctl.submitted, 1)
	require.Len(t, f.ctl.heartbeats, 1, "one signal, then by ID")
	assert.NotEmpty(t, f.ctl.byID)
	sent := int64(len(f.ctl.heartbeats) + len(f.ctl.byID))
	assert.InDelta(t, sent, f.ctl.submitted[0].HeartbeatSeq, 1, "the last seq before the submission (a beat may follow while it is accepted)")
}

func waitUntil(t *testing.T, d time.Duration, what string, cond func() bool) {
	t.Helper()
	end := time.Now().Add(d)
	for time.Now().Before(end) {
		if cond() {
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Fatalf("timed out waiting for %s", what)
}
