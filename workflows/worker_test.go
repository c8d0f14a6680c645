package workflows

import (
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/mock"
	"github.com/stretchr/testify/require"
	"github.com/stretchr/testify/suite"
	"go.temporal.io/sdk/converter"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/testsuite"
	"go.temporal.io/sdk/workflow"

	"github.com/wdc-runtime/wdc/api"
	"github.com/wdc-runtime/wdc/fleet"
	"github.com/wdc-runtime/wdc/resource"
)

type workerSuite struct {
	suite.Suite
	testsuite.WorkflowTestSuite
	env *testsuite.TestWorkflowEnvironment
	// lost collects worker-lost signals the workflow sent.
	lost []api.WorkerLostSignal
}

func TestWorkerWorkflow(t *testing.T) { suite.Run(t, new(workerSuite)) }

func (s *workerSuite) SetupTest() {
	s.env = s.NewTestWorkflowEnvironment()
	s.env.SetTestTimeout(20 * time.Second)
	s.env.RegisterWorkflowWithOptions(WdcWorker, workflow.RegisterOptions{Name: api.WorkerWorkflowType})
	livenessBySignals(s.env)
	s.lost = nil
	s.env.OnSignalExternalWorkflow(mock.Anything, mock.Anything, mock.Anything, api.SignalWorkerLost, mock.Anything).
		Return(func(ns, wfID, runID, name string, arg any) error {
			s.lost = append(s.lost, arg.(api.WorkerLostSignal))
			return nil
		})
}

// livenessBySignals stands for a control plane that cannot hold liveness
// activities (HoldLiveness fails at once): the entry then judges the
// worker's heartbeat signals with its own timer until the next signal,
// the fallback the tests that use it are about. worker_liveness_test.go
// covers the liveness activity itself.
func livenessBySignals(env *testsuite.TestWorkflowEnvironment) {
	env.RegisterActivity(controlActs.HoldLiveness)
	env.OnActivity(controlActs.HoldLiveness, mock.Anything, mock.Anything).Return(errors.New("no control plane holds liveness activities"))
}

func testRegistration(id string) fleet.Registration {
	return fleet.Registration{
		WorkerID:   id,
		Capacity:   resource.List{CPUMillis: 4000, MemoryBytes: 8 << 30, GPUs: 1},
		Labels:     map[string]string{"zone": "a"},
		StaleAfter: 15 * time.Second, OfflineAfter: 60 * time.Second,
	}
}

// update sends an update at delay and records the outcome.
type updateOutcome struct {
	accepted, rejected, completed bool
	err                           error
	result                        converter.EncodedValue
	// submitted is a submit-result update's answer.
	submitted *api.SubmitResultResult
	// value is what the update handler returned.
	value any
}

func (s *workerSuite) update(delay time.Duration, name string, arg any) *updateOutcome {
	out := &updateOutcome{}
	s.env.RegisterDelayedCallback(func() {
		s.env.UpdateWorkflow(name, "", &testsuite.TestUpdateCallback{
			OnAccept: func() { out.accepted = true },
			OnReject: func(err error) { out.rejected = true; out.err = err },
			OnComplete: func(v any, err error) {
				out.completed = true
				out.value = v
				if err != nil {
					out.err = err
				}
			},
		}, arg)
	}, delay)
	return out
}

func (s *workerSuite) query(delay time.Duration, into *api.WorkerView) {
	s.env.RegisterDelayedCallback(func() {
		v, err := s.env.QueryWorkflow(api.QueryWorker)
		s.Require().NoError(err)
		s.Require().NoError(v.Get(into))
	}, delay)
}

func (s *workerSuite) heartbeat(delay time.Duration, incarnation, seq int64) {
	s.env.RegisterDelayedCallback(func() {
		s.env.SignalWorkflow(api.SignalWorkerHeartbeat, api.WorkerHeartbeatSignal{WorkerID: "w1", Incarnation: incarnation, Seq: seq})
	}, delay)
}

func (s *workerSuite) run(until time.Duration) {
	s.env.RegisterDelayedCallback(func() { s.env.CancelWorkflow() }, until)
	s.env.ExecuteWorkflow(api.WorkerWorkflowType, api.WorkerInput{WorkerID: "w1"})
}

func (s *workerSuite) TestRegisterReturnsIncarnationAndIsActive() {
	reg := s.update(0, api.UpdateRegister, testRegistration("w1"))
	var v api.WorkerView
	s.query(time.Second, &v)
	s.run(2 * time.Second)
	s.True(reg.completed)
	s.NoError(reg.err)
	s.Equal(fleet.Active, v.State)
	s.Equal(int64(1), v.Incarnation)
	s.Equal(int64(4000), v.Free.CPUMillis)
}

