package local

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/wdc-runtime/wdc/api"
	"github.com/wdc-runtime/wdc/envelope"
	"github.com/wdc-runtime/wdc/internal/blobstore"
	"github.com/wdc-runtime/wdc/internal/executor"
	"github.com/wdc-runtime/wdc/launchers"
	"github.com/wdc-runtime/wdc/lease"
)

// leaseControl answers lease queries with a fixed lease (or error) and
// counts them; heartbeats are taken, results accepted.
type leaseControl struct {
	mu       sync.Mutex
	lease    lease.Lease
	queryErr error
	queries  int
}

func (c *leaseControl) Heartbeat(context.Context, api.LeaseHeartbeatSignal) error { return nil }

// HeartbeatByID finds no lease activity: heartbeats go as signals.
func (c *leaseControl) HeartbeatByID(context.Context, api.LeaseHeartbeatSignal) error {
	return executor.ErrNoLeaseActivity
}

func (c *leaseControl) Lease(_ context.Context, taskID string) (api.TaskView, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.queries++
	if c.queryErr != nil {
		return api.TaskView{}, c.queryErr
	}
	l := c.lease
	return api.TaskView{TaskID: taskID, Lease: &l}, nil
}

func (c *leaseControl) SubmitResult(_ context.Context, in api.SubmitResultInput, onAccepted func()) (api.SubmitResultResult, error) {
	if onAccepted != nil {
		onAccepted()
	}
	return api.SubmitResultResult{Accepted: true}, nil
}

func (c *leaseControl) ReportFailure(context.Context, api.AttemptFailedSignal) error { return nil }

func (c *leaseControl) queryCount() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.queries
}

// launchFixture is a launcher and an attempt whose command, if it ever
// starts, creates the file marker.
type launchFixture struct {
	launcher *Launcher
	ctl      *leaseControl
	attempt  launchers.Attempt
	work     string
	marker   string
}

func newLaunchFixture(t *testing.T) *launchFixture {
	t.Helper()
	blobs, err := blobstore.OpenDir(context.Background(), t.TempDir())
	require.NoError(t, err)
	marker := filepath.Join(t.TempDir(), "started")
	env := envelope.Envelope{
		TaskID: "t1", RunID: "r1", WorldID: "w1",
		Command: []string{"/bin/sh", "-c", `touch "$MARKER"`},
		Env:     map[string]string{"PATH": "/usr/bin:/bin", "MARKER": marker},
	}
	env.Normalize()
	digest, err := env.Digest()
	require.NoError(t, err)
	l := lease.Lease{TaskID: "t1", EnvelopeDigest: digest, WorkerID: "w-a", Attempt: 2, Fence: 2, State: lease.Active, TTL: 4 * time.Second}
	ctl := &leaseControl{lease: l}
	work := t.TempDir()
	launcher, err := New(Options{WorkerID: "w-a", WorkDir: work, Blobs: blobs, Control: ctl})
	require.NoError(t, err)
	return &launchFixture{launcher: launcher, ctl: ctl, attempt: launchers.Attempt{Envelope: env, Lease: l, HeartbeatInterval: time.Second}, work: work, marker: marker}
}

// assertNothingStarted: no command ran and no task directory is left.
func (f *launchFixture) assertNothingStarted(t *testing.T) {
	t.Helper()
	time.Sleep(200 * time.Millisecond) // a started shell would have touched the marker by now
	assert.NoFileExists(t, f.marker, "the command ran")
	entries, err := os.ReadDir(f.work)
	require.NoError(t, err)
	assert.Empty(t, entries, "a refused launch leaves nothing in the work dir")
	assert.Zero(t, f.launcher.Running())
}

// A launch whose lease has moved on (the control plane revoked it and
// granted a new fence) or ended starts nothing: one lease query, judged by
// the fence check.
func TestSubmitRefusesALeaseThatIsNotCurrent(t *testing.T) {
	tests := map[string]struct {
		edit   func(*lease.Lease)
		reason lease.RejectReason
	}{
		"stale fence":  {func(l *lease.Lease) { l.Fence, l.Attempt = 3, 3 }, lease.RejectStaleFence},
		"revoked":      {func(l *lease.Lease) { l.State = lease.Revoked }, lease.RejectLeaseNotActive},
		"other worker": {func(l *lease.Lease) { l.WorkerID = "w-b" }, lease.RejectWrongWorker},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			f := newLaunchFixture(t)
			tc.edit(&f.ctl.lease)
			_, err := f.launcher.Submit(context.Background(), f.attempt)
			var rej *executor.Rejected
			require.ErrorAs(t, err, &rej)
			assert.Equal(t, string(tc.reason), rej.Reason)
			assert.Contains(t, err.Error(), "not started")
			assert.Equal(t, 1, f.ctl.queryCount(), "one lease query")
			f.assertNothingStarted(t)
		})
	}
}

