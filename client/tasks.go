package client

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	enumspb "go.temporal.io/api/enums/v1"
	historypb "go.temporal.io/api/history/v1"
	"go.temporal.io/api/serviceerror"
	workflowpb "go.temporal.io/api/workflow/v1"
	"go.temporal.io/api/workflowservice/v1"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/converter"
	"go.temporal.io/sdk/temporal"

	"github.com/wdc-runtime/wdc/api"
	"github.com/wdc-runtime/wdc/envelope"
)

// SubmitTask adds a sealed envelope's task to its run, starting the run
// (UpdateWithStart) when it does not exist yet, signed by c.Signer when
// set. Adding the same envelope again is idempotent (Existing is set); the
// same task ID with another envelope is a conflict *Error.
func (c *Client) SubmitTask(ctx context.Context, env envelope.Envelope, opts api.TaskOptions) (api.AddTaskResult, error) {
	var res api.AddTaskResult
	digest, err := CheckSubmission(&env, opts)
	if err != nil {
		return res, err
	}
	if err := c.checkSubmittable(ctx, env, digest); err != nil {
		return res, err
	}
	op := "submit task " + env.TaskID
	err = c.within(ctx, op, func(ctx context.Context) error {
		// A start operation runs once: a retry needs its own.
		in := api.AddTaskInput{Envelope: env, EnvelopeDigest: digest, Options: opts}
		var err error
		if in.Authority, err = c.sign(api.TaskAuthorityKind, api.TaskAuthorityOf(env, digest)); err != nil {
			return err
		}
		if in.Proof, err = c.sign(api.UpdateAddTask, in); err != nil {
			return err
		}
		start := c.C.NewWithStartWorkflowOperation(c.runStartOptions(env.RunID, env.WorldID), api.RunWorkflowType, api.RunInput{RunID: env.RunID, WorldID: env.WorldID})
		handle, err := c.C.UpdateWithStartWorkflow(ctx, client.UpdateWithStartWorkflowOptions{
			StartWorkflowOperation: start,
			UpdateOptions: client.UpdateWorkflowOptions{
				UpdateName: api.UpdateAddTask, Args: []any{in},
				WaitForStage: client.WorkflowUpdateStageCompleted,
			},
		})
		if err == nil {
			err = handle.Get(ctx, &res)
		}
		return err
	})
	return res, wrap(op, err)
}

// CheckSubmission is SubmitTask's local validation of one sealed envelope
// and its options, with no server call: the envelope's fields (sealed),
// its launcher, the options. Errors are *Error with the field named. It
// returns the envelope digest.
func CheckSubmission(env *envelope.Envelope, opts api.TaskOptions) (string, error) {
	env.Normalize()
	if err := env.Validate(true); err != nil {
		return "", &Error{Type: api.ErrTypeInvalidArgument, Message: err.Error()}
	}
	if err := opts.WithDefaults().Validate(); err != nil {
		return "", &Error{Type: api.ErrTypeInvalidArgument, Message: "options." + err.Error()}
	}
	return env.Digest()
}

