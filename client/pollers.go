package client

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/api/serviceerror"
	"go.temporal.io/sdk/client"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/wdc-runtime/wdc/api"
)

// Poller checks and the call bound. Every wdc update and query is answered
// by a process polling a task queue: the control plane (`wdc control-plane`,
// workflow tasks on api.ControlTaskQueue) for every workflow, an agent
// (`wdc agent`, activity tasks on api.AgentTaskQueue(id)) for launches.
// Without one, Temporal accepts the request and waits for a poller forever
// (updates) or until the RPC times out (queries), so the CLI checks first
// with RequirePoller and bounds each call with Client.CallTimeout.
const (
	// PollerRecency is how recently a poller must have polled to count as
	// present. A live poller re-polls at least once a minute (Temporal's
	// long poll lasts up to 60 s), and the server reports a poller for up to
	// 5 minutes after its last poll; a process killed less than about 90 s
	// ago may therefore still count as present (then CallTimeout is the
	// backstop). A process stopped cleanly is forgotten at once.
	PollerRecency = 90 * time.Second
	// PollerGrace is how long RequirePoller keeps looking for a poller
	// before it reports none: a control plane started a moment ago has not
	// polled yet.
	PollerGrace = 3 * time.Second
	// pollerCheckInterval is the wait between DescribeTaskQueue calls
	// within PollerGrace.
	pollerCheckInterval = 250 * time.Millisecond
)

// UnavailableError says that the process a request needs is not there: no
// recent poller on TaskQueue (Waited is 0: nothing was sent), or no answer
// within Waited (the request was sent; it may still take effect once a
// poller returns). Match it with errors.As; the CLI exits with its
// "unavailable" code.
type UnavailableError struct {
	// TaskQueue is the queue nobody polls: api.ControlTaskQueue or an
	// agent's queue.
	TaskQueue string
	// Address and Namespace name the Temporal server and namespace asked
	// (Address may be empty when the client was not told it).
	Address   string
	Namespace string
	// Op is what was being done when the wait ran out, e.g. "register
	// worker w1"; empty when nothing was sent.
	Op string
	// Waited is how long the call waited before giving up; 0 when no
	// poller was found before sending anything.
	Waited time.Duration
}

// Error says which process is missing, where, and how to start it; after a
// timeout, also what was being done and that it may still take effect.
func (e *UnavailableError) Error() string {
	where := e.TaskQueue
	if e.Address != "" {
		where += " on " + e.Address
	}
	if e.Namespace != "" {
		where += " (namespace " + e.Namespace + ")"
	}
	if e.Waited > 0 {
		return fmt.Sprintf("%s: no answer within %s from the %s polling %s; is it still running? (start `%s`) The request was sent and may still take effect when it is back",
			e.Op, e.Waited, e.role(), where, e.StartCommand())
	}
	return fmt.Sprintf("no %s is polling %s; start `%s`", e.role(), where, e.StartCommand())
}

// role names the process that polls the queue.
func (e *UnavailableError) role() string {
	if e.TaskQueue == api.ControlTaskQueue {
		return "control plane"
	}
	return "agent"
}

// StartCommand is the command that starts a poller of the queue:
// "wdc control-plane", or "wdc agent --worker-id ID" for an agent queue.
func (e *UnavailableError) StartCommand() string {
	if e.TaskQueue == api.ControlTaskQueue {
		return "wdc control-plane"
	}
	return "wdc agent --worker-id " + strings.TrimPrefix(e.TaskQueue, api.AgentTaskQueue(""))
}

// queueType is the task-queue type whose pollers show that the process
// serving taskQueue is up: workflow tasks for the control queue (it also
// polls activities, but every update and query needs the workflow poller),
// activity tasks for anything else (agents run activities only).
func queueType(taskQueue string) enumspb.TaskQueueType {
	if taskQueue == api.ControlTaskQueue {
		return enumspb.TASK_QUEUE_TYPE_WORKFLOW
	}
	return enumspb.TASK_QUEUE_TYPE_ACTIVITY
}

