package testsuite

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/temporal"
	sdkworker "go.temporal.io/sdk/worker"

	"github.com/wdc-runtime/wdc/activities"
	"github.com/wdc-runtime/wdc/api"
	wdcclient "github.com/wdc-runtime/wdc/client"
	"github.com/wdc-runtime/wdc/envelope"
	"github.com/wdc-runtime/wdc/fleet"
	"github.com/wdc-runtime/wdc/launchers"
	"github.com/wdc-runtime/wdc/lease"
	"github.com/wdc-runtime/wdc/resource"
)

// Messages that race inside one workflow task. The SDK's test
// environment runs a workflow task per message, so these tests use the
// real server: the control plane is stopped, the messages are sent (the
// server holds them), and a new control plane then gets them all in one
// workflow task.

// raceEnv is a soak-namespace client with a running control plane (which
// the test stops and restarts) and one fleet worker whose agent runs
// launcher.
func raceEnv(t *testing.T, workerID string, launcher launchers.Launcher) (client.Client, *wdcclient.Client, stopper, map[string]string) {
	t.Helper()
	c, err := client.Dial(client.Options{HostPort: suite.srv.FrontendHostPort(), Namespace: soakNamespace, Logger: quietLogger{}})
	require.NoError(t, err)
	t.Cleanup(c.Close)
	cp := startControlPlane(t, c)
	wc := &wdcclient.Client{C: c}
	labels := map[string]string{"suite": workerID}
	_, err = wc.RegisterWorker(context.Background(), fleet.Registration{WorkerID: workerID, Capacity: resource.List{CPUMillis: 4000, MemoryBytes: 4 << 30},
		Labels: labels, StaleAfter: time.Hour, OfflineAfter: 2 * time.Hour})
	require.NoError(t, err)
	aw := sdkworker.New(c, api.AgentTaskQueue(workerID), sdkworker.Options{})
	aw.RegisterActivityWithOptions(&activities.Agent{WorkerID: workerID, Launcher: launcher}, activity.RegisterOptions{SkipInvalidStructFunctions: true})
	require.NoError(t, aw.Start())
	t.Cleanup(aw.Stop)
	return c, wc, cp, labels
}

// updateAsync sends an update and returns a channel with its outcome.
func updateAsync(c client.Client, wfID, updateID, name string, arg any, out any) <-chan error {
	done := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		h, err := c.UpdateWorkflow(ctx, client.UpdateWorkflowOptions{
			WorkflowID: wfID, UpdateID: updateID, UpdateName: name, Args: []any{arg}, WaitForStage: client.WorkflowUpdateStageCompleted,
		})
		if err == nil {
			err = h.Get(ctx, out)
		}
		done <- err
	}()
	return done
}

func wait(t *testing.T, ch <-chan error) error {
	t.Helper()
	select {
	case err := <-ch:
		return err
	case <-time.After(time.Minute):
		t.Fatal("no answer within a minute")
		return nil
	}
}