// SubmitTasks adds many sealed envelopes of ONE run in one add-tasks
// update (starting the run when needed), signed by c.Signer when set: the
// run validates them all
// first and refuses the whole batch when one is bad (the *Error names its
// index and field, nothing is added), then starts every task. Call
// CheckSubmission on each envelope first to refuse bad input without a
// server call. At most api.MaxTasksPerBatch envelopes, all with the same
// run_id and world_id.
//
// The result has one entry per envelope: Errors[i] is set when task i
// could not be started (its task ID was used before by another run). The
// call is bounded by CallTimeout once per 50 envelopes (plus one).
func (c *Client) SubmitTasks(ctx context.Context, envs []envelope.Envelope, opts api.TaskOptions) (api.AddTasksResult, error) {
	var res api.AddTasksResult
	if len(envs) == 0 {
		return res, &Error{Type: api.ErrTypeInvalidArgument, Message: "no envelopes to submit"}
	}
	if len(envs) > api.MaxTasksPerBatch {
		return res, &Error{Type: api.ErrTypeInvalidArgument, Message: fmt.Sprintf("at most %d envelopes per batch (got %d)", api.MaxTasksPerBatch, len(envs))}
	}
	in := api.AddTasksInput{Tasks: make([]api.AddTaskInput, len(envs))}
	for i := range envs {
		env := envs[i]
		digest, err := CheckSubmission(&env, opts)
		if err != nil {
			return res, fmt.Errorf("envelope %d (%s): %w", i, env.TaskID, err)
		}
		if env.RunID != envs[0].RunID || env.WorldID != envs[0].WorldID {
			return res, &Error{Type: api.ErrTypeInvalidArgument, Message: fmt.Sprintf("envelope %d (%s): run %s/world %s, but the batch is for run %s/world %s", i, env.TaskID, env.RunID, env.WorldID, envs[0].RunID, envs[0].WorldID)}
		}
		authority, err := c.sign(api.TaskAuthorityKind, api.TaskAuthorityOf(env, digest))
		if err != nil {
			return res, err
		}
		in.Tasks[i] = api.AddTaskInput{Envelope: env, EnvelopeDigest: digest, Options: opts, Authority: authority}
	}
	run := envs[0].RunID
	if err := c.checkRunOpen(ctx, run); err != nil {
		return res, err
	}
	op := fmt.Sprintf("submit %d tasks to run %s", len(envs), run)
	// A batch starts a workflow per task: it may take longer than one
	// call; the bound grows by one CallTimeout per 50 tasks.
	err := c.withinScaled(ctx, op, 1+len(envs)/50, func(ctx context.Context) error {
		in.Proof = nil
		var err error
		if in.Proof, err = c.sign(api.UpdateAddTasks, in); err != nil {
			return err
		}
		start := c.C.NewWithStartWorkflowOperation(c.runStartOptions(run, envs[0].WorldID), api.RunWorkflowType, api.RunInput{RunID: run, WorldID: envs[0].WorldID})
		handle, err := c.C.UpdateWithStartWorkflow(ctx, client.UpdateWithStartWorkflowOptions{
			StartWorkflowOperation: start,
			UpdateOptions: client.UpdateWorkflowOptions{
				UpdateName: api.UpdateAddTasks, Args: []any{in}, WaitForStage: client.WorkflowUpdateStageCompleted,
			},
		})
		if err == nil {
			err = handle.Get(ctx, &res)
		}
		return err
	})
	return res, wrap(op, err)
}

// checkSubmittable refuses, before anything is created, a task ID already
// used by another run or envelope (task IDs are never reused) and a run
// that is closed.
func (c *Client) checkSubmittable(ctx context.Context, env envelope.Envelope, digest string) error {
	if v, err := c.Task(ctx, env.TaskID); err == nil {
		if v.RunID != env.RunID || v.EnvelopeDigest != digest {
			return &Error{Type: api.ErrTypeConflict, Message: fmt.Sprintf("task_id %q is already used (run %s, envelope %s, %s); task IDs are never reused: choose another", env.TaskID, v.RunID, v.EnvelopeDigest, v.State)}
		}
	}
	return c.checkRunOpen(ctx, env.RunID)
}

// checkRunOpen refuses a run that exists and is closed.
func (c *Client) checkRunOpen(ctx context.Context, runID string) error {
	desc, err := c.C.DescribeWorkflowExecution(ctx, api.RunWorkflowID(runID), "")
	if err == nil && desc.GetWorkflowExecutionInfo().GetStatus() != enumspb.WORKFLOW_EXECUTION_STATUS_RUNNING {
		return &Error{Type: api.ErrTypeConflict, Message: fmt.Sprintf("run %s is closed (its workflow is %s); tasks cannot join it: use another run_id", runID, strings.ToLower(strings.TrimPrefix(desc.GetWorkflowExecutionInfo().GetStatus().String(), "WORKFLOW_EXECUTION_STATUS_")))}
	}
	return nil
}

