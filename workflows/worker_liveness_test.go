package workflows

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/mock"
	"github.com/stretchr/testify/require"
	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/testsuite"
	"go.temporal.io/sdk/workflow"

	"github.com/wdc-runtime/wdc/api"
	"github.com/wdc-runtime/wdc/fleet"
)

// livenessEnv runs a registry entry whose liveness activities are held
// as the control plane holds them (pending, never completed by the
// activity), so that a test can end them as Temporal would.
type livenessEnv struct {
	t   *testing.T
	env *testsuite.TestWorkflowEnvironment
	// held are the liveness activities started, in order.
	held []heldLiveness
	lost []api.WorkerLostSignal
}

type heldLiveness struct {
	id               string
	in               api.LivenessInput
	heartbeatTimeout time.Duration
	// lifetime is its start-to-close timeout.
	lifetime time.Duration
	token    []byte
}

func newLivenessEnv(t *testing.T) *livenessEnv {
	var ts testsuite.WorkflowTestSuite
	l := &livenessEnv{t: t, env: ts.NewTestWorkflowEnvironment()}
	l.env.SetTestTimeout(20 * time.Second)
	l.env.RegisterWorkflowWithOptions(WdcWorker, workflow.RegisterOptions{Name: api.WorkerWorkflowType})
	l.env.RegisterActivity(controlActs.HoldLiveness)
	l.env.OnActivity(controlActs.HoldLiveness, mock.Anything, mock.Anything).Return(func(ctx context.Context, in api.LivenessInput) error {
		info := activity.GetInfo(ctx)
		l.held = append(l.held, heldLiveness{id: info.ActivityID, in: in, heartbeatTimeout: info.HeartbeatTimeout, lifetime: info.Deadline.Sub(l.env.Now()), token: info.TaskToken})
		return activity.ErrResultPending
	})
	l.env.OnSignalExternalWorkflow(mock.Anything, mock.Anything, mock.Anything, api.SignalWorkerLost, mock.Anything).
		Return(func(ns, wfID, runID, name string, arg any) error {
			l.lost = append(l.lost, arg.(api.WorkerLostSignal))
			return nil
		})
	return l
}

// at runs fn at workflow time d.
func (l *livenessEnv) at(d time.Duration, fn func()) { l.env.RegisterDelayedCallback(fn, d) }

func (l *livenessEnv) update(d time.Duration, name string, arg any) {
	l.at(d, func() {
		l.env.UpdateWorkflow(name, "", &testsuite.TestUpdateCallback{
			OnAccept: func() {}, OnReject: func(err error) { l.t.Errorf("%s rejected: %v", name, err) }, OnComplete: func(any, error) {},
		}, arg)
	})
}

func (l *livenessEnv) view(d time.Duration, into *api.WorkerView) {
	l.at(d, func() {
		v, err := l.env.QueryWorkflow(api.QueryWorker)
		require.NoError(l.t, err)
		require.NoError(l.t, v.Get(into))
	})
}

// end ends the newest held liveness activity with err, as the server
// reports a timeout.
func (l *livenessEnv) end(d time.Duration, err error) {
	l.at(d, func() {
		require.NotEmpty(l.t, l.held, "no liveness activity was started")
		require.NoError(l.t, l.env.CompleteActivity(l.held[len(l.held)-1].token, nil, err))
	})
}

func (l *livenessEnv) run(until time.Duration) {
	l.at(until, func() { l.env.CancelWorkflow() })
	l.env.ExecuteWorkflow(api.WorkerWorkflowType, api.WorkerInput{WorkerID: "w1"})
}

var heartbeatTimeout = temporal.NewTimeoutError(enumspb.TIMEOUT_TYPE_HEARTBEAT, nil)

// While its liveness activity is pending, a worker stays ACTIVE with no
// heartbeat signal and no liveness timer: Temporal keeps the window. The
// activity is held for the incarnation, under its ID, with the stale-after
// window as its heartbeat timeout.
func TestLivenessActivityKeepsAWorkerActiveWithoutSignals(t *testing.T) {
	l := newLivenessEnv(t)
	timers, checks := 0, 0
	l.env.SetOnTimerScheduledListener(func(_ string, d time.Duration) {
		if d > fleet.DefaultReservationCheckAfter/2 { // the windows are 15 s and 60 s
			checks++ // the reservation check's
			return
		}
		timers++
	})
	l.update(0, api.UpdateRegister, testRegistration("w1"))
	l.update(time.Second, api.UpdateReserve, api.ReserveInput{TaskID: "t1", Fence: 1})
	var v api.WorkerView
	l.view(10*time.Minute, &v)
	l.run(11 * time.Minute)
	require.Len(t, l.held, 1)
	require.Equal(t, "liveness-1", l.held[0].id)
	require.Equal(t, api.LivenessInput{WorkerID: "w1", Incarnation: 1}, l.held[0].in)
	require.Equal(t, 15*time.Second, l.held[0].heartbeatTimeout, "the heartbeat timeout is the stale-after window")
	require.Equal(t, fleet.Active, v.State)
	require.Equal(t, "liveness-1", v.LivenessActivity)
	require.Len(t, v.Reservations, 1, "nothing revoked")
	require.Empty(t, l.lost)
	require.Zero(t, timers, "no liveness timer while Temporal keeps the window")
	require.NotZero(t, checks, "the reservation is checked")
}