func (s *workerSuite) TestRegisterValidatorRejectsBadInput() {
	bad := testRegistration("w1")
	bad.Capacity.CPUMillis = -1
	bad.Labels = map[string]string{"bad key!": "x"}
	r1 := s.update(0, api.UpdateRegister, bad)
	other := testRegistration("someone-else")
	r2 := s.update(time.Millisecond, api.UpdateRegister, other)
	var v api.WorkerView
	s.query(time.Second, &v)
	s.run(2 * time.Second)
	s.True(r1.rejected)
	s.ErrorContains(r1.err, "capacity.cpu_millis")
	s.ErrorContains(r1.err, "labels")
	s.True(r2.rejected)
	s.ErrorContains(r2.err, "worker_id")
	s.False(v.Registered, "nothing registered after rejected updates")
}

// An entry whose registration was refused (UpdateWithStart starts it
// anyway) ends by itself after UnregisteredLifetime; a registered one
// does not.
func (s *workerSuite) TestEntryWithoutARegistrationEnds() {
	refused := s.update(0, api.UpdateRegister, testRegistration("someone-else"))
	start := s.env.Now()
	s.run(10 * UnregisteredLifetime) // the entry ends before this cancel
	s.True(refused.rejected)
	s.True(s.env.IsWorkflowCompleted())
	s.NoError(s.env.GetWorkflowError(), "it ended by itself, not by the cancel")
	s.Less(s.env.Now().Sub(start), 2*UnregisteredLifetime)
	var v api.WorkerView
	s.NoError(s.env.GetWorkflowResult(&v))
	s.False(v.Registered)
}

func (s *workerSuite) TestARegisteredEntryOutlivesTheUnregisteredLifetime() {
	s.update(0, api.UpdateRegister, testRegistration("w1"))
	for i := range 6 {
		s.heartbeat(time.Duration(i+1)*10*time.Second, 1, int64(i+1))
	}
	var v api.WorkerView
	s.query(UnregisteredLifetime+5*time.Second, &v)
	s.run(UnregisteredLifetime + 10*time.Second)
	s.True(v.Registered)
	s.Equal(fleet.Active, v.State)
	s.Error(s.env.GetWorkflowError(), "it ran until cancelled")
}

func (s *workerSuite) TestSilentWorkerGoesStaleThenOffline() {
	s.update(0, api.UpdateRegister, testRegistration("w1"))
	var at14, at16, at61 api.WorkerView
	s.query(14*time.Second, &at14)
	s.query(16*time.Second, &at16)
	s.query(61*time.Second, &at61)
	s.run(70 * time.Second)
	s.Equal(fleet.Active, at14.State)
	s.Equal(fleet.Stale, at16.State)
	s.Equal(fleet.Offline, at61.State)
}

func (s *workerSuite) TestHeartbeatsKeepActiveAndReviveStale() {
	s.update(0, api.UpdateRegister, testRegistration("w1"))
	for i := int64(1); i <= 5; i++ {
		s.heartbeat(time.Duration(i)*10*time.Second, 1, i) // every 10 s < 15 s
	}
	var at55, at70, at75 api.WorkerView
	s.query(55*time.Second, &at55)
	// last heartbeat at 50 s → STALE at 65 s; a heartbeat at 72 s revives it.
	s.query(70*time.Second, &at70)
	s.heartbeat(72*time.Second, 1, 6)
	s.query(75*time.Second, &at75)
	s.run(80 * time.Second)
	s.Equal(fleet.Active, at55.State)
	s.Equal(fleet.Stale, at70.State)
	s.Equal(fleet.Active, at75.State)
	s.Equal(int64(6), at75.HeartbeatsAccepted)
}

func (s *workerSuite) TestOldIncarnationHeartbeatDoesNotReviveOffline() {
	s.update(0, api.UpdateRegister, testRegistration("w1"))
	s.heartbeat(61*time.Second, 1, 1) // OFFLINE by now: ignored
	var afterOld, afterRereg api.WorkerView
	s.query(62*time.Second, &afterOld)
	s.update(63*time.Second, api.UpdateRegister, testRegistration("w1"))
	s.heartbeat(64*time.Second, 1, 2) // incarnation 1 is old now: ignored
	s.query(65*time.Second, &afterRereg)
	s.run(66 * time.Second)
	s.Equal(fleet.Offline, afterOld.State)
	s.Equal(int64(0), afterOld.HeartbeatsAccepted)
	s.Equal(fleet.Active, afterRereg.State)
	s.Equal(int64(2), afterRereg.Incarnation)
	s.Equal(int64(0), afterRereg.HeartbeatsAccepted)
}

