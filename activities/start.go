package activities

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"go.temporal.io/api/serviceerror"
	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/client"

	"github.com/wdc-runtime/wdc/api"
	wdcclient "github.com/wdc-runtime/wdc/client"
)

// startConcurrency is how many task workflows StartTasks starts at once.
const startConcurrency = 32

// startHeartbeatEvery is how often StartTasks heartbeats (details: how
// many tasks it has started), whether or not a start returned meanwhile:
// its heartbeat timeout detects a dead control plane, not a slow server
// (StartToClose bounds that).
const startHeartbeatEvery = 2 * time.Second

// StartTasks starts every task of a batch its run admitted as a top-level
// WdcTask workflow, startConcurrency at a time, so a batch costs its run
// one activity instead of a child per task. A task whose workflow ID is
// already used by an execution of this run counts as started (an earlier
// try of this activity started it); one used by another run, or refused
// by the ID reuse policy, is reported in Errors. Errors returned are
// transport failures: Temporal retries the activity, and the retry starts
// nothing twice.
func (c *Control) StartTasks(ctx context.Context, in api.StartTasksInput) (api.StartTasksResult, error) {
	res := api.StartTasksResult{Errors: make([]string, len(in.Tasks))}
	var (
		wg       sync.WaitGroup
		mu       sync.Mutex
		firstErr error
		started  int
	)
	sem := make(chan struct{}, startConcurrency)
	done := make(chan struct{})
	defer close(done)
	go func() {
		tick := time.NewTicker(startHeartbeatEvery)
		defer tick.Stop()
		for {
			select {
			case <-done:
				return
			case <-tick.C:
				mu.Lock()
				n := started
				mu.Unlock()
				activity.RecordHeartbeat(ctx, n)
			}
		}
	}()
	for i, t := range in.Tasks {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer func() { <-sem; wg.Done() }()
			msg, err := c.startTask(ctx, in.RunID, t)
			mu.Lock()
			defer mu.Unlock()
			if err != nil && firstErr == nil {
				firstErr = err
			}
			res.Errors[i] = msg
			started++
		}()
	}
	wg.Wait()
	return res, firstErr
}

// startTask starts one task: "" when it runs (now or already, for this
// run), else why it cannot; an error is a transport failure.
func (c *Control) startTask(ctx context.Context, runID string, t api.StartTask) (string, error) {
	taskID := t.Input.Envelope.TaskID
	wfID := api.TaskWorkflowID(taskID)
	_, err := c.Client.ExecuteWorkflow(ctx, client.StartWorkflowOptions{
		ID:                    wfID,
		TaskQueue:             api.ControlTaskQueue,
		WorkflowIDReusePolicy: api.TaskIDReusePolicy(t.Rerun),
		// Else the SDK answers an existing execution (another run's too)
		// as if it had started it.
		WorkflowExecutionErrorWhenAlreadyStarted: true,
		TypedSearchAttributes:                    api.TaskStartAttributes(runID),
		StaticSummary:                            api.TaskSummary(t.Input.Envelope),
		StaticDetails:                            api.TaskDetails(t.Input.Envelope, t.Input.EnvelopeDigest),
		Memo:                                     api.TaskMemo(runID, t.Input.EnvelopeDigest, t.Input.Options.WithDefaults().LeaseTTL),
	}, api.TaskWorkflowType, t.Input)
	var started *serviceerror.WorkflowExecutionAlreadyStarted
	if err == nil || !errors.As(err, &started) {
		return "", err
	}
	// Started before: by an earlier try of this activity (this run's, and
	// started after the activity was first scheduled: retries keep
	// ScheduledTime), or by another run, or by this run before (a task
	// that left its list, or whose earlier start failed).
	desc, err := c.Client.DescribeWorkflowExecution(ctx, wfID, "")
	if err != nil {
		return "", fmt.Errorf("describe %s: %w", wfID, err)
	}
	info := desc.GetWorkflowExecutionInfo()
	owner := wdcclient.Keyword(info.GetSearchAttributes(), api.SARunID.GetName())
	if owner == runID && !info.GetStartTime().AsTime().Before(activity.GetInfo(ctx).ScheduledTime) {
		return "", nil
	}
	return fmt.Sprintf("start task %s: workflow %s exists (run %s, %s; task IDs cannot be reused)", taskID, wfID, owner, statusName(info.GetStatus())), nil
}
