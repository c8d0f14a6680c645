package activities

import (
	"context"
	"errors"
	"fmt"
	"time"

	"go.temporal.io/api/serviceerror"
	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/temporal"

	"github.com/wdc-runtime/wdc/api"
	"github.com/wdc-runtime/wdc/identity"
	"github.com/wdc-runtime/wdc/internal/executor"
	"github.com/wdc-runtime/wdc/launchers"
	"github.com/wdc-runtime/wdc/lease"
)

// Agent are the activities of one fleet worker's agent, on its task queue
// api.AgentTaskQueue(worker): they run Local attempts through Launcher.
type Agent struct {
	WorkerID string
	Launcher launchers.Launcher
	// Incarnation is the agent's current registration's incarnation (0
	// before it registered); nil skips the incarnation check.
	Incarnation func() int64
	// Signer, when set, signs each launch failure's detail
	// (api.LaunchFailure) with the worker's SVID.
	Signer *identity.Signer
	// Verifier judges each launch's api.LaunchInput.Authority, its
	// submitter's signature over the task (identity.Verifier.Authority):
	// in mode required an unsigned launch starts nothing. Nil (identity
	// off) launches unsigned work.
	Verifier *identity.Verifier
}

// LaunchAttempt starts an attempt and returns once it runs; the executor
// then owns it. A launch that is already past its deadline
// (activity.GetInfo(ctx).Deadline, the schedule-to-close timeout: an agent
// that was frozen or partitioned may receive it late) starts nothing; the
// launcher checks the deadline again, and that the lease is still current,
// right before the command starts.
//
// A launch reserved under an earlier incarnation of the worker (one queued
// for the agent before it restarted, whose reservation its registration
// reported lost) starts nothing either; one of a later incarnation waits
// for the registration that made it to return (awaitIncarnation).
//
// Errors: a non-retryable launch_failed ApplicationError, whose detail is
// the signed api.LaunchFailure (failed), when the attempt is for another
// worker or incarnation, its launch is past its deadline, its lease is not
// current or cannot be verified, or it cannot start (bad command, missing
// input) — the task turns that into a launch_failed retry on a new
// attempt.
func (a *Agent) LaunchAttempt(ctx context.Context, in api.LaunchInput) (api.LaunchResult, error) {
	if in.Lease.WorkerID != a.WorkerID {
		return api.LaunchResult{}, a.failed(in, fmt.Sprintf("lease is for worker %q, this agent is %q", in.Lease.WorkerID, a.WorkerID), nil)
	}
	if rej := a.authorize(ctx, in); rej != nil {
		if activity.IsActivity(ctx) {
			activity.GetLogger(ctx).Warn("launch refused", "task", in.Lease.TaskID, "attempt", in.Lease.Attempt, "fence", in.Lease.Fence, "reason", rej.Reason, "detail", rej.Message)
		}
		// Unsigned: the worker vouches only for launches of the task's
		// own execution. A signed failure of this claim, taken to the
		// genuine launch, would let its task skip the lock-delay.
		return api.LaunchResult{}, unsignedFailure(in, fmt.Sprintf("attempt %d (fence %d) not started: %s: %s", in.Lease.Attempt, in.Lease.Fence, rej.Reason, rej.Message))
	}
	if a.Incarnation != nil && in.Incarnation != 0 {
		if mine := a.awaitIncarnation(ctx, in.Incarnation); mine != in.Incarnation {
			if activity.IsActivity(ctx) {
				activity.GetLogger(ctx).Warn("launch refused: reserved for another incarnation", "task", in.Lease.TaskID, "worker", in.Lease.WorkerID,
					"attempt", in.Lease.Attempt, "fence", in.Lease.Fence, "reserved_incarnation", in.Incarnation, "incarnation", mine)
			}
			return api.LaunchResult{}, a.failed(in, fmt.Sprintf("attempt %d (fence %d) not started: reserved for incarnation %d of worker %s, this agent is incarnation %d",
				in.Lease.Attempt, in.Lease.Fence, in.Incarnation, a.WorkerID, mine), nil)
		}
	}
	var deadline time.Time
	if activity.IsActivity(ctx) {
		deadline = activity.GetInfo(ctx).Deadline
	}
	if err := launchers.Expired(ctx, deadline, time.Now()); err != nil {
		if activity.IsActivity(ctx) {
			activity.GetLogger(ctx).Warn("launch refused", "task", in.Lease.TaskID, "worker", in.Lease.WorkerID, "attempt", in.Lease.Attempt, "fence", in.Lease.Fence, "error", err)
		}
		return api.LaunchResult{}, a.failed(in, fmt.Sprintf("attempt %d (fence %d) not started: %v", in.Lease.Attempt, in.Lease.Fence, err), err)
	}
	attempt := launchers.Attempt{Envelope: in.Envelope, Lease: in.Lease, HeartbeatInterval: in.HeartbeatInterval}
	if activity.IsActivity(ctx) {
		attempt.StillCurrent = launchStillWanted(ctx)
	}
	sub, err := a.Launcher.Submit(ctx, attempt)
	if err != nil {
		// wdc's own line about the attempt, whatever the launcher: the
		// SDK's "Activity error." line names only Temporal's activity
		// attempt and worker identity.
		if activity.IsActivity(ctx) {
			activity.GetLogger(ctx).Warn("launch failed", "task", in.Lease.TaskID, "worker", in.Lease.WorkerID, "attempt", in.Lease.Attempt, "fence", in.Lease.Fence, "error", err)
		}
		return api.LaunchResult{}, a.failed(in, err.Error(), err)
	}
	return api.LaunchResult{TaskDir: sub.TaskDir, PID: sub.PID}, nil
}