// RequirePoller returns nil when some process polled taskQueue within
// PollerRecency, judged by Temporal's DescribeTaskQueue (workflow pollers
// for api.ControlTaskQueue, activity pollers for an agent queue). It keeps
// looking for up to PollerGrace, then returns an *UnavailableError naming
// the queue, the server and the command to start. Errors from
// DescribeTaskQueue itself (server unreachable, permission denied) are
// returned wrapped. It writes nothing and costs one RPC when a poller is
// present.
func (c *Client) RequirePoller(ctx context.Context, taskQueue string) error {
	grace := PollerGrace
	if c.pollerGrace != 0 {
		grace = c.pollerGrace
	}
	deadline := time.Now().Add(grace)
	for {
		ok, err := c.hasPoller(ctx, taskQueue)
		switch {
		case err != nil:
			return fmt.Errorf("describe task queue %s: %w", taskQueue, err)
		case ok:
			return nil
		case !time.Now().Before(deadline):
			return &UnavailableError{TaskQueue: taskQueue, Address: c.Address, Namespace: c.Namespace}
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(pollerCheckInterval):
		}
	}
}

// hasPoller asks DescribeTaskQueue once, bounded by PollerGrace.
func (c *Client) hasPoller(ctx context.Context, taskQueue string) (bool, error) {
	dctx, cancel := context.WithTimeout(ctx, PollerGrace)
	defer cancel()
	resp, err := c.C.DescribeTaskQueue(dctx, taskQueue, queueType(taskQueue))
	if err != nil {
		return false, err
	}
	now := time.Now()
	for _, p := range resp.GetPollers() {
		if now.Sub(p.GetLastAccessTime().AsTime()) <= PollerRecency {
			return true, nil
		}
	}
	return false, nil
}

// within runs f under the call bound (CallTimeout; none when zero) and
// turns its expiry into an *UnavailableError for the control plane naming
// op. An expiry of ctx itself, or any error when ctx's own deadline comes
// first, is returned unchanged.
//
// The bound's expiry is recognised by the bound's context or by the error
// kind: the server enforces the same deadline (gRPC sends it along) and
// may cancel the call a moment before the local timer fires.
func (c *Client) within(ctx context.Context, op string, f func(context.Context) error) error {
	return c.withinScaled(ctx, op, 1, f)
}

// withinScaled is within with scale × CallTimeout as the bound, for a call
// that does the work of several (a batch).
func (c *Client) withinScaled(ctx context.Context, op string, scale int, f func(context.Context) error) error {
	if c.CallTimeout <= 0 {
		return retryNotReady(ctx, f)
	}
	wait := c.CallTimeout * time.Duration(max(scale, 1))
	cctx, cancel := context.WithTimeout(ctx, wait)
	defer cancel()
	err := retryNotReady(cctx, f)
	// The bound is the effective deadline unless the caller's is earlier.
	bound, _ := cctx.Deadline()
	parent, hasParent := ctx.Deadline()
	ours := !hasParent || parent.After(bound)
	if err != nil && ours && ctx.Err() == nil && (cctx.Err() != nil || timedOut(err)) {
		return &UnavailableError{TaskQueue: api.ControlTaskQueue, Address: c.Address, Namespace: c.Namespace, Op: op, Waited: wait}
	}
	return err
}

// timedOut reports whether err says a call timed out or was cancelled,
// in any of the forms the SDK and gRPC return.
func timedOut(err error) bool {
	var updateTimeout *client.WorkflowUpdateServiceTimeoutOrCanceledError
	var deadline *serviceerror.DeadlineExceeded
	var canceled *serviceerror.Canceled
	switch {
	case errors.Is(err, context.DeadlineExceeded), errors.Is(err, context.Canceled),
		errors.As(err, &updateTimeout), errors.As(err, &deadline), errors.As(err, &canceled):
		return true
	}
	switch status.Code(err) {
	case codes.DeadlineExceeded, codes.Canceled:
		return true
	}
	return false
}

// notReadyTries bounds how often a call answered "workflow not ready" is
// tried, 100 ms apart and doubling (about 1.5 s in all).
const notReadyTries = 5

// retryNotReady calls f again when Temporal answers WorkflowNotReady: the
// workflow task that was to take an update failed and is retried by the
// server (for example a run that completes just as a child's completion
// arrives fails its task with UnhandledCommand), or a query came before
// the workflow's first task. Nothing of the failed task was applied, so
// sending the update again is safe.
func retryNotReady(ctx context.Context, f func(context.Context) error) error {
	wait := 100 * time.Millisecond
	for try := 1; ; try++ {
		err := f(ctx)
		var notReady *serviceerror.WorkflowNotReady
		if !errors.As(err, &notReady) || try == notReadyTries {
			return err
		}
		select {
		case <-ctx.Done():
			return err
		case <-time.After(wait):
		}
		wait *= 2
	}
}
