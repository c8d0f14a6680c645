package workflows

import (
	"context"
	"errors"
	"time"

	"github.com/stretchr/testify/mock"
	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/testsuite"

	"github.com/wdc-runtime/wdc/api"
	"github.com/wdc-runtime/wdc/lease"
)

// heldLease is a lease activity as the control plane holds it (pending,
// never completed by the activity), so that a test can end it as
// Temporal would.
type heldLease struct {
	id               string
	in               api.LeaseHoldInput
	heartbeatTimeout time.Duration
	at               time.Time
	// deadline is its start-to-close deadline.
	deadline time.Time
	token    []byte
}

// holdLeases installs the HoldLease mock and returns what it holds, in
// order, and the IDs of the lease activities the task cancelled.
func (s *taskSuite) holdLeases() (held *[]heldLease, cancelled *[]string) {
	held, cancelled = &[]heldLease{}, &[]string{}
	s.env.OnActivity(controlActs.HoldLease, mock.Anything, mock.Anything).Return(func(ctx context.Context, in api.LeaseHoldInput) error {
		info := activity.GetInfo(ctx)
		*held = append(*held, heldLease{id: info.ActivityID, in: in, heartbeatTimeout: info.HeartbeatTimeout, at: s.env.Now(), deadline: info.Deadline, token: info.TaskToken})
		return activity.ErrResultPending
	})
	s.env.SetOnActivityCanceledListener(func(info *activity.Info) {
		if info.ActivityType.Name == "HoldLease" {
			*cancelled = append(*cancelled, info.ActivityID)
		}
	})
	return held, cancelled
}

// endLeaseActivity ends the newest held lease activity at d with err, as
// the server reports a timeout.
func (s *taskSuite) endLeaseActivity(d time.Duration, held *[]heldLease, err error) {
	s.env.RegisterDelayedCallback(func() {
		s.Require().NotEmpty(*held, "no lease activity was started")
		s.Require().NoError(s.env.CompleteActivity((*held)[len(*held)-1].token, nil, err))
	}, d)
}

// viewAt queries the task at d.
func (s *taskSuite) viewAt(d time.Duration, into *api.TaskView) {
	s.env.RegisterDelayedCallback(func() { *into = s.lastView() }, d)
}

// A task that ends before its first heartbeat runs no lease activity:
// the launch is its one activity, as for every task.
func (s *taskSuite) TestTrivialTaskHoldsNoLeaseActivity() {
	held, _ := s.holdLeases()
	local, remote := s.started()
	s.submit(time.Second, "t1/1/1", s.claim("worker-a", 1))
	out := s.execute(api.TaskOptions{})
	s.Equal(api.TaskCompleted, out.State)
	s.Empty(*held)
	s.Equal([]string{"SelectWorker", "Ingest"}, *local)
	s.Equal([]string{"LaunchAttempt"}, *remote)
}

// The first accepted heartbeat signal schedules the lease activity
// (lease-<fence>, heartbeat timeout = the TTL) and stops the lease timer:
// while it is pending Temporal keeps the time, so with no further signal
// the lease outlives many TTLs, and a result is accepted.
func (s *taskSuite) TestFirstHeartbeatHandsTheLeaseToAnActivity() {
	held, _ := s.holdLeases()
	var timers, timersCancelled int
	s.env.SetOnTimerScheduledListener(func(string, time.Duration) { timers++ })
	s.env.SetOnTimerCanceledListener(func(string) { timersCancelled++ })
	s.heartbeat(10*time.Second, s.claim("worker-a", 1), 1)
	s.heartbeat(12*time.Second, s.claim("worker-a", 1), 2) // a fallback signal: no second activity
	var during api.TaskView
	s.viewAt(5*time.Minute, &during)
	sub := s.submit(10*time.Minute, "t1/1/1", s.claim("worker-a", 1))
	out := s.execute(api.TaskOptions{LeaseTTL: 30 * time.Second})
	s.Equal(api.TaskCompleted, out.State)
	s.Equal(int64(1), out.Attempts)
	s.NoError(sub.err)
	s.Require().Len(*held, 1)
	h := (*held)[0]
	s.Equal("lease-1", h.id)
	s.Equal(api.LeaseHoldInput{TaskID: "t1", WorkerID: "worker-a", Attempt: 1, Fence: 1}, h.in)
	s.Equal(30*time.Second, h.heartbeatTimeout, "the heartbeat timeout is the lease TTL")
	s.Equal("lease-1", during.LeaseActivity)
	s.Equal(lease.Active, during.Lease.State)
	s.Equal(1, timers, "the grant's lease timer only")
	s.Equal(1, timersCancelled, "stopped when the lease activity took over")
}