// Fault 4: a submit-result and a cancel delivered in one workflow task.
// Whichever came first wins, the other is answered, and the task ends.
// Before: the cancel branch ended the lease, the submit handler waited
// for an ingest that never came, and the workflow never closed.
func TestFault4SubmitAndCancelInOneWorkflowTask(t *testing.T) {
	// updateGap separates the two updates so the server admits them in
	// the order sent (300 ms was seen to swap them on a loaded machine);
	// no control plane runs meanwhile, so one workflow task takes both.
	const updateGap = time.Second
	for _, order := range []string{"submit-then-cancel", "cancel-then-submit"} {
		t.Run(order, func(t *testing.T) {
			c, wc, cp, labels := raceEnv(t, "race4-"+order[:6], &soakLauncher{})
			env := envelope.Envelope{TaskID: "race4-" + order, RunID: "race-run", WorldID: "races", Command: []string{"true"}, Selector: labels}
			_, err := wc.SubmitTask(context.Background(), env, api.TaskOptions{LeaseTTL: time.Hour})
			require.NoError(t, err)
			claim := waitLaunched(t, wc, env.TaskID, 1)
			cp.Stop()

			wfID := api.TaskWorkflowID(env.TaskID)
			var res api.SubmitResultResult
			var view api.TaskView
			var submitted, cancelled <-chan error
			if order == "submit-then-cancel" {
				submitted = updateAsync(c, wfID, api.SubmitResultUpdateID(claim), api.UpdateSubmitResult, api.SubmitResultInput{Claim: claim}, &res)
				time.Sleep(updateGap)
				cancelled = updateAsync(c, wfID, "cancel", api.UpdateCancelTask, api.CancelTaskInput{Reason: "race"}, &view)
			} else {
				cancelled = updateAsync(c, wfID, "cancel", api.UpdateCancelTask, api.CancelTaskInput{Reason: "race"}, &view)
				time.Sleep(updateGap)
				submitted = updateAsync(c, wfID, api.SubmitResultUpdateID(claim), api.UpdateSubmitResult, api.SubmitResultInput{Claim: claim}, &res)
			}
			time.Sleep(time.Second)
			startControlPlane(t, c)

			submitErr, cancelErr := wait(t, submitted), wait(t, cancelled)
			require.NoError(t, cancelErr, "the cancel is answered")
			out, err := wc.WaitTask(context.Background(), env.TaskID)
			require.NoError(t, err, "the task ends")
			if order == "submit-then-cancel" {
				require.NoError(t, submitErr)
				require.True(t, res.Accepted)
				require.Equal(t, claim.Fence, res.Result.Fence, "answered with its own claim's result")
				require.Equal(t, api.TaskCompleted, out.State)
			} else {
				var appErr *temporal.ApplicationError
				require.True(t, errors.As(submitErr, &appErr), "got %v", submitErr)
				require.Equal(t, string(lease.RejectLeaseNotActive), appErr.Type())
				require.Equal(t, api.TaskCancelled, out.State)
			}
		})
	}
}

// gatedLauncher holds each launch until released, then fails it.
type gatedLauncher struct {
	soakLauncher
	once    sync.Once
	release chan struct{}
}

func (g *gatedLauncher) Submit(ctx context.Context, a launchers.Attempt) (launchers.Submission, error) {
	if a.Lease.Attempt > 1 {
		return g.soakLauncher.Submit(ctx, a)
	}
	select {
	case <-g.release:
	case <-ctx.Done():
	}
	return launchers.Submission{}, errors.New("launch failed after the result was submitted")
}

