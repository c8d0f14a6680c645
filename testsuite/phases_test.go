package testsuite

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/client"
	sdkworker "go.temporal.io/sdk/worker"

	"github.com/wdc-runtime/wdc/activities"
	"github.com/wdc-runtime/wdc/api"
	wdcclient "github.com/wdc-runtime/wdc/client"
	"github.com/wdc-runtime/wdc/envelope"
	"github.com/wdc-runtime/wdc/fleet"
	"github.com/wdc-runtime/wdc/internal/blobstore"
	"github.com/wdc-runtime/wdc/lease"
	"github.com/wdc-runtime/wdc/resource"
)

// phaseLabels keep the phase test's tasks on its own workers.
var phaseLabels = map[string]string{"suite": "phases"}

// phaseRegistration is a phase worker's registration: liveness-fenced,
// like a Local agent's, so that its loss needs no lock-delay.
func phaseRegistration(id string) fleet.Registration {
	return fleet.Registration{WorkerID: id, Capacity: resource.List{CPUMillis: 4000, MemoryBytes: 4 << 30},
		Labels: phaseLabels, StaleAfter: time.Hour, OfflineAfter: 2 * time.Hour, LivenessFenced: true}
}

// phaseWorker registers a fleet worker in the soak namespace whose agent
// launches nothing (the test plays the attempts).
func phaseWorker(t *testing.T, c client.Client, wc *wdcclient.Client, id string) {
	t.Helper()
	_, err := wc.RegisterWorker(context.Background(), phaseRegistration(id))
	require.NoError(t, err)
	aw := sdkworker.New(c, api.AgentTaskQueue(id), sdkworker.Options{})
	aw.RegisterActivityWithOptions(&activities.Agent{WorkerID: id, Launcher: &soakLauncher{}}, activity.RegisterOptions{SkipInvalidStructFunctions: true})
	require.NoError(t, aw.Start())
	t.Cleanup(aw.Stop)
}

func waitLaunched(t *testing.T, wc *wdcclient.Client, taskID string, attempt int64) lease.Claim {
	t.Helper()
	var v api.TaskView
	waitFor(t, 30*time.Second, "attempt launched", func() bool {
		var err error
		v, err = wc.Task(context.Background(), taskID)
		return err == nil && v.Lease != nil && v.Lease.Attempt == attempt && v.Lease.State == lease.Active && v.AttemptDir != ""
	})
	return lease.ClaimOf(*v.Lease)
}

func submitAs(t *testing.T, c client.Client, updateID string, in api.SubmitResultInput) (api.SubmitResultResult, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	h, err := c.UpdateWorkflow(ctx, client.UpdateWorkflowOptions{
		WorkflowID: api.TaskWorkflowID(in.TaskID), UpdateID: updateID, UpdateName: api.UpdateSubmitResult,
		Args: []any{in}, WaitForStage: client.WorkflowUpdateStageCompleted,
	})
	var res api.SubmitResultResult
	if err == nil {
		err = h.Get(ctx, &res)
	}
	return res, err
}

