package api

import (
	"strconv"
	"strings"
	"time"

	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/sdk/temporal"
)

// Task queues.
const (
	// ControlTaskQueue is polled by `wdc control-plane`: every workflow and
	// the control activities (select/reserve, ingest, cleanup).
	ControlTaskQueue = "wdc-control"
	// RunTaskQueue is also polled by `wdc control-plane`, for the workflow
	// tasks of runs (WdcRun) only: a run answers submissions and its
	// tasks' reports without queueing behind the workflow tasks of the
	// tasks it started. Runs started before it existed stay on
	// ControlTaskQueue, which serves every workflow too.
	RunTaskQueue = "wdc-control-runs"
	// RegistryTaskQueue is also polled by `wdc control-plane`, for the
	// workflow tasks of registry entries (WdcWorker) only: a worker's
	// reserve updates and record queries do not queue behind the workflow
	// tasks of the thousands of tasks that ask for them. Entries started
	// before it existed stay on ControlTaskQueue.
	RegistryTaskQueue = "wdc-control-registry"
	// agentTaskQueuePrefix + worker ID is polled by that worker's agent.
	agentTaskQueuePrefix = "wdc-agent/"
)

// AgentTaskQueue is the task queue of fleet worker workerID's agent, where
// Local attempts are launched and cancelled: "wdc-agent/<worker-id>".
func AgentTaskQueue(workerID string) string { return agentTaskQueuePrefix + workerID }

// Workflow types.
const (
	WorkerWorkflowType = "WdcWorker"
	TaskWorkflowType   = "WdcTask"
	RunWorkflowType    = "WdcRun"
)

// Workflow-ID prefixes; IDs are prefix + the wdc ID.
const (
	workerIDPrefix = "wdc-worker/"
	taskIDPrefix   = "wdc-task/"
	runIDPrefix    = "wdc-run/"
)

// WorkerWorkflowID is the registry entry's workflow ID: "wdc-worker/<id>".
func WorkerWorkflowID(workerID string) string { return workerIDPrefix + workerID }

// LivenessActivityID is the ID of the liveness activity a registry entry
// keeps pending for incarnation while the worker is ACTIVE or DRAINING:
// "liveness-<incarnation>". The agent heartbeats it by this ID
// (RecordActivityHeartbeatByID on the entry's workflow), so a heartbeat of
// an older incarnation finds no such activity.
func LivenessActivityID(incarnation int64) string {
	return "liveness-" + strconv.FormatInt(incarnation, 10)
}

// LeaseActivityID is the ID of the lease activity a task
// keeps pending while the lease of fence is ACTIVE and heartbeated:
// "lease-<fence>". The executor heartbeats it by this ID
// (RecordActivityHeartbeatByID on the task's workflow), so a heartbeat of
// an older fence finds no such activity.
func LeaseActivityID(fence int64) string {
	return "lease-" + strconv.FormatInt(fence, 10)
}

// TaskWorkflowID is the logical task's workflow ID: "wdc-task/<id>".
// Workflow-ID uniqueness gives at most one running WdcTask, hence at most
// one ACTIVE lease, per task (invariant 5).
func TaskWorkflowID(taskID string) string { return taskIDPrefix + taskID }

// RunWorkflowID is the run's workflow ID: "wdc-run/<id>".
func RunWorkflowID(runID string) string { return runIDPrefix + runID }

// WorkerIDFromWorkflowID returns the worker ID of a "wdc-worker/<id>"
// workflow ID, or "" for any other ID.
func WorkerIDFromWorkflowID(wfID string) string {
	if id, ok := strings.CutPrefix(wfID, workerIDPrefix); ok {
		return id
	}
	return ""
}

// SubmitResultUpdateID is the update ID of a result submission,
// "<task>/<attempt>/<fence>": a resubmission of the same attempt is
// deduplicated by Temporal.
func SubmitResultUpdateID(c Claim) string {
	return c.TaskID + "/" + strconv.FormatInt(c.Attempt, 10) + "/" + strconv.FormatInt(c.Fence, 10)
}