// runStartOptions are the start options of run runID of world worldID,
// with its summary for the UI (api.RunSummary).
func (c *Client) runStartOptions(runID, worldID string) client.StartWorkflowOptions {
	return client.StartWorkflowOptions{
		StaticSummary:            api.RunSummary(runID, worldID),
		ID:                       api.RunWorkflowID(runID),
		TaskQueue:                api.RunTaskQueue,
		WorkflowIDConflictPolicy: enumspb.WORKFLOW_ID_CONFLICT_POLICY_USE_EXISTING,
		WorkflowIDReusePolicy:    enumspb.WORKFLOW_ID_REUSE_POLICY_REJECT_DUPLICATE,
		TypedSearchAttributes:    temporal.NewSearchAttributes(api.SAKind.ValueSet(api.KindRun), api.SARunID.ValueSet(runID)),
	}
}

// Task returns a task's lease view (query lease), with what only the
// workflow's description knows: how a closed workflow closed (ClosedAs) and
// the last heartbeat by ID of the lease activity. Errors: ErrNotFound.
func (c *Client) Task(ctx context.Context, taskID string) (api.TaskView, error) {
	var v api.TaskView
	err := c.within(ctx, "query task "+taskID, func(ctx context.Context) error {
		resp, err := c.C.QueryWorkflow(ctx, api.TaskWorkflowID(taskID), "", api.QueryLease)
		if err == nil {
			err = resp.Get(&v)
		}
		return err
	})
	if err != nil || v.State.Terminal() {
		return v, wrap("task "+taskID, err)
	}
	// A closed workflow's query replays to its last state: one that an
	// operator terminated (or that failed or timed out) still says
	// LEASED. Its description says how it closed.
	desc, err := c.C.DescribeWorkflowExecution(ctx, api.TaskWorkflowID(taskID), "")
	if err != nil {
		return v, wrap("task "+taskID, err)
	}
	if status := desc.GetWorkflowExecutionInfo().GetStatus(); closedWithoutOutcome(status) {
		v.State, v.ClosedAs, v.Waiting, v.Phase = api.TaskAborted, statusName(status), "", ""
		return v, nil
	}
	// While a lease activity holds the lease, its heartbeats by ID renew
	// the lease without reaching the task: the time Temporal recorded
	// for the last one is the lease's.
	if v.LeaseActivity != "" && v.Lease != nil {
		for _, a := range desc.GetPendingActivities() {
			if a.GetActivityId() == v.LeaseActivity && a.GetLastHeartbeatTime() != nil {
				renewLease(&v, a.GetLastHeartbeatTime().AsTime())
			}
		}
	}
	return v, nil
}

// renewLease moves the view's current lease to a heartbeat at t, when t
// is later than the one the task recorded.
func renewLease(v *api.TaskView, t time.Time) {
	if !t.After(v.Lease.RenewedAt) {
		return
	}
	v.Lease.RenewedAt, v.Lease.ExpiresAt = t, t.Add(v.Lease.TTL)
	if n := len(v.Leases); n > 0 && v.Leases[n-1].Fence == v.Lease.Fence {
		v.Leases[n-1].RenewedAt, v.Leases[n-1].ExpiresAt = v.Lease.RenewedAt, v.Lease.ExpiresAt
	}
}

// closedWithoutOutcome reports whether a task workflow with status s
// closed without returning its outcome.
func closedWithoutOutcome(s enumspb.WorkflowExecutionStatus) bool {
	switch s {
	case enumspb.WORKFLOW_EXECUTION_STATUS_TERMINATED, enumspb.WORKFLOW_EXECUTION_STATUS_FAILED,
		enumspb.WORKFLOW_EXECUTION_STATUS_TIMED_OUT, enumspb.WORKFLOW_EXECUTION_STATUS_CANCELED:
		return true
	}
	return false
}