func (s *workerSuite) TestReserveBeyondCapacityRejectedWithoutHistory() {
	s.update(0, api.UpdateRegister, testRegistration("w1"))
	ok := s.update(time.Second, api.UpdateReserve, api.ReserveInput{TaskID: "t1", Fence: 1, Requirements: fleet.Requirements{Resources: resource.List{CPUMillis: 3000}}})
	tooBig := s.update(2*time.Second, api.UpdateReserve, api.ReserveInput{TaskID: "t2", Fence: 1, Requirements: fleet.Requirements{Resources: resource.List{CPUMillis: 2000}}})
	var v api.WorkerView
	s.query(3*time.Second, &v)
	s.run(4 * time.Second)
	s.True(ok.completed)
	s.NoError(ok.err)
	s.True(tooBig.rejected, "validator must reject")
	s.False(tooBig.accepted)
	var appErr *temporal.ApplicationError
	s.Require().True(errors.As(tooBig.err, &appErr))
	s.Equal(api.ErrTypeIneligible, appErr.Type())
	s.Contains(appErr.Message(), "cpu_millis: need 2000, free 1000")
	s.Len(v.Reservations, 1)
	s.Equal(int64(1000), v.Free.CPUMillis)
}

func (s *workerSuite) TestDrainedWorkerGetsNoReservation() {
	s.update(0, api.UpdateRegister, testRegistration("w1"))
	drain := s.update(time.Second, api.UpdateDrain, api.DrainInput{Reason: "maintenance"})
	r := s.update(2*time.Second, api.UpdateReserve, api.ReserveInput{TaskID: "t1", Fence: 1})
	var v api.WorkerView
	s.query(3*time.Second, &v)
	s.run(4 * time.Second)
	s.NoError(drain.err)
	s.True(r.rejected)
	s.ErrorContains(r.err, "DRAINING")
	s.Equal(fleet.Draining, v.State)
}

func (s *workerSuite) TestReleaseFreesCapacity() {
	s.update(0, api.UpdateRegister, testRegistration("w1"))
	s.update(time.Second, api.UpdateReserve, api.ReserveInput{TaskID: "t1", Fence: 1, Requirements: fleet.Requirements{Resources: resource.List{GPUs: 1}}})
	s.env.RegisterDelayedCallback(func() {
		s.env.SignalWorkflow(api.SignalRelease, api.ReleaseSignal{TaskID: "t1", Fence: 1})
	}, 2*time.Second)
	var v api.WorkerView
	s.query(3*time.Second, &v)
	s.run(4 * time.Second)
	s.Empty(v.Reservations)
	s.Equal(int64(1), v.Free.GPUs)
}

func (s *workerSuite) TestStaleWorkerReportsLostReservations() {
	s.update(0, api.UpdateRegister, testRegistration("w1"))
	s.update(time.Second, api.UpdateReserve, api.ReserveInput{TaskID: "t1", Fence: 3})
	s.run(20 * time.Second)
	s.Require().Len(s.lost, 1)
	s.Equal(api.WorkerLostSignal{WorkerID: "w1", Incarnation: 1, TaskID: "t1", Fence: 3, State: "STALE"}, s.lost[0])
}

// A re-registration that adopts attempts keeps exactly the reservations
// it names by task and fence; every other one is lost (REREGISTERED), and
// a claim for a fence or task the registry does not hold keeps nothing.
func (s *workerSuite) TestReRegistrationKeepsOnlyAdoptedReservations() {
	s.update(0, api.UpdateRegister, testRegistration("w1"))
	s.update(time.Second, api.UpdateReserve, api.ReserveInput{TaskID: "t1", Fence: 1})
	s.update(time.Second, api.UpdateReserve, api.ReserveInput{TaskID: "t2", Fence: 2})
	s.update(time.Second, api.UpdateReserve, api.ReserveInput{TaskID: "t3", Fence: 1})
	again := testRegistration("w1")
	again.Adopt = []fleet.Adoption{
		{TaskID: "t1", Attempt: 1, Fence: 1},
		{TaskID: "t2", Attempt: 1, Fence: 1}, // the registry holds fence 2
		{TaskID: "t9", Attempt: 1, Fence: 1}, // and nothing of t9
	}
	reg := s.update(2*time.Second, api.UpdateRegister, again)
	var v api.WorkerView
	s.query(3*time.Second, &v)
	s.run(4 * time.Second)
	s.Require().True(reg.completed)
	s.Require().NoError(reg.err)
	res, ok := reg.value.(api.RegisterResult)
	s.Require().True(ok, "%T", reg.value)
	s.Equal(api.RegisterResult{WorkerID: "w1", Incarnation: 2, Adopted: []api.ReservationRef{{TaskID: "t1", Fence: 1}}}, res)
	s.Equal(int64(2), v.Incarnation)
	s.Require().Len(v.Reservations, 1)
	s.Equal("t1", v.Reservations[0].TaskID)
	s.ElementsMatch([]api.WorkerLostSignal{
		{WorkerID: "w1", Incarnation: 1, TaskID: "t2", Fence: 2, State: "REREGISTERED"}, // the lost incarnation
		{WorkerID: "w1", Incarnation: 1, TaskID: "t3", Fence: 1, State: "REREGISTERED"},
	}, s.lost)
}

