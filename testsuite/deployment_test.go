package testsuite

import (
	"context"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/sdk/client"
	sdkworker "go.temporal.io/sdk/worker"

	"github.com/wdc-runtime/wdc/api"
	wdcclient "github.com/wdc-runtime/wdc/client"
	"github.com/wdc-runtime/wdc/envelope"
	"github.com/wdc-runtime/wdc/fleet"
	"github.com/wdc-runtime/wdc/worker"
)

// nsDeployment is the namespace of TestUpgradeThroughWorkerDeployment: a
// Worker Deployment (and its current version) is per namespace, and the
// suite's own control plane is the current version of "default".
const nsDeployment = "wdc-deployment"

// An upgrade as an operator does it (docs/upgrading.md): control plane v1
// is the first of its deployment and makes itself current, and serves the
// run started before any control plane was there; a task is in
// flight on it when v2 starts, which does not take over; v2 is made
// current through the Worker Deployment API (what `temporal worker
// deployment set-current-version` calls). The in-flight task finishes on
// v1 — every workflow task of it, before and after the switch, completed
// by v1 — while a new task of the same run runs on v2, and the run and
// the registry entry move to v2. Visibility then shows v1 drained, and
// with v1 stopped a third task still runs and the agent's drain is
// answered.
func TestUpgradeThroughWorkerDeployment(t *testing.T) {
	ctx := context.Background()
	c := dialNamespace(t, nsDeployment)
	wc := &wdcclient.Client{C: c}
	deployment := c.WorkerDeploymentClient().GetHandle(worker.DefaultDeploymentName)
	v1 := sdkworker.WorkerDeploymentVersion{DeploymentName: worker.DefaultDeploymentName, BuildID: "v1"}
	v2 := sdkworker.WorkerDeploymentVersion{DeploymentName: worker.DefaultDeploymentName, BuildID: "v2"}

	// A run started while the deployment has no current version (none at
	// all yet) waits in its task queue, and v1 serves it once current.
	const runID = "run-deploy"
	require.NoError(t, wc.StartRun(ctx, api.RunInput{RunID: runID, WorldID: "suite"}))

	cp1, stop1 := startVersion(t, c, v1)
	assert.Equal(t, worker.VersionStatus{Version: v1, Current: true, Promoted: true, Took: cp1.Status().Took}, cp1.Status(),
		"the first control plane of the deployment makes itself current")
	t.Logf("v1 current %s after its start", cp1.Status().Took)
	waitFor(t, 10*time.Second, "the early run on v1", func() bool {
		b, v := versioning(t, c, api.RunWorkflowID(runID))
		return b == enumspb.VERSIONING_BEHAVIOR_AUTO_UPGRADE && v == v1
	})

	const agentID = "deploy-a"
	agent := startAgentOn(t, c, agentID)
	gate := filepath.Join(t.TempDir(), "go")
	inflight := deploymentEnvelope(t, "deploy-inflight", runID, "while [ ! -e "+gate+" ]; do sleep 0.05; done; echo v1 > outputs/built.txt")
	_, err := wc.SubmitTask(ctx, inflight, api.TaskOptions{})
	require.NoError(t, err)
	waitFor(t, 15*time.Second, "the in-flight task's attempt running", func() bool {
		v, err := wc.Task(ctx, inflight.TaskID)
		return err == nil && v.AttemptDir != "" && v.Lease != nil
	})

	cp2, _ := startVersion(t, c, v2)
	st := cp2.Status()
	assert.False(t, st.Current, "a second version does not take over")
	assert.Equal(t, &v1, st.CurrentVersion)
	assert.Equal(t, "serving build v2 of worker deployment wdc, not current; current is v1; make it current with "+
		"`temporal worker deployment set-current-version --namespace "+nsDeployment+" --deployment-name wdc --build-id v2`",
		st.Describe("--namespace "+nsDeployment))

	switched := time.Now()
	before, err := deployment.Describe(ctx, client.WorkerDeploymentDescribeOptions{})
	require.NoError(t, err)
	require.Equal(t, &v1, before.Info.RoutingConfig.CurrentVersion, "v1 is current until the operator switches")
	_, err = deployment.SetCurrentVersion(ctx, client.WorkerDeploymentSetCurrentVersionOptions{BuildID: v2.BuildID})
	require.NoError(t, err)
	// (Its PreviousVersion is v2 when the SDK retried a switch whose answer
	// was lost, so the deployment's own routing is what is checked.)
	after, err := deployment.Describe(ctx, client.WorkerDeploymentDescribeOptions{})
	require.NoError(t, err)
	require.Equal(t, &v2, after.Info.RoutingConfig.CurrentVersion)

	require.NoError(t, os.WriteFile(gate, nil, 0o644))
	out, err := waitTaskIn(t, wc, inflight.TaskID)
	require.NoError(t, err)
	assert.Equal(t, api.TaskCompleted, out.State)
	pinnedTo(t, c, api.TaskWorkflowID(inflight.TaskID), v1, switched)

	next := deploymentEnvelope(t, "deploy-next", runID, "echo v2 > outputs/built.txt")
	_, err = wc.SubmitTask(ctx, next, api.TaskOptions{})
	require.NoError(t, err)
	out, err = waitTaskIn(t, wc, next.TaskID)
	require.NoError(t, err)
	assert.Equal(t, api.TaskCompleted, out.State)
	pinnedTo(t, c, api.TaskWorkflowID(next.TaskID), v2, time.Time{})
	for _, wf := range []string{api.RunWorkflowID(runID), api.WorkerWorkflowID(agentID)} {
		waitFor(t, 10*time.Second, wf+" on v2", func() bool {
			b, v := versioning(t, c, wf)
			return b == enumspb.VERSIONING_BEHAVIOR_AUTO_UPGRADE && v == v2
		})
	}

	var drainage *client.WorkerDeploymentVersionDrainageInfo
	waitFor(t, 30*time.Second, "v1 drained", func() bool {
		d, err := deployment.DescribeVersion(ctx, client.WorkerDeploymentDescribeVersionOptions{BuildID: v1.BuildID})
		require.NoError(t, err)
		drainage = d.Info.DrainageInfo
		return drainage != nil && drainage.DrainageStatus == client.WorkerDeploymentVersionDrainageStatusDrained
	})
	t.Logf("v1 drained %s after the switch", drainage.LastChangedTime.Sub(switched).Round(time.Millisecond))

	stop1()
	last := deploymentEnvelope(t, "deploy-after-v1", runID, "echo v2 > outputs/built.txt")
	_, err = wc.SubmitTask(ctx, last, api.TaskOptions{})
	require.NoError(t, err)
	out, err = waitTaskIn(t, wc, last.TaskID)
	require.NoError(t, err)
	assert.Equal(t, api.TaskCompleted, out.State, "v1 is no longer needed")
	pinnedTo(t, c, api.TaskWorkflowID(last.TaskID), v2, time.Time{})
	w, err := wc.Worker(ctx, agentID)
	require.NoError(t, err)
	assert.Equal(t, fleet.Active, w.State)

	// The agent's drain on stop is answered too (before the cleanup
	// stops v2).
	agent.Stop(ctx)
	w, err = wc.Worker(ctx, agentID)
	require.NoError(t, err)
	assert.Equal(t, fleet.Draining, w.State)
}

