package testsuite

import (
	"context"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	commonpb "go.temporal.io/api/common/v1"
	enumspb "go.temporal.io/api/enums/v1"
	sdkpb "go.temporal.io/api/sdk/v1"
	"go.temporal.io/sdk/converter"

	"github.com/wdc-runtime/wdc/api"
	"github.com/wdc-runtime/wdc/internal/executor"
	"github.com/wdc-runtime/wdc/lease"
	"github.com/wdc-runtime/wdc/worker"
)

// payloadString decodes a user-metadata payload (JSON-encoded string).
func payloadString(t *testing.T, p *commonpb.Payload) string {
	t.Helper()
	if p == nil {
		return ""
	}
	var s string
	require.NoError(t, converter.GetDefaultDataConverter().FromPayload(p, &s))
	return s
}

// describeMetadata is a workflow's static summary and details, and its memo.
func describeMetadata(t *testing.T, wfID string) (summary, details string, memo map[string]*commonpb.Payload) {
	t.Helper()
	resp, err := suite.client.DescribeWorkflowExecution(context.Background(), wfID, "")
	require.NoError(t, err)
	md := resp.GetExecutionConfig().GetUserMetadata()
	return payloadString(t, md.GetSummary()), payloadString(t, md.GetDetails()), resp.GetWorkflowExecutionInfo().GetMemo().GetFields()
}

// workflowMetadata is the answer of the SDK's built-in metadata query:
// handler definitions and current details.
func workflowMetadata(t *testing.T, wfID string) *sdkpb.WorkflowMetadata {
	t.Helper()
	v, err := suite.client.QueryWorkflow(context.Background(), wfID, "", "__temporal_workflow_metadata")
	require.NoError(t, err)
	var md sdkpb.WorkflowMetadata
	require.NoError(t, v.Get(&md))
	return &md
}

// assertDescribed checks that every handler of a workflow definition has a
// description (the SDK's own __ queries aside).
func assertDescribed(t *testing.T, md *sdkpb.WorkflowMetadata, names ...string) {
	t.Helper()
	def := md.GetDefinition()
	got := map[string]string{}
	for _, list := range [][]*sdkpb.WorkflowInteractionDefinition{def.GetQueryDefinitions(), def.GetSignalDefinitions(), def.GetUpdateDefinitions()} {
		for _, d := range list {
			if !strings.HasPrefix(d.GetName(), "__") {
				got[d.GetName()] = d.GetDescription()
				assert.NotEmpty(t, d.GetDescription(), "%s: handler %s has no description", def.GetType(), d.GetName())
			}
		}
	}
	for _, n := range names {
		assert.Contains(t, got, n, "%s: handler %s is defined", def.GetType(), n)
	}
}