// A heartbeat timeout of the lease activity expires the lease
// (lease_expired) at the time Temporal says, and the next attempt runs.
func (s *taskSuite) TestLeaseActivityHeartbeatTimeoutExpiresTheLease() {
	held, _ := s.holdLeases()
	s.heartbeat(10*time.Second, s.claim("worker-a", 1), 1)
	s.endLeaseActivity(2*time.Minute, held, temporal.NewTimeoutError(enumspb.TIMEOUT_TYPE_HEARTBEAT, nil))
	var after api.TaskView
	s.viewAt(2*time.Minute+time.Millisecond, &after)
	second := s.submit(2*time.Minute+20*time.Second, "t1/2/2", s.claim("worker-b", 2))
	out := s.execute(api.TaskOptions{LeaseTTL: 30 * time.Second, Backoff: lease.Backoff{Initial: time.Second, Max: time.Second, Multiplier: 1}})
	s.Equal(api.TaskCompleted, out.State)
	s.Equal(int64(2), out.Attempts)
	s.NoError(second.err)
	s.Require().Len(after.Leases, 1)
	first := after.Leases[0]
	s.Equal(lease.Expired, first.State)
	s.Equal(string(lease.ReasonLeaseExpired), first.EndReason)
	s.Equal(first.EndedAt.Add(-30*time.Second), first.RenewedAt, "last heard a TTL before the timeout")
	s.Empty(after.LeaseActivity)
	view := s.lastView()
	s.Require().Len(view.Directives, 1)
	s.Equal(lease.ReasonLeaseExpired, view.Directives[0].Reason)
	s.Require().Len(s.cancels, 1, "the expired attempt is cancelled")
	s.Equal(int64(1), s.cancels[0].Fence)
}

// A lease of MaxLeaseTTL-scale TTL (25 h, past LeaseActivityLifetime) is
// held by a lease activity that lives longer than its heartbeat timeout,
// so the server never caps the timeout at the lifetime: a silent holder's
// lease expires at its TTL.
func (s *taskSuite) TestLongLeaseExpiresAtItsTTL() {
	const ttl = 25 * time.Hour
	held, _ := s.holdLeases()
	s.heartbeat(time.Hour, s.claim("worker-a", 1), 1)
	s.endLeaseActivity(time.Hour+ttl, held, temporal.NewTimeoutError(enumspb.TIMEOUT_TYPE_HEARTBEAT, nil))
	var after api.TaskView
	s.viewAt(time.Hour+ttl+time.Millisecond, &after)
	s.submit(time.Hour+ttl+time.Minute, "t1/2/2", s.claim("worker-b", 2))
	out := s.execute(api.TaskOptions{LeaseTTL: ttl, Backoff: lease.Backoff{Initial: time.Second, Max: time.Second, Multiplier: 1}})
	s.Equal(api.TaskCompleted, out.State)
	s.Require().Len(*held, 1)
	s.Equal(ttl, (*held)[0].heartbeatTimeout)
	s.Greater((*held)[0].deadline.Sub((*held)[0].at), ttl, "the lifetime outlasts the heartbeat timeout")
	s.Require().NotEmpty(after.Leases)
	s.Equal(lease.Expired, after.Leases[0].State)
	s.Equal(time.Hour, after.Leases[0].RenewedAt.Sub(after.Leases[0].GrantedAt), "last heard at its heartbeat, a TTL before the expiry")
}