// statusName is a workflow status without its enum prefix (TERMINATED).
func statusName(s enumspb.WorkflowExecutionStatus) string {
	return strings.TrimPrefix(enumspb.WorkflowExecutionStatus_name[int32(s)], "WORKFLOW_EXECUTION_STATUS_")
}

// EarlierFences is what the other runs of a task's workflow, running or
// closed, published: the highest fence (search attribute WdcFence, 0 when
// none); of the closed runs among them, the latest close time; whether one
// is still listed as running yet has no description to say when it
// closed (Open: it counts as closing now); and the longest lease TTL
// among them (memo api.MemoLeaseTTL; 0 when none says).
type EarlierFences struct {
	Fence    int64
	ClosedAt time.Time
	Open     bool
	LeaseTTL time.Duration
}

// FenceFloor reads what the runs of the task's workflow other than self
// (a run ID) that published a fence at or above from granted: a run that
// an operator reset away or terminated may have granted fences the current
// run's ledger does not remember, and its command may still run. It
// lists by workflow ID alone and filters the fence here: SQLite
// visibility would otherwise answer from its WdcFence index, every task's
// row, at a cost that grows with every task the namespace ever ran. A run
// visibility lists as open is read from its description instead, since
// visibility indexes a grant's WdcFence after the grant (about a second
// later on Elasticsearch), and so is each run of bases (ResetBases), which
// visibility may not list yet. Errors: Temporal's.
func (c *Client) FenceFloor(ctx context.Context, taskID, self string, from int64, bases ...string) (EarlierFences, error) {
	wfID := api.TaskWorkflowID(taskID)
	q := fmt.Sprintf("WorkflowId = %q", wfID)
	var out EarlierFences
	dc := converter.GetDefaultDataConverter()
	add := func(e *workflowpb.WorkflowExecutionInfo) {
		var fence int64
		if p := e.GetSearchAttributes().GetIndexedFields()[api.SAFence.GetName()]; p == nil || dc.FromPayload(p, &fence) != nil || fence < from {
			return
		}
		out.Fence = max(out.Fence, fence)
		if e.GetCloseTime() == nil {
			out.Open = true
		} else if at := e.GetCloseTime().AsTime(); at.After(out.ClosedAt) {
			out.ClosedAt = at
		}
		var ttl time.Duration
		if p := e.GetMemo().GetFields()[api.MemoLeaseTTL]; p != nil && dc.FromPayload(p, &ttl) == nil {
			out.LeaseTTL = max(out.LeaseTTL, ttl)
		}
	}
	// describe is the run's description, nil when it no longer exists.
	describe := func(runID string) (*workflowpb.WorkflowExecutionInfo, error) {
		d, err := c.C.DescribeWorkflowExecution(ctx, wfID, runID)
		var nf *serviceerror.NotFound
		switch {
		case errors.As(err, &nf):
			return nil, nil
		case err != nil:
			return nil, wrap("fences of task "+taskID, err)
		}
		return d.GetWorkflowExecutionInfo(), nil
	}
	seen := map[string]bool{self: true}
	var token []byte
	for {
		resp, err := c.C.ListWorkflow(ctx, &workflowservice.ListWorkflowExecutionsRequest{Query: q, NextPageToken: token, PageSize: 100})
		if err != nil {
			return EarlierFences{}, wrap("fences of task "+taskID, err)
		}
		for _, e := range resp.GetExecutions() {
			if seen[e.GetExecution().GetRunId()] {
				continue
			}
			seen[e.GetExecution().GetRunId()] = true
			if e.GetCloseTime() == nil {
				// A closed row holds the run's final attributes; an open
				// one may predate its last grant.
				d, err := describe(e.GetExecution().GetRunId())
				if err != nil {
					return EarlierFences{}, err
				}
				if d != nil {
					e = d
				}
			}
			add(e)
		}
		if token = resp.GetNextPageToken(); len(token) == 0 {
			break
		}
	}
	for _, id := range bases {
		if seen[id] {
			continue
		}
		seen[id] = true
		d, err := describe(id)
		if err != nil {
			return EarlierFences{}, err
		}
		if d != nil {
			add(d)
		}
	}
	return out, nil
}