// An adoption claim that is not well formed refuses the registration.
func (s *workerSuite) TestRegisterValidatorRejectsBadAdoption() {
	s.update(0, api.UpdateRegister, testRegistration("w1"))
	bad := testRegistration("w1")
	bad.Adopt = []fleet.Adoption{{TaskID: "t1", Attempt: 1, Fence: 0}}
	r := s.update(time.Second, api.UpdateRegister, bad)
	var v api.WorkerView
	s.query(2*time.Second, &v)
	s.run(3 * time.Second)
	s.True(r.rejected)
	s.ErrorContains(r.err, "adopt[0]")
	s.Equal(int64(1), v.Incarnation, "no new incarnation")
}

func (s *workerSuite) TestSweepEvaluatesNow() {
	s.update(0, api.UpdateRegister, testRegistration("w1"))
	s.env.RegisterDelayedCallback(func() { s.env.SignalWorkflow(api.SignalSweep, api.SweepSignal{}) }, 16*time.Second)
	var v api.WorkerView
	s.query(16*time.Second+time.Millisecond, &v)
	s.run(17 * time.Second)
	s.Equal(fleet.Stale, v.State)
}

func (s *workerSuite) TestOneTimerPerWindowUnderHeartbeatStorm() {
	s.update(0, api.UpdateRegister, testRegistration("w1"))
	timers := 0
	s.env.SetOnTimerScheduledListener(func(timerID string, d time.Duration) { timers++ })
	for i := int64(1); i <= 100; i++ {
		s.heartbeat(time.Duration(i)*100*time.Millisecond, 1, i) // 100 heartbeats in 10 s
	}
	s.run(12 * time.Second)
	s.LessOrEqual(timers, 2, "one timer per liveness window, not one per heartbeat")
}

// TestWorkerContinueAsNewKeepsPendingHeartbeats: 50 heartbeats arrive while
// the workflow is busy telling a task its reservation is lost; continue-as-new
// is suggested; every one of them is applied before the workflow continues.
func TestWorkerContinueAsNewKeepsPendingHeartbeats(t *testing.T) {
	var ts testsuite.WorkflowTestSuite
	env := ts.NewTestWorkflowEnvironment()
	env.RegisterWorkflowWithOptions(WdcWorker, workflow.RegisterOptions{Name: api.WorkerWorkflowType})
	livenessBySignals(env)
	start := time.Unix(1000, 0).UTC()
	rec := fleet.Worker{}
	rec.Register(testRegistration("w1"), start)
	require.NoError(t, rec.Reserve("t1", 1, fleet.Requirements{}, start))
	env.SetStartTime(start)
	env.RegisterDelayedCallback(func() { env.SetContinueAsNewSuggested(true) }, 10*time.Second)
	// The worker goes STALE at 15 s; telling t1 takes 5 s, during which the
	// heartbeats arrive and wait in the signal channel.
	env.OnSignalExternalWorkflow(mock.Anything, mock.Anything, mock.Anything, api.SignalWorkerLost, mock.Anything).
		After(5 * time.Second).Return(nil)
	env.RegisterDelayedCallback(func() {
		for i := int64(1); i <= 50; i++ {
			env.SignalWorkflow(api.SignalWorkerHeartbeat, api.WorkerHeartbeatSignal{WorkerID: "w1", Incarnation: 1, Seq: i})
		}
	}, 17*time.Second)
	env.SetContinuedExecutionRunID("the-previous-run") // a carry comes only from continue-as-new
	env.ExecuteWorkflow(api.WorkerWorkflowType, api.WorkerInput{WorkerID: "w1", State: &rec})
	err := env.GetWorkflowError()
	var can *workflow.ContinueAsNewError
	require.True(t, errors.As(err, &can), "want continue-as-new, got %v", err)
	var next api.WorkerInput
	require.NoError(t, converter.GetDefaultDataConverter().FromPayloads(can.Input, &next))
	require.NotNil(t, next.State)
	require.Equal(t, int64(50), next.State.HeartbeatsAccepted, "every pending heartbeat applied before continue-as-new")
	require.Equal(t, int64(50), next.State.HeartbeatSeq)
	require.Equal(t, fleet.Active, next.State.State, "the heartbeats revived the STALE worker")
	require.Empty(t, next.State.Reservations)
}

