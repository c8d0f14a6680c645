package activities

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/api/serviceerror"
	workflowpb "go.temporal.io/api/workflow/v1"
	"go.temporal.io/api/workflowservice/v1"
	"go.temporal.io/sdk/activity"

	"github.com/wdc-runtime/wdc/api"
	wdcclient "github.com/wdc-runtime/wdc/client"
	"github.com/wdc-runtime/wdc/lease"
)

// ReconcileTasks describes each named task's workflow and returns those
// that are closed: a COMPLETED one with its outcome (its report to the run
// may have been lost), any other (terminated, failed, timed out, or not
// found) with its status, so the run records it as ended without a result.
// With ListClosed it describes instead the run's tasks that visibility
// lists as closed without an outcome (ClosedTasksQuery), and returns those
// whose current execution is still so. With Reported it also returns a
// running task whose lease query says it ended (reportedOutcome). Errors
// are transport failures (retried).
func (c *Control) ReconcileTasks(ctx context.Context, in api.ReconcileTasksInput) (api.ReconcileTasksResult, error) {
	var res api.ReconcileTasksResult
	ids := in.TaskIDs
	if in.ListClosed {
		var err error
		if ids, err = c.closedTaskIDs(ctx, in.RunID); err != nil {
			return res, err
		}
	}
	for i, id := range ids {
		activity.RecordHeartbeat(ctx, i)
		wfID := api.TaskWorkflowID(id)
		desc, err := c.Client.DescribeWorkflowExecution(ctx, wfID, "")
		var nf *serviceerror.NotFound
		switch {
		case errors.As(err, &nf):
			res.Closed = append(res.Closed, api.ReconciledTask{TaskID: id, Status: "NOT_FOUND"})
			continue
		case err != nil:
			return res, fmt.Errorf("describe %s: %w", wfID, err)
		}
		if why := notWdcTask(desc.GetWorkflowExecutionInfo()); why != "" {
			// A look-alike under the task's ID: whatever it answers is not
			// the task's outcome, and the task itself is gone.
			activity.GetLogger(ctx).Warn("look-alike task execution ignored", "run", in.RunID, "task", id, "detail", why)
			res.Closed = append(res.Closed, api.ReconciledTask{TaskID: id, Status: StatusNotATask})
			continue
		}
		status := desc.GetWorkflowExecutionInfo().GetStatus()
		if in.Reported && status == enumspb.WORKFLOW_EXECUTION_STATUS_RUNNING {
			rt, err := c.reportedOutcome(ctx, in.RunID, id, desc.GetWorkflowExecutionInfo().GetExecution().GetRunId())
			if err != nil {
				return res, err
			}
			if rt != nil {
				res.Closed = append(res.Closed, *rt)
			}
			continue
		}
		if status == enumspb.WORKFLOW_EXECUTION_STATUS_RUNNING ||
			(in.ListClosed && status == enumspb.WORKFLOW_EXECUTION_STATUS_COMPLETED) {
			// Listed from an execution that was reset or continued as new,
			// or that completed (and reported) since.
			continue
		}
		rt := api.ReconciledTask{TaskID: id, Status: statusName(status)}
		if status == enumspb.WORKFLOW_EXECUTION_STATUS_COMPLETED {
			var out api.TaskOutcome
			if err := c.Client.GetWorkflow(ctx, wfID, "").Get(ctx, &out); err != nil {
				return res, fmt.Errorf("result of %s: %w", wfID, err)
			}
			if out.RunID != in.RunID {
				continue // another run's task of the same ID
			}
			if err := compactOutcome(&out); err != nil {
				return res, fmt.Errorf("result of %s: %w", wfID, err)
			}
			rt.Outcome = &out
		}
		res.Closed = append(res.Closed, rt)
	}
	return res, nil
}

// StatusNotATask is api.ReconciledTask.Status for an execution under a
// task's workflow ID that is not a task wdc runs (notWdcTask): the run
// records the task as ended without a result.
const StatusNotATask = "NOT_A_WDC_TASK"

