package workflows

import (
	"context"
	"strings"
	"time"

	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/converter"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/testsuite"

	"github.com/wdc-runtime/wdc/api"
	"github.com/wdc-runtime/wdc/lease"
)

// started records which activities ran as local activities and which as
// activities.
func (s *taskSuite) started() (local, remote *[]string) {
	local, remote = &[]string{}, &[]string{}
	s.env.SetOnLocalActivityStartedListener(func(info *activity.Info, _ context.Context, _ []any) {
		*local = append(*local, info.ActivityType.Name)
	})
	s.env.SetOnActivityStartedListener(func(info *activity.Info, _ context.Context, _ converter.EncodedValues) {
		*remote = append(*remote, info.ActivityType.Name)
	})
	return local, remote
}

// A task selects and ingests in its workflow tasks (local
// activities); the launch is its one activity. The ingest releases the
// reservation and reports the result it kept to the run, once, so the
// workflow itself sends no release and no report; it runs no cleanup.
func (s *taskSuite) TestSelectsAndIngestsLocallyAndReportsTheKeptResultOnce() {
	local, remote := s.started()
	sub := s.submit(time.Second, "t1/1/1", s.claim("worker-a", 1))
	out := s.execute(api.TaskOptions{})
	s.Equal(api.TaskCompleted, out.State)
	s.True(sub.completed)
	s.NoError(sub.err)
	s.Equal([]string{"SelectWorker", "Ingest"}, *local)
	s.Equal([]string{"LaunchAttempt"}, *remote)
	s.Require().Len(s.ingests, 1)
	s.Len(s.releases, 1, "the ingest releases")
	s.Empty(s.signalled, "the ingest reported and released: the workflow signalled nothing")
	s.Require().Len(s.ended, 1)
	s.Require().NotNil(out.Result)
	ref, err := api.ResultRefOf(*out.Result)
	s.Require().NoError(err)
	s.Equal(api.TaskOutcome{TaskID: "t1", RunID: "r1", State: api.TaskCompleted, Attempts: 1, Ref: &ref}, s.ended[0])
	s.Zero(s.cleanups)
	s.Equal(api.TaskCompleted, s.lastView().State)
}

// An ingest that fails leaves the lease ACTIVE under its own timer (the
// ingest does not stop it): with no heartbeat it expires on
// time and the next attempt completes the task.
func (s *taskSuite) TestFailedIngestKeepsTheLeaseWhichThenExpires() {
	s.ingestErr = func(in api.IngestInput) error {
		if in.Fence == 1 {
			return temporal.NewNonRetryableApplicationError("digest mismatch", api.ErrTypeArtifactMismatch, nil)
		}
		return nil
	}
	s.secondAttemptKeeps(45*time.Second, "ingest failed")
	view := s.lastView()
	s.Require().Len(view.Directives, 1)
	s.Equal(lease.ReasonLeaseExpired, view.Directives[0].Reason)
	s.Require().Len(s.grantTimes, 2)
	s.InDelta(float64(31*time.Second), float64(s.grantTimes[1].Sub(s.grantTimes[0])), float64(time.Second),
		"expired at its TTL, then one second of backoff")
	s.Equal(1, s.cleanups, "the refused attempt's staging is cleaned up")
}

// An ingest that answers with artifacts the submission did not name (a
// completion anyone could send by the activity's ID) keeps nothing: the
// result is abandoned as if its ingest failed, and the next attempt's
// own result completes the task.
func (s *taskSuite) TestIngestAnsweringOtherArtifactsKeepsNothing() {
	s.ingestForged = func(in api.IngestInput) *api.IngestResult {
		if in.Fence != 1 {
			return nil
		}
		return &api.IngestResult{Artifacts: []api.Artifact{{Name: "out.txt", Digest: "sha256:" + strings.Repeat("f", 64), SizeBytes: 1}}}
	}
	s.secondAttemptKeeps(45*time.Second, "other artifacts")
	s.Equal(int64(2), s.lastView().Result.Fence, "the forged answer was not kept")
}

