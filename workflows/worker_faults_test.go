package workflows

import (
	"context"
	"errors"
	"time"

	"github.com/stretchr/testify/mock"
	"go.temporal.io/sdk/converter"
	"go.temporal.io/sdk/workflow"

	"github.com/wdc-runtime/wdc/activities"
	"github.com/wdc-runtime/wdc/api"
	"github.com/wdc-runtime/wdc/fleet"
	"github.com/wdc-runtime/wdc/resource"
)

// Fault 6 (registry): worker-lost notifications decided when the registry
// continues as new are carried, not sent while signals pile up unapplied;
// the new run sends them first.
func (s *workerSuite) TestFault6ContinueAsNewCarriesLostNotifications() {
	start := time.Unix(1000, 0).UTC()
	s.env.SetStartTime(start)
	rec := fleet.Worker{}
	rec.Register(testRegistration("w1"), start)
	carried := []api.WorkerLostSignal{{WorkerID: "w1", Incarnation: 1, TaskID: "t7", Fence: 3, State: "STALE"}}
	s.env.RegisterDelayedCallback(func() { s.env.CancelWorkflow() }, time.Second)
	s.env.SetContinuedExecutionRunID("the-previous-run") // a carry comes only from continue-as-new
	s.env.ExecuteWorkflow(api.WorkerWorkflowType, api.WorkerInput{WorkerID: "w1", State: &rec, Lost: carried})
	s.Equal(carried, s.lost, "the carried notification is sent by the new run")
}

// Fault 6 (registry): with continue-as-new suggested while a worker-lost
// notification is being sent, releases and heartbeats that arrive during
// the send are applied, and the continue-as-new input carries the result.
func (s *workerSuite) TestFault6SignalsDuringLostSendAreNotDropped() {
	start := time.Unix(1000, 0).UTC()
	s.env = s.NewTestWorkflowEnvironment()
	s.env.RegisterWorkflowWithOptions(WdcWorker, workflow.RegisterOptions{Name: api.WorkerWorkflowType})
	livenessBySignals(s.env)
	s.env.SetStartTime(start)
	s.env.OnSignalExternalWorkflow(mock.Anything, mock.Anything, mock.Anything, api.SignalWorkerLost, mock.Anything).After(5 * time.Second).Return(nil)
	rec := fleet.Worker{}
	rec.Register(testRegistration("w1"), start)
	for _, id := range []string{"t1", "t2", "t3"} {
		s.Require().NoError(rec.Reserve(id, 1, fleet.Requirements{}, start))
	}
	// t1's worker-lost is carried in; while it is sent (5 s), t2 and t3
	// are released and heartbeats arrive, then continue-as-new is due.
	s.env.RegisterDelayedCallback(func() {
		s.env.SignalWorkflow(api.SignalRelease, api.ReleaseSignal{TaskID: "t2", Fence: 1})
		s.env.SignalWorkflow(api.SignalRelease, api.ReleaseSignal{TaskID: "t3", Fence: 1})
		for i := int64(1); i <= 10; i++ {
			s.env.SignalWorkflow(api.SignalWorkerHeartbeat, api.WorkerHeartbeatSignal{WorkerID: "w1", Incarnation: 1, Seq: i})
		}
		s.env.SetContinueAsNewSuggested(true)
	}, 2*time.Second)
	s.env.SetContinuedExecutionRunID("the-previous-run") // a carry comes only from continue-as-new
	s.env.ExecuteWorkflow(api.WorkerWorkflowType, api.WorkerInput{WorkerID: "w1", State: &rec,
		Lost: []api.WorkerLostSignal{{WorkerID: "w1", Incarnation: 1, TaskID: "t0", Fence: 1, State: "STALE"}}})
	var can *workflow.ContinueAsNewError
	s.Require().True(errors.As(s.env.GetWorkflowError(), &can), "got %v", s.env.GetWorkflowError())
	var next api.WorkerInput
	s.Require().NoError(converter.GetDefaultDataConverter().FromPayloads(can.Input, &next))
	s.Equal(int64(10), next.State.HeartbeatsAccepted)
	s.Require().Len(next.State.Reservations, 1, "both releases applied")
	s.Equal("t1", next.State.Reservations[0].TaskID)
	s.Empty(next.Lost)
}