// notWdcTask says why an execution under a task's workflow ID is not one
// wdc runs ("" when it is): any namespace client can start a workflow of
// another type, or of type WdcTask on a task queue of its own, whose
// query and result answer anything. Only WdcTask on api.ControlTaskQueue
// runs wdc's code, which checks its own input (its submitter's signature)
// before it runs anything.
func notWdcTask(info *workflowpb.WorkflowExecutionInfo) string {
	switch {
	case info.GetType().GetName() != api.TaskWorkflowType:
		return fmt.Sprintf("workflow %s is of type %q, not %s", info.GetExecution().GetWorkflowId(), info.GetType().GetName(), api.TaskWorkflowType)
	case info.GetTaskQueue() != api.ControlTaskQueue:
		return fmt.Sprintf("workflow %s runs on task queue %q, not %s", info.GetExecution().GetWorkflowId(), info.GetTaskQueue(), api.ControlTaskQueue)
	}
	return ""
}

// reportedOutcome is a running task's outcome as its own lease query
// (at execution execRunID) gives it, nil while the task has not ended or
// when it belongs to another run: a task-ended signal is a hint to look,
// never the outcome itself.
func (c *Control) reportedOutcome(ctx context.Context, runID, taskID, execRunID string) (*api.ReconciledTask, error) {
	wfID := api.TaskWorkflowID(taskID)
	resp, err := c.Client.QueryWorkflow(ctx, wfID, execRunID, api.QueryLease)
	var v api.TaskView
	if err == nil {
		err = resp.Get(&v)
	}
	if err != nil {
		return nil, fmt.Errorf("query %s: %w", wfID, err)
	}
	if !v.State.Terminal() || v.RunID != runID {
		activity.GetLogger(ctx).Warn("task-ended signal for a task that has not ended ignored", "run", runID, "task", taskID, "state", v.State, "task_run", v.RunID)
		return nil, nil
	}
	out := api.TaskOutcome{TaskID: taskID, RunID: v.RunID, State: v.State, Result: v.Result}
	if v.Lease != nil {
		out.Attempts = v.Lease.Attempt
	}
	if err := compactOutcome(&out); err != nil {
		return nil, fmt.Errorf("result of %s: %w", wfID, err)
	}
	return &api.ReconciledTask{TaskID: taskID, Status: "RUNNING", Outcome: &out}, nil
}

// compactOutcome replaces out's full Result with its compact Ref.
func compactOutcome(out *api.TaskOutcome) error {
	if out.Result == nil {
		return nil
	}
	ref, err := api.ResultRefOf(*out.Result)
	if err != nil {
		return err
	}
	out.Result, out.Ref = nil, &ref
	return nil
}

// ClosedTasksQuery is the visibility query for the tasks of run runID
// whose workflow closed without an outcome (terminated, failed, timed out,
// cancelled) before it reached a terminal task state.
func ClosedTasksQuery(runID string) string {
	return fmt.Sprintf(`%s = %q AND %s = %q AND ExecutionStatus IN ("Terminated", "Failed", "TimedOut", "Canceled") AND %s NOT IN (%q, %q, %q, %q)`,
		api.SAKind.GetName(), api.KindTask, api.SARunID.GetName(), runID, api.SATaskState.GetName(),
		api.TaskCompleted, api.TaskRetriesExhausted, api.TaskCancelled, api.TaskAborted)
}

