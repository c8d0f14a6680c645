package workflows

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/spiffe/go-spiffe/v2/spiffeid"
	"github.com/stretchr/testify/mock"
	"github.com/stretchr/testify/require"
	"github.com/stretchr/testify/suite"
	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/converter"
	"go.temporal.io/sdk/interceptor"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/testsuite"
	"go.temporal.io/sdk/worker"
	"go.temporal.io/sdk/workflow"

	"github.com/wdc-runtime/wdc/activities"
	"github.com/wdc-runtime/wdc/api"
	"github.com/wdc-runtime/wdc/envelope"
	"github.com/wdc-runtime/wdc/identity"
	"github.com/wdc-runtime/wdc/lease"
)

const testArtifactDigest = "sha256:0000000000000000000000000000000000000000000000000000000000000001"

func testEnvelope(t testing.TB) (envelope.Envelope, string) {
	env := envelope.Envelope{TaskID: "t1", RunID: "r1", WorldID: "w1", Command: []string{"true"}}
	env.Normalize()
	d, err := env.Digest()
	require.NoError(t, err)
	return env, d
}

type taskSuite struct {
	suite.Suite
	testsuite.WorkflowTestSuite
	env    *testsuite.TestWorkflowEnvironment
	envl   envelope.Envelope
	digest string
	// submitter, when set, signs the task's authority (as tasks submit
	// does); nil leaves the task unsigned.
	submitter *identity.Signer

	mu sync.Mutex
	// gen counts SetupTestWith calls: the mocks of an earlier one record
	// nothing.
	gen    int
	grants []api.SelectWorkerInput
	// grantTimes are the workflow times of the SelectWorker calls.
	grantTimes []time.Time
	launches   []api.LaunchInput
	ingests    []api.IngestInput
	cancels    []api.CancelAttemptInput
	releases   []api.ReleaseSignal
	// ended are the task-ended reports sent: by the workflow or, as the
	// real Ingest does, by the Ingest mock when asked (IngestInput.Report);
	// releases the releases sent, by the workflow or by the Ingest mock;
	// signalled counts the ones the workflow sent itself, by signal name.
	ended     []api.TaskOutcome
	signalled map[string]int
	cleanups  int
	// workers are handed out in turn by the SelectWorker mock, passing
	// over the last one in AvoidWorkers while another is left.
	workers []string
	// ingestAfter and selectAfter delay the Ingest and SelectWorker mocks
	// (set before SetupTestWith).
	ingestAfter, selectAfter time.Duration
	// ingestErr, when set, decides the Ingest mock's error per input.
	ingestErr func(api.IngestInput) error
	// ingestForged, when set, is what the Ingest mock answers instead of
	// the submission's artifacts (a completion forged by its activity ID).
	ingestForged func(api.IngestInput) *api.IngestResult
	// ingestLost, when set, says per input that the ingest did its work
	// but its completion was lost and every retry failed (a store outage):
	// the mock then returns an error after the work.
	ingestLost func(api.IngestInput) bool
	// waits are answered by the SelectWorker mock first, one per call
	// (no worker: the task waits).
	waits []api.SelectWorkerResult
	// issuedAt is every grant's IdentityIssuedAt: zero for a worker that
	// registered unsigned.
	issuedAt time.Time
	// workerLoss, when set, is the registry entry's answer to a
	// worker-lost signal (CheckWorkerLoss); nil agrees with the signal.
	workerLoss func(api.WorkerLostSignal) (api.WorkerLossCheck, error)
}

func TestTaskWorkflow(t *testing.T) { suite.Run(t, new(taskSuite)) }

func (s *taskSuite) SetupTest() {
	s.env = s.NewTestWorkflowEnvironment()
	s.ingestAfter, s.selectAfter, s.ingestErr, s.ingestLost, s.waits, s.ingestForged = 0, 0, nil, nil, nil, nil
	s.issuedAt, s.workerLoss = time.Time{}, nil
	s.SetupTestWith(nil)
	s.env.SetTestTimeout(20 * time.Second)
}