// A heartbeat timeout makes the worker STALE at once (its reservations are
// lost to their tasks) and OFFLINE when the offline window, counted from
// the last heartbeat Temporal saw, has passed.
func TestLivenessHeartbeatTimeoutMakesTheWorkerStaleThenOffline(t *testing.T) {
	l := newLivenessEnv(t)
	l.update(0, api.UpdateRegister, testRegistration("w1"))
	l.update(time.Second, api.UpdateReserve, api.ReserveInput{TaskID: "t1", Fence: 3})
	l.end(30*time.Second, heartbeatTimeout) // last heartbeat at 15 s
	var stale, stillStale, offline api.WorkerView
	l.view(30*time.Second+time.Millisecond, &stale)
	l.view(74*time.Second, &stillStale)
	l.view(76*time.Second, &offline)
	l.run(80 * time.Second)
	require.Equal(t, fleet.Stale, stale.State)
	require.Empty(t, stale.LivenessActivity)
	require.Equal(t, []api.WorkerLostSignal{{WorkerID: "w1", Incarnation: 1, TaskID: "t1", Fence: 3, State: "STALE"}}, l.lost)
	require.Equal(t, fleet.Stale, stillStale.State)
	require.Equal(t, fleet.Offline, offline.State, "OFFLINE 60 s after the last heartbeat (15 s)")
	require.Len(t, l.held, 1, "no liveness activity for a STALE worker")
}

// A STALE worker's heartbeat signal brings it back, with a new liveness
// activity; an ended lifetime replaces the activity without a state change.
func TestHeartbeatSignalRevivesAStaleWorkerWithANewLivenessActivity(t *testing.T) {
	l := newLivenessEnv(t)
	l.update(0, api.UpdateRegister, testRegistration("w1"))
	l.end(20*time.Second, heartbeatTimeout)
	l.at(25*time.Second, func() {
		l.env.SignalWorkflow(api.SignalWorkerHeartbeat, api.WorkerHeartbeatSignal{WorkerID: "w1", Incarnation: 1, Seq: 9})
	})
	var revived, renewed api.WorkerView
	l.view(26*time.Second, &revived)
	l.end(30*time.Second, temporal.NewTimeoutError(enumspb.TIMEOUT_TYPE_START_TO_CLOSE, nil))
	l.view(31*time.Second, &renewed)
	l.run(40 * time.Second)
	require.Equal(t, fleet.Active, revived.State)
	require.Equal(t, "liveness-1", revived.LivenessActivity)
	require.Equal(t, fleet.Active, renewed.State)
	require.Len(t, l.held, 3, "registration, revival, renewal")
	require.Equal(t, "liveness-1", l.held[2].id)
}

// A new registration (another agent took the worker over) cancels the old
// incarnation's liveness activity and holds one for the new incarnation.
func TestReRegistrationHoldsLivenessForTheNewIncarnation(t *testing.T) {
	l := newLivenessEnv(t)
	var cancelled []string
	l.env.SetOnActivityCanceledListener(func(info *activity.Info) { cancelled = append(cancelled, info.ActivityID) })
	l.update(0, api.UpdateRegister, testRegistration("w1"))
	l.update(5*time.Second, api.UpdateRegister, testRegistration("w1"))
	var v api.WorkerView
	l.view(6*time.Second, &v)
	l.run(7 * time.Second)
	require.Equal(t, int64(2), v.Incarnation)
	require.Equal(t, "liveness-2", v.LivenessActivity)
	require.Len(t, l.held, 2)
	require.Equal(t, "liveness-2", l.held[1].id)
	require.NotEmpty(t, cancelled)
	require.Equal(t, "liveness-1", cancelled[0], "the old incarnation's activity is cancelled first")
}

// An unexpected end (a failure, not a timeout) falls back to judging
// heartbeat signals on the entry's own timer from then on.
func TestLivenessFailureFallsBackToHeartbeatSignals(t *testing.T) {
	l := newLivenessEnv(t)
	l.update(0, api.UpdateRegister, testRegistration("w1"))
	l.end(10*time.Second, errors.New("boom"))
	var at24, at26 api.WorkerView
	l.view(24*time.Second, &at24)
	l.view(26*time.Second, &at26)
	l.run(30 * time.Second)
	require.Equal(t, fleet.Active, at24.State)
	require.Equal(t, fleet.Stale, at26.State, "STALE 15 s after the failure, with no heartbeat signal")
	require.Len(t, l.held, 1, "not rescheduled until a heartbeat signal")
}

// A liveness activity not started within the stale window leaves the
// worker to its heartbeat signals (which the agent sends meanwhile): a
// worker that sent one stays ACTIVE and gets a new activity; one that did
// not is STALE.
func TestLivenessNotStartedFallsBackToHeartbeatSignals(t *testing.T) {
	notStarted := temporal.NewTimeoutError(enumspb.TIMEOUT_TYPE_SCHEDULE_TO_START, nil)

	live := newLivenessEnv(t)
	live.update(0, api.UpdateRegister, testRegistration("w1"))
	live.at(10*time.Second, func() {
		live.env.SignalWorkflow(api.SignalWorkerHeartbeat, api.WorkerHeartbeatSignal{WorkerID: "w1", Incarnation: 1, Seq: 1})
	})
	live.end(16*time.Second, notStarted)
	var v api.WorkerView
	live.view(17*time.Second, &v)
	live.run(18 * time.Second)
	require.Equal(t, fleet.Active, v.State)
	require.Len(t, live.held, 2, "scheduled again")

	dead := newLivenessEnv(t)
	dead.update(0, api.UpdateRegister, testRegistration("w1"))
	dead.end(16*time.Second, notStarted)
	var d api.WorkerView
	dead.view(17*time.Second, &d)
	dead.run(18 * time.Second)
	require.Equal(t, fleet.Stale, d.State, "no heartbeat for 16 s (stale after 15 s)")
}