// Ending the lease (a worker-lost revocation) cancels its lease activity,
// so the executor's next heartbeat by ID learns it.
func (s *taskSuite) TestRevocationCancelsTheLeaseActivity() {
	held, cancelled := s.holdLeases()
	s.heartbeat(10*time.Second, s.claim("worker-a", 1), 1)
	s.env.RegisterDelayedCallback(func() {
		s.env.SignalWorkflow(api.SignalWorkerLost, api.WorkerLostSignal{WorkerID: "worker-a", TaskID: "t1", Fence: 1, State: "STALE", LivenessFenced: true})
	}, 20*time.Second)
	s.submit(40*time.Second, "t1/2/2", s.claim("worker-b", 2))
	out := s.execute(api.TaskOptions{LeaseTTL: 30 * time.Second, Backoff: lease.Backoff{Initial: time.Second, Max: time.Second, Multiplier: 1}})
	s.Equal(api.TaskCompleted, out.State)
	s.Require().Len(*held, 1)
	s.Equal([]string{"lease-1"}, *cancelled)
	view := s.lastView()
	s.Require().Len(view.Directives, 1)
	s.Equal(lease.ReasonWorkerLost, view.Directives[0].Reason)
}

// Cancelling the task cancels the lease activity too.
func (s *taskSuite) TestCancelCancelsTheLeaseActivity() {
	_, cancelled := s.holdLeases()
	s.heartbeat(10*time.Second, s.claim("worker-a", 1), 1)
	out := &updateOutcome{}
	s.env.RegisterDelayedCallback(func() { s.cancelNow(out) }, 20*time.Second)
	res := s.execute(api.TaskOptions{LeaseTTL: 30 * time.Second})
	s.Equal(api.TaskCancelled, res.State)
	s.Equal([]string{"lease-1"}, *cancelled)
}

// A lease whose result is pending is not expired by its lease activity's
// heartbeat timeout (the executor stops heartbeating once its result is
// accepted; a large ingest may outlast the TTL): the ingest decides.
func (s *taskSuite) TestNoExpiryWhileTheResultIsPending() {
	s.env = s.NewTestWorkflowEnvironment()
	s.ingestAfter = 2 * time.Minute
	s.SetupTestWith(nil)
	s.env.SetTestTimeout(20 * time.Second)
	held, _ := s.holdLeases()
	s.heartbeat(10*time.Second, s.claim("worker-a", 1), 1)
	out := &updateOutcome{}
	s.env.RegisterDelayedCallback(func() {
		s.env.UpdateWorkflow(api.UpdateSubmitResult, "t1/1/1", &testsuite.TestUpdateCallback{
			OnAccept: func() {}, OnReject: func(err error) { out.err = err }, OnComplete: func(_ any, err error) { out.completed, out.err = true, err },
		}, api.SubmitResultInput{Claim: s.claim("worker-a", 1), Artifacts: []api.Artifact{{Name: "big.bin", Digest: testArtifactDigest, SizeBytes: LocalIngestMaxBytes + 1}}})
	}, 20*time.Second)
	s.endLeaseActivity(time.Minute, held, temporal.NewTimeoutError(enumspb.TIMEOUT_TYPE_HEARTBEAT, nil))
	res := s.execute(api.TaskOptions{LeaseTTL: 30 * time.Second})
	s.Equal(api.TaskCompleted, res.State)
	s.Equal(int64(1), res.Attempts)
	s.True(out.completed)
	s.NoError(out.err)
	view := s.lastView()
	s.Empty(view.Directives)
	s.Equal(lease.Completed, view.Leases[0].State)
}

// A lease activity the control plane did not start within a TTL leaves
// the lease to heartbeat signals (the executor sends them while its
// heartbeats by ID find no started activity): signals keep it ACTIVE, the
// next accepted one schedules another activity, and when the signals stop
// too the lease expires on its timer, a TTL after the last one.
func (s *taskSuite) TestNotStartedLeaseActivityFallsBackToSignals() {
	held, _ := s.holdLeases()
	c := s.claim("worker-a", 1)
	s.heartbeat(10*time.Second, c, 1)
	s.endLeaseActivity(40*time.Second, held, temporal.NewTimeoutError(enumspb.TIMEOUT_TYPE_SCHEDULE_TO_START, nil))
	// The by-ID heartbeats found nothing started: signals meanwhile.
	for i, at := range []time.Duration{20, 30, 35} {
		s.heartbeat(at*time.Second, c, int64(2+i))
	}
	var fellBack api.TaskView
	s.viewAt(40*time.Second+time.Millisecond, &fellBack)
	s.heartbeat(50*time.Second, c, 5) // schedules a new lease activity
	s.endLeaseActivity(80*time.Second, held, temporal.NewTimeoutError(enumspb.TIMEOUT_TYPE_SCHEDULE_TO_START, nil))
	var expired api.TaskView
	s.viewAt(81*time.Second, &expired)
	s.submit(100*time.Second, "t1/2/2", s.claim("worker-b", 2))
	res := s.execute(api.TaskOptions{LeaseTTL: 30 * time.Second, Backoff: lease.Backoff{Initial: time.Second, Max: time.Second, Multiplier: 1}})
	s.Equal(api.TaskCompleted, res.State)
	s.Equal(lease.Active, fellBack.Lease.State, "kept by the signals")
	s.Empty(fellBack.LeaseActivity)
	s.Require().Len(*held, 2, "scheduled again by the next signal")
	s.Equal("lease-1", (*held)[1].id)
	s.Require().Len(expired.Leases, 1)
	s.Equal(lease.Expired, expired.Leases[0].State, "no signal since 50 s: expired on the timer at 80 s")
	s.Equal(string(lease.ReasonLeaseExpired), expired.Leases[0].EndReason)
	s.WithinDuration(expired.Leases[0].RenewedAt.Add(30*time.Second), expired.Leases[0].EndedAt, 10*time.Millisecond)
}