// SetupTestWith installs the default mocks on s.env; launch, when set,
// installs the LaunchAttempt mock instead of the default one.
func (s *taskSuite) SetupTestWith(launch func(env *testsuite.TestWorkflowEnvironment)) {
	s.env.RegisterWorkflowWithOptions(WdcTask, workflow.RegisterOptions{Name: api.TaskWorkflowType})
	s.env.RegisterActivity(&activities.Control{})
	s.env.RegisterActivity(&activities.Agent{})
	s.envl, s.digest = testEnvelope(s.T())
	s.mu.Lock()
	s.gen++
	gen := s.gen
	s.grants, s.launches, s.ingests, s.cancels, s.releases, s.ended = nil, nil, nil, nil, nil, nil
	s.signalled = map[string]int{}
	s.cleanups = 0
	s.grantTimes = nil
	s.mu.Unlock()
	s.workers = []string{"worker-a", "worker-b"}
	// stale: a mock called by an earlier test's environment (an unawaited
	// activity of a workflow that has ended) records nothing here.
	stale := func() bool { return gen != s.gen }

	s.env.OnActivity(controlActs.SelectWorker, mock.Anything, mock.Anything).After(s.selectAfter).Return(
		func(_ context.Context, in api.SelectWorkerInput) (api.SelectWorkerResult, error) {
			s.mu.Lock()
			defer s.mu.Unlock()
			s.grants = append(s.grants, in)
			s.grantTimes = append(s.grantTimes, s.env.Now())
			if len(s.waits) > 0 {
				w := s.waits[0]
				s.waits = s.waits[1:]
				return w, nil
			}
			avoid := ""
			if n := len(in.AvoidWorkers); n > 0 {
				avoid = in.AvoidWorkers[n-1]
			}
			for _, w := range s.workers {
				if w != avoid {
					return api.SelectWorkerResult{WorkerID: w, Incarnation: 1, IdentityIssuedAt: s.issuedAt}, nil
				}
			}
			return api.SelectWorkerResult{WorkerID: s.workers[0], Incarnation: 1, IdentityIssuedAt: s.issuedAt}, nil
		})
	if launch != nil {
		launch(s.env)
	} else {
		s.env.OnActivity(agentActs.LaunchAttempt, mock.Anything, mock.Anything).Return(
			func(_ context.Context, in api.LaunchInput) (api.LaunchResult, error) {
				s.mu.Lock()
				defer s.mu.Unlock()
				s.launches = append(s.launches, in)
				return api.LaunchResult{TaskDir: "/tmp/x"}, nil
			})
	}
	s.env.OnActivity(agentActs.CancelAttempt, mock.Anything, mock.Anything).Return(
		func(_ context.Context, in api.CancelAttemptInput) error {
			s.mu.Lock()
			defer s.mu.Unlock()
			if !stale() {
				s.cancels = append(s.cancels, in)
			}
			return nil
		})
	s.env.OnActivity(controlActs.Ingest, mock.Anything, mock.Anything).After(s.ingestAfter).Return(
		func(_ context.Context, in api.IngestInput) (api.IngestResult, error) {
			s.mu.Lock()
			defer s.mu.Unlock()
			s.ingests = append(s.ingests, in)
			if s.ingestErr != nil {
				if err := s.ingestErr(in); err != nil {
					return api.IngestResult{}, err
				}
			}
			// What the real Ingest sends once the result is stored.
			s.releases = append(s.releases, api.ReleaseSignal{TaskID: in.TaskID, Fence: in.Fence})
			if s.ingestLost != nil && s.ingestLost(in) {
				if in.Report != nil && !stale() {
					s.ended = append(s.ended, *in.Report) // sent before the completion was lost
				}
				return api.IngestResult{}, errors.New("blob store unreachable")
			}
			if s.ingestForged != nil {
				if f := s.ingestForged(in); f != nil {
					return *f, nil
				}
			}
			res := api.IngestResult{Artifacts: in.Artifacts, Logs: in.Logs}
			if in.Report != nil && !stale() {
				s.ended = append(s.ended, *in.Report)
				res.Reported = true
			}
			return res, nil
		})
	// The registry entry agrees with every worker-lost signal unless a
	// test says otherwise (workerLoss).
	s.env.OnActivity(controlActs.CheckWorkerLoss, mock.Anything, mock.Anything).Return(
		func(_ context.Context, lost api.WorkerLostSignal) (api.WorkerLossCheck, error) {
			s.mu.Lock()
			defer s.mu.Unlock()
			if s.workerLoss != nil {
				return s.workerLoss(lost)
			}
			return api.WorkerLossCheck{State: lost.State, LivenessFenced: lost.LivenessFenced}, nil
		})
	s.env.OnActivity(controlActs.CleanupStaging, mock.Anything, mock.Anything).Return(
		func(context.Context, api.CleanupInput) error {
			s.mu.Lock()
			defer s.mu.Unlock()
			if !stale() {
				s.cleanups++
			}
			return nil
		})
	s.env.OnSignalExternalWorkflow(mock.Anything, mock.Anything, mock.Anything, api.SignalRelease, mock.Anything).Return(
		func(ns, id, run, name string, arg any) error {
			s.mu.Lock()
			defer s.mu.Unlock()
			if !stale() {
				s.releases = append(s.releases, arg.(api.ReleaseSignal))
				s.signalled[name]++
			}
			return nil
		})
	s.env.OnSignalExternalWorkflow(mock.Anything, api.RunWorkflowID("r1"), mock.Anything, api.SignalTaskEnded, mock.Anything).Return(
		func(ns, id, run, name string, arg any) error {
			s.mu.Lock()
			defer s.mu.Unlock()
			if !stale() {
				s.ended = append(s.ended, arg.(api.TaskOutcome))
				s.signalled[name]++
			}
			return nil
		})
}

func (s *taskSuite) claim(worker string, n int64) api.Claim {
	return api.Claim{TaskID: "t1", WorkerID: worker, Attempt: n, Fence: n, EnvelopeDigest: s.digest}
}

func (s *taskSuite) submit(delay time.Duration, id string, c api.Claim) *updateOutcome {
	out := &updateOutcome{}
	s.env.RegisterDelayedCallback(func() { s.submitNow(id, c, out) }, delay)
	return out
}

func (s *taskSuite) heartbeat(delay time.Duration, c api.Claim, seq int64) {
	s.env.RegisterDelayedCallback(func() {
		s.env.SignalWorkflow(api.SignalLeaseHeartbeat, api.LeaseHeartbeatSignal{Claim: c, Seq: seq})
	}, delay)
}

// start starts the task as its run does (TaskStart): the same input and
// the same workflow ID and search attributes. opts.LeaseTTL defaults to
// 30 s here.
func (s *taskSuite) start(env *testsuite.TestWorkflowEnvironment, opts api.TaskOptions) {
	if opts.LeaseTTL == 0 {
		opts.LeaseTTL = 30 * time.Second
	}
	env.ExecuteWorkflow(api.TaskWorkflowType, s.startInput(env, opts))
}

// startInput is the input of start, after it set env's start options.
func (s *taskSuite) startInput(env *testsuite.TestWorkflowEnvironment, opts api.TaskOptions) api.TaskInput {
	add := api.AddTaskInput{Envelope: s.envl, EnvelopeDigest: s.digest, Options: opts}
	if s.submitter != nil {
		p, err := s.submitter.Sign(api.TaskAuthorityKind, api.TaskAuthorityOf(s.envl, s.digest), time.Now())
		s.Require().NoError(err)
		add.Authority = p
	}
	co, in := TaskStart(s.envl.RunID, add)
	env.SetStartWorkflowOptions(client.StartWorkflowOptions{ID: co.WorkflowID, TaskQueue: co.TaskQueue, TypedSearchAttributes: co.TypedSearchAttributes})
	return in
}

func (s *taskSuite) execute(opts api.TaskOptions) api.TaskOutcome {
	s.start(s.env, opts)
	s.Require().True(s.env.IsWorkflowCompleted())
	s.Require().NoError(s.env.GetWorkflowError())
	var out api.TaskOutcome
	s.Require().NoError(s.env.GetWorkflowResult(&out))
	return out
}

func (s *taskSuite) lastView() api.TaskView {
	v, err := s.env.QueryWorkflow(api.QueryLease)
	s.Require().NoError(err)
	var view api.TaskView
	s.Require().NoError(v.Get(&view))
	return view
}