// Fault 5: the launch of attempt 1 fails in the same workflow task in
// which attempt 1's result passed the fence check. The lease with a
// pending result is not revoked: the task completes on attempt 1 and the
// submission is answered with its own result. Before: the lease was
// revoked under the pending result, and the submission was answered with
// the next attempt's result.
func TestFault5LaunchFailureAndResultInOneWorkflowTask(t *testing.T) {
	g := &gatedLauncher{release: make(chan struct{})}
	c, wc, cp, labels := raceEnv(t, "race5", g)
	env := envelope.Envelope{TaskID: "race5", RunID: "race-run", WorldID: "races", Command: []string{"true"}, Selector: labels}
	_, err := wc.SubmitTask(context.Background(), env, api.TaskOptions{LeaseTTL: time.Hour, LaunchTimeout: time.Hour})
	require.NoError(t, err)
	var v api.TaskView
	waitFor(t, 30*time.Second, "attempt 1 granted", func() bool {
		v, err = wc.Task(context.Background(), env.TaskID)
		return err == nil && v.Lease != nil && v.Lease.State == lease.Active
	})
	claim := lease.ClaimOf(*v.Lease)
	cp.Stop()

	var res api.SubmitResultResult
	submitted := updateAsync(c, api.TaskWorkflowID(env.TaskID), api.SubmitResultUpdateID(claim), api.UpdateSubmitResult, api.SubmitResultInput{Claim: claim}, &res)
	time.Sleep(300 * time.Millisecond)
	close(g.release) // the launch activity fails while no control plane runs
	time.Sleep(time.Second)
	startControlPlane(t, c)

	submitErr := wait(t, submitted)
	if submitErr != nil {
		// The launch failure was applied first: the result is refused by
		// the fence check (never accepted with another attempt's result).
		var appErr *temporal.ApplicationError
		require.True(t, errors.As(submitErr, &appErr), "got %v", submitErr)
		require.Equal(t, string(lease.RejectLeaseNotActive), appErr.Type())
		_, err := wc.CancelTask(context.Background(), env.TaskID, "done")
		require.NoError(t, err)
		return
	}
	// The result was taken first: it is decided, and the launch failure
	// cannot revoke the lease under it.
	out, err := wc.WaitTask(context.Background(), env.TaskID)
	require.NoError(t, err)
	final, err := wc.Task(context.Background(), env.TaskID)
	require.NoError(t, err)
	t.Logf("outcome %s after %d attempt(s); directives %v", out.State, out.Attempts, final.Directives)
	require.True(t, res.Accepted)
	require.Equal(t, claim.Fence, res.Result.Fence, "answered with its own claim's result")
	require.Equal(t, api.TaskCompleted, out.State)
	require.Equal(t, int64(1), out.Attempts)
	require.Empty(t, final.Directives)
}

// A control plane that is down longer than a worker's offline window,
// while the worker's agent keeps heartbeating: when it comes back, the
// heartbeats held by the server are applied before the liveness windows
// are judged, so the worker stays ACTIVE and keeps its reservation (a
// control-plane deploy must not take the fleet OFFLINE).
func TestControlPlaneOutageKeepsALiveWorkerActive(t *testing.T) {
	c, wc, cp, _ := raceEnv(t, "outage-w", &soakLauncher{})
	ctx := context.Background()
	reg, err := wc.RegisterWorker(ctx, fleet.Registration{WorkerID: "outage-w2", Capacity: resource.List{CPUMillis: 1000, MemoryBytes: 1 << 30},
		StaleAfter: 2 * time.Second, OfflineAfter: 4 * time.Second, HeartbeatInterval: 500 * time.Millisecond})
	require.NoError(t, err)
	h, err := c.UpdateWorkflow(ctx, client.UpdateWorkflowOptions{
		WorkflowID: api.WorkerWorkflowID("outage-w2"), UpdateName: api.UpdateReserve, WaitForStage: client.WorkflowUpdateStageCompleted,
		Args: []any{api.ReserveInput{TaskID: "outage-task", Fence: 1}},
	})
	require.NoError(t, err)
	require.NoError(t, h.Get(ctx, nil))
	stop := make(chan struct{})
	beats := make(chan struct{})
	go func() { // the agent's heartbeats, every 500 ms, through the outage
		defer close(beats)
		for seq := int64(1); ; seq++ {
			select {
			case <-stop:
				return
			case <-time.After(500 * time.Millisecond):
			}
			_ = wc.WorkerHeartbeat(ctx, api.WorkerHeartbeatSignal{WorkerID: "outage-w2", Incarnation: reg.Incarnation, Seq: seq})
		}
	}()
	cp.Stop()
	time.Sleep(10 * time.Second) // more than twice the offline window
	startControlPlane(t, c)
	time.Sleep(2 * time.Second)
	close(stop)
	<-beats
	v, err := wc.Worker(ctx, "outage-w2")
	require.NoError(t, err)
	require.Equal(t, fleet.Active, v.State, "a worker that kept heartbeating is not taken for dead")
	require.Equal(t, reg.Incarnation, v.Incarnation)
	require.True(t, v.HasReservation("outage-task", 1), "its reservation was not reported lost")
}