// ResetBases returns the base runs of the resets on the way to run runID
// of the task's workflow, newest first: the run named as base by each
// workflow task its history records as failed by a reset
// (WORKFLOW_TASK_FAILED_CAUSE_RESET_WORKFLOW). A reset of a run other
// than the current one terminates the current run without naming it.
// Errors: Temporal's.
func (c *Client) ResetBases(ctx context.Context, taskID, runID string) ([]string, error) {
	iter := c.C.GetWorkflowHistory(ctx, api.TaskWorkflowID(taskID), runID, false, enumspb.HISTORY_EVENT_FILTER_TYPE_ALL_EVENT)
	var bases []string
	for iter.HasNext() {
		ev, err := iter.Next()
		if err != nil {
			return nil, wrap("history of task "+taskID, err)
		}
		if a := ev.GetWorkflowTaskFailedEventAttributes(); a != nil && a.GetCause() == enumspb.WORKFLOW_TASK_FAILED_CAUSE_RESET_WORKFLOW && a.GetBaseRunId() != "" {
			bases = append([]string{a.GetBaseRunId()}, bases...)
		}
	}
	return bases, nil
}

// LeaseHeartbeatAt is when Temporal last recorded a heartbeat by ID on
// the task's pending lease activity for fence (api.LeaseActivityID), read
// from the task's description (DescribeWorkflowExecution: no control
// plane takes part); zero when the task holds none or none was recorded
// yet. While a lease activity holds the lease, these heartbeats renew it
// without reaching the task, so the lease's RenewedAt in the task's view
// is the last heartbeat signal's. Errors: ErrNotFound (wrapped) when no
// such task exists; Temporal's error otherwise.
func (c *Client) LeaseHeartbeatAt(ctx context.Context, taskID string, fence int64) (time.Time, error) {
	resp, err := c.C.DescribeWorkflowExecution(ctx, api.TaskWorkflowID(taskID), "")
	if err != nil {
		return time.Time{}, wrap("task "+taskID, err)
	}
	id := api.LeaseActivityID(fence)
	for _, a := range resp.GetPendingActivities() {
		if a.GetActivityId() == id && a.GetLastHeartbeatTime() != nil {
			return a.GetLastHeartbeatTime().AsTime(), nil
		}
	}
	return time.Time{}, nil
}

// TaskEnvelope returns the sealed envelope a task runs: the input of its
// workflow's current run (WdcTask carries it across continue-as-new), read
// from the run's first history event, so no workflow needs to answer.
// Errors: ErrNotFound; a history without the start event or whose input is
// not a task's.
func (c *Client) TaskEnvelope(ctx context.Context, taskID string) (envelope.Envelope, error) {
	iter := c.C.GetWorkflowHistory(ctx, api.TaskWorkflowID(taskID), "", false, enumspb.HISTORY_EVENT_FILTER_TYPE_ALL_EVENT)
	if !iter.HasNext() {
		return envelope.Envelope{}, fmt.Errorf("task %s: empty history", taskID)
	}
	ev, err := iter.Next()
	if err != nil {
		return envelope.Envelope{}, wrap("task "+taskID, err)
	}
	started := ev.GetWorkflowExecutionStartedEventAttributes()
	if started == nil {
		return envelope.Envelope{}, fmt.Errorf("task %s: the history does not start with the workflow's start", taskID)
	}
	var in api.TaskInput
	if err := converter.GetDefaultDataConverter().FromPayloads(started.GetInput(), &in); err != nil {
		return envelope.Envelope{}, fmt.Errorf("task %s: decode its input: %w", taskID, err)
	}
	if in.Envelope.TaskID != taskID {
		return envelope.Envelope{}, fmt.Errorf("task %s: its input holds no envelope of this task", taskID)
	}
	return in.Envelope, nil
}