// Attempt 1 never heartbeats: its lease expires (a retry, never FAILED),
// attempt 2 runs elsewhere with the same digest and a higher fence; a late
// result from attempt 1 is refused and never ingested.
func (s *taskSuite) TestExpiryRetriesAndStaleResultIsRejected() {
	good := s.submit(40*time.Second, "t1/2/2", s.claim("worker-b", 2))
	stale := s.submit(35*time.Second, "t1/1/1", s.claim("worker-a", 1))
	out := s.execute(api.TaskOptions{})

	s.Equal(api.TaskCompleted, out.State)
	s.Equal(int64(2), out.Attempts)
	s.True(good.completed)
	s.NoError(good.err)
	s.True(stale.rejected, "the stale result is refused by the validator")
	var appErr *temporal.ApplicationError
	s.Require().True(errors.As(stale.err, &appErr))
	s.Equal(string(lease.RejectStaleFence), appErr.Type())

	s.Require().Len(s.ingests, 1, "only the current attempt is ingested")
	s.Equal(int64(2), s.ingests[0].Fence)
	s.Equal(1, s.cleanups, "the expired attempt's staging is cleaned up")
	view := s.lastView()
	s.Require().Len(view.Leases, 2)
	s.Equal(lease.Expired, view.Leases[0].State)
	s.Equal(lease.Completed, view.Leases[1].State)
	s.Equal("worker-a", view.Leases[0].WorkerID)
	s.Equal("worker-b", view.Leases[1].WorkerID, "the retry prefers another worker")
	s.Equal(view.Leases[0].EnvelopeDigest, view.Leases[1].EnvelopeDigest, "retry keeps the digest")
	s.Require().Len(view.Directives, 1)
	s.Equal(lease.ReasonLeaseExpired, view.Directives[0].Reason)
	s.Equal(int64(2), view.Directives[0].NextFence)
	s.Require().Len(s.cancels, 1, "best-effort cancel of the expired attempt")
	s.Equal(int64(1), s.cancels[0].Fence)
	s.Require().Len(s.ended, 1)
	s.Equal(api.TaskCompleted, s.ended[0].State)
	s.Nil(s.ended[0].Result, "the run gets a compact reference, not the full result")
	s.Require().NotNil(s.ended[0].Ref)
	s.Equal(int64(2), s.ended[0].Ref.Fence)
	s.Equal(1, s.ended[0].Ref.Artifacts)
	s.Contains(s.releases, api.ReleaseSignal{TaskID: "t1", Fence: 1})
	s.Contains(s.releases, api.ReleaseSignal{TaskID: "t1", Fence: 2})
}

func (s *taskSuite) TestWrongWorkerAndBadArtifactAreRejected() {
	wrongWorker := s.submit(time.Second, "x1", s.claim("worker-b", 1))
	out := &updateOutcome{}
	s.env.RegisterDelayedCallback(func() {
		s.env.UpdateWorkflow(api.UpdateSubmitResult, "x2", &testsuite.TestUpdateCallback{
			OnAccept: func() {}, OnReject: func(err error) { out.rejected = true; out.err = err }, OnComplete: func(any, error) {},
		}, api.SubmitResultInput{Claim: s.claim("worker-a", 1), Artifacts: []api.Artifact{{Name: "../../etc/passwd", Digest: testArtifactDigest}}})
	}, 2*time.Second)
	s.submit(3*time.Second, "t1/1/1", s.claim("worker-a", 1))
	res := s.execute(api.TaskOptions{})
	s.Equal(api.TaskCompleted, res.State)
	s.True(wrongWorker.rejected)
	s.ErrorContains(wrongWorker.err, "does not hold the lease")
	var appErr *temporal.ApplicationError
	s.Require().True(errors.As(wrongWorker.err, &appErr))
	s.Equal(string(lease.RejectWrongWorker), appErr.Type())
	s.True(out.rejected)
	s.ErrorContains(out.err, "artifacts[0].name")
	s.ErrorContains(out.err, "..")
	s.Len(s.ingests, 1)
}

// While a result is being ingested, another submission for the same lease
// (a different update ID: a misbehaving executor) is refused. Identical
// resubmissions (same update ID) are deduplicated by the server; the system
// tests cover that against the real server.
func (s *taskSuite) TestSecondSubmissionDuringIngestIsRefused() {
	first := s.submit(time.Second, "t1/1/1", s.claim("worker-a", 1))
	second := s.submit(time.Second, "other-id", s.claim("worker-a", 1))
	res := s.execute(api.TaskOptions{})
	s.Equal(api.TaskCompleted, res.State)
	s.True(first.completed)
	s.NoError(first.err)
	s.True(second.rejected)
	var appErr *temporal.ApplicationError
	s.Require().True(errors.As(second.err, &appErr))
	s.Equal(string(lease.RejectLeaseNotActive), appErr.Type())
	s.Len(s.ingests, 1, "one result ingested")
}

// A liveness-fenced worker's attempt is dead by the time the worker goes
// STALE: its lease is revoked before the TTL and the retry follows at
// once (after its backoff), with no lock-delay. So is a later
// incarnation's loss (a cluster agent that registered again adopted the
// attempt's reservation).
func (s *taskSuite) TestWorkerLostRevokesBeforeTTL() {
	for name, lostIncarnation := range map[string]int64{"the lease's incarnation": 2, "a later incarnation": 3} {
		s.Run(name, func() {
			s.SetupTest()
			s.waits = []api.SelectWorkerResult{{WorkerID: "worker-a", Incarnation: 2}}
			s.env.RegisterDelayedCallback(func() {
				s.env.SignalWorkflow(api.SignalWorkerLost, api.WorkerLostSignal{WorkerID: "worker-a", Incarnation: lostIncarnation, TaskID: "t1", Fence: 1,
					State: "STALE", LivenessFenced: true})
			}, 2*time.Second)
			var atRetry api.TaskView
			s.env.RegisterDelayedCallback(func() { atRetry = s.lastView() }, 5*time.Second)
			s.submit(10*time.Second, "t1/2/2", s.claim("worker-b", 2))
			res := s.execute(api.TaskOptions{LeaseTTL: time.Hour})
			s.Equal(api.TaskCompleted, res.State)
			s.Require().NotEmpty(atRetry.Directives)
			s.Equal(lease.ReasonWorkerLost, atRetry.Directives[0].Reason)
			s.True(atRetry.Directives[0].LockDelayUntil.IsZero(), "no lock-delay")
			s.Equal(lease.Revoked, atRetry.Leases[0].State)
			s.Equal(string(lease.ReasonWorkerLost), atRetry.Leases[0].EndReason)
		})
	}
}