// A lease query that fails refuses the launch: an attempt whose lease
// cannot be verified may have been revoked already.
func TestSubmitRefusesWhenTheLeaseCannotBeVerified(t *testing.T) {
	f := newLaunchFixture(t)
	f.ctl.queryErr = errors.New("context deadline exceeded")
	_, err := f.launcher.Submit(context.Background(), f.attempt)
	require.ErrorIs(t, err, executor.ErrLeaseUnverified)
	f.assertNothingStarted(t)
}

// A launch past its deadline (the control plane gave up on it) starts
// nothing and asks nothing.
func TestSubmitRefusesALaunchPastItsDeadline(t *testing.T) {
	f := newLaunchFixture(t)
	ctx, cancel := context.WithDeadline(context.Background(), time.Now().Add(-1500*time.Millisecond))
	defer cancel()
	_, err := f.launcher.Submit(ctx, f.attempt)
	require.ErrorIs(t, err, launchers.ErrLaunchExpired)
	assert.Zero(t, f.ctl.queryCount())
	f.assertNothingStarted(t)
}

// After Shutdown (the agent gave way or stops) a launch starts nothing and
// asks nothing, even for a current lease.
func TestSubmitAfterShutdownStartsNothing(t *testing.T) {
	f := newLaunchFixture(t)
	f.launcher.Shutdown(context.Background(), "another registration took over this worker")
	_, err := f.launcher.Submit(context.Background(), f.attempt)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "not started: agent shutting down (another registration took over this worker)")
	assert.Zero(t, f.ctl.queryCount())
	f.assertNothingStarted(t)
}

// The current lease: the command starts (after one lease query).
func TestSubmitStartsACurrentAttempt(t *testing.T) {
	f := newLaunchFixture(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	sub, err := f.launcher.Submit(ctx, f.attempt)
	require.NoError(t, err)
	assert.DirExists(t, sub.TaskDir)
	require.Eventually(t, func() bool { _, err := os.Stat(f.marker); return err == nil }, 10*time.Second, 20*time.Millisecond)
	// The attempt writes its report after the command exits; let it finish
	// before the test's directories are removed.
	require.Eventually(t, func() bool { return f.launcher.Running() == 0 }, 10*time.Second, 20*time.Millisecond)
}

// A launch stalled in its staging (a slow input download) holds no lock
// that the agent's heartbeats (Running), a cancel or another launch need;
// a Cancel during the stall stops it at once, and it starts nothing.
func TestAStalledLaunchBlocksNothingAndACancelStopsIt(t *testing.T) {
	f := newLaunchFixture(t)
	stalled := make(chan struct{})
	f.launcher.opts.Faults.Stall = func(ctx context.Context, c lease.Claim) {
		close(stalled)
		<-ctx.Done() // a download that only a cancel ends
	}
	errc := make(chan error, 1)
	go func() {
		_, err := f.launcher.Submit(context.Background(), f.attempt)
		errc <- err
	}()
	<-stalled
	done := make(chan int, 1)
	go func() { done <- f.launcher.Running() }()
	select {
	case n := <-done:
		assert.Equal(t, 1, n, "a starting attempt holds its slot")
	case <-time.After(time.Second):
		t.Fatal("Running waited on the stalled launch")
	}
	other := f.attempt
	other.Lease.TaskID, other.Envelope.TaskID = "t2", "t2"
	_, err := f.launcher.Status(context.Background(), other.Claim())
	require.ErrorIs(t, err, launchers.ErrUnknownAttempt, "Status answers during the stall")

	began := time.Now()
	require.NoError(t, f.launcher.Cancel(context.Background(), f.attempt.Claim(), "lease_expired"))
	select {
	case err := <-errc:
		var rej *executor.Rejected
		require.ErrorAs(t, err, &rej)
		assert.Equal(t, string(lease.RejectLeaseNotActive), rej.Reason)
		assert.Less(t, time.Since(began), time.Second, "the cancel takes effect at once")
	case <-time.After(5 * time.Second):
		t.Fatal("the cancelled launch did not return")
	}
	f.assertNothingStarted(t)
}