// WdcWorker messages.
const (
	// UpdateRegister (RegisterInput → RegisterResult) registers or
	// re-registers a worker; sent with UpdateWithStart.
	UpdateRegister = "register"
	// SignalWorkerHeartbeat (WorkerHeartbeatSignal) renews worker liveness
	// when the entry holds no liveness activity for the incarnation (see
	// LivenessActivityID): it brings a STALE worker back.
	SignalWorkerHeartbeat = "worker-heartbeat"
	// UpdateDrain (DrainInput → WorkerView) stops new reservations.
	UpdateDrain = "drain"
	// UpdateUndrain (UndrainInput → WorkerView) lets a drained worker take
	// reservations again.
	UpdateUndrain = "undrain"
	// UpdateDeregister (DeregisterInput → WorkerView) removes the worker
	// from the registry; its workflow then completes.
	UpdateDeregister = "deregister"
	// UpdateRevoke (RevokeInput → WorkerView) revokes the worker's
	// identity; signed by a submitter when identity is on.
	UpdateRevoke = "revoke"
	// SignalSweep (SweepSignal) re-evaluates liveness now.
	SignalSweep = "sweep"
	// UpdateReserve (ReserveInput → ReserveResult) holds capacity for a
	// lease; its validator rejects (writing no history) unless the worker is
	// ACTIVE and the request fits.
	UpdateReserve = "reserve"
	// SignalRelease (ReleaseSignal) returns a reservation.
	SignalRelease = "release"
	// QueryWorker (→ WorkerView) returns the registry record.
	QueryWorker = "worker"
)

// WdcTask messages.
const (
	// SignalLeaseHeartbeat (LeaseHeartbeatSignal) renews a lease when the
	// task holds no started lease activity for its fence (see
	// LeaseActivityID); a heartbeat failing the fence check is counted and
	// ignored. The task starts the lease activity when it
	// accepts the first one.
	SignalLeaseHeartbeat = "lease-heartbeat"
	// UpdateSubmitResult (SubmitResultInput → SubmitResultResult) hands an
	// attempt's result to the task; the validator is the fence check.
	UpdateSubmitResult = "submit-result"
	// TaskAuthorityKind is the kind a submitter signs a TaskAuthority
	// under.
	TaskAuthorityKind = "task-authority"
	// LaunchFailedReport is the kind a worker signs a LaunchFailure under.
	LaunchFailedReport = "launch-failed"
	// SignalAttemptFailed (AttemptFailedSignal) reports an attempt that
	// ended without a result (e.g. infra_killed).
	SignalAttemptFailed = "attempt-failed"
	// SignalWorkerLost (WorkerLostSignal) is sent by WdcWorker when the
	// worker holding a reservation goes STALE/OFFLINE or re-registers.
	SignalWorkerLost = "worker-lost"
	// UpdateCancelTask (CancelTaskInput → TaskView) cancels the task.
	UpdateCancelTask = "cancel"
	// QueryLease (→ TaskView) returns the current lease and lease history.
	QueryLease = "lease"
)

// WdcRun messages.
const (
	// UpdateAddTask (AddTaskInput → AddTaskResult) starts a task as a child
	// of the run; with UpdateWithStart it creates the run if needed.
	UpdateAddTask = "add-task"
	// UpdateAddTasks (AddTasksInput → AddTasksResult) adds many tasks in
	// one update: all are validated first (one bad task refuses the
	// batch, nothing added), then started together.
	UpdateAddTasks = "add-tasks"
	// SignalTaskEnded (TaskEndedSignal) tells a run that a task ended: sent
	// by the task once it decided, or by the local ingest of a result in
	// the workflow task that decides it. A hint only: the run reads the
	// outcome from the task, appends a worker_result event for an accepted
	// result and keeps a task's first outcome.
	SignalTaskEnded = "task-ended"
	// UpdateCommit (CommitInput → CommitResult) is the only way evidence,
	// parent_time and the TCD digest change.
	UpdateCommit = "commit"
	// UpdateCloseRun (CloseRunInput → RunView) closes the run: it ends once
	// every task has ended.
	UpdateCloseRun = "close"
	// QueryRun (→ RunView) returns the run.
	QueryRun = "run"
)