// A lost reservation of another incarnation of the lease's worker — one a
// selection left behind before the worker registered again, under the
// fence it then reserved anew — leaves the lease alone: its attempt runs
// under the new incarnation, and revoking it (with no lock-delay) would
// let the retry start beside it.
func (s *taskSuite) TestWorkerLostOfAnotherIncarnationKeepsTheLease() {
	s.waits = []api.SelectWorkerResult{{WorkerID: "worker-a", Incarnation: 2}}
	s.env.RegisterDelayedCallback(func() {
		s.env.SignalWorkflow(api.SignalWorkerLost, api.WorkerLostSignal{WorkerID: "worker-a", Incarnation: 1, TaskID: "t1", Fence: 1,
			State: api.WorkerReregistered, LivenessFenced: true})
	}, 2*time.Second)
	sub := s.submit(3*time.Second, "t1/1/1", s.claim("worker-a", 1))
	res := s.execute(api.TaskOptions{LeaseTTL: time.Hour})
	s.Equal(api.TaskCompleted, res.State)
	s.NoError(sub.err, "the lease of incarnation 2 was still current")
	s.Equal(int64(1), res.Attempts)
	s.Require().Len(s.launches, 1)
	s.Equal(int64(2), s.launches[0].Lease.Incarnation)
}

// A lease revoked before its launch answered (the worker went STALE while
// the launch waited for its agent) waits a lock-delay even when the
// worker's attempts are otherwise dead by then: the launch sees the
// revocation only once the workflow task that decided it completes, and
// may start its command before that.
func (s *taskSuite) TestRevokedBeforeItsLaunchAnsweredWaitsTheLockDelay() {
	ttl := 40 * time.Second
	s.env = s.NewTestWorkflowEnvironment()
	s.SetupTestWith(func(env *testsuite.TestWorkflowEnvironment) {
		env.OnActivity(agentActs.LaunchAttempt, mock.Anything, mock.Anything).After(5*time.Second).Return(api.LaunchResult{TaskDir: "/tmp/x"}, nil)
	})
	s.env.RegisterDelayedCallback(func() {
		s.env.SignalWorkflow(api.SignalWorkerLost, api.WorkerLostSignal{WorkerID: "worker-a", Incarnation: 1, TaskID: "t1", Fence: 1,
			State: "STALE", LivenessFenced: true})
	}, 2*time.Second)
	var atRevoke api.TaskView
	s.env.RegisterDelayedCallback(func() { atRevoke = s.lastView() }, 3*time.Second)
	s.submit(60*time.Second, "t1/2/2", s.claim("worker-b", 2))
	res := s.execute(api.TaskOptions{LeaseTTL: ttl})
	s.Equal(api.TaskCompleted, res.State)
	s.Require().NotEmpty(atRevoke.Directives)
	until := atRevoke.Directives[0].LockDelayUntil
	s.Equal(atRevoke.Leases[0].EndedAt.Add(ttl), until)
	s.Require().Len(s.grantTimes, 2)
	s.False(s.grantTimes[1].Before(until), "attempt 2 selected at %s, before the lock-delay ends at %s", s.grantTimes[1], until)
}

// A lost reservation whose attempt may still run (a cluster or hand-off
// worker's, whose executor runs on without it; or a forced
// deregistration) revokes the lease at once, but the next attempt is
// granted no earlier than a lease TTL later: the old executor's
// self-fencing deadline (the lock-delay).
func (s *taskSuite) TestLostWorkerWithoutLivenessFencingWaitsTheLockDelay() {
	ttl := 40 * time.Second
	for name, lost := range map[string]api.WorkerLostSignal{
		"cluster worker STALE":  {WorkerID: "worker-a", TaskID: "t1", Fence: 1, State: "STALE"},
		"forced deregistration": {WorkerID: "worker-a", TaskID: "t1", Fence: 1, State: "DEREGISTERED", LivenessFenced: true},
	} {
		s.Run(name, func() {
			s.SetupTest()
			s.env.RegisterDelayedCallback(func() { s.env.SignalWorkflow(api.SignalWorkerLost, lost) }, 2*time.Second)
			var atRevoke api.TaskView
			s.env.RegisterDelayedCallback(func() { atRevoke = s.lastView() }, 3*time.Second)
			s.submit(60*time.Second, "t1/2/2", s.claim("worker-b", 2))
			res := s.execute(api.TaskOptions{LeaseTTL: ttl})
			s.Equal(api.TaskCompleted, res.State)
			s.Require().Len(atRevoke.Leases, 1)
			s.Equal(lease.Revoked, atRevoke.Leases[0].State, "revoked at once")
			s.Require().NotEmpty(atRevoke.Directives)
			until := atRevoke.Directives[0].LockDelayUntil
			s.Equal(atRevoke.Leases[0].EndedAt.Add(ttl), until, "a TTL after the revocation")
			s.Require().Len(s.grantTimes, 2)
			s.False(s.grantTimes[1].Before(until), "attempt 2 selected at %s, before the lock-delay ends at %s", s.grantTimes[1], until)
		})
	}
}