// A task whose first attempt loses its lease (frozen past its TTL) and
// whose second completes elsewhere reads in the Temporal UI: the task,
// run and worker workflows have summaries, details and current details;
// the launches, the lease timer, the backoff and the ingest name their
// attempt, fence and worker; every handler has a description; the
// agent's events carry its worker ID as identity, the control plane's
// its own; a trivial task's history is no longer for it.
func TestWorkflowsCarryUserMetadataForTheUI(t *testing.T) {
	thaw := make(chan struct{})
	t.Cleanup(func() { close(thaw) })
	freeze := func(o *worker.AgentOptions) {
		o.Faults = executor.Faults{Freeze: func(c lease.Claim) {
			if c.Attempt == 1 && c.TaskID == "meta-retry" {
				select {
				case <-thaw:
				case <-time.After(30 * time.Second):
				}
			}
		}}
	}
	startAgent(t, "meta-a", freeze)
	startAgent(t, "meta-b", freeze)
	waitWorkersActive(t, "meta-a", "meta-b")

	// A trivial task first: its history length is the per-task cost
	// (events_per_task) that user metadata must not grow.
	trivial := taskEnvelope(t, "meta-true", "true")
	submit(t, trivial, api.TaskOptions{})
	out, _ := waitOutcome(t, trivial.TaskID)
	require.Equal(t, api.TaskCompleted, out.State)
	n := historyLength(t, api.TaskWorkflowID(trivial.TaskID))
	t.Logf("trivial task: %d history events", n)
	assert.LessOrEqual(t, n, 27, "events per single-attempt task (as before user metadata)")

	env := taskEnvelope(t, "meta-retry", "echo ok > outputs/ok.txt")
	submit(t, env, api.TaskOptions{LeaseTTL: 2 * time.Second, HeartbeatInterval: 500 * time.Millisecond,
		Backoff: lease.Backoff{Initial: 200 * time.Millisecond, Max: time.Second}})
	out, view := waitOutcome(t, env.TaskID)
	require.Equal(t, api.TaskCompleted, out.State)
	require.Len(t, view.Leases, 2, "attempt 1 expired, attempt 2 completed")
	first, second := view.Leases[0], view.Leases[1]
	require.Equal(t, string(lease.ReasonLeaseExpired), first.EndReason)
	wfID := api.TaskWorkflowID(env.TaskID)

	// The task's static summary, details and memo.
	summary, details, memo := describeMetadata(t, wfID)
	assert.Contains(t, summary, "task meta-retry")
	assert.Contains(t, summary, "run "+env.RunID)
	assert.Contains(t, summary, "echo ok > outputs/ok.txt")
	assert.Contains(t, details, view.EnvelopeDigest)
	assert.Contains(t, details, "launcher: local")
	assert.Contains(t, details, "cpu 100m")
	require.Contains(t, memo, api.MemoRunID)
	assert.Equal(t, env.RunID, payloadString(t, memo[api.MemoRunID]))
	assert.Equal(t, view.EnvelopeDigest, payloadString(t, memo[api.MemoEnvelopeDigest]))

	// Summaries of the task's commands, and who caused its events.
	var launches, timers, markers, cancels []string
	launchIdentity := map[int64]string{}
	scheduled := map[int64]string{} // LaunchAttempt scheduled event → summary
	iter := suite.client.GetWorkflowHistory(context.Background(), wfID, "", false, enumspb.HISTORY_EVENT_FILTER_TYPE_ALL_EVENT)
	for iter.HasNext() {
		ev, err := iter.Next()
		require.NoError(t, err)
		s := payloadString(t, ev.GetUserMetadata().GetSummary())
		switch ev.GetEventType() {
		case enumspb.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED:
			switch ev.GetActivityTaskScheduledEventAttributes().GetActivityType().GetName() {
			case "LaunchAttempt":
				launches = append(launches, s)
				scheduled[ev.GetEventId()] = s
			case "CancelAttempt":
				cancels = append(cancels, s)
			}
		case enumspb.EVENT_TYPE_TIMER_STARTED:
			timers = append(timers, s)
		case enumspb.EVENT_TYPE_MARKER_RECORDED:
			markers = append(markers, s)
		case enumspb.EVENT_TYPE_ACTIVITY_TASK_COMPLETED:
			a := ev.GetActivityTaskCompletedEventAttributes()
			if _, ok := scheduled[a.GetScheduledEventId()]; ok {
				launchIdentity[a.GetScheduledEventId()] = a.GetIdentity()
			}
		case enumspb.EVENT_TYPE_WORKFLOW_TASK_COMPLETED:
			assert.True(t, strings.HasPrefix(ev.GetWorkflowTaskCompletedEventAttributes().GetIdentity(), "wdc-control-plane@"),
				"workflow task completed by %q", ev.GetWorkflowTaskCompletedEventAttributes().GetIdentity())
		}
	}
	t.Logf("launches %q; timers %q; markers %q; cancels %q", launches, timers, markers, cancels)
	require.Len(t, launches, 2)
	assert.Equal(t, "LaunchAttempt attempt 1 · fence 1 → "+first.WorkerID, launches[0])
	assert.Equal(t, "LaunchAttempt attempt 2 · fence 2 → "+second.WorkerID, launches[1])
	for id, s := range scheduled {
		worker := first.WorkerID
		if strings.Contains(s, "fence 2") {
			worker = second.WorkerID
		}
		assert.Equal(t, api.AgentIdentity(worker), launchIdentity[id], "identity of the completion of %q", s)
	}
	assert.Contains(t, timers, "lease TTL · fence 1")
	assert.True(t, containsPrefix(timers, "backoff "), "a backoff timer: %q", timers)
	assert.Contains(t, strings.Join(timers, "\n"), "after lease_expired")
	assert.Contains(t, markers, "Ingest attempt 2 · 1 artifact")
	assert.True(t, containsPrefix(markers, "SelectWorker for fence 2 · avoiding "+first.WorkerID), "selection markers %q", markers)
	assert.Contains(t, cancels, "CancelAttempt attempt 1 · fence 1 on "+first.WorkerID+" · lease_expired")

	// Current details: the lease table, kept by the workflow.
	md := workflowMetadata(t, wfID)
	t.Logf("task current details:\n%s", md.GetCurrentDetails())
	assert.Contains(t, md.GetCurrentDetails(), "**Ended** · COMPLETED")
	assert.Contains(t, md.GetCurrentDetails(), "| attempt | fence | worker | state | reason |")
	assert.Contains(t, md.GetCurrentDetails(), "| 1 | 1 | "+first.WorkerID+" | EXPIRED | lease_expired |")
	assert.Contains(t, md.GetCurrentDetails(), "| 2 | 2 | "+second.WorkerID+" | COMPLETED |")
	assertDescribed(t, md, api.QueryLease, api.UpdateSubmitResult, api.UpdateCancelTask,
		api.SignalLeaseHeartbeat, api.SignalWorkerLost, api.SignalAttemptFailed)

	// The run and the workers.
	summary, _, _ = describeMetadata(t, api.RunWorkflowID(env.RunID))
	assert.Equal(t, api.RunSummary(env.RunID, env.WorldID), summary)
	md = workflowMetadata(t, api.RunWorkflowID(env.RunID))
	t.Logf("run current details:\n%s", md.GetCurrentDetails())
	assert.Contains(t, md.GetCurrentDetails(), "| 1 | 0 | 1 | 0 | 0 | 0 |", "one task, completed")
	assert.Contains(t, md.GetCurrentDetails(), "evidence 0 · parent_time 0")
	assertDescribed(t, md, api.QueryRun, api.UpdateAddTask, api.UpdateAddTasks, api.UpdateCommit, api.UpdateCloseRun, api.SignalTaskEnded)

	summary, _, _ = describeMetadata(t, api.WorkerWorkflowID("meta-a"))
	assert.Equal(t, "worker meta-a · local · cpu 2 · mem 1Gi", summary)
	// Each kind on its own task queue: a registry entry's reserves and a
	// run's submissions do not wait behind the tasks' workflow tasks.
	for wfID, queue := range map[string]string{
		api.WorkerWorkflowID("meta-a"):     api.RegistryTaskQueue,
		api.RunWorkflowID(env.RunID):       api.RunTaskQueue,
		api.TaskWorkflowID(trivial.TaskID): api.ControlTaskQueue,
	} {
		resp, err := suite.client.DescribeWorkflowExecution(context.Background(), wfID, "")
		require.NoError(t, err)
		assert.Equal(t, queue, resp.GetExecutionConfig().GetTaskQueue().GetName(), wfID)
	}
	md = workflowMetadata(t, api.WorkerWorkflowID("meta-a"))
	t.Logf("worker current details:\n%s", md.GetCurrentDetails())
	assert.Contains(t, md.GetCurrentDetails(), "**ACTIVE** · incarnation ")
	assert.Contains(t, md.GetCurrentDetails(), "free: cpu 2 · mem 1Gi")
	assertDescribed(t, md, api.QueryWorker, api.UpdateRegister, api.UpdateReserve, api.UpdateDrain, api.UpdateUndrain, api.UpdateDeregister,
		api.SignalWorkerHeartbeat, api.SignalRelease, api.SignalSweep)

	// The CLI names itself: its close update is accepted from wdc-cli@<host>.
	code, _, errOut := cli(t, "runs", "close", env.RunID)
	require.Equal(t, 0, code, errOut)
	host, err := os.Hostname()
	require.NoError(t, err)
	var closedBy []string
	iter = suite.client.GetWorkflowHistory(context.Background(), api.RunWorkflowID(env.RunID), "", false, enumspb.HISTORY_EVENT_FILTER_TYPE_ALL_EVENT)
	for iter.HasNext() {
		ev, err := iter.Next()
		require.NoError(t, err)
		if req := ev.GetWorkflowExecutionUpdateAcceptedEventAttributes().GetAcceptedRequest(); req.GetInput().GetName() == api.UpdateCloseRun {
			closedBy = append(closedBy, req.GetMeta().GetIdentity())
		}
	}
	assert.Equal(t, []string{api.CLIIdentity(host)}, closedBy)
}

func containsPrefix(list []string, prefix string) bool {
	for _, s := range list {
		if strings.HasPrefix(s, prefix) {
			return true
		}
	}
	return false
}
