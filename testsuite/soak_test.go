package testsuite

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.temporal.io/api/workflowservice/v1"
	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/client"
	sdkworker "go.temporal.io/sdk/worker"

	"github.com/wdc-runtime/wdc/activities"
	"github.com/wdc-runtime/wdc/api"
	wdcclient "github.com/wdc-runtime/wdc/client"
	"github.com/wdc-runtime/wdc/envelope"
	"github.com/wdc-runtime/wdc/fleet"
	"github.com/wdc-runtime/wdc/launchers"
	"github.com/wdc-runtime/wdc/lease"
	"github.com/wdc-runtime/wdc/resource"
	"github.com/wdc-runtime/wdc/worker"
)

// The soak tests run in their own namespace, where Temporal suggests
// continue-as-new every soakContinueAsNewAfter history events, with their
// own control plane: they drive the registry and a task through many
// continue-as-new generations under a steady stream of messages and
// count what was sent against what was applied.
const (
	soakNamespace          = "wdc-soak"
	soakContinueAsNewAfter = 200
)

// soakEnv is a client and control plane on the soak namespace.
func soakEnv(t *testing.T) (client.Client, *wdcclient.Client) {
	t.Helper()
	c, err := client.Dial(client.Options{HostPort: suite.srv.FrontendHostPort(), Namespace: soakNamespace, Logger: quietLogger{}})
	require.NoError(t, err)
	t.Cleanup(c.Close)
	startControlPlane(t, c)
	return c, &wdcclient.Client{C: c}
}

// startControlPlane starts a control plane on c's namespace, stopped when
// the test ends unless the caller stops it first.
func startControlPlane(t *testing.T, c client.Client) stopper {
	t.Helper()
	cp := worker.NewControlPlane(c, suite.blobs)
	require.NoError(t, cp.Start())
	var once sync.Once
	t.Cleanup(func() { once.Do(cp.Stop) })
	return stopOnce{cp, &once}
}

// stopper is a control plane a test may stop.
type stopper interface{ Stop() }

// stopOnce lets a test stop a control plane that its cleanup also stops.
type stopOnce struct {
	cp   *worker.ControlPlane
	once *sync.Once
}

func (s stopOnce) Stop() { s.once.Do(s.cp.Stop) }

// runCount counts the runs (continue-as-new generations) of a workflow.
func runCount(t *testing.T, c client.Client, wfID string) int {
	t.Helper()
	n := 0
	var token []byte
	for {
		resp, err := c.ListWorkflow(context.Background(), &workflowservice.ListWorkflowExecutionsRequest{
			Namespace: soakNamespace, Query: fmt.Sprintf("WorkflowId = %q", wfID), NextPageToken: token,
		})
		require.NoError(t, err)
		n += len(resp.GetExecutions())
		if token = resp.GetNextPageToken(); len(token) == 0 {
			return n
		}
	}
}