// The lease loop's paths on the real server: a worker-lost revocation
// retries on the other worker; an ingest failure answers its own
// submission and keeps the lease, and a corrected resubmission completes
// the task; a task cancelled while leased ends CANCELLED and its
// reservation is released. With -update-histories the histories become
// replay fixtures.
func TestLeaseLoopPhasesOnTheRealServer(t *testing.T) {
	c, wc := soakEnv(t)
	ctx := context.Background()
	phaseWorker(t, c, wc, "phase-a")
	phaseWorker(t, c, wc, "phase-b")

	// Worker lost, then an ingest failure, then an accepted result.
	env := envelope.Envelope{TaskID: "phase-lost", RunID: "phase-run", WorldID: "phases", Command: []string{"true"}, Selector: phaseLabels}
	_, err := wc.SubmitTask(ctx, env, api.TaskOptions{LeaseTTL: time.Hour, Backoff: lease.Backoff{Initial: 100 * time.Millisecond, Max: time.Second}})
	require.NoError(t, err)
	first := waitLaunched(t, wc, env.TaskID, 1)
	// The worker's agent restarts: its new registration loses the old
	// incarnation's reservation, and the registry tells the task.
	_, err = wc.RegisterWorker(ctx, phaseRegistration(first.WorkerID))
	require.NoError(t, err)
	second := waitLaunched(t, wc, env.TaskID, 2)
	require.NotEqual(t, first.WorkerID, second.WorkerID, "the retry avoids the lost worker")
	// runs status shows the live state and attempt of a task still running.
	waitFor(t, 10*time.Second, "runs status shows attempt 2 LEASED on the second worker", func() bool {
		run, err := wc.RunWithLiveTasks(ctx, env.RunID)
		return err == nil && len(run.Tasks) == 1 && run.Tasks[0].State == api.TaskLeased &&
			run.Tasks[0].Attempts == 2 && run.Tasks[0].WorkerID == second.WorkerID
	})

	// Stage a file whose bytes do not match the declared digest.
	_, _, err = suite.blobs.Stage(ctx, blobstore.StagingPrefix(env.TaskID, second.Attempt, second.Fence)+"out.txt", strings.NewReader("real bytes\n"))
	require.NoError(t, err)
	good := blobstore.DigestBytes([]byte("real bytes\n"))
	bad := blobstore.DigestBytes([]byte("other bytes\n"))
	_, err = submitAs(t, c, "bad-digest", api.SubmitResultInput{Claim: second, Artifacts: []api.Artifact{{Name: "out.txt", Digest: bad, SizeBytes: 11}}})
	require.Error(t, err, "the ingest failure answers its own submission")
	require.ErrorContains(t, err, "ingest failed")
	v, err := wc.Task(ctx, env.TaskID)
	require.NoError(t, err)
	require.Equal(t, lease.Active, v.Lease.State, "the lease survives a failed ingest")
	res, err := submitAs(t, c, api.SubmitResultUpdateID(second), api.SubmitResultInput{Claim: second, Artifacts: []api.Artifact{{Name: "out.txt", Digest: good, SizeBytes: 11}}})
	require.NoError(t, err)
	require.Equal(t, second.Fence, res.Result.Fence)
	out, err := wc.WaitTask(ctx, env.TaskID)
	require.NoError(t, err)
	require.Equal(t, api.TaskCompleted, out.State)
	v, err = wc.Task(ctx, env.TaskID)
	require.NoError(t, err)
	require.Equal(t, lease.ReasonWorkerLost, v.Directives[0].Reason)

	// Cancelled while leased.
	env2 := envelope.Envelope{TaskID: "phase-cancel", RunID: "phase-run", WorldID: "phases", Command: []string{"true"}, Selector: phaseLabels}
	_, err = wc.SubmitTask(ctx, env2, api.TaskOptions{LeaseTTL: time.Hour})
	require.NoError(t, err)
	held := waitLaunched(t, wc, env2.TaskID, 1)
	_, err = wc.CancelTask(ctx, env2.TaskID, "phase test")
	require.NoError(t, err)
	out, err = wc.WaitTask(ctx, env2.TaskID)
	require.NoError(t, err)
	require.Equal(t, api.TaskCancelled, out.State)
	waitFor(t, 10*time.Second, "the cancelled lease's reservation released", func() bool {
		w, err := wc.Worker(ctx, held.WorkerID)
		return err == nil && !w.HasReservation(env2.TaskID, held.Fence)
	})

	if *updateHistories {
		writeHistoryFrom(t, c, api.TaskWorkflowID(env.TaskID), "")  // worker_lost revoke, ingest failure, acceptance
		writeHistoryFrom(t, c, api.TaskWorkflowID(env2.TaskID), "") // cancel while leased
	}
}
