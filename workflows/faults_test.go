package workflows

import (
	"context"
	"errors"
	"time"

	"github.com/stretchr/testify/mock"
	"go.temporal.io/sdk/converter"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/testsuite"
	"go.temporal.io/sdk/workflow"

	"github.com/wdc-runtime/wdc/api"
	"github.com/wdc-runtime/wdc/lease"
)

// Tests named after the faults found by reading the lease loop: each
// failed on the loop before it became a phase machine.

func (s *taskSuite) cancelNow(out *updateOutcome) {
	s.env.UpdateWorkflow(api.UpdateCancelTask, "cancel", &testsuite.TestUpdateCallback{
		OnAccept:   func() { out.accepted = true },
		OnReject:   func(err error) { out.rejected = true; out.err = err },
		OnComplete: func(_ any, err error) { out.completed = true; out.err = err },
	}, api.CancelTaskInput{Reason: "user"})
}

func (s *taskSuite) submitNow(id string, c api.Claim, out *updateOutcome) {
	s.env.UpdateWorkflow(api.UpdateSubmitResult, id, &testsuite.TestUpdateCallback{
		OnAccept: func() { out.accepted = true },
		OnReject: func(err error) { out.rejected = true; out.err = err },
		OnComplete: func(v any, err error) {
			out.completed = true
			out.err = err
			if r, ok := v.(api.SubmitResultResult); ok {
				out.submitted = &r
			}
		},
	}, api.SubmitResultInput{Claim: c, Artifacts: []api.Artifact{{Name: "summary.json", Digest: testArtifactDigest, SizeBytes: 10}}})
}

// Fault 4: a submit-result and a cancel in the same workflow task. The
// submission came first, so its result is decided (ingested) before the
// cancel can end the lease; the task completes and the submission gets
// its own answer. Before: the cancel branch ended the lease and the
// submit handler waited forever for an ingest that never came.
func (s *taskSuite) TestFault4SubmitThenCancelInOneWorkflowTask() {
	sub, can := &updateOutcome{}, &updateOutcome{}
	s.env.RegisterDelayedCallback(func() {
		s.submitNow("t1/1/1", s.claim("worker-a", 1), sub)
		s.cancelNow(can)
	}, 5*time.Second)
	res := s.execute(api.TaskOptions{})
	s.Equal(api.TaskCompleted, res.State, "the result passed the fence check before the cancel")
	s.True(sub.completed)
	s.NoError(sub.err)
	s.Require().NotNil(sub.submitted)
	s.Equal(int64(1), sub.submitted.Result.Fence)
	s.True(can.completed, "the cancel is answered too")
	s.Len(s.ingests, 1)
}

// Fault 4, the other order: the cancel came first, so the submission is
// refused by its validator (nothing is ingested) and the task ends
// CANCELLED.
func (s *taskSuite) TestFault4CancelThenSubmitInOneWorkflowTask() {
	sub, can := &updateOutcome{}, &updateOutcome{}
	s.env.RegisterDelayedCallback(func() {
		s.cancelNow(can)
		s.submitNow("t1/1/1", s.claim("worker-a", 1), sub)
	}, 5*time.Second)
	res := s.execute(api.TaskOptions{})
	s.Equal(api.TaskCancelled, res.State)
	s.True(can.completed)
	s.True(sub.rejected, "a submission after the cancel is refused")
	var appErr *temporal.ApplicationError
	s.Require().True(errors.As(sub.err, &appErr))
	s.Equal(string(lease.RejectLeaseNotActive), appErr.Type())
	s.Empty(s.ingests)
}

// Fault 5: the launch activity fails while the attempt's result is being
// ingested. A lease whose result is pending is not revoked: the ingest
// decides, the task completes on attempt 1, and the submission is answered
// with its own result. Before: the launch failure revoked the lease under
// the pending result and the submission was answered with the next
// attempt's result.
func (s *taskSuite) TestFault5LaunchFailureWhileResultPending() {
	s.env = s.NewTestWorkflowEnvironment()
	s.ingestAfter = 10 * time.Second
	s.SetupTestWith(func(env *testsuite.TestWorkflowEnvironment) {
		env.OnActivity(agentActs.LaunchAttempt, mock.Anything, mock.Anything).After(6 * time.Second).Return(
			func(_ context.Context, in api.LaunchInput) (api.LaunchResult, error) {
				s.mu.Lock()
				defer s.mu.Unlock()
				s.launches = append(s.launches, in)
				if in.Lease.Attempt == 1 {
					return api.LaunchResult{}, temporal.NewNonRetryableApplicationError("launch timed out", api.ErrTypeLaunchFailed, nil)
				}
				return api.LaunchResult{}, nil
			})
	})
	sub := s.submit(2*time.Second, "t1/1/1", s.claim("worker-a", 1))
	res := s.execute(api.TaskOptions{LeaseTTL: time.Hour})
	s.Equal(api.TaskCompleted, res.State)
	s.Equal(int64(1), res.Attempts, "no second attempt")
	s.True(sub.completed)
	s.NoError(sub.err)
	s.Require().NotNil(sub.submitted)
	s.Equal(int64(1), sub.submitted.Result.Fence, "the submission gets its own claim's result")
	view := s.lastView()
	s.Empty(view.Directives, "the pending result kept the lease")
	s.Equal(lease.Completed, view.Leases[0].State)
}