// Anyone may send worker-lost: a loss the worker's registry entry
// refutes (it holds the reservation, live) revokes nothing, and the
// lock-delay is skipped only when the entry agrees that the worker was
// liveness-fenced; an entry that cannot be read gets the lock-delay.
func (s *taskSuite) TestWorkerLostIsTakenFromTheRegistryNotTheSignal() {
	ttl := 40 * time.Second
	forged := api.WorkerLostSignal{WorkerID: "worker-a", Incarnation: 1, TaskID: "t1", Fence: 1, State: "STALE", LivenessFenced: true}
	for _, tc := range []struct {
		name      string
		entry     func(api.WorkerLostSignal) (api.WorkerLossCheck, error)
		revoked   bool
		lockDelay bool
	}{
		{name: "refuted", entry: func(api.WorkerLostSignal) (api.WorkerLossCheck, error) {
			return api.WorkerLossCheck{Refuted: true}, nil
		}},
		{name: "the entry is live but not liveness-fenced", revoked: true, lockDelay: true,
			entry: func(api.WorkerLostSignal) (api.WorkerLossCheck, error) {
				return api.WorkerLossCheck{State: "STALE"}, nil
			}},
		{name: "the entry cannot be read", revoked: true, lockDelay: true,
			entry: func(api.WorkerLostSignal) (api.WorkerLossCheck, error) {
				return api.WorkerLossCheck{}, errors.New("query timed out")
			}},
		{name: "the entry agrees", revoked: true,
			entry: func(api.WorkerLostSignal) (api.WorkerLossCheck, error) {
				return api.WorkerLossCheck{State: "STALE", LivenessFenced: true}, nil
			}},
	} {
		s.Run(tc.name, func() {
			s.SetupTest()
			s.workerLoss = tc.entry
			s.env.RegisterDelayedCallback(func() { s.env.SignalWorkflow(api.SignalWorkerLost, forged) }, 2*time.Second)
			var after api.TaskView
			s.env.RegisterDelayedCallback(func() { after = s.lastView() }, 8*time.Second)
			switch {
			case tc.revoked && tc.lockDelay:
				s.submit(60*time.Second, "t1/2/2", s.claim("worker-b", 2))
			case tc.revoked:
				s.submit(10*time.Second, "t1/2/2", s.claim("worker-b", 2))
			default:
				s.submit(10*time.Second, "t1/1/1", s.claim("worker-a", 1))
			}
			res := s.execute(api.TaskOptions{LeaseTTL: ttl})
			s.Equal(api.TaskCompleted, res.State)
			s.Require().NotEmpty(after.Leases)
			if !tc.revoked {
				s.Equal(lease.Active, after.Leases[0].State, "the lease holds")
				s.Equal(int64(1), res.Attempts)
				return
			}
			s.Equal(lease.Revoked, after.Leases[0].State)
			s.Require().NotEmpty(after.Directives)
			if tc.lockDelay {
				s.Equal(after.Leases[0].EndedAt.Add(ttl), after.Directives[0].LockDelayUntil)
			} else {
				s.True(after.Directives[0].LockDelayUntil.IsZero())
			}
		})
	}
}

func (s *taskSuite) TestInfraKillRetries() {
	s.env.RegisterDelayedCallback(func() {
		s.env.SignalWorkflow(api.SignalAttemptFailed, api.AttemptFailedSignal{Claim: s.claim("worker-a", 1), Reason: lease.ReasonInfraKilled, Detail: "signal: killed"})
	}, 2*time.Second)
	s.submit(10*time.Second, "t1/2/2", s.claim("worker-b", 2))
	res := s.execute(api.TaskOptions{LeaseTTL: time.Hour})
	s.Equal(api.TaskCompleted, res.State)
	view := s.lastView()
	s.Equal(lease.ReasonInfraKilled, view.Directives[0].Reason)
}

// A disruption (infra_killed) is retried without a backoff, and does not
// grow the backoff of a later retry: attempt 2's expiry waits the first
// retry's delay, not the second's.
func (s *taskSuite) TestDisruptionRetriesAtOnceWithoutGrowingTheBackoff() {
	s.env.RegisterDelayedCallback(func() {
		s.env.SignalWorkflow(api.SignalAttemptFailed, api.AttemptFailedSignal{Claim: s.claim("worker-a", 1), Reason: lease.ReasonInfraKilled, Detail: "evicted"})
	}, 2*time.Second)
	backoff := lease.Backoff{Initial: time.Minute, Max: time.Hour, Multiplier: 2, Jitter: 0.2}
	first, _ := backoff.Delay(1, "t1")
	second, _ := backoff.Delay(2, "t1")
	// Attempt 3 is granted at 2 s + 10 s (attempt 2's TTL) + first.
	s.submit(12*time.Second+first+2*time.Second, "t1/3/3", s.claim("worker-a", 3))
	res := s.execute(api.TaskOptions{LeaseTTL: 10 * time.Second, Backoff: backoff})
	s.Equal(api.TaskCompleted, res.State)
	view := s.lastView()
	s.Require().Len(view.Directives, 2)
	s.Equal(lease.ReasonInfraKilled, view.Directives[0].Reason)
	s.Equal(lease.ReasonLeaseExpired, view.Directives[1].Reason)
	s.Require().Len(s.grantTimes, 3)
	s.Less(s.grantTimes[1].Sub(s.grantTimes[0]), 3*time.Second, "attempt 2 right after the disruption at 2 s")
	s.Greater(second-first, 20*time.Second, "the two delays are told apart")
	s.InDelta(float64(first), float64(s.grantTimes[2].Sub(s.grantTimes[1])-10*time.Second), float64(time.Second),
		"attempt 2 expired after its 10 s TTL, then waited the first retry's delay")
}

// An OOM kill (oom_killed) is the program's doing, not a disruption: its
// retry waits the backoff, and the directive names it.
func (s *taskSuite) TestOOMKillRetriesAfterTheBackoff() {
	s.env.RegisterDelayedCallback(func() {
		s.env.SignalWorkflow(api.SignalAttemptFailed, api.AttemptFailedSignal{Claim: s.claim("worker-a", 1), Reason: lease.ReasonOOMKilled, Detail: "OOM killed (signal: SIGKILL)"})
	}, 2*time.Second)
	backoff := lease.Backoff{Initial: time.Minute, Max: time.Hour, Multiplier: 2, Jitter: 0.2}
	first, _ := backoff.Delay(1, "t1")
	s.submit(2*time.Second+first+5*time.Second, "t1/2/2", s.claim("worker-b", 2))
	res := s.execute(api.TaskOptions{LeaseTTL: time.Hour, Backoff: backoff})
	s.Equal(api.TaskCompleted, res.State)
	view := s.lastView()
	s.Require().Len(view.Directives, 1)
	s.Equal(lease.ReasonOOMKilled, view.Directives[0].Reason)
	s.Contains(view.Directives[0].Detail, "OOM killed")
	s.Require().Len(s.grantTimes, 2)
	s.InDelta(float64(first), float64(s.grantTimes[1].Sub(s.grantTimes[0])-2*time.Second), float64(time.Second),
		"attempt 2 waited the backoff after the OOM kill at 2 s")
}

