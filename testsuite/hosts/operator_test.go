package hosts

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"
	"time"

	commonpb "go.temporal.io/api/common/v1"
	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/api/serviceerror"
	"go.temporal.io/api/workflowservice/v1"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/converter"

	"github.com/wdc-runtime/wdc/api"
	temporaltest "github.com/wdc-runtime/wdc/internal/testenv/temporal"
	"github.com/wdc-runtime/wdc/lease"
)

// envRunOperator makes this test binary an operator with Temporal's own
// client calls (what `temporal workflow terminate`, `reset` and `list`
// and the Web UI make), run on a host like the wdc CLI: `operator
// terminate|reset-first|reset-last|runs ADDRESS TASK`, `operator
// terminate-worker|reset-worker-first|reset-worker-last ADDRESS WORKER`
// (its registry entry), or for the official server `operator
// health|register-namespace ADDRESS NAMESPACE`.
const envRunOperator = "WDC_HOSTS_OPERATOR"

// operatorRun is one execution of a task's workflow, as `operator runs`
// prints it (one JSON array, oldest first): its status, close time (zero
// while running) and the lease view its query returns.
type operatorRun struct {
	RunID  string       `json:"run_id"`
	Status string       `json:"status"`
	Start  time.Time    `json:"start"`
	Close  time.Time    `json:"close,omitzero"`
	View   api.TaskView `json:"view"`
	// FromHistory: the run answered no query; View holds only the leases
	// its launches carried, as granted (closedRunFacts).
	FromHistory bool `json:"from_history,omitempty"`
	// UndecidedFrom: the start of the last completed workflow task of a
	// run closed with input events after it, which its query replays as
	// if decided (a lease end from then on may never have happened).
	UndecidedFrom time.Time `json:"undecided_from,omitzero"`
}