// authorize is what a launch must be before the agent creates or starts
// anything for it: an attempt the executor accepts (executor.CheckAttempt:
// a valid sealed envelope of the lease's task and digest), signed by its
// submitter (Verifier.Authority over its api.TaskAuthority) and, with
// identity on, scheduled by the task itself (scheduledByTask). It returns
// nil or the rejection.
func (a *Agent) authorize(ctx context.Context, in api.LaunchInput) *lease.Rejection {
	if err := executor.CheckAttempt(launchers.Attempt{Envelope: in.Envelope, Lease: in.Lease, HeartbeatInterval: in.HeartbeatInterval}); err != nil {
		return &lease.Rejection{Reason: lease.RejectInvalidInput, Message: err.Error()}
	}
	if _, rej := a.Verifier.Authority(time.Now(), api.TaskAuthorityKind, api.TaskAuthorityOf(in.Envelope, in.Lease.EnvelopeDigest), in.Authority); rej != nil {
		return rej
	}
	if !a.Verifier.Enabled() || !activity.IsActivity(ctx) {
		return nil
	}
	return scheduledByTask(ctx, in.Lease.TaskID)
}

// scheduledByTask refuses a launch that task taskID's own execution did
// not schedule: the server names the workflow that scheduled an activity
// (no client can), and only WdcTask on api.ControlTaskQueue runs wdc's
// code, which checked its input at start and launches only its current
// lease. Any other workflow (an attacker's own, or a look-alike under the
// task's ID on a queue of its own) could replay a signed envelope under a
// lease of its making. It returns nil or the rejection (wrong_task; or
// unauthenticated when the scheduler cannot be described).
func scheduledByTask(ctx context.Context, taskID string) *lease.Rejection {
	info := activity.GetInfo(ctx)
	want := api.TaskWorkflowID(taskID)
	if info.WorkflowExecution.ID != want {
		return &lease.Rejection{Reason: lease.RejectWrongTask, Message: fmt.Sprintf("scheduled by workflow %s, not by task %s (%s)", info.WorkflowExecution.ID, taskID, want)}
	}
	dctx, cancel := context.WithTimeout(ctx, describeTimeout)
	defer cancel()
	desc, err := activity.GetClient(ctx).DescribeWorkflowExecution(dctx, info.WorkflowExecution.ID, info.WorkflowExecution.RunID)
	if err != nil {
		return &lease.Rejection{Reason: lease.RejectUnauthenticated, Message: fmt.Sprintf("the scheduling workflow %s cannot be described: %v", want, err)}
	}
	if why := notWdcTask(desc.GetWorkflowExecutionInfo()); why != "" {
		return &lease.Rejection{Reason: lease.RejectWrongTask, Message: "scheduled by a look-alike: " + why}
	}
	return nil
}