// Fault 7 (registry): a reservation whose task moved on (an ambiguous
// reserve whose answer was lost, a release that never came) is found by
// the periodic check and released; one that still belongs to its task's
// lease is kept.
func (s *workerSuite) TestFault7StaleReservationsAreReconciled() {
	start := time.Unix(1000, 0).UTC()
	s.env.SetStartTime(start)
	s.env.RegisterActivity(&activities.Control{})
	var checked []api.ReservationRef
	s.env.OnActivity(controlActs.CheckReservations, mock.Anything, mock.Anything).Return(
		func(_ context.Context, in api.CheckReservationsInput) (api.CheckReservationsResult, error) {
			checked = append(checked, in.Reservations...)
			return api.CheckReservationsResult{Stale: []api.StaleReservation{
				{ReservationRef: api.ReservationRef{TaskID: "lost-answer", Fence: 2}, Why: "fence 2 was granted to w2"},
			}}, nil
		})
	s.update(0, api.UpdateRegister, testRegistration("w1"))
	s.update(time.Second, api.UpdateReserve, api.ReserveInput{TaskID: "lost-answer", Fence: 2, Requirements: fleet.Requirements{Resources: resourceCPU(1000)}})
	s.update(time.Second, api.UpdateReserve, api.ReserveInput{TaskID: "running", Fence: 1, Requirements: fleet.Requirements{Resources: resourceCPU(1000)}})
	for i := int64(1); i <= 30; i++ {
		s.heartbeat(time.Duration(i)*5*time.Second, 1, i) // stay ACTIVE
	}
	var v api.WorkerView
	s.query(fleet.DefaultReservationCheckAfter+10*time.Second, &v)
	s.run(fleet.DefaultReservationCheckAfter + 20*time.Second)
	s.ElementsMatch([]api.ReservationRef{{TaskID: "lost-answer", Fence: 2}, {TaskID: "running", Fence: 1}}, checked)
	s.Require().Len(v.Reservations, 1)
	s.Equal("running", v.Reservations[0].TaskID)
	s.Equal(int64(3000), v.Free.CPUMillis)
}

func resourceCPU(millis int64) resource.List { return resource.List{CPUMillis: millis} }

// After a control-plane outage longer than the offline window, the
// liveness timer and the heartbeats the agent kept sending arrive in one
// workflow task: the heartbeats are applied first, so the worker stays
// ACTIVE and keeps its reservations (before: OFFLINE, every lease revoked).
func (s *workerSuite) TestHeartbeatsHeldDuringAnOutageKeepTheWorkerActive() {
	s.update(0, api.UpdateRegister, testRegistration("w1")) // stale 15 s, offline 60 s
	s.update(time.Second, api.UpdateReserve, api.ReserveInput{TaskID: "t1", Fence: 1})
	for i := int64(1); i <= 40; i++ {
		seq := i
		s.env.RegisterDelayedCallback(func() {
			s.env.SignalWorkflowSkippingWorkflowTask(api.SignalWorkerHeartbeat, api.WorkerHeartbeatSignal{WorkerID: "w1", Incarnation: 1, Seq: seq})
		}, time.Duration(2*i)*time.Second) // every 2 s for 80 s, none processed until the timer fires
	}
	var v api.WorkerView
	s.query(81*time.Second, &v)
	s.run(82 * time.Second)
	s.Equal(fleet.Active, v.State)
	s.Len(v.Reservations, 1, "the reservation was not reported lost")
	s.Empty(s.lost)
}