// operatorMain runs one operator command and returns the exit code.
func operatorMain(args []string) int {
	if len(args) != 3 {
		fmt.Fprintln(os.Stderr, "usage: operator terminate|reset-first|reset-last|runs ADDRESS TASK, terminate-worker|reset-worker-first|reset-worker-last ADDRESS WORKER, or health|register-namespace ADDRESS NAMESPACE")
		return 2
	}
	timeout := 30 * time.Second
	if args[0] == "health" {
		timeout = 5 * time.Second
	}
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	if args[0] == "register-namespace" {
		if err := temporaltest.RegisterNamespace(ctx, args[1], args[2]); err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		return 0
	}
	c, err := client.DialContext(ctx, client.Options{HostPort: args[1], Namespace: "default"})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer c.Close()
	wfID := api.TaskWorkflowID(args[2])
	switch args[0] {
	case "terminate-worker", "reset-worker-first", "reset-worker-last":
		// The worker's registry entry.
		wfID, args[0] = api.WorkerWorkflowID(args[2]), strings.Replace(args[0], "-worker", "", 1)
	}
	switch args[0] {
	case "health":
		_, err = c.CheckHealth(ctx, &client.CheckHealthRequest{})
	case "terminate":
		err = c.TerminateWorkflow(ctx, wfID, "", "soak nemesis: operator terminate")
		var nf *serviceerror.NotFound
		if errors.As(err, &nf) {
			err = errNotRunning
		}
	case "reset-first", "reset-last":
		err = resetRunning(ctx, c, wfID, args[0] == "reset-first")
	case "runs":
		var runs []operatorRun
		if runs, err = taskRuns(ctx, c, wfID); err == nil {
			err = json.NewEncoder(os.Stdout).Encode(runs)
		}
	default:
		err = fmt.Errorf("operator: unknown command %q", args[0])
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	return 0
}

// errNotRunning: the task's workflow closed before the operator acted.
var errNotRunning = errors.New("not running")

// resetRunning resets the running execution of wfID to its first or last
// completed workflow task, as `temporal workflow reset --type
// FirstWorkflowTask|LastWorkflowTask` does; errNotRunning when it closed.
func resetRunning(ctx context.Context, c client.Client, wfID string, first bool) error {
	desc, err := c.DescribeWorkflowExecution(ctx, wfID, "")
	if err != nil {
		return err
	}
	info := desc.GetWorkflowExecutionInfo()
	if info.GetStatus() != enumspb.WORKFLOW_EXECUTION_STATUS_RUNNING {
		return errNotRunning
	}
	runID := info.GetExecution().GetRunId()
	var point int64
	iter := c.GetWorkflowHistory(ctx, wfID, runID, false, enumspb.HISTORY_EVENT_FILTER_TYPE_ALL_EVENT)
	for iter.HasNext() && !(first && point != 0) {
		ev, err := iter.Next()
		if err != nil {
			return err
		}
		if ev.GetEventType() == enumspb.EVENT_TYPE_WORKFLOW_TASK_COMPLETED {
			point = ev.GetEventId()
		}
		if ev.GetEventType() == enumspb.EVENT_TYPE_WORKFLOW_EXECUTION_COMPLETED {
			return errNotRunning
		}
	}
	if point == 0 {
		return errNotRunning
	}
	_, err = c.ResetWorkflowExecution(ctx, &workflowservice.ResetWorkflowExecutionRequest{
		Namespace:                 "default",
		WorkflowExecution:         &commonpb.WorkflowExecution{WorkflowId: wfID, RunId: runID},
		Reason:                    "soak nemesis: operator reset",
		WorkflowTaskFinishEventId: point,
		RequestId:                 fmt.Sprintf("soak-%s-%d", wfID, time.Now().UnixNano()),
	})
	return err
}

// taskRuns lists every execution of wfID from visibility, oldest first,
// each with its lease query (a closed one's replays its whole history);
// one closed by an operator also with its history's facts
// (closedRunFacts).
func taskRuns(ctx context.Context, c client.Client, wfID string) ([]operatorRun, error) {
	var runs []operatorRun
	var token []byte
	for {
		resp, err := c.ListWorkflow(ctx, &workflowservice.ListWorkflowExecutionsRequest{
			Query: fmt.Sprintf("WorkflowId = %q", wfID), NextPageToken: token, PageSize: 100})
		if err != nil {
			return nil, err
		}
		for _, e := range resp.GetExecutions() {
			r := operatorRun{RunID: e.GetExecution().GetRunId(), Start: e.GetStartTime().AsTime(),
				Status: enumspb.WorkflowExecutionStatus_name[int32(e.GetStatus())]}
			if e.GetCloseTime() != nil {
				r.Close = e.GetCloseTime().AsTime()
			}
			q, err := c.QueryWorkflow(ctx, wfID, r.RunID, api.QueryLease)
			var notReady *serviceerror.WorkflowNotReady
			refused := errors.As(err, &notReady) && !r.Close.IsZero()
			switch {
			case refused:
				// Closed while its workflow task was failing (an
				// operator's reset of a run cut off from the server):
				// Temporal never answers its queries.
			case err != nil:
				return nil, fmt.Errorf("query run %s: %w", r.RunID, err)
			default:
				if err := q.Get(&r.View); err != nil {
					return nil, err
				}
			}
			switch e.GetStatus() {
			case enumspb.WORKFLOW_EXECUTION_STATUS_RUNNING, enumspb.WORKFLOW_EXECUTION_STATUS_COMPLETED,
				enumspb.WORKFLOW_EXECUTION_STATUS_CONTINUED_AS_NEW:
			default:
				var launched []lease.Lease
				if launched, r.UndecidedFrom, err = closedRunFacts(ctx, c, wfID, r.RunID, refused); err != nil {
					return nil, fmt.Errorf("run %s: %w", r.RunID, err)
				}
				if refused {
					r.View.Leases, r.FromHistory = launched, true
				}
			}
			runs = append(runs, r)
		}
		if token = resp.GetNextPageToken(); len(token) == 0 {
			break
		}
	}
	slices.SortFunc(runs, func(a, b operatorRun) int { return a.Start.Compare(b.Start) })
	return runs, nil
}

// closedRunFacts reads a closed run's history for undecidedFrom
// (operatorRun) and, with leases, the leases it launched as granted (its
// LaunchAttempt inputs; how each ended is in the workflow's state only).
func closedRunFacts(ctx context.Context, c client.Client, wfID, run string, leases bool) (launched []lease.Lease, undecidedFrom time.Time, err error) {
	var started, lastDecided time.Time
	undecided := false
	iter := c.GetWorkflowHistory(ctx, wfID, run, false, enumspb.HISTORY_EVENT_FILTER_TYPE_ALL_EVENT)
	for iter.HasNext() {
		ev, err := iter.Next()
		if err != nil {
			return nil, time.Time{}, err
		}
		switch ev.GetEventType() {
		case enumspb.EVENT_TYPE_WORKFLOW_TASK_STARTED:
			started = ev.GetEventTime().AsTime()
		case enumspb.EVENT_TYPE_WORKFLOW_TASK_COMPLETED:
			lastDecided, undecided = started, false
		case enumspb.EVENT_TYPE_WORKFLOW_EXECUTION_SIGNALED, enumspb.EVENT_TYPE_WORKFLOW_EXECUTION_UPDATE_ADMITTED,
			enumspb.EVENT_TYPE_WORKFLOW_EXECUTION_CANCEL_REQUESTED, enumspb.EVENT_TYPE_TIMER_FIRED,
			enumspb.EVENT_TYPE_ACTIVITY_TASK_COMPLETED, enumspb.EVENT_TYPE_ACTIVITY_TASK_FAILED,
			enumspb.EVENT_TYPE_ACTIVITY_TASK_TIMED_OUT, enumspb.EVENT_TYPE_ACTIVITY_TASK_CANCELED,
			enumspb.EVENT_TYPE_EXTERNAL_WORKFLOW_EXECUTION_SIGNALED, enumspb.EVENT_TYPE_SIGNAL_EXTERNAL_WORKFLOW_EXECUTION_FAILED,
			enumspb.EVENT_TYPE_CHILD_WORKFLOW_EXECUTION_STARTED, enumspb.EVENT_TYPE_CHILD_WORKFLOW_EXECUTION_COMPLETED,
			enumspb.EVENT_TYPE_CHILD_WORKFLOW_EXECUTION_FAILED, enumspb.EVENT_TYPE_CHILD_WORKFLOW_EXECUTION_TERMINATED,
			enumspb.EVENT_TYPE_START_CHILD_WORKFLOW_EXECUTION_FAILED, enumspb.EVENT_TYPE_CHILD_WORKFLOW_EXECUTION_CANCELED,
			enumspb.EVENT_TYPE_CHILD_WORKFLOW_EXECUTION_TIMED_OUT, enumspb.EVENT_TYPE_EXTERNAL_WORKFLOW_EXECUTION_CANCEL_REQUESTED,
			enumspb.EVENT_TYPE_REQUEST_CANCEL_EXTERNAL_WORKFLOW_EXECUTION_FAILED, enumspb.EVENT_TYPE_WORKFLOW_PROPERTIES_MODIFIED_EXTERNALLY,
			enumspb.EVENT_TYPE_NEXUS_OPERATION_STARTED, enumspb.EVENT_TYPE_NEXUS_OPERATION_COMPLETED,
			enumspb.EVENT_TYPE_NEXUS_OPERATION_FAILED, enumspb.EVENT_TYPE_NEXUS_OPERATION_CANCELED,
			enumspb.EVENT_TYPE_NEXUS_OPERATION_TIMED_OUT:
			// An input a later workflow task decides on (the commands a
			// completed one made come after its completion event).
			undecided = true
		case enumspb.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED:
			attrs := ev.GetActivityTaskScheduledEventAttributes()
			if leases && attrs.GetActivityType().GetName() == "LaunchAttempt" {
				var in api.LaunchInput
				if err := converter.GetDefaultDataConverter().FromPayloads(attrs.GetInput(), &in); err != nil {
					return nil, time.Time{}, fmt.Errorf("event %d: %w", ev.GetEventId(), err)
				}
				launched = append(launched, in.Lease)
			}
		}
	}
	if undecided {
		undecidedFrom = lastDecided
	}
	return launched, undecidedFrom, nil
}

// operator runs `operator cmd ADDRESS arg` on h and returns its stdout,
// or an error with its stderr.
func (h *host) operator(cmd, arg string) ([]byte, error) {
	return h.output("operator", append(h.env(), envRunOperator+"=1"), cmd, h.c.address, arg)
}