// ReportedHeartbeats returns how many lease heartbeats an attempt reported
// sending (api.SubmitResultInput.HeartbeatSeq: signals and heartbeats by
// ID, which leave no event of their own) when ev is the acceptance of its
// submit-result update in a task's history; false for any other event or
// an input that does not decode.
func ReportedHeartbeats(ev *historypb.HistoryEvent) (int64, bool) {
	req := ev.GetWorkflowExecutionUpdateAcceptedEventAttributes().GetAcceptedRequest()
	if req.GetInput().GetName() != api.UpdateSubmitResult {
		return 0, false
	}
	var in api.SubmitResultInput
	if err := converter.GetDefaultDataConverter().FromPayloads(req.GetInput().GetArgs(), &in); err != nil {
		return 0, false
	}
	return in.HeartbeatSeq, true
}

// TaskSummary is a task as visibility lists it.
type TaskSummary struct {
	TaskID   string        `json:"task_id"`
	RunID    string        `json:"run_id"`
	State    api.TaskState `json:"state"`
	WorkerID string        `json:"worker_id,omitempty"`
	Attempt  int64         `json:"attempt"`
	Fence    int64         `json:"fence"`
	Started  time.Time     `json:"started"`
}

// ListTasks lists tasks from visibility, one row per task, optionally
// filtered by state (TaskStateQuery) and/or run, newest first; a workflow
// that closed without an outcome is listed ABORTED.
func (c *Client) ListTasks(ctx context.Context, state, runID string) ([]TaskSummary, error) {
	q := fmt.Sprintf(`%s = %q AND %s`, api.SAKind.GetName(), api.KindTask, TaskStateQuery(api.TaskState(state)))
	if runID != "" {
		q += fmt.Sprintf(` AND %s = %q`, api.SARunID.GetName(), runID)
	}
	var out []TaskSummary
	at := map[string]int{} // task ID → its row: one per task
	var token []byte
	for {
		resp, err := c.C.ListWorkflow(ctx, &workflowservice.ListWorkflowExecutionsRequest{Query: q, NextPageToken: token, PageSize: 1000})
		if err != nil {
			return nil, wrap("list tasks", err)
		}
		for _, ex := range resp.GetExecutions() {
			sa := ex.GetSearchAttributes()
			s := TaskSummary{
				TaskID:  strings.TrimPrefix(ex.GetExecution().GetWorkflowId(), api.TaskWorkflowID("")),
				Started: ex.GetStartTime().AsTime(),
			}
			s.RunID = keyword(sa, api.SARunID.GetName())
			s.State = api.TaskState(keyword(sa, api.SATaskState.GetName()))
			if closedWithoutOutcome(ex.GetStatus()) {
				s.State = api.TaskAborted
			}
			s.WorkerID = keyword(sa, api.SAWorkerID.GetName())
			s.Attempt = intAttr(sa, api.SAAttempt.GetName())
			s.Fence = intAttr(sa, api.SAFence.GetName())
			// A reset leaves the old run beside the new one: the running
			// run is the task's row.
			if i, seen := at[s.TaskID]; seen {
				if ex.GetStatus() == enumspb.WORKFLOW_EXECUTION_STATUS_RUNNING {
					out[i] = s
				}
				continue
			}
			at[s.TaskID] = len(out)
			out = append(out, s)
		}
		token = resp.GetNextPageToken()
		if len(token) == 0 {
			return out, nil
		}
	}
}