// describeTimeout bounds scheduledByTask's description of the task.
const describeTimeout = 10 * time.Second

// failed is LaunchAttempt's error: non-retryable launch_failed with msg
// and cause, detailed by the api.LaunchFailure of in's claim, signed by
// a.Signer when set (unsigned if signing fails: the task then waits a
// lock-delay before the next attempt, as for any unsigned failure).
func (a *Agent) failed(in api.LaunchInput, msg string, cause error) error {
	f := api.LaunchFailure{Claim: lease.ClaimOf(in.Lease), Detail: msg}
	if a.Signer != nil {
		p, err := a.Signer.Sign(api.LaunchFailedReport, f, time.Now())
		if err == nil {
			f.Proof = p
		}
	}
	return temporal.NewNonRetryableApplicationError(msg, api.ErrTypeLaunchFailed, cause, f)
}

// unsignedFailure is failed without the worker's signature, for a launch
// the agent refused to vouch for (authorize).
func unsignedFailure(in api.LaunchInput, msg string) error {
	return temporal.NewNonRetryableApplicationError(msg, api.ErrTypeLaunchFailed, nil, api.LaunchFailure{Claim: lease.ClaimOf(in.Lease), Detail: msg})
}

// incarnationWait bounds how long a launch reserved under a newer
// incarnation than the agent knows waits for its registration to return.
const incarnationWait = 10 * time.Second

// awaitIncarnation is the agent's incarnation once it is at least want:
// a reservation of incarnation N+1 can reach the agent before its
// registration's answer does. It returns sooner with a lower one when ctx
// ends or incarnationWait passes.
func (a *Agent) awaitIncarnation(ctx context.Context, want int64) int64 {
	deadline := time.Now().Add(incarnationWait)
	for {
		mine := a.Incarnation()
		if mine >= want || !time.Now().Before(deadline) {
			return mine
		}
		select {
		case <-ctx.Done():
			return mine
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// launchStillWanted is the lease check of a launch, which its task
// cancels when the lease ends (api.LaunchInput): one
// synchronous heartbeat of the launch activity, answered by the Temporal
// server alone. The lease is current while the launch is neither
// cancelled nor gone (timed out, or its task ended); the workflow task
// that ends a lease also requests the launch's cancellation, so this sees
// what a lease query would see, without a round trip through the
// control plane. Errors: *executor.Rejected (lease_not_active) when the
// launch was cancelled or is gone; executor.ErrLeaseUnverified (wrapped)
// when the heartbeat fails otherwise.
func launchStillWanted(actx context.Context) func(context.Context) error {
	c, token := activity.GetClient(actx), activity.GetInfo(actx).TaskToken
	return func(ctx context.Context) error {
		err := c.RecordActivityHeartbeat(ctx, token)
		var cancelled *temporal.CanceledError
		var notFound *serviceerror.NotFound
		switch {
		case err == nil:
			return nil
		case errors.As(err, &cancelled):
			return &executor.Rejected{Reason: string(lease.RejectLeaseNotActive), Message: "the task cancelled this launch: the lease ended before the command started"}
		case errors.As(err, &notFound):
			return &executor.Rejected{Reason: string(lease.RejectLeaseNotActive), Message: "the task no longer waits for this launch (it timed out, or the task ended)"}
		}
		return fmt.Errorf("%w: launch heartbeat: %w", executor.ErrLeaseUnverified, err)
	}
}

// CancelAttempt stops an attempt whose lease ended (best effort).
func (a *Agent) CancelAttempt(ctx context.Context, in api.CancelAttemptInput) error {
	return a.Launcher.Cancel(ctx, in.Claim, in.Reason)
}