// A registry entry under a steady stream of heartbeats, reserves and
// releases (for soakFor: 15 s in `make test`, 90 s in `make soak`)
// continues as new many times; every heartbeat is applied, and every
// reservation is released.
func TestSoakWorkerContinueAsNew(t *testing.T) {
	c, wc := soakEnv(t)
	ctx := context.Background()
	const id = "soak-w"
	reg, err := wc.RegisterWorker(ctx, fleet.Registration{WorkerID: id, Capacity: resource.List{CPUMillis: 64000, MemoryBytes: 64 << 30}})
	require.NoError(t, err)
	firstRun := currentRunID(t, c, api.WorkerWorkflowID(id))

	// 15 s streams about twenty generations on a loaded 2-core machine.
	deadline := time.Now().Add(soakFor(t, 15*time.Second))
	var sent atomic.Int64
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { // heartbeats every 20 ms
		defer wg.Done()
		for seq := int64(1); time.Now().Before(deadline); seq++ {
			if err := wc.WorkerHeartbeat(ctx, api.WorkerHeartbeatSignal{WorkerID: id, Incarnation: reg.Incarnation, Seq: seq}); err == nil {
				sent.Add(1)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}()
	var reserved, released atomic.Int64
	for g := 0; g < 4; g++ {
		wg.Add(1)
		go func(g int) { // reserve, hold briefly, release
			defer wg.Done()
			for i := 0; time.Now().Before(deadline); i++ {
				task := fmt.Sprintf("soak-%d-%d", g, i)
				h, err := c.UpdateWorkflow(ctx, client.UpdateWorkflowOptions{
					WorkflowID: api.WorkerWorkflowID(id), UpdateName: api.UpdateReserve, WaitForStage: client.WorkflowUpdateStageCompleted,
					Args: []any{api.ReserveInput{TaskID: task, Fence: 1, Requirements: fleet.Requirements{Resources: resource.List{CPUMillis: 100}}}},
				})
				if err == nil {
					err = h.Get(ctx, nil)
				}
				if err != nil {
					continue // refused (e.g. during a continue-as-new): nothing held
				}
				reserved.Add(1)
				time.Sleep(30 * time.Millisecond)
				require.NoError(t, c.SignalWorkflow(ctx, api.WorkerWorkflowID(id), "", api.SignalRelease, api.ReleaseSignal{TaskID: task, Fence: 1}))
				released.Add(1)
			}
		}(g)
	}
	wg.Wait()

	var v api.WorkerView
	waitFor(t, 30*time.Second, "every heartbeat and release applied", func() bool {
		var err error
		v, err = wc.Worker(ctx, id)
		return err == nil && v.HeartbeatsAccepted >= sent.Load() && len(v.Reservations) == 0
	})
	runs := runCount(t, c, api.WorkerWorkflowID(id))
	t.Logf("worker: %d heartbeats sent, %d applied; %d reserved, %d released, %d held; %d runs", sent.Load(), v.HeartbeatsAccepted, reserved.Load(), released.Load(), len(v.Reservations), runs)
	require.Equal(t, sent.Load(), v.HeartbeatsAccepted, "no heartbeat lost across continue-as-new")
	require.Empty(t, v.Reservations, "every reservation released")
	require.GreaterOrEqual(t, runs, 3, "the registry continued as new under load")
	require.Equal(t, fleet.Active, v.State)
	if *updateHistories {
		writeHistoryFrom(t, c, api.WorkerWorkflowID(id), firstRun) // continue-as-new holding reservations
	}
}

// currentRunID is the run ID of a workflow's current run.
func currentRunID(t *testing.T, c client.Client, wfID string) string {
	t.Helper()
	desc, err := c.DescribeWorkflowExecution(context.Background(), wfID, "")
	require.NoError(t, err)
	return desc.GetWorkflowExecutionInfo().GetExecution().GetRunId()
}

// soakLauncher starts nothing: the test itself plays the attempt.
type soakLauncher struct{ submitted atomic.Int64 }

func (l *soakLauncher) Submit(ctx context.Context, a launchers.Attempt) (launchers.Submission, error) {
	l.submitted.Add(1)
	return launchers.Submission{TaskDir: "/nonexistent/soak"}, nil
}

func (l *soakLauncher) Status(ctx context.Context, c lease.Claim) (launchers.Status, error) {
	return launchers.Status{Phase: launchers.PhaseRunning}, nil
}

func (l *soakLauncher) Cancel(ctx context.Context, c lease.Claim, reason string) error { return nil }

// A task whose attempt heartbeats every 25 ms (for soakFor: 30 s in `make
// test`, 90 s in `make soak`) continues as new many times with its lease
// ACTIVE; every heartbeat is applied, the lease never expires, the result
// is accepted on attempt 1 and the worker's reservation is released.
func TestSoakTaskContinueAsNewWithActiveLease(t *testing.T) {
	c, wc := soakEnv(t)
	ctx := context.Background()
	const wid = "soak-agent"
	sel := map[string]string{"suite": "soak-task"}
	_, err := wc.RegisterWorker(ctx, fleet.Registration{WorkerID: wid, Capacity: resource.List{CPUMillis: 4000, MemoryBytes: 4 << 30},
		Labels: sel, StaleAfter: time.Hour, OfflineAfter: 2 * time.Hour})
	require.NoError(t, err)
	l := &soakLauncher{}
	aw := sdkworker.New(c, api.AgentTaskQueue(wid), sdkworker.Options{})
	aw.RegisterActivityWithOptions(&activities.Agent{WorkerID: wid, Launcher: l}, activity.RegisterOptions{SkipInvalidStructFunctions: true})
	require.NoError(t, aw.Start())
	t.Cleanup(aw.Stop)

	env := envelope.Envelope{TaskID: "soak-task", RunID: "soak-run", WorldID: "soak", Command: []string{"true"}, Selector: sel}
	_, err = wc.SubmitTask(ctx, env, api.TaskOptions{LeaseTTL: 5 * time.Second})
	require.NoError(t, err)
	firstRun := currentRunID(t, c, api.TaskWorkflowID(env.TaskID))
	var view api.TaskView
	waitFor(t, 20*time.Second, "attempt 1 launched", func() bool {
		view, err = wc.Task(ctx, env.TaskID)
		return err == nil && view.Lease != nil && view.AttemptDir != ""
	})
	claim := lease.ClaimOf(*view.Lease)

	// 30 s: on a loaded 2-core machine 15 s of heartbeats makes only two
	// generations, 30 s five.
	deadline := time.Now().Add(soakFor(t, 30*time.Second))
	sent := int64(0)
	for seq := int64(1); time.Now().Before(deadline); seq++ {
		err := c.SignalWorkflow(ctx, api.TaskWorkflowID(env.TaskID), "", api.SignalLeaseHeartbeat, api.LeaseHeartbeatSignal{Claim: claim, Seq: seq})
		require.NoError(t, err)
		sent++
		time.Sleep(25 * time.Millisecond)
	}
	// Every heartbeat sent is applied (none lost to a continue-as-new)
	// before the result is submitted; one that raced the submission would
	// rightly be refused, the lease's result being pending.
	var applied int64
	waitFor(t, 20*time.Second, "every heartbeat applied", func() bool {
		v, err := wc.Task(ctx, env.TaskID)
		applied = v.Stats.HeartbeatsAccepted
		return err == nil && applied >= sent
	})
	h, err := c.UpdateWorkflow(ctx, client.UpdateWorkflowOptions{
		WorkflowID: api.TaskWorkflowID(env.TaskID), UpdateID: api.SubmitResultUpdateID(claim), UpdateName: api.UpdateSubmitResult,
		Args: []any{api.SubmitResultInput{Claim: claim}}, WaitForStage: client.WorkflowUpdateStageCompleted,
	})
	require.NoError(t, err)
	var res api.SubmitResultResult
	require.NoError(t, h.Get(ctx, &res))
	require.True(t, res.Accepted)

	out, err := wc.WaitTask(ctx, env.TaskID)
	require.NoError(t, err)
	final, err := wc.Task(ctx, env.TaskID)
	require.NoError(t, err)
	runs := runCount(t, c, api.TaskWorkflowID(env.TaskID))
	t.Logf("task: %d heartbeats sent, %d applied, %d continue-as-new, %d runs, %d launches", sent, final.Stats.HeartbeatsAccepted, final.Stats.ContinuedAsNew, runs, l.submitted.Load())
	require.Equal(t, api.TaskCompleted, out.State)
	require.Equal(t, int64(1), out.Attempts, "the lease never expired")
	require.Equal(t, sent, final.Stats.HeartbeatsAccepted, "no heartbeat lost across continue-as-new")
	require.GreaterOrEqual(t, final.Stats.ContinuedAsNew, int64(3))
	require.Equal(t, int64(1), l.submitted.Load(), "one launch")
	waitFor(t, 10*time.Second, "the reservation released", func() bool {
		v, err := wc.Worker(ctx, wid)
		return err == nil && len(v.Reservations) == 0
	})
	if *updateHistories {
		writeHistoryFrom(t, c, api.TaskWorkflowID(env.TaskID), firstRun) // continue-as-new with an ACTIVE lease
		writeHistoryFrom(t, c, api.TaskWorkflowID(env.TaskID), "")       // the run that completed
	}
}