// A holder that heartbeats by signal only (an executor older than lease
// activities) keeps its lease: the activity's heartbeat timeout finds the
// lease renewed by signals, and no further activity is scheduled for that
// fence.
func (s *taskSuite) TestSignalOnlyHolderKeepsItsLease() {
	held, _ := s.holdLeases()
	c := s.claim("worker-a", 1)
	for i := range 10 {
		s.heartbeat(time.Duration(10+10*i)*time.Second, c, int64(i+1))
	}
	s.endLeaseActivity(40*time.Second, held, temporal.NewTimeoutError(enumspb.TIMEOUT_TYPE_HEARTBEAT, nil))
	sub := s.submit(105*time.Second, "t1/1/1", c)
	res := s.execute(api.TaskOptions{LeaseTTL: 30 * time.Second})
	s.Equal(api.TaskCompleted, res.State)
	s.Equal(int64(1), res.Attempts)
	s.NoError(sub.err)
	s.Len(*held, 1, "not scheduled again for a holder that heartbeats by signal")
}

// A lease activity that lived its whole lifetime (the executor heartbeated
// throughout) is replaced at once, the lease counted as heard then; one
// that fails unexpectedly leaves the lease to heartbeat signals and the
// timer (heard at the failure) until the next accepted signal.
func (s *taskSuite) TestLeaseActivityLifetimeAndFailure() {
	held, _ := s.holdLeases()
	c := s.claim("worker-a", 1)
	s.heartbeat(10*time.Second, c, 1)
	s.endLeaseActivity(time.Minute, held, temporal.NewTimeoutError(enumspb.TIMEOUT_TYPE_START_TO_CLOSE, nil))
	var replaced api.TaskView
	s.viewAt(time.Minute+time.Millisecond, &replaced)
	s.endLeaseActivity(2*time.Minute, held, errors.New("boom"))
	var failed api.TaskView
	s.viewAt(2*time.Minute+time.Millisecond, &failed)
	s.heartbeat(2*time.Minute+20*time.Second, c, 2) // a signal: held again
	var again api.TaskView
	s.viewAt(2*time.Minute+21*time.Second, &again)
	sub := s.submit(5*time.Minute, "t1/1/1", c)
	res := s.execute(api.TaskOptions{LeaseTTL: 30 * time.Second})
	s.Equal(api.TaskCompleted, res.State)
	s.Equal(int64(1), res.Attempts, "the lease never expired")
	s.NoError(sub.err)
	s.Equal("lease-1", replaced.LeaseActivity, "replaced at once")
	s.InDelta(float64(time.Minute), float64(replaced.Lease.RenewedAt.Sub(replaced.Lease.GrantedAt)), float64(time.Second), "heard at the lifetime's end")
	s.Empty(failed.LeaseActivity)
	s.Equal(lease.Active, failed.Lease.State)
	s.InDelta(float64(2*time.Minute), float64(failed.Lease.RenewedAt.Sub(failed.Lease.GrantedAt)), float64(time.Second), "heard at the failure")
	s.Equal("lease-1", again.LeaseActivity)
	s.Len(*held, 3)
}