func (s *taskSuite) TestLaunchFailureRetries() {
	calls := 0
	s.env = s.NewTestWorkflowEnvironment()
	s.SetupTestWith(func(env *testsuite.TestWorkflowEnvironment) {
		env.OnActivity(agentActs.LaunchAttempt, mock.Anything, mock.Anything).Return(
			func(_ context.Context, in api.LaunchInput) (api.LaunchResult, error) {
				calls++
				if in.Lease.Attempt == 1 {
					return api.LaunchResult{}, temporal.NewNonRetryableApplicationError("command[0]: \"nope\" not found", api.ErrTypeLaunchFailed, nil)
				}
				return api.LaunchResult{}, nil
			})
	})
	s.submit(20*time.Second, "t1/2/2", s.claim("worker-b", 2))
	res := s.execute(api.TaskOptions{LeaseTTL: time.Hour})
	s.Equal(api.TaskCompleted, res.State)
	view := s.lastView()
	s.Equal(lease.ReasonLaunchFailed, view.Directives[0].Reason)
	s.Contains(view.Directives[0].Detail, "not found")
	s.Equal(2, calls)
}

// A run continued from one that a reset started reads the runs the reset
// replaced (SelectWorkerInput.Reset) while it waits and until its first
// grant, whose fence is above theirs; its later selections do not.
func (s *taskSuite) TestSelectionReadsTheRunsAResetReplacedUntilTheFirstGrant() {
	s.waits = []api.SelectWorkerResult{{Waiting: "fence 1 of an earlier run", RetryAfter: time.Second}}
	in := s.startInput(s.env, api.TaskOptions{LeaseTTL: 10 * time.Second, MaxAttempts: 2})
	in.Carry = &api.TaskCarry{Ledger: lease.NewLedger(s.envl.TaskID, s.digest), AfterReset: true}
	s.env.SetContinuedExecutionRunID("the-previous-run") // a carry comes only from continue-as-new
	s.env.ExecuteWorkflow(api.TaskWorkflowType, in)
	s.Require().True(s.env.IsWorkflowCompleted())
	s.Require().Len(s.grants, 3, "a wait, the first grant, the retry's grant")
	s.True(s.grants[0].Reset, "while it waits")
	s.True(s.grants[1].Reset, "until its first grant")
	s.False(s.grants[2].Reset, "after it")
}

func (s *taskSuite) TestMaxAttemptsGivesRetriesExhausted() {
	res := s.execute(api.TaskOptions{LeaseTTL: 10 * time.Second, MaxAttempts: 3})
	s.Equal(api.TaskRetriesExhausted, res.State, "never FAILED")
	s.Equal(int64(3), res.Attempts)
	view := s.lastView()
	s.Len(view.Leases, 3)
	for i, l := range view.Leases {
		s.Equal(int64(i+1), l.Fence)
		s.Equal(lease.Expired, l.State)
	}
	s.Empty(s.ingests)
	s.Require().Len(s.ended, 1)
	s.Equal(api.TaskRetriesExhausted, s.ended[0].State)
}

func (s *taskSuite) TestCancel() {
	cancelled := &updateOutcome{}
	s.env.RegisterDelayedCallback(func() {
		s.env.UpdateWorkflow(api.UpdateCancelTask, "", &testsuite.TestUpdateCallback{
			OnAccept: func() {}, OnReject: func(err error) { cancelled.err = err }, OnComplete: func(any, error) { cancelled.completed = true },
		}, api.CancelTaskInput{Reason: "user"})
	}, 5*time.Second)
	res := s.execute(api.TaskOptions{})
	s.Equal(api.TaskCancelled, res.State)
	s.True(cancelled.completed)
	view := s.lastView()
	s.Equal(lease.Revoked, view.Leases[0].State)
	s.Equal("cancelled", view.Leases[0].EndReason)
	s.cancelled(1)
	s.Empty(s.ingests)
	s.Equal(1, s.cleanups, "a cancelled attempt's staging is cleaned up")
}

// cancelled waits for n best-effort cancels of ended attempts: the task
// does not await them before it completes, so the test environment may
// still be running the last one when the workflow has ended.
func (s *taskSuite) cancelled(n int) {
	s.Eventually(func() bool {
		s.mu.Lock()
		defer s.mu.Unlock()
		return len(s.cancels) == n
	}, 2*time.Second, 5*time.Millisecond, "%d cancel(s) of ended attempts", n)
}

func (s *taskSuite) TestWorkflowCancellationEndsCancelled() {
	s.env.RegisterDelayedCallback(func() { s.env.CancelWorkflow() }, 5*time.Second)
	res := s.execute(api.TaskOptions{})
	s.Equal(api.TaskCancelled, res.State)
}

// A heartbeat storm (100 heartbeats inside one TTL window) must not start a
// timer per heartbeat: one timer per window.
func (s *taskSuite) TestHeartbeatStormUsesOneTimerPerWindow() {
	timers := 0
	s.env.SetOnTimerScheduledListener(func(string, time.Duration) { timers++ })
	c := s.claim("worker-a", 1)
	for i := int64(1); i <= 100; i++ {
		s.heartbeat(time.Duration(i)*200*time.Millisecond, c, i) // 100 in 20 s < TTL 30 s
	}
	s.heartbeat(21*time.Second, s.claim("worker-a", 7), 1) // stale: counted, ignored
	s.submit(25*time.Second, "t1/1/1", c)
	res := s.execute(api.TaskOptions{})
	s.Equal(api.TaskCompleted, res.State)
	s.Equal(1, timers, "one lease timer for the window")
	view := s.lastView()
	s.Equal(int64(100), view.Stats.HeartbeatsAccepted)
	s.Equal(int64(1), view.Stats.HeartbeatsRejected[string(lease.RejectStaleFence)])
}

// Heartbeats every TTL/3 keep a lease alive past several TTLs; the timer is
// re-armed for the remainder, about once per two-thirds TTL.
func (s *taskSuite) TestHeartbeatsKeepLeaseAlive() {
	timers := 0
	s.env.SetOnTimerScheduledListener(func(string, time.Duration) { timers++ })
	c := s.claim("worker-a", 1)
	for i := int64(1); i <= 30; i++ {
		s.heartbeat(time.Duration(i)*10*time.Second, c, i) // 300 s = 10 TTLs
	}
	s.submit(305*time.Second, "t1/1/1", c)
	res := s.execute(api.TaskOptions{})
	s.Equal(api.TaskCompleted, res.State)
	s.Equal(int64(1), res.Attempts, "never expired")
	s.LessOrEqual(timers, 16)
	s.Zero(s.cleanups, "completed by its first attempt: ingest left nothing staged, no cleanup activity")
}