// Search attributes (docs/architecture.md, "Conventions"). SQLite visibility allows 10 Keyword and 3
// Int custom attributes; wdc uses 5 and 2.
var (
	// SAKind is "worker", "task" or "run".
	SAKind = temporal.NewSearchAttributeKeyKeyword("WdcKind")
	// SAWorkerState is a worker's fleet.State.
	SAWorkerState = temporal.NewSearchAttributeKeyKeyword("WdcWorkerState")
	// SATaskState is a task's TaskState.
	SATaskState = temporal.NewSearchAttributeKeyKeyword("WdcTaskState")
	// SAWorkerID is the worker's ID (on tasks: the current lease holder).
	SAWorkerID = temporal.NewSearchAttributeKeyKeyword("WdcWorkerID")
	// SARunID is the run of a task or run.
	SARunID = temporal.NewSearchAttributeKeyKeyword("WdcRunID")
	// SAAttempt and SAFence are a task's current attempt and fence.
	SAAttempt = temporal.NewSearchAttributeKeyInt64("WdcAttempt")
	SAFence   = temporal.NewSearchAttributeKeyInt64("WdcFence")
)

// MemoWorkerProfile is the memo field in which a worker's registry entry
// publishes its fleet.Profile (capacity, labels, capabilities,
// incarnation) when it registers, so worker selection reads every
// worker's profile from one visibility list instead of querying each.
const MemoWorkerProfile = "WdcWorkerProfile"

// Kinds, the values of SAKind.
const (
	KindWorker = "worker"
	KindTask   = "task"
	KindRun    = "run"
)

// SearchAttributes lists wdc's search attributes and their types, to be
// registered on a namespace before any wdc workflow starts (the dev server
// does; for another server: `temporal operator search-attribute create`).
func SearchAttributes() map[string]enumspb.IndexedValueType {
	return map[string]enumspb.IndexedValueType{
		SAKind.GetName():        enumspb.INDEXED_VALUE_TYPE_KEYWORD,
		SAWorkerState.GetName(): enumspb.INDEXED_VALUE_TYPE_KEYWORD,
		SATaskState.GetName():   enumspb.INDEXED_VALUE_TYPE_KEYWORD,
		SAWorkerID.GetName():    enumspb.INDEXED_VALUE_TYPE_KEYWORD,
		SARunID.GetName():       enumspb.INDEXED_VALUE_TYPE_KEYWORD,
		SAAttempt.GetName():     enumspb.INDEXED_VALUE_TYPE_INT,
		SAFence.GetName():       enumspb.INDEXED_VALUE_TYPE_INT,
	}
}

// TaskStartAttributes are the search attributes a task's workflow starts
// with: kind task, its run, state PENDING.
func TaskStartAttributes(runID string) temporal.SearchAttributes {
	return temporal.NewSearchAttributes(
		SAKind.ValueSet(KindTask),
		SARunID.ValueSet(runID),
		SATaskState.ValueSet(string(TaskPending)),
	)
}

// TaskIDReusePolicy is how a task's workflow ID may be used again: never,
// but a restart of an ABORTED task (rerun) may follow an execution that
// was terminated, failed or timed out (a completed one is never repeated).
func TaskIDReusePolicy(rerun bool) enumspb.WorkflowIdReusePolicy {
	if rerun {
		return enumspb.WORKFLOW_ID_REUSE_POLICY_ALLOW_DUPLICATE_FAILED_ONLY
	}
	return enumspb.WORKFLOW_ID_REUSE_POLICY_REJECT_DUPLICATE
}

// TaskMemo is the memo a task's workflow starts with: its run, envelope
// digest and lease TTL.
func TaskMemo(runID, envelopeDigest string, leaseTTL time.Duration) map[string]any {
	return map[string]any{MemoRunID: runID, MemoEnvelopeDigest: envelopeDigest, MemoLeaseTTL: leaseTTL}
}