// TaskStateQuery is the visibility filter for task workflows in state ("":
// all, never a run continued as new): WdcTaskState with ExecutionStatus, as
// a closed workflow keeps its last WdcTaskState (docs/operations.md).
func TaskStateQuery(state api.TaskState) string {
	const notContinued = `ExecutionStatus != "ContinuedAsNew"`
	switch {
	case state == "":
		return notContinued
	case state == api.TaskAborted:
		return `ExecutionStatus IN ("Terminated", "Failed", "TimedOut", "Canceled")`
	case state.Terminal():
		return fmt.Sprintf(`%s = %q AND ExecutionStatus = "Completed"`, api.SATaskState.GetName(), state)
	}
	return fmt.Sprintf(`%s = %q AND ExecutionStatus = "Running"`, api.SATaskState.GetName(), state)
}

// CancelTask cancels a task; the answer is its view after the request.
// Errors: a conflict *Error when the task has already ended (a closed
// workflow takes no update), ErrNotFound when there is no such task.
func (c *Client) CancelTask(ctx context.Context, taskID, reason string) (api.TaskView, error) {
	var v api.TaskView
	in := api.CancelTaskInput{Reason: reason}
	var err error
	if in.Proof, err = c.sign(api.UpdateCancelTask, in); err != nil {
		return v, err
	}
	err = wrap("task "+taskID, c.update(ctx, api.TaskWorkflowID(taskID), "", api.UpdateCancelTask, in, &v))
	if errors.Is(err, ErrNotFound) {
		if ended, qerr := c.Task(ctx, taskID); qerr == nil {
			return ended, &Error{Type: api.ErrTypeConflict, Message: fmt.Sprintf("task %s already ended %s; nothing to cancel", taskID, ended.State)}
		}
	}
	return v, err
}

// WaitTask blocks until the task workflow ends and returns its outcome,
// following an operator's reset to its new run. It is not bounded by
// CallTimeout (a task may run for days); bound ctx, or use WaitEnded.
func (c *Client) WaitTask(ctx context.Context, taskID string) (api.TaskOutcome, error) {
	wfID := api.TaskWorkflowID(taskID)
	for {
		waited := c.currentRun(ctx, wfID)
		var out api.TaskOutcome
		err := c.C.GetWorkflow(ctx, wfID, "").Get(ctx, &out)
		var term *temporal.TerminatedError
		if !errors.As(err, &term) || waited == "" {
			return out, wrap("task "+taskID, err)
		}
		// A reset terminates the run and starts its successor at once.
		if now := c.currentRun(ctx, wfID); now == "" || now == waited || ctx.Err() != nil {
			return out, wrap("task "+taskID, err)
		}
	}
}

// currentRun is the run ID of the workflow's current execution while it
// runs, "" otherwise (closed, or not found).
func (c *Client) currentRun(ctx context.Context, wfID string) string {
	desc, err := c.C.DescribeWorkflowExecution(ctx, wfID, "")
	if err != nil || desc.GetWorkflowExecutionInfo().GetStatus() != enumspb.WORKFLOW_EXECUTION_STATUS_RUNNING {
		return ""
	}
	return desc.GetWorkflowExecutionInfo().GetExecution().GetRunId()
}

// WaitEnded waits, within CallTimeout, for a task that was told to end
// (cancelled) to end, and returns its outcome. Errors: *UnavailableError
// when the control plane does not finish it in time.
func (c *Client) WaitEnded(ctx context.Context, taskID string) (api.TaskOutcome, error) {
	var out api.TaskOutcome
	err := c.within(ctx, "wait for task "+taskID+" to end", func(ctx context.Context) error {
		return c.C.GetWorkflow(ctx, api.TaskWorkflowID(taskID), "").Get(ctx, &out)
	})
	return out, wrap("task "+taskID, err)
}

// TaskExists checks, without asking the control plane, that task taskID
// was submitted (its WdcTask workflow exists, running or closed). Errors:
// ErrNotFound.
func (c *Client) TaskExists(ctx context.Context, taskID string) error {
	_, err := c.C.DescribeWorkflowExecution(ctx, api.TaskWorkflowID(taskID), "")
	return wrap("task "+taskID, err)
}

// ---- runs ----