func (s *workerSuite) TestUndrain() {
	s.update(0, api.UpdateRegister, testRegistration("w1"))
	s.update(time.Second, api.UpdateDrain, api.DrainInput{Reason: "kernel"})
	var drained api.WorkerView
	s.query(2*time.Second, &drained)
	s.update(3*time.Second, api.UpdateUndrain, api.UndrainInput{})
	r := s.update(4*time.Second, api.UpdateReserve, api.ReserveInput{TaskID: "t1", Fence: 1})
	s.run(5 * time.Second)
	s.Equal(fleet.Draining, drained.State)
	s.Equal("kernel", drained.DrainReason)
	s.True(r.completed)
	s.NoError(r.err, "an undrained worker takes reservations again")
}

func (s *workerSuite) TestDeregisterRefusesWhileHoldingLeasesUnlessForced() {
	s.update(0, api.UpdateRegister, testRegistration("w1"))
	s.update(time.Second, api.UpdateReserve, api.ReserveInput{TaskID: "t1", Fence: 2})
	refused := s.update(2*time.Second, api.UpdateDeregister, api.DeregisterInput{})
	forced := s.update(3*time.Second, api.UpdateDeregister, api.DeregisterInput{Force: true})
	s.env.ExecuteWorkflow(api.WorkerWorkflowType, api.WorkerInput{WorkerID: "w1"})
	s.True(refused.rejected)
	s.ErrorContains(refused.err, "holds 1 lease")
	s.True(forced.completed)
	s.Require().True(s.env.IsWorkflowCompleted(), "the registry entry ends")
	s.NoError(s.env.GetWorkflowError())
	var final api.WorkerView
	s.NoError(s.env.GetWorkflowResult(&final))
	s.Equal(fleet.Deregistered, final.State)
	s.Equal(int64(1), final.Incarnation)
	s.Require().Len(s.lost, 1, "the task holding a lease is told")
	s.Equal(string(fleet.Deregistered), s.lost[0].State)
}

func (s *workerSuite) TestIncarnationsContinueAcrossEntries() {
	s.update(0, api.UpdateRegister, testRegistration("w1"))
	var v api.WorkerView
	s.query(time.Second, &v)
	s.env.RegisterDelayedCallback(func() { s.env.CancelWorkflow() }, 2*time.Second)
	s.env.ExecuteWorkflow(api.WorkerWorkflowType, api.WorkerInput{WorkerID: "w1", IncarnationFloor: 7})
	s.Equal(int64(8), v.Incarnation)
}

// A client that starts a registry entry with a record of its choosing (a
// registered, ACTIVE worker) skips the register update and its identity
// check: the record is ignored unless the run was continued as new.
func TestWorkerIgnoresAStateItWasStartedWithByAClient(t *testing.T) {
	var ts testsuite.WorkflowTestSuite
	env := ts.NewTestWorkflowEnvironment()
	env.RegisterWorkflowWithOptions(WdcWorker, workflow.RegisterOptions{Name: api.WorkerWorkflowType})
	livenessBySignals(env)
	start := time.Unix(1000, 0).UTC()
	env.SetStartTime(start)
	rec := fleet.Worker{}
	rec.Register(testRegistration("w1"), start)
	var view api.WorkerView
	env.RegisterDelayedCallback(func() {
		v, err := env.QueryWorkflow(api.QueryWorker)
		require.NoError(t, err)
		require.NoError(t, v.Get(&view))
		env.CancelWorkflow()
	}, time.Second)
	env.ExecuteWorkflow(api.WorkerWorkflowType, api.WorkerInput{WorkerID: "w1", State: &rec})
	require.False(t, view.Registered, "a forged start registers nothing")
	require.Zero(t, view.Incarnation)
}