// Fault 5, the answer half: a submission whose ingest fails is answered
// with that failure, and the next attempt's result goes to its own
// submission.
func (s *taskSuite) TestFault5EachSubmissionGetsItsOwnOutcome() {
	s.ingestErr = func(in api.IngestInput) error {
		if in.Fence == 1 {
			return temporal.NewNonRetryableApplicationError("digest mismatch", api.ErrTypeArtifactMismatch, nil)
		}
		return nil
	}
	first := s.submit(2*time.Second, "t1/1/1", s.claim("worker-a", 1))
	second := s.submit(50*time.Second, "t1/2/2", s.claim("worker-b", 2))
	res := s.execute(api.TaskOptions{LeaseTTL: 30 * time.Second})
	s.Equal(api.TaskCompleted, res.State)
	s.True(first.completed)
	s.Error(first.err, "attempt 1's submission is answered with its ingest failure")
	if first.submitted != nil {
		s.False(first.submitted.Accepted)
	}
	s.True(second.completed)
	s.NoError(second.err)
	s.Require().NotNil(second.submitted)
	s.Equal(int64(2), second.submitted.Result.Fence)
}

// Fault 6 (task): continue-as-new is suggested while a worker-lost signal
// waits in the channel. The task applies it, ends the lease (cancel and
// release delivered, not dropped with the closing run), and continues as
// new only at the next quiet point, carrying the retry.
func (s *taskSuite) TestFault6TaskContinueAsNewDropsNoCommand() {
	s.env.RegisterDelayedCallback(func() {
		s.env.SetContinueAsNewSuggested(true)
		s.env.SignalWorkflow(api.SignalWorkerLost, api.WorkerLostSignal{WorkerID: "worker-a", TaskID: "t1", Fence: 1, State: "STALE"})
	}, 5*time.Second)
	s.start(s.env, api.TaskOptions{LeaseTTL: time.Hour})
	var can *workflow.ContinueAsNewError
	s.Require().True(errors.As(s.env.GetWorkflowError(), &can), "got %v", s.env.GetWorkflowError())
	var next api.TaskInput
	s.Require().NoError(converter.GetDefaultDataConverter().FromPayloads(can.Input, &next))
	s.Require().Len(next.Carry.Ledger.Leases, 1)
	s.Equal(lease.Revoked, next.Carry.Ledger.Leases[0].State)
	s.Equal(string(lease.ReasonWorkerLost), next.Carry.Ledger.Leases[0].EndReason)
	s.Contains(s.releases, api.ReleaseSignal{TaskID: "t1", Fence: 1}, "the release was sent before the run closed")
	s.Require().Len(s.cancels, 1, "the cancel of the lost attempt ran before the run closed")
	s.Require().Len(next.Carry.Directives, 1)
}

// Fault 7 (task side): selection names every worker that lost a lease of
// the task, so none of them is chosen again while another fits.
func (s *taskSuite) TestFault7SelectionAvoidsEveryWorkerThatLostALease() {
	s.workers = []string{"worker-a", "worker-b", "worker-c"}
	res := s.execute(api.TaskOptions{LeaseTTL: 10 * time.Second, MaxAttempts: 3})
	s.Equal(api.TaskRetriesExhausted, res.State)
	s.Require().Len(s.grants, 3)
	s.Empty(s.grants[0].AvoidWorkers)
	s.Equal([]string{"worker-a"}, s.grants[1].AvoidWorkers)
	s.Equal([]string{"worker-a", "worker-b"}, s.grants[2].AvoidWorkers)
}