// StartRun starts a run (no tasks yet). Errors: a conflict *Error when the
// run exists (a run ID is never reused).
func (c *Client) StartRun(ctx context.Context, in api.RunInput) error {
	opts := c.runStartOptions(in.RunID, in.WorldID)
	opts.WorkflowIDConflictPolicy = enumspb.WORKFLOW_ID_CONFLICT_POLICY_FAIL
	opts.WorkflowExecutionErrorWhenAlreadyStarted = true
	_, err := c.C.ExecuteWorkflow(ctx, opts, api.RunWorkflowType, in)
	var started *serviceerror.WorkflowExecutionAlreadyStarted
	if errors.As(err, &started) {
		return &Error{Type: api.ErrTypeConflict, Message: fmt.Sprintf("run %s already exists", in.RunID)}
	}
	return wrap("start run "+in.RunID, err)
}

// Run returns a run's state (query run). Errors: ErrNotFound.
func (c *Client) Run(ctx context.Context, runID string) (api.RunView, error) {
	var v api.RunView
	err := c.within(ctx, "query run "+runID, func(ctx context.Context) error {
		resp, err := c.C.QueryWorkflow(ctx, api.RunWorkflowID(runID), "", api.QueryRun)
		if err == nil {
			err = resp.Get(&v)
		}
		return err
	})
	return v, wrap("run "+runID, err)
}

// RunWithLiveTasks is Run with each task that has not ended shown live:
// its state, attempt and worker from visibility (the run records a task's
// state and attempts only when it ends). A visibility error leaves the
// run's own record.
func (c *Client) RunWithLiveTasks(ctx context.Context, runID string) (api.RunView, error) {
	v, err := c.Run(ctx, runID)
	if err != nil {
		return v, err
	}
	live, err := c.ListTasks(ctx, "", runID)
	if err != nil {
		return v, nil
	}
	byID := make(map[string]TaskSummary, len(live))
	for _, s := range live {
		byID[s.TaskID] = s
	}
	for i := range v.Tasks {
		t := &v.Tasks[i]
		s, ok := byID[t.TaskID]
		if !ok {
			continue
		}
		if !t.State.Terminal() && s.State != "" {
			t.State, t.Attempts = s.State, s.Attempt
		}
		if !t.State.Terminal() {
			t.WorkerID = s.WorkerID
		}
	}
	return v, nil
}

// Commit commits worker results as evidence. Errors: a conflict *Error for
// a run that has ended.
func (c *Client) Commit(ctx context.Context, runID string, in api.CommitInput) (api.CommitResult, error) {
	var res api.CommitResult
	if c.Signer != nil {
		in.Proof = nil
		p, err := c.sign(api.UpdateCommit, in)
		if err != nil {
			return res, err
		}
		in.Proof = p
	}
	var err error
	err = wrap("run "+runID, c.update(ctx, api.RunWorkflowID(runID), "", api.UpdateCommit, in, &res))
	if errors.Is(err, ErrNotFound) {
		if v, qerr := c.Run(ctx, runID); qerr == nil {
			return res, &Error{Type: api.ErrTypeConflict, Message: fmt.Sprintf("run %s has ended (%s, closed); it takes no more commits", runID, v.Status)}
		}
	}
	return res, err
}

// CloseRun closes a run; it ends once its tasks have ended. Closing a run
// that has already ended returns its final state.
func (c *Client) CloseRun(ctx context.Context, runID string) (api.RunView, error) {
	var v api.RunView
	var in api.CloseRunInput
	var err error
	if in.Proof, err = c.sign(api.UpdateCloseRun, in); err != nil {
		return v, err
	}
	err = wrap("run "+runID, c.update(ctx, api.RunWorkflowID(runID), "", api.UpdateCloseRun, in, &v))
	if errors.Is(err, ErrNotFound) {
		if ended, qerr := c.Run(ctx, runID); qerr == nil {
			return ended, nil
		}
	}
	return v, err
}