// closedTaskIDs lists the task IDs ClosedTasksQuery finds, each once.
func (c *Control) closedTaskIDs(ctx context.Context, runID string) ([]string, error) {
	var ids []string
	seen := map[string]bool{}
	var token []byte
	for {
		resp, err := c.Client.ListWorkflow(ctx, &workflowservice.ListWorkflowExecutionsRequest{Query: ClosedTasksQuery(runID), NextPageToken: token, PageSize: 1000})
		if err != nil {
			return nil, fmt.Errorf("list closed tasks of run %s: %w", runID, err)
		}
		for _, e := range resp.GetExecutions() {
			id, ok := strings.CutPrefix(e.GetExecution().GetWorkflowId(), api.TaskWorkflowID(""))
			if ok && !seen[id] {
				seen[id] = true
				ids = append(ids, id)
			}
		}
		if token = resp.GetNextPageToken(); len(token) == 0 {
			return ids, nil
		}
		activity.RecordHeartbeat(ctx, len(ids))
	}
}

// CheckReservations judges each of a worker's reservations against its
// task's lease (query "lease", and the workflow's description when the
// query says it runs): it is stale when the task has ended (also when its
// workflow was terminated, failed or timed out: TaskView.ClosedAs) or
// does not exist, when the task's current lease under that fence is held
// by another worker or has ended, or when the task has moved past that
// fence. A reservation for the fence the task is selecting (its last fence
// + 1) is kept: its grant may still come. Errors are transport failures
// (retried); a task that does not answer its query is kept, never guessed.
func (c *Control) CheckReservations(ctx context.Context, in api.CheckReservationsInput) (api.CheckReservationsResult, error) {
	wc := &wdcclient.Client{C: c.Client}
	var res api.CheckReservationsResult
	for i, r := range in.Reservations {
		activity.RecordHeartbeat(ctx, i)
		qctx, cancel := context.WithTimeout(ctx, checkQueryTimeout)
		desc, err := c.Client.DescribeWorkflowExecution(qctx, api.TaskWorkflowID(r.TaskID), "")
		if err == nil {
			if why := notWdcTask(desc.GetWorkflowExecutionInfo()); why != "" {
				cancel()
				res.Stale = append(res.Stale, api.StaleReservation{ReservationRef: r, Why: why})
				continue
			}
		}
		v, err := wc.Task(qctx, r.TaskID)
		cancel()
		if errors.Is(err, wdcclient.ErrNotFound) {
			res.Stale = append(res.Stale, api.StaleReservation{ReservationRef: r, Why: "no such task"})
			continue
		}
		if err != nil {
			activity.GetLogger(ctx).Warn("reservation check: task did not answer", "task", r.TaskID, "error", err)
			continue
		}
		if why := staleReservation(v, in.WorkerID, r.Fence); why != "" {
			res.Stale = append(res.Stale, api.StaleReservation{ReservationRef: r, Why: why})
		}
	}
	return res, nil
}

// checkQueryTimeout bounds each task query of CheckReservations, so one
// task that does not answer does not fail the whole check.
const checkQueryTimeout = 10 * time.Second

// staleReservation says why worker's reservation under fence no longer
// belongs to task view v, or "" when it still does.
func staleReservation(v api.TaskView, worker string, fence int64) string {
	if v.State.Terminal() {
		return fmt.Sprintf("task ended %s", v.State)
	}
	cur := v.Lease
	switch {
	case cur == nil && fence == 1:
		return "" // the first selection is under way
	case cur == nil:
		return fmt.Sprintf("task has no lease, fence %d was never granted", fence)
	case cur.Fence+1 == fence && cur.State != lease.Active:
		return "" // the next selection is under way
	case cur.Fence != fence:
		return fmt.Sprintf("task's current lease is fence %d on %s", cur.Fence, cur.WorkerID)
	case cur.WorkerID != worker:
		return fmt.Sprintf("fence %d was granted to %s", fence, cur.WorkerID)
	case cur.State != lease.Active:
		return fmt.Sprintf("lease for fence %d is %s", fence, cur.State)
	}
	return ""
}

// statusName is a workflow status as api.ReconciledTask.Status documents
// it: TERMINATED (the enum's String is "Terminated").
func statusName(s enumspb.WorkflowExecutionStatus) string {
	return strings.TrimPrefix(enumspb.WorkflowExecutionStatus_name[int32(s)], "WORKFLOW_EXECUTION_STATUS_")
}