func TestTaskAttemptAndFenceGrowAcrossContinueAsNew(t *testing.T) {
	var ts testsuite.WorkflowTestSuite
	env := ts.NewTestWorkflowEnvironment()
	env.SetTestTimeout(20 * time.Second)
	env.RegisterWorkflowWithOptions(WdcTask, workflow.RegisterOptions{Name: api.TaskWorkflowType})
	env.RegisterActivity(&activities.Control{})
	env.RegisterActivity(&activities.Agent{})
	envl, digest := testEnvelope(t)
	env.OnActivity(controlActs.SelectWorker, mock.Anything, mock.Anything).Return(api.SelectWorkerResult{WorkerID: "worker-a"}, nil)
	env.OnActivity(agentActs.LaunchAttempt, mock.Anything, mock.Anything).Return(api.LaunchResult{}, nil)
	env.OnActivity(agentActs.CancelAttempt, mock.Anything, mock.Anything).Return(nil)
	env.OnSignalExternalWorkflow(mock.Anything, mock.Anything, mock.Anything, mock.Anything, mock.Anything).Return(nil)

	// A previous run granted three leases already.
	ledger := lease.NewLedger("t1", digest)
	now := time.Unix(0, 0).UTC()
	for i := 0; i < 3; i++ {
		_, err := ledger.Grant("worker-z", time.Second, now)
		require.NoError(t, err)
		now = now.Add(time.Second)
		_, err = ledger.Expire(now)
		require.NoError(t, err)
	}
	env.SetContinueAsNewSuggested(true)
	env.SetContinuedExecutionRunID("the-previous-run") // a carry comes only from continue-as-new
	env.ExecuteWorkflow(api.TaskWorkflowType, api.TaskInput{
		Envelope: envl, EnvelopeDigest: digest, Options: api.TaskOptions{LeaseTTL: 10 * time.Second},
		Carry: &api.TaskCarry{Ledger: ledger},
	})
	var can *workflow.ContinueAsNewError
	require.True(t, errors.As(env.GetWorkflowError(), &can), "got %v", env.GetWorkflowError())
	var next api.TaskInput
	require.NoError(t, converter.GetDefaultDataConverter().FromPayloads(can.Input, &next))
	require.NotNil(t, next.Carry)
	require.Equal(t, int64(3), next.Carry.Ledger.Fence, "continue-as-new carries the fence")
	require.Len(t, next.Carry.Ledger.Leases, 3)
	require.Equal(t, int64(1), next.Carry.Stats.ContinuedAsNew)

	// The continued run grants fence 4 next, never 1.
	env2 := ts.NewTestWorkflowEnvironment()
	env2.SetTestTimeout(20 * time.Second)
	env2.RegisterWorkflowWithOptions(WdcTask, workflow.RegisterOptions{Name: api.TaskWorkflowType})
	env2.RegisterActivity(&activities.Control{})
	env2.RegisterActivity(&activities.Agent{})
	var granted []int64
	env2.OnActivity(controlActs.SelectWorker, mock.Anything, mock.Anything).Return(api.SelectWorkerResult{WorkerID: "worker-a"}, nil)
	env2.OnActivity(agentActs.LaunchAttempt, mock.Anything, mock.Anything).Return(func(_ context.Context, in api.LaunchInput) (api.LaunchResult, error) {
		granted = append(granted, in.Lease.Fence)
		return api.LaunchResult{}, nil
	})
	env2.OnActivity(agentActs.CancelAttempt, mock.Anything, mock.Anything).Return(nil)
	env2.OnActivity(controlActs.CleanupStaging, mock.Anything, mock.Anything).Return(nil)
	env2.OnSignalExternalWorkflow(mock.Anything, mock.Anything, mock.Anything, mock.Anything, mock.Anything).Return(nil)
	next.Options.MaxAttempts = 5
	env2.SetContinuedExecutionRunID("the-first-run")
	env2.ExecuteWorkflow(api.TaskWorkflowType, next)
	require.NoError(t, env2.GetWorkflowError())
	var out api.TaskOutcome
	require.NoError(t, env2.GetWorkflowResult(&out))
	require.Equal(t, api.TaskRetriesExhausted, out.State)
	require.Equal(t, []int64{4, 5}, granted)
}

// A CAN during an ACTIVE lease (timed by its timer: no heartbeat signal
// yet) keeps watching the same lease.
func (s *taskSuite) TestContinueAsNewWithActiveLeaseKeepsLease() {
	s.env.RegisterDelayedCallback(func() { s.env.SetContinueAsNewSuggested(true) }, 2*time.Second)
	s.heartbeat(3*time.Second, s.claim("worker-a", 7), 1) // stale: wakes the task, holds nothing
	s.start(s.env, api.TaskOptions{})
	var can *workflow.ContinueAsNewError
	s.Require().True(errors.As(s.env.GetWorkflowError(), &can), "got %v", s.env.GetWorkflowError())
	var next api.TaskInput
	s.Require().NoError(converter.GetDefaultDataConverter().FromPayloads(can.Input, &next))
	cur := next.Carry.Ledger.Current()
	s.Require().NotNil(cur)
	s.Equal(lease.Active, cur.State)
	s.Equal(int64(1), cur.Fence)
	s.Equal("/tmp/x", next.Carry.AttemptDir, "the launched attempt's directory is carried")
	s.Equal(s.envl, next.Envelope)
	s.Equal(s.digest, next.EnvelopeDigest)
}

// While a lease activity holds the lease, the task does not continue as
// new (a new run could not tell when the heartbeats by ID stopped): the
// attempt's result completes the task in the same run.
func (s *taskSuite) TestNoContinueAsNewWhileALeaseActivityHoldsTheLease() {
	held, _ := s.holdLeases()
	c := s.claim("worker-a", 1)
	s.heartbeat(5*time.Second, c, 1)
	s.env.RegisterDelayedCallback(func() { s.env.SetContinueAsNewSuggested(true) }, 6*time.Second)
	sub := s.submit(10*time.Second, "t1/1/1", c)
	out := s.execute(api.TaskOptions{})
	s.Equal(api.TaskCompleted, out.State)
	s.NoError(sub.err)
	s.Len(*held, 1)
}