// A worker-lost (or attempt-failed) for the current lease and a cancel in
// one workflow task: the lost lease is released once and the task ends
// CANCELLED. (Found in review: the watch took the cancel branch on a lease
// that had already ended and looped without yielding.)
func (s *taskSuite) TestLostOrFailedAndCancelInOneWorkflowTask() {
	for _, msg := range []struct {
		name string
		arg  any
	}{
		{api.SignalWorkerLost, api.WorkerLostSignal{WorkerID: "worker-a", TaskID: "t1", Fence: 1, State: "STALE"}},
		{api.SignalAttemptFailed, api.AttemptFailedSignal{Claim: s.claim("worker-a", 1), Reason: lease.ReasonInfraKilled}},
	} {
		s.Run(msg.name, func() {
			s.SetupTest()
			can := &updateOutcome{}
			s.env.RegisterDelayedCallback(func() {
				s.env.SignalWorkflowSkippingWorkflowTask(msg.name, msg.arg)
				s.cancelNow(can)
			}, 5*time.Second)
			res := s.execute(api.TaskOptions{})
			s.Equal(api.TaskCancelled, res.State)
			s.True(can.completed)
			s.cancelled(1)
			s.Equal([]api.ReleaseSignal{{TaskID: "t1", Fence: 1}}, s.releases, "released once")
		})
	}
}

// Cancelling the workflow while a result is being ingested: the ingest
// goes on, the task completes with that result, and the submission is
// answered with it (not with "canceled").
func (s *taskSuite) TestWorkflowCancelDuringIngestAnswersTheSubmission() {
	s.env = s.NewTestWorkflowEnvironment()
	s.ingestAfter = 10 * time.Second
	s.SetupTestWith(nil)
	sub := s.submit(2*time.Second, "t1/1/1", s.claim("worker-a", 1))
	s.env.RegisterDelayedCallback(func() { s.env.CancelWorkflow() }, 5*time.Second)
	res := s.execute(api.TaskOptions{LeaseTTL: time.Hour})
	s.Equal(api.TaskCompleted, res.State)
	s.True(sub.completed)
	s.NoError(sub.err)
	s.Require().NotNil(sub.submitted)
	s.True(sub.submitted.Accepted)
	s.Equal(int64(1), sub.submitted.Result.Fence)
}

// A task cancelled while its worker was being reserved is not granted:
// the reservation is handed back and nothing is launched.
func (s *taskSuite) TestCancelDuringSelectionGrantsNothing() {
	s.env = s.NewTestWorkflowEnvironment()
	s.selectAfter = 3 * time.Second
	s.SetupTestWith(nil)
	can := &updateOutcome{}
	s.env.RegisterDelayedCallback(func() { s.cancelNow(can) }, time.Second)
	res := s.execute(api.TaskOptions{})
	s.Equal(api.TaskCancelled, res.State)
	s.Equal(int64(0), res.Attempts, "no lease was granted")
	s.Empty(s.launches)
	s.Equal([]api.ReleaseSignal{{TaskID: "t1", Fence: 1}}, s.releases, "the reservation is handed back")
}

// An executor's report is an infrastructure kill or a failed launch;
// any other reason it names is taken as an infrastructure kill.
func (s *taskSuite) TestAttemptFailedReasonIsNotTakenOnTrust() {
	s.env.RegisterDelayedCallback(func() {
		s.env.SignalWorkflow(api.SignalAttemptFailed, api.AttemptFailedSignal{Claim: s.claim("worker-a", 1), Reason: lease.ReasonWorkerLost})
	}, 2*time.Second)
	s.submit(10*time.Second, "t1/2/2", s.claim("worker-b", 2))
	res := s.execute(api.TaskOptions{LeaseTTL: time.Hour})
	s.Equal(api.TaskCompleted, res.State)
	s.Equal(lease.ReasonInfraKilled, s.lastView().Directives[0].Reason)
}

// After a control-plane outage the lease timer and the heartbeats the
// executor kept sending arrive in one workflow task: the heartbeats are
// applied first, so a lease that was kept alive does not expire.
func (s *taskSuite) TestHeartbeatsHeldDuringAnOutageKeepTheLease() {
	c := s.claim("worker-a", 1)
	for i := int64(1); i <= 5; i++ {
		seq := i
		s.env.RegisterDelayedCallback(func() {
			s.env.SignalWorkflowSkippingWorkflowTask(api.SignalLeaseHeartbeat, api.LeaseHeartbeatSignal{Claim: c, Seq: seq})
		}, time.Duration(20+2*i)*time.Second) // 22 s .. 30 s: the control plane is down, TTL 30 s
	}
	s.submit(45*time.Second, "t1/1/1", c)
	res := s.execute(api.TaskOptions{})
	s.Equal(api.TaskCompleted, res.State)
	s.Equal(int64(1), res.Attempts, "the lease did not expire")
	s.Equal(int64(5), s.lastView().Stats.HeartbeatsAccepted)
}