// A signed holder's lease activity lives SignedLeaseActivityLifetime, and
// the next one waits for the attempt's next heartbeat signal (signed, as
// heartbeats by ID are not): the lease holds meanwhile on its TTL.
func (s *taskSuite) TestSignedHoldersLeaseActivityWaitsForASignalAfterItsLifetime() {
	s.issuedAt = time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)
	held, _ := s.holdLeases()
	c := s.claim("worker-a", 1)
	s.heartbeat(10*time.Second, c, 1)
	s.endLeaseActivity(time.Minute, held, temporal.NewTimeoutError(enumspb.TIMEOUT_TYPE_START_TO_CLOSE, nil))
	s.heartbeat(time.Minute+5*time.Second, c, 1) // seen already: renews nothing, schedules nothing
	var waiting api.TaskView
	s.viewAt(time.Minute+6*time.Second, &waiting)
	s.heartbeat(time.Minute+20*time.Second, c, 2)
	var again api.TaskView
	s.viewAt(time.Minute+21*time.Second, &again)
	sub := s.submit(3*time.Minute, "t1/1/1", c)
	res := s.execute(api.TaskOptions{LeaseTTL: 30 * time.Second})
	s.Equal(api.TaskCompleted, res.State)
	s.Equal(int64(1), res.Attempts, "the signal renewed the lease in time")
	s.NoError(sub.err)
	s.Require().NotEmpty(*held)
	s.InDelta(float64(SignedLeaseActivityLifetime), float64((*held)[0].deadline.Sub((*held)[0].at)), float64(15*time.Second), "not LeaseActivityLifetime")
	s.Empty(waiting.LeaseActivity, "not replaced before a new heartbeat signal")
	s.Equal(lease.Active, waiting.Lease.State)
	s.Equal(int64(1), waiting.Stats.HeartbeatsAccepted, "the repeat is not counted")
	s.Equal("lease-1", again.LeaseActivity)
	s.Len(*held, 2)
}

// When no heartbeat signal follows the end of a signed holder's lease
// activity, the lease expires a TTL after it: heartbeats by ID kept it no
// longer.
func (s *taskSuite) TestSignedHoldersLeaseExpiresWithoutASignalAfterTheLifetime() {
	s.issuedAt = time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)
	held, _ := s.holdLeases()
	s.heartbeat(10*time.Second, s.claim("worker-a", 1), 1)
	s.endLeaseActivity(time.Minute, held, temporal.NewTimeoutError(enumspb.TIMEOUT_TYPE_START_TO_CLOSE, nil))
	second := s.submit(2*time.Minute, "t1/2/2", s.claim("worker-b", 2))
	out := s.execute(api.TaskOptions{LeaseTTL: 30 * time.Second, Backoff: lease.Backoff{Initial: time.Second, Max: time.Second, Multiplier: 1}})
	s.Equal(api.TaskCompleted, out.State)
	s.Equal(int64(2), out.Attempts)
	s.NoError(second.err)
	view := s.lastView()
	s.Require().Len(view.Leases, 2)
	first := view.Leases[0]
	s.Equal(lease.Expired, first.State)
	s.Equal(first.RenewedAt.Add(30*time.Second), first.EndedAt, "a TTL after the lifetime's end")
	s.Len(*held, 1)
}

// A task that waits for room looks again after the wait its control plane
// asks for (RetryAfter: many tasks wait) when that is longer than its
// select_interval, and after its select_interval otherwise.
func (s *taskSuite) TestWaitingTaskLooksAgainWhenTheControlPlaneSays() {
	s.waits = []api.SelectWorkerResult{
		{Waiting: "worker-a: no room", RetryAfter: 40 * time.Second},
		{Waiting: "worker-a: no room", RetryAfter: 100 * time.Millisecond},
	}
	s.submit(time.Minute, "t1/1/1", s.claim("worker-a", 1))
	out := s.execute(api.TaskOptions{LeaseTTL: 2 * time.Minute, SelectInterval: 3 * time.Second})
	s.Equal(api.TaskCompleted, out.State)
	s.Require().Len(s.grantTimes, 3)
	s.Equal(40*time.Second, s.grantTimes[1].Sub(s.grantTimes[0]), "the control plane's wait")
	s.Equal(4500*time.Millisecond, s.grantTimes[2].Sub(s.grantTimes[1]), "select_interval (grown by half) when longer")
}