// A worker-lost report that does not name the current lease (another
// worker, another fence, or a task ID it does not hold) changes nothing.
func (s *taskSuite) TestWorkerLostForAnotherLeaseIsIgnored() {
	for i, lost := range []api.WorkerLostSignal{
		{WorkerID: "worker-b", TaskID: "t1", Fence: 1, State: "STALE"},
		{WorkerID: "worker-a", TaskID: "t1", Fence: 7, State: "STALE"},
		{WorkerID: "worker-a", TaskID: "t9", Fence: 1, State: "STALE"},
	} {
		lost := lost
		s.env.RegisterDelayedCallback(func() { s.env.SignalWorkflow(api.SignalWorkerLost, lost) }, time.Duration(i+1)*time.Second)
	}
	var v api.TaskView
	s.env.RegisterDelayedCallback(func() { v = s.lastView() }, 5*time.Second)
	s.submit(6*time.Second, "t1/1/1", s.claim("worker-a", 1))
	res := s.execute(api.TaskOptions{LeaseTTL: time.Hour})
	s.Equal(api.TaskCompleted, res.State)
	s.Equal(int64(1), res.Attempts)
	s.Empty(v.Directives)
	s.Equal(lease.Active, v.Lease.State)
}

// A selection that found fences granted by an earlier run (one an
// operator reset away) reserves a higher one; the task grants exactly it,
// and a claim under the old fence is stale. The launch names the
// incarnation the reservation was made under, so that a restarted agent
// refuses it.
func (s *taskSuite) TestGrantTakesTheFenceTheSelectionReserved() {
	s.waits = []api.SelectWorkerResult{{WorkerID: "worker-a", Incarnation: 7, Fence: 5}}
	stale := s.submit(time.Second, "t1/1/1", s.claim("worker-a", 1))
	good := s.submit(2*time.Second, "t1/1/5", api.Claim{TaskID: "t1", WorkerID: "worker-a", Attempt: 1, Fence: 5, EnvelopeDigest: s.digest})
	out := s.execute(api.TaskOptions{})
	s.Equal(api.TaskCompleted, out.State)
	s.Require().Len(s.launches, 1)
	s.Equal(int64(5), s.launches[0].Lease.Fence)
	s.Equal(int64(1), s.launches[0].Lease.Attempt)
	s.Equal(int64(7), s.launches[0].Incarnation)
	s.True(stale.rejected)
	var appErr *temporal.ApplicationError
	s.Require().True(errors.As(stale.err, &appErr))
	s.Equal(string(lease.RejectStaleFence), appErr.Type())
	s.NoError(good.err)
}

// Anyone may fail the launch activity by its ID: with identity required, a
// launch failure is believed (the command did not start, so the next
// attempt need not wait) only when the holder's worker signed it for this
// very claim; any other waits a lock-delay of the lease's TTL.
func (s *taskSuite) TestLaunchFailureSkipsTheLockDelayOnlyWhenItsWorkerSignedIt() {
	iss, err := identity.NewIssuer(spiffeid.RequireTrustDomainFromString(identity.DefaultTrustDomain))
	s.Require().NoError(err)
	v, err := identity.NewVerifier(identity.ModeRequired, iss.TrustDomain(), iss.Bundle())
	s.Require().NoError(err)
	signer := func(id string) *identity.Signer {
		svid, err := iss.IssueWorker(id, time.Hour)
		s.Require().NoError(err)
		sg, err := identity.NewSigner(svid)
		s.Require().NoError(err)
		return sg
	}
	own, other := signer("worker-a"), signer("worker-b")
	alice, err := iss.Issue(spiffeid.RequireFromString("spiffe://"+iss.TrustDomain().Name()+"/wdc/submitter/alice"), time.Hour)
	s.Require().NoError(err)
	s.submitter, err = identity.NewSigner(alice)
	s.Require().NoError(err)
	defer func() { s.submitter = nil }()
	for _, tc := range []struct {
		name      string
		by        *identity.Signer
		otherFor  bool // signed for another claim
		timeout   bool // a timeout failure, as anyone may fail it by ID
		lockDelay bool
	}{
		{name: "unsigned", lockDelay: true},
		{name: "a timeout", timeout: true, lockDelay: true},
		{name: "by another worker", by: other, lockDelay: true},
		{name: "for another claim", by: own, otherFor: true, lockDelay: true},
		{name: "by the holder's worker", by: own},
	} {
		s.Run(tc.name, func() {
			s.env = s.NewTestWorkflowEnvironment()
			s.issuedAt = time.Date(2020, 1, 1, 0, 0, 0, 0, time.UTC)
			s.SetupTestWith(func(env *testsuite.TestWorkflowEnvironment) {
				env.OnActivity(agentActs.LaunchAttempt, mock.Anything, mock.Anything).Return(
					func(_ context.Context, in api.LaunchInput) (api.LaunchResult, error) {
						if in.Lease.Attempt > 1 {
							return api.LaunchResult{}, nil
						}
						if tc.timeout {
							return api.LaunchResult{}, temporal.NewTimeoutError(enumspb.TIMEOUT_TYPE_START_TO_CLOSE, nil)
						}
						f := api.LaunchFailure{Claim: lease.ClaimOf(in.Lease), Detail: "no such image"}
						if tc.otherFor {
							f.Fence++
						}
						if tc.by != nil {
							p, err := tc.by.Sign(api.LaunchFailedReport, f, time.Now())
							s.Require().NoError(err)
							f.Proof = p
						}
						return api.LaunchResult{}, temporal.NewNonRetryableApplicationError(f.Detail, api.ErrTypeLaunchFailed, nil, f)
					})
			})
			s.env.SetWorkerOptions(worker.Options{Interceptors: []interceptor.WorkerInterceptor{Interceptor(v)}})
			res := s.execute(api.TaskOptions{LeaseTTL: time.Minute, MaxAttempts: 2}) // attempt 2 expires: nothing signs its result
			s.Equal(int64(2), res.Attempts)
			view := s.lastView()
			s.Require().NotEmpty(view.Directives)
			d := view.Directives[0]
			s.Equal(lease.ReasonLaunchFailed, d.Reason)
			if tc.lockDelay {
				s.Equal(view.Leases[0].EndedAt.Add(time.Minute), d.LockDelayUntil, "a TTL after the failure")
				s.False(s.grantTimes[1].Before(d.LockDelayUntil), "attempt 2 waited for it")
			} else {
				s.True(d.LockDelayUntil.IsZero())
				s.Less(s.grantTimes[1].Sub(s.grantTimes[0]), time.Minute)
			}
		})
	}
}