// A result larger than LocalIngestMaxBytes is ingested by an activity of
// its own (it heartbeats by bytes), which reports nothing: the task
// reports once it kept the result, even when the activity's completion
// (anyone may send it by the activity's ID) claims it reported.
func (s *taskSuite) TestIngestsALargeResultInAnActivity() {
	s.ingestForged = func(in api.IngestInput) *api.IngestResult {
		return &api.IngestResult{Artifacts: in.Artifacts, Logs: in.Logs, Reported: true}
	}
	local, remote := s.started()
	out := &updateOutcome{}
	s.env.RegisterDelayedCallback(func() {
		s.env.UpdateWorkflow(api.UpdateSubmitResult, "t1/1/1", &testsuite.TestUpdateCallback{
			OnAccept: func() {}, OnReject: func(err error) { out.err = err }, OnComplete: func(_ any, err error) { out.completed, out.err = true, err },
		}, api.SubmitResultInput{Claim: s.claim("worker-a", 1), Artifacts: []api.Artifact{{Name: "big.bin", Digest: testArtifactDigest, SizeBytes: LocalIngestMaxBytes + 1}}})
	}, time.Second)
	res := s.execute(api.TaskOptions{})
	s.Equal(api.TaskCompleted, res.State)
	s.True(out.completed)
	s.NoError(out.err)
	s.Equal([]string{"SelectWorker"}, *local)
	s.Equal([]string{"LaunchAttempt", "Ingest"}, *remote)
	s.Require().Len(s.ingests, 1)
	s.Equal(int64(1), s.ingests[0].Fence)
	s.Nil(s.ingests[0].Report, "an ingest by activity does not report")
	s.Require().Len(s.ended, 1)
	s.Equal(map[string]int{api.SignalTaskEnded: 1}, s.signalled, "the task reported, once it kept the result")
}

// Attempt 1's ingest did its work and reported, but its completion was
// lost and every retry failed (a store outage): the task abandons the
// result and attempt 2 completes. The run hears of attempt 1 only from
// those reports, which its check of the task refuses (testsuite
// TestStoreOutageDuringIngestLeavesTheRunOnTheKeptResult); the task's
// last word is attempt 2's kept result.
func (s *taskSuite) TestAbandonedIngestIsNotTheTasksLastReport() {
	s.ingestLost = func(in api.IngestInput) bool { return in.Fence == 1 }
	out := s.secondAttemptKeeps(70*time.Second, "ingest failed")
	want, err := api.ResultRefOf(*out.Result)
	s.Require().NoError(err)
	s.Require().GreaterOrEqual(len(s.ended), 2)
	last := s.ended[len(s.ended)-1]
	s.Equal(api.TaskCompleted, last.State)
	s.Equal(&want, last.Ref, "the kept result's reference")
	s.Equal(int64(2), last.Attempts)
	for _, r := range s.ended[:len(s.ended)-1] {
		s.Equal(int64(1), r.Attempts, "only attempt 1's lost ingest reported before")
	}
	s.Zero(s.signalled[api.SignalTaskEnded], "attempt 2's ingest reported")
}

// A result the ingest reported but the task did not keep (the ingest
// answered other artifacts than the result names) counts as no report of
// the task's: when attempt 2's ingest keeps its result but its report
// does not reach the run, the task reports attempt 2's result itself.
func (s *taskSuite) TestReportOfAnAbandonedIngestIsNotTakenForTheTasks() {
	s.ingestForged = func(in api.IngestInput) *api.IngestResult {
		if in.Fence != 1 {
			return &api.IngestResult{Artifacts: in.Artifacts, Logs: in.Logs} // its report was lost
		}
		s.ended = append(s.ended, *in.Report) // it did report
		return &api.IngestResult{Artifacts: []api.Artifact{{Name: "out.txt", Digest: "sha256:" + strings.Repeat("f", 64), SizeBytes: 1}}, Reported: true}
	}
	s.secondAttemptKeeps(45*time.Second, "ingest failed")
	s.Require().Len(s.ended, 2, "attempt 1's ingest, then the task itself")
	s.Equal(int64(1), s.ended[0].Attempts)
	s.Equal(int64(2), s.ended[1].Attempts)
	s.Equal(1, s.signalled[api.SignalTaskEnded])
}

// secondAttemptKeeps submits attempt 1's result at 1 s and attempt 2's at
// second, runs the task (lease TTL 30 s, backoff 1 s), and checks that
// attempt 1's result was answered, refused with firstErr, and attempt 2's
// kept.
func (s *taskSuite) secondAttemptKeeps(second time.Duration, firstErr string) api.TaskOutcome {
	first := s.submit(time.Second, "t1/1/1", s.claim("worker-a", 1))
	next := s.submit(second, "t1/2/2", s.claim("worker-b", 2))
	out := s.execute(api.TaskOptions{LeaseTTL: 30 * time.Second, Backoff: lease.Backoff{Initial: time.Second, Max: time.Second, Multiplier: 1}})
	s.Equal(api.TaskCompleted, out.State)
	s.True(first.completed)
	s.ErrorContains(first.err, firstErr)
	s.NoError(next.err)
	s.Require().NotNil(out.Result)
	s.Equal(int64(2), out.Result.Fence)
	return out
}