// startVersion starts a control plane on c's namespace serving version v;
// stop stops it before the test's end (it is stopped then otherwise).
func startVersion(t *testing.T, c client.Client, v sdkworker.WorkerDeploymentVersion) (cp *worker.ControlPlane, stop func()) {
	t.Helper()
	cp = worker.NewControlPlaneWith(c, suite.blobs, worker.ControlPlaneOptions{Version: v})
	require.NoError(t, cp.Start())
	var once sync.Once
	stop = func() { once.Do(cp.Stop) }
	t.Cleanup(stop)
	return cp, stop
}

// deploymentEnvelope is taskEnvelope in run runID.
func deploymentEnvelope(t *testing.T, taskID, runID, script string) envelope.Envelope {
	env := taskEnvelope(t, taskID, script)
	env.RunID = runID
	env.Normalize()
	require.NoError(t, env.Validate(true))
	return env
}

// waitTaskIn waits, at most a minute, for a task's outcome.
func waitTaskIn(t *testing.T, wc *wdcclient.Client, taskID string) (api.TaskOutcome, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	return wc.WaitTask(ctx, taskID)
}

// pinnedTo asserts that workflow wfID closed pinned to version v, and
// that v completed every one of its workflow tasks — at least one after
// since, when since is set.
func pinnedTo(t *testing.T, c client.Client, wfID string, v sdkworker.WorkerDeploymentVersion, since time.Time) {
	t.Helper()
	waitFor(t, 10*time.Second, wfID+" closed", func() bool {
		d, err := c.DescribeWorkflowExecution(context.Background(), wfID, "")
		require.NoError(t, err)
		return d.GetWorkflowExecutionInfo().GetStatus() != enumspb.WORKFLOW_EXECUTION_STATUS_RUNNING
	})
	b, got := versioning(t, c, wfID)
	assert.Equal(t, enumspb.VERSIONING_BEHAVIOR_PINNED, b, wfID)
	assert.Equal(t, v, got, wfID)
	var completions, after int
	it := c.GetWorkflowHistory(context.Background(), wfID, "", false, enumspb.HISTORY_EVENT_FILTER_TYPE_ALL_EVENT)
	for it.HasNext() {
		e, err := it.Next()
		require.NoError(t, err)
		a := e.GetWorkflowTaskCompletedEventAttributes()
		if a == nil {
			continue
		}
		completions++
		if e.GetEventTime().AsTime().After(since) {
			after++
		}
		assert.Equal(t, v.BuildID, a.GetDeploymentVersion().GetBuildId(), "%s: workflow task completed by %s (event %d)", wfID, a.GetIdentity(), e.GetEventId())
		assert.Equal(t, v.DeploymentName, a.GetDeploymentVersion().GetDeploymentName())
		assert.Equal(t, enumspb.VERSIONING_BEHAVIOR_PINNED, a.GetVersioningBehavior())
	}
	assert.NotZero(t, completions, wfID)
	if !since.IsZero() {
		assert.NotZero(t, after, "%s: no workflow task completed after the switch", wfID)
	}
}

// versioning is a workflow's versioning behaviour and deployment version
// as Temporal describes them.
func versioning(t *testing.T, c client.Client, wfID string) (enumspb.VersioningBehavior, sdkworker.WorkerDeploymentVersion) {
	t.Helper()
	d, err := c.DescribeWorkflowExecution(context.Background(), wfID, "")
	require.NoError(t, err)
	vi := d.GetWorkflowExecutionInfo().GetVersioningInfo()
	return vi.GetBehavior(), sdkworker.WorkerDeploymentVersion{
		DeploymentName: vi.GetDeploymentVersion().GetDeploymentName(), BuildID: vi.GetDeploymentVersion().GetBuildId(),
	}
}
