package workflows

import (
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sort"
	"time"

	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/workflow"

	"github.com/wdc-runtime/wdc/api"
	"github.com/wdc-runtime/wdc/envelope"
	"github.com/wdc-runtime/wdc/fleet"
)

// WdcRun is the parent of a run's tasks (workflow ID api.RunWorkflowID).
// Tasks are added by the add-task(s) updates and run as WdcTask workflows,
// each batch started by one StartTasks activity (older runs: as children,
// parent-close policy ABANDON); each signals task-ended when it ended, the
// run then reads the outcome from the task itself (verifyReports), and the
// reconcile finds those that close without.
// Parent ingest appends one worker_result event per accepted result.
// Evidence, parent_time and the TCD digest change only through the
// commit update (invariant 4).
//
// The run ends once it is closed (close update, or CloseWhenDone) and every
// task has ended.
func WdcRun(ctx workflow.Context, in api.RunInput) (api.RunState, error) {
	if err := startedAsWdcStartsIt(ctx); err != nil {
		return api.RunState{}, err
	}
	if in.Carry != nil && !continued(ctx) {
		workflow.GetLogger(ctx).Warn("carry ignored: only continue-as-new carries a run's state", "run", in.RunID)
		in.Carry = nil
	}
	r, err := newRunWorkflow(in)
	if err != nil {
		return api.RunState{}, temporal.NewNonRetryableApplicationError(err.Error(), api.ErrTypeInvalidArgument, nil)
	}
	if err := r.setup(ctx); err != nil {
		return api.RunState{}, err
	}
	return r.run(ctx)
}

type runWorkflow struct {
	st       api.RunState
	wake     workflow.Channel
	endedCh  workflow.ReceiveChannel
	starting int
	saDone   bool

	// childDone receives the outcome of each child started by this run
	// (not by a run it continued from), from the child's own completion:
	// a task that ends without reporting (terminated, failed, timed out)
	// is still recorded.
	childDone workflow.Channel
	// watched are the tasks whose child this run watches, and those being
	// started.
	watched map[string]bool
	// admits counts admit calls; admittedAt is each task's count at its
	// last admit (a reconcile ignores closures older than that).
	admits     int64
	admittedAt map[string]int64
	// reconcile is the armed timer after which tasks the run cannot watch
	// are looked up (nil when none is armed).
	reconcile workflow.Future
	// index maps each listed task's ID to its position in st.Tasks.
	index map[string]int
	// carryTooLarge is set when the state, compacted, was too large to
	// carry into a continue-as-new; it is tried again after a commit.
	carryTooLarge bool
	// endedAs is the outcome each task that ended in this run ended with
	// (endedKey), so a later, differing report is told from a repeat.
	endedAs map[string]string
	// shown is what the current details last showed (showDetails).
	shown runDetailsKey
	// reported are the tasks named by a task-ended signal whose outcome is
	// still to be read from the task itself (verifyReports), in arrival
	// order; reportedSet holds the same IDs and those being verified.
	reported    []string
	reportedSet map[string]bool
	// verify is the ReconcileTasks activity reading the outcomes of
	// verifying (nil when none runs); verifySince is r.admits at its start.
	verify      workflow.Future
	verifying   []string
	verifySince int64
	// inStart are the tasks a StartTasks activity of this run is starting
	// (startBatch); reportedInStart are those whose report was read while
	// they were, queued again once their start returns; reportedAgain
	// those reported again while being verified (rereadTaskReports).
	inStart         map[string]bool
	reportedInStart map[string]bool
	reportedAgain   map[string]bool
	// reconciles counts reconcileUnwatched calls, sweepFrom is where the
	// next sweep of open tasks starts (sweepEvery).
	reconciles, sweepFrom int
}

// startHeartbeat and startBackoff bound how long a batch's start waits
// for a control plane killed under its StartTasks activity: the
// activity's heartbeat timeout and its retry policy's MaximumInterval.
const (
	startHeartbeat = 10 * time.Second
	startBackoff   = 5 * time.Second
)

// childDoneBuffer is the capacity of the channel of child outcomes: more
// than a run ever has open at once (the buffer grows as needed).
const childDoneBuffer = 1 << 20

// maxCarryBytes is the largest continue-as-new input a run sends, under
// Temporal's 2 MiB payload limit with room for the rest of the command.
const maxCarryBytes = 1900 << 10

// startTasksByActivity is the change ID of starting a batch's tasks with
// one StartTasks activity (version 1) instead of a child each (default).
// Retire it as docs/upgrading.md says: once every open WdcRun has
// continued as new on a build that has it, delete the DefaultVersion
// branch (startTask, awaitStart, watchChild, childDone) and this constant.
const startTasksByActivity = "start-tasks-by-activity"

// verifyTaskReports is the change ID of reading a task's outcome from the
// task itself when its task-ended signal arrives (version 1) instead of
// taking the signal's content (default), so a signal anyone can send
// cannot end a task or add a worker_result. Retire it as
// docs/upgrading.md says: once every open WdcRun has continued as new on
// a build that has it, make noteTaskEnded unconditional.
const verifyTaskReports = "verify-task-reports"

// rereadTaskReports is the change ID of reading a task again when its
// report or a batch meets it mid-start or mid-verify (version 1): a report
// read while the task was starting is read again once the start returns,
// one that arrived while the task was being verified is read again after,
// a batch naming a task being started waits for the start before it looks
// the task up, and every sweepEvery reconciles the run looks its open
// tasks up by ID. Before (default), the report was dropped and the batch
// took the task as existing. GetVersion is called only when such a case
// arises. Retire it as docs/upgrading.md says: once every open WdcRun has
// continued as new on a build that has it.
const rereadTaskReports = "reread-task-reports"

// sweepEvery is how many reconciles of unwatched tasks pass between two
// look-ups of the run's open tasks by ID (up to maxVerifyBatch of them,
// in turn): a task whose report was lost is found, whatever the cause.
const sweepEvery = 10

// maxVerifyBatch is the most reported tasks one ReconcileTasks activity
// reads the outcome of.
const maxVerifyBatch = 256

// reconcileInterval is how often a run looks for tasks it does not watch
// that closed without reporting (tasks started by StartTasks, and children
// started before a continue-as-new).
const reconcileInterval = time.Minute

// InitialTCD is a run's TCD digest before any commit.
func InitialTCD(runID, worldID string) (string, error) {
	return envelope.DigestOf(struct {
		RunID      string `json:"run_id"`
		WorldID    string `json:"world_id"`
		ParentTime int64  `json:"parent_time"`
	}{runID, worldID, 0})
}

// NextTCD chains a commit onto the previous TCD digest.
func NextTCD(prev string, parentTime int64, committed []api.ResultRef) (string, error) {
	return envelope.DigestOf(struct {
		Previous   string          `json:"previous"`
		ParentTime int64           `json:"parent_time"`
		Committed  []api.ResultRef `json:"committed"`
	}{prev, parentTime, committed})
}

func newRunWorkflow(in api.RunInput) (*runWorkflow, error) {
	if in.Carry != nil {
		r := &runWorkflow{st: *in.Carry}
		r.loadCarry()
		for _, id := range r.st.Reported {
			r.noteReport(id)
		}
		r.st.Reported = nil
		return r, nil
	}
	if err := fleet.ValidateID("run_id", in.RunID); err != nil {
		return nil, err
	}
	if err := fleet.ValidateID("world_id", in.WorldID); err != nil {
		return nil, err
	}
	tcd, err := InitialTCD(in.RunID, in.WorldID)
	if err != nil {
		return nil, err
	}
	return &runWorkflow{st: api.RunState{
		RunID: in.RunID, WorldID: in.WorldID, Status: api.RunRunning, CloseWhenDone: in.CloseWhenDone,
		Tasks: []api.RunTask{}, Events: []api.Event{}, TCDDigest: tcd,
	}, index: map[string]int{}}, nil
}

// loadCarry derives what a carried state does not hold: the task index,
// the pending bytes and the open count (all open tasks are listed).
func (r *runWorkflow) loadCarry() {
	if r.st.Tasks == nil {
		r.st.Tasks = []api.RunTask{}
	}
	if r.st.Events == nil {
		r.st.Events = []api.Event{}
	}
	r.rebuildIndex()
	r.st.TaskCounts.Open = 0
	r.st.PendingBytes = 0
	for _, t := range r.st.Tasks {
		if !t.State.Terminal() {
			r.st.TaskCounts.Open++
			r.st.PendingBytes += api.PendingTaskBytes(t.TaskID)
		}
	}
	for _, e := range r.st.Events {
		if e.Type == api.EventWorkerResult && !e.Committed {
			r.st.PendingBytes += eventBytes(e)
		}
	}
}

// countEnded adds n to the count of ended tasks in state s (nothing for a
// state that has not ended).
func countEnded(c *api.RunTaskCounts, s api.TaskState, n int64) {
	switch s {
	case api.TaskCompleted:
		c.Completed += n
	case api.TaskRetriesExhausted:
		c.RetriesExhausted += n
	case api.TaskCancelled:
		c.Cancelled += n
	case api.TaskAborted:
		c.Aborted += n
	}
}

// eventBytes is an event's size in the run's state: its JSON length.
func eventBytes(e api.Event) int64 {
	b, err := json.Marshal(e)
	if err != nil {
		return 0
	}
	return int64(len(b))
}

func (r *runWorkflow) rebuildIndex() {
	r.index = make(map[string]int, len(r.st.Tasks))
	for i, t := range r.st.Tasks {
		r.index[t.TaskID] = i
	}
}

func (r *runWorkflow) setup(ctx workflow.Context) error {
	r.wake = workflow.NewBufferedChannel(ctx, 1)
	r.endedCh = workflow.GetSignalChannelWithOptions(ctx, api.SignalTaskEnded, workflow.SignalChannelOptions{Description: descTaskEnded})
	r.childDone = workflow.NewBufferedChannel(ctx, childDoneBuffer)
	r.watched = map[string]bool{}
	r.admittedAt = map[string]int64{}
	r.inStart, r.reportedInStart, r.reportedAgain = map[string]bool{}, map[string]bool{}, map[string]bool{}
	if err := workflow.SetQueryHandlerWithOptions(ctx, api.QueryRun, func() (api.RunView, error) { return r.st, nil },
		workflow.QueryHandlerOptions{Description: descRunQuery}); err != nil {
		return err
	}
	if err := workflow.SetUpdateHandlerWithOptions(ctx, api.UpdateAddTask, r.addTask, workflow.UpdateHandlerOptions{Validator: r.validateAddTask, Description: descAddTask}); err != nil {
		return err
	}
	if err := workflow.SetUpdateHandlerWithOptions(ctx, api.UpdateAddTasks, r.addTasks, workflow.UpdateHandlerOptions{Validator: r.validateAddTasks, Description: descAddTasks}); err != nil {
		return err
	}
	if err := workflow.SetUpdateHandlerWithOptions(ctx, api.UpdateCommit, r.commit, workflow.UpdateHandlerOptions{Validator: r.validateCommit, Description: descCommit}); err != nil {
		return err
	}
	return workflow.SetUpdateHandlerWithOptions(ctx, api.UpdateCloseRun, func(ctx workflow.Context, in api.CloseRunInput) (api.RunView, error) {
		r.st.Closed = true
		r.wake.SendAsync(true)
		return r.st, nil
	}, workflow.UpdateHandlerOptions{Description: descCloseRun, Validator: func(ctx workflow.Context, in api.CloseRunInput) error {
		unsigned := in
		unsigned.Proof = nil
		return authenticateSubmitter(ctx, api.UpdateCloseRun, unsigned, in.Proof)
	}})
}

func (r *runWorkflow) run(ctx workflow.Context) (api.RunState, error) {
	r.publish(ctx)
	for {
		r.refreshStatus()
		r.showDetails(ctx)
		if r.st.Closed && r.starting == 0 && r.allEnded() {
			if err := workflow.Await(ctx, func() bool { return workflow.AllHandlersFinished(ctx) }); err != nil {
				return r.st, err
			}
			r.publish(ctx)
			return r.st, nil
		}
		if workflow.GetInfo(ctx).GetContinueAsNewSuggested() && !r.carryTooLarge {
			if err := r.continueAsNew(ctx); err != nil {
				return r.st, err
			}
		}
		r.armReconcile(ctx)
		sel := workflow.NewSelector(ctx)
		r.verifyReports(ctx)
		sel.AddReceive(r.endedCh, func(c workflow.ReceiveChannel, _ bool) {
			var out api.TaskEndedSignal
			c.Receive(ctx, &out)
			r.noteTaskEnded(ctx, out)
		})
		sel.AddReceive(r.childDone, func(c workflow.ReceiveChannel, _ bool) {
			var out api.TaskEndedSignal
			c.Receive(ctx, &out)
			r.onTaskEnded(ctx, out)
		})
		sel.AddReceive(r.wake, func(c workflow.ReceiveChannel, _ bool) { c.Receive(ctx, nil) })
		if r.reconcile != nil {
			sel.AddFuture(r.reconcile, func(workflow.Future) {
				r.reconcile = nil
				r.reconcileUnwatched(ctx)
			})
		}
		if r.verify != nil {
			sel.AddFuture(r.verify, func(f workflow.Future) { r.verified(ctx, f) })
		}
		sel.Select(ctx)
		if ctx.Err() != nil {
			return r.st, temporal.NewCanceledError("run cancelled")
		}
	}
}

// unwatched lists the tasks that have not ended and that this run does not
// watch (started by StartTasks, or as children before a continue-as-new).
func (r *runWorkflow) unwatched() []string {
	var ids []string
	for _, t := range r.st.Tasks {
		if !t.State.Terminal() && !r.watched[t.TaskID] {
			ids = append(ids, t.TaskID)
		}
	}
	return ids
}

// armReconcile arms the reconcile timer while some task is unwatched.
func (r *runWorkflow) armReconcile(ctx workflow.Context) {
	if r.reconcile != nil || r.starting > 0 || len(r.unwatched()) == 0 {
		return
	}
	r.reconcile = workflow.NewTimerWithOptions(ctx, reconcileInterval, workflow.TimerOptions{
		Summary: fmt.Sprintf("reconcile %d unwatched tasks", len(r.unwatched())),
	})
}

// reconcileUnwatched finds the tasks of this run whose workflow closed
// without reporting (ReconcileTasks in list mode) and records them, as
// ABORTED (ended without a result) or with their outcome.
func (r *runWorkflow) reconcileUnwatched(ctx workflow.Context) {
	ids := r.unwatched()
	if len(ids) == 0 {
		return
	}
	r.reconciles++
	if r.reconciles%sweepEvery == 0 && workflow.GetVersion(ctx, rereadTaskReports, workflow.DefaultVersion, 1) == 1 {
		// A look by ID also finds a task that completed and whose report
		// was lost (visibility lists only those closed without an outcome).
		start := r.sweepFrom % len(ids)
		ids = slices.Concat(ids[start:], ids[:start])[:min(len(ids), maxVerifyBatch)]
		r.sweepFrom = start + len(ids)
		r.reconcileTasks(ctx, api.ReconcileTasksInput{RunID: r.st.RunID, TaskIDs: ids},
			fmt.Sprintf("ReconcileTasks sweep of %d open tasks", len(ids)))
		return
	}
	r.reconcileTasks(ctx, api.ReconcileTasksInput{RunID: r.st.RunID, ListClosed: true},
		fmt.Sprintf("ReconcileTasks of %d unwatched tasks", len(ids)))
}

// reconcileTasks runs ReconcileTasks and records each closed task it
// returns that the run lists as open and does not watch, unless it was
// admitted again while the activity ran (the closure is its last
// execution's).
func (r *runWorkflow) reconcileTasks(ctx workflow.Context, in api.ReconcileTasksInput, summary string) {
	actx := workflow.WithActivityOptions(ctx, workflow.ActivityOptions{
		TaskQueue:           api.ControlTaskQueue,
		StartToCloseTimeout: 2 * time.Minute,
		HeartbeatTimeout:    30 * time.Second,
		RetryPolicy:         &temporal.RetryPolicy{MaximumAttempts: 3},
		Summary:             summary,
	})
	since := r.admits
	var res api.ReconcileTasksResult
	if err := workflow.ExecuteActivity(actx, controlActs.ReconcileTasks, in).Get(ctx, &res); err != nil {
		workflow.GetLogger(ctx).Warn("reconcile tasks", "run", r.st.RunID, "error", err)
		return
	}
	r.recordReconciled(ctx, res, since)
}

// recordReconciled records each task of res that the run lists as open
// and does not watch, unless it was admitted again after since (r.admits
// when the activity started).
func (r *runWorkflow) recordReconciled(ctx workflow.Context, res api.ReconcileTasksResult, since int64) {
	for _, c := range res.Closed {
		if r.watched[c.TaskID] || r.admittedAt[c.TaskID] > since {
			continue
		}
		out := api.TaskEndedSignal{TaskID: c.TaskID, RunID: r.st.RunID, State: api.TaskAborted}
		if c.Outcome != nil && c.Outcome.State.Terminal() {
			out = *c.Outcome
		}
		r.onTaskEndedDetail(ctx, out, "workflow "+c.Status)
	}
}

// noteTaskEnded takes a task-ended signal. At verifyTaskReports version 1
// it is only a hint: the task is queued for verifyReports, which reads the
// outcome from the task's own workflow. Before, the signal's outcome was
// recorded as sent.
func (r *runWorkflow) noteTaskEnded(ctx workflow.Context, out api.TaskEndedSignal) {
	if workflow.GetVersion(ctx, verifyTaskReports, workflow.DefaultVersion, 1) == workflow.DefaultVersion {
		r.onTaskEnded(ctx, out)
		return
	}
	r.noteReport(out.TaskID)
}

// noteReport queues a task for verifyReports, once, if the run lists it
// as open.
func (r *runWorkflow) noteReport(taskID string) {
	if t := r.task(taskID); t == nil || t.State.Terminal() {
		return
	}
	if r.reportedSet[taskID] {
		if slices.Contains(r.verifying, taskID) {
			r.reportedAgain[taskID] = true
		}
		return
	}
	if r.reportedSet == nil {
		r.reportedSet = map[string]bool{}
	}
	r.reportedSet[taskID] = true
	r.reported = append(r.reported, taskID)
}

// verifyReports starts one ReconcileTasks activity (Reported) for up to
// maxVerifyBatch queued tasks, unless one runs: reports that arrive
// meanwhile wait for the next, so a busy run verifies in batches.
func (r *runWorkflow) verifyReports(ctx workflow.Context) {
	if r.verify != nil || len(r.reported) == 0 {
		return
	}
	n := min(len(r.reported), maxVerifyBatch)
	r.verifying = append([]string(nil), r.reported[:n]...)
	r.reported = append([]string(nil), r.reported[n:]...)
	r.verifySince = r.admits
	actx := workflow.WithActivityOptions(ctx, workflow.ActivityOptions{
		TaskQueue:           api.ControlTaskQueue,
		StartToCloseTimeout: 2 * time.Minute,
		HeartbeatTimeout:    30 * time.Second,
		Summary:             fmt.Sprintf("ReconcileTasks of %d reported tasks", n),
	})
	r.verify = workflow.ExecuteActivity(actx, controlActs.ReconcileTasks,
		api.ReconcileTasksInput{RunID: r.st.RunID, TaskIDs: r.verifying, Reported: true})
}

// verified records the outcomes verifyReports read. A reported task still
// open afterwards did not say it ended: its signal is logged, counted
// (api.MetricTaskReportsUnverified) and dropped. When the activity failed
// (it retries until it succeeds, so only on cancellation) the tasks are
// queued again.
func (r *runWorkflow) verified(ctx workflow.Context, f workflow.Future) {
	ids := r.verifying
	r.verify, r.verifying = nil, nil
	var res api.ReconcileTasksResult
	if err := f.Get(ctx, &res); err != nil {
		workflow.GetLogger(ctx).Warn("verify task reports", "run", r.st.RunID, "error", err)
		r.reported = append(ids, r.reported...)
		return
	}
	r.recordReconciled(ctx, res, r.verifySince)
	for _, id := range ids {
		delete(r.reportedSet, id)
		again := r.reportedAgain[id]
		delete(r.reportedAgain, id)
		if r.inStart[id] && workflow.GetVersion(ctx, rereadTaskReports, workflow.DefaultVersion, 1) == 1 {
			// Its execution may be the one this start replaces: read it
			// again once the start returns.
			r.reportedInStart[id] = true
			continue
		}
		open := func() bool { t := r.task(id); return t != nil && !t.State.Terminal() && !r.watched[id] }
		if again && open() && workflow.GetVersion(ctx, rereadTaskReports, workflow.DefaultVersion, 1) == 1 {
			// Reported again after it was read: it may have ended since.
			r.noteReport(id)
			continue
		}
		if open() {
			workflow.GetLogger(ctx).Warn("task-ended signal for a task that has not ended; ignored", "run", r.st.RunID, "task", id)
			count(ctx, api.MetricTaskReportsUnverified, "")
		}
	}
}

// pendingReports are the tasks queued or being verified, for a
// continue-as-new to carry.
func (r *runWorkflow) pendingReports() []string {
	return append(append([]string(nil), r.verifying...), r.reported...)
}

// watchChild records the child's own outcome when it closes, whatever the
// way: its result if it completed, ABORTED if it was terminated, failed or
// timed out. The task-ended signal normally arrives first; the later of
// the two is ignored.
func (r *runWorkflow) watchChild(ctx workflow.Context, taskID string, child workflow.ChildWorkflowFuture) {
	workflow.Go(ctx, func(gctx workflow.Context) {
		var out api.TaskOutcome
		if err := child.Get(gctx, &out); err != nil || !out.State.Terminal() {
			out = api.TaskOutcome{TaskID: taskID, RunID: r.st.RunID, State: api.TaskAborted}
		}
		r.childDone.Send(gctx, out)
	})
}

func (r *runWorkflow) validateAddTask(ctx workflow.Context, in api.AddTaskInput) error {
	if err := r.validateTask(in); err != nil {
		return err
	}
	unsigned := in
	unsigned.Proof = nil
	if err := authenticateSubmitter(ctx, api.UpdateAddTask, unsigned, in.Proof); err != nil {
		countRejected(ctx, err)
		return err
	}
	if err := authenticateAuthority(ctx, in); err != nil {
		countRejected(ctx, err)
		return err
	}
	if t := r.task(in.Envelope.TaskID); t != nil && t.State != api.TaskAborted {
		return nil // idempotent re-add
	}
	return r.checkRoom(api.PendingTaskBytes(in.Envelope.TaskID), 1)
}

// validateTask is validateAddTask without the room check.
func (r *runWorkflow) validateTask(in api.AddTaskInput) error {
	bad := func(format string, args ...any) error {
		return temporal.NewApplicationError(fmt.Sprintf(format, args...), api.ErrTypeInvalidArgument)
	}
	if err := in.Envelope.Validate(true); err != nil {
		return bad("%v", err)
	}
	digest, err := in.Envelope.Digest()
	if err != nil {
		return bad("%v", err)
	}
	if digest != in.EnvelopeDigest {
		return bad("envelope_digest: %s does not match the envelope (%s)", in.EnvelopeDigest, digest)
	}
	if in.Envelope.RunID != r.st.RunID {
		return bad("envelope.run_id: %q, this is run %q", in.Envelope.RunID, r.st.RunID)
	}
	if in.Envelope.WorldID != r.st.WorldID {
		return temporal.NewApplicationError(fmt.Sprintf("envelope.world_id: %q, but run %s is in world %q", in.Envelope.WorldID, r.st.RunID, r.st.WorldID), api.ErrTypeConflict)
	}
	if err := in.Options.WithDefaults().Validate(); err != nil {
		return bad("options.%v", err)
	}
	if t := r.task(in.Envelope.TaskID); t != nil {
		if t.EnvelopeDigest != digest {
			return temporal.NewApplicationError(fmt.Sprintf("task_id %q is already in run %s with envelope %s", t.TaskID, r.st.RunID, t.EnvelopeDigest), api.ErrTypeConflict)
		}
		if t.State != api.TaskAborted {
			return nil // idempotent re-add
		}
		// An ABORTED task added again starts again, unless the run is
		// closed.
	}
	if r.st.Closed {
		return temporal.NewApplicationError(fmt.Sprintf("run %s is closed", r.st.RunID), api.ErrTypeConflict)
	}
	return nil
}

// checkRoom refuses tasks whose pending bytes would take the run past
// api.MaxRunPendingBytes (ErrTypeRunFull).
func (r *runWorkflow) checkRoom(bytes int64, tasks int) error {
	if r.st.PendingBytes+bytes <= api.MaxRunPendingBytes {
		return nil
	}
	return temporal.NewApplicationError(fmt.Sprintf(
		"run %s is full: %d open tasks and %d uncommitted results take %d of its %d pending bytes, %d more task(s) need %d; it makes room as tasks end and as results are committed (wdc runs commit)",
		r.st.RunID, r.st.TaskCounts.Open, r.uncommitted(), r.st.PendingBytes, api.MaxRunPendingBytes, tasks, bytes), api.ErrTypeRunFull)
}

// uncommitted counts the uncommitted worker_result events.
func (r *runWorkflow) uncommitted() int64 {
	n := int64(0)
	for _, e := range r.st.Events {
		if e.Type == api.EventWorkerResult && !e.Committed {
			n++
		}
	}
	return n
}

// addTask starts the task and returns once it has started: a batch of
// one (addTasks) or, at DefaultVersion of startTasksByActivity, a child.
func (r *runWorkflow) addTask(ctx workflow.Context, in api.AddTaskInput) (api.AddTaskResult, error) {
	in.Proof = nil // judged by the validator; the task needs none
	if workflow.GetVersion(ctx, startTasksByActivity, workflow.DefaultVersion, 1) != workflow.DefaultVersion {
		res, errs := r.startBatch(ctx, []api.AddTaskInput{in})
		if errs[0] != "" {
			return api.AddTaskResult{}, temporal.NewApplicationError(errs[0], api.ErrTypeConflict)
		}
		r.refreshStatus()
		r.publish(ctx)
		return res[0], nil
	}
	started := r.startTask(ctx, in)
	if started.child == nil {
		return started.res, nil
	}
	defer func() { r.starting--; r.wake.SendAsync(true) }()
	if err := r.awaitStart(ctx, started); err != nil {
		return api.AddTaskResult{}, err
	}
	r.refreshStatus()
	r.publish(ctx)
	return started.res, nil
}

// validateAddTasks refuses the whole batch when any task would be refused
// alone (the error names its index), when the batch is empty or larger
// than api.MaxTasksPerBatch, names a task twice, or would take the run
// past api.MaxRunPendingBytes (ErrTypeRunFull).
func (r *runWorkflow) validateAddTasks(ctx workflow.Context, in api.AddTasksInput) error {
	bad := func(format string, args ...any) error {
		return temporal.NewApplicationError(fmt.Sprintf(format, args...), api.ErrTypeInvalidArgument)
	}
	switch n := len(in.Tasks); {
	case n == 0:
		return bad("tasks: give at least one task")
	case n > api.MaxTasksPerBatch:
		return bad("tasks: at most %d per batch (got %d)", api.MaxTasksPerBatch, n)
	}
	seen := make(map[string]int, len(in.Tasks))
	added, bytes := 0, int64(0)
	for i, t := range in.Tasks {
		if j, dup := seen[t.Envelope.TaskID]; dup {
			return bad("tasks[%d]: task_id %q is also tasks[%d]", i, t.Envelope.TaskID, j)
		}
		seen[t.Envelope.TaskID] = i
		if err := r.validateTask(in.Tasks[i]); err != nil {
			var appErr *temporal.ApplicationError
			if errors.As(err, &appErr) {
				return temporal.NewApplicationError(fmt.Sprintf("tasks[%d] (%s): %s", i, t.Envelope.TaskID, appErr.Message()), appErr.Type())
			}
			return fmt.Errorf("tasks[%d]: %w", i, err)
		}
		if e := r.task(t.Envelope.TaskID); e == nil || e.State == api.TaskAborted {
			added++
			bytes += api.PendingTaskBytes(t.Envelope.TaskID)
		}
	}
	if err := r.checkRoom(bytes, added); err != nil {
		return err
	}
	unsigned := in
	unsigned.Proof = nil
	if err := authenticateSubmitter(ctx, api.UpdateAddTasks, unsigned, in.Proof); err != nil {
		countRejected(ctx, err)
		return err
	}
	for i, t := range in.Tasks {
		if err := authenticateAuthority(ctx, t); err != nil {
			countRejected(ctx, err)
			return fmt.Errorf("tasks[%d] (%s): %w", i, t.Envelope.TaskID, err)
		}
	}
	return nil
}

// addTasks starts every task of the batch at once and returns when all
// have started (or failed to): with one StartTasks activity, or, at
// DefaultVersion of startTasksByActivity, as children.
func (r *runWorkflow) addTasks(ctx workflow.Context, in api.AddTasksInput) (api.AddTasksResult, error) {
	out := api.AddTasksResult{Results: make([]api.AddTaskResult, len(in.Tasks)), Errors: make([]string, len(in.Tasks))}
	if workflow.GetVersion(ctx, startTasksByActivity, workflow.DefaultVersion, 1) != workflow.DefaultVersion {
		out.Results, out.Errors = r.startBatch(ctx, in.Tasks)
		r.refreshStatus()
		r.publish(ctx)
		return out, nil
	}
	starts := make([]startedTask, len(in.Tasks))
	for i, t := range in.Tasks {
		starts[i] = r.startTask(ctx, t)
	}
	for i, st := range starts {
		out.Results[i] = st.res
		if st.child == nil {
			continue
		}
		if err := r.awaitStart(ctx, st); err != nil {
			out.Results[i] = api.AddTaskResult{}
			out.Errors[i] = err.Error()
		}
		r.starting--
	}
	r.wake.SendAsync(true)
	r.refreshStatus()
	r.publish(ctx)
	return out, nil
}

// startBatch admits every task of a batch and starts the admitted ones
// with one StartTasks activity: one result per task, and errs[i] saying
// why task i did not start (it is then not in the run). Tasks of the
// batch that the run lists as open but cannot watch are looked up first,
// so one an operator terminated restarts at once (as ABORTED tasks do).
// Started tasks are not watched: they report with task-ended, and the
// reconcile finds those that close without reporting.
func (r *runWorkflow) startBatch(ctx workflow.Context, ins []api.AddTaskInput) ([]api.AddTaskResult, []string) {
	results, errs := make([]api.AddTaskResult, len(ins)), make([]string, len(ins))
	if r.anyInStart(ins) && workflow.GetVersion(ctx, rereadTaskReports, workflow.DefaultVersion, 1) == 1 {
		// Whether it started or was terminated meanwhile is known once its
		// start returns. Counted as starting, the batch keeps the run from
		// ending meanwhile.
		r.starting++
		err := workflow.Await(ctx, func() bool { return !r.anyInStart(ins) })
		r.starting--
		r.wake.SendAsync(true)
		if err != nil {
			for i := range errs {
				errs[i] = err.Error()
			}
			return results, errs
		}
	}
	r.reconcileReadded(ctx, ins)
	var batch []api.StartTask
	var pos []int
	var admitted []admittedTask
	for i, in := range ins {
		if t := r.task(in.Envelope.TaskID); r.st.Closed && (t == nil || t.State == api.TaskAborted) {
			// Found terminated just now, or closed while the batch waited:
			// a closed run starts nothing.
			errs[i] = fmt.Sprintf("run %s is closed", r.st.RunID)
			continue
		}
		a := r.admit(in)
		results[i] = a.res
		if a.res.Existing {
			continue
		}
		_, input := TaskStart(r.st.RunID, in)
		batch = append(batch, api.StartTask{Input: input, Rerun: a.rerun})
		pos = append(pos, i)
		admitted = append(admitted, a)
		r.inStart[a.res.TaskID] = true
	}
	if len(batch) == 0 {
		return results, errs
	}
	actx := workflow.WithActivityOptions(ctx, startTasksOptions(len(batch)))
	var res api.StartTasksResult
	err := workflow.ExecuteActivity(actx, controlActs.StartTasks, api.StartTasksInput{RunID: r.st.RunID, Tasks: batch}).Get(ctx, &res)
	for j, i := range pos {
		why := ""
		switch {
		case err != nil:
			why = fmt.Sprintf("start task %s: %v", admitted[j].res.TaskID, err)
		case j < len(res.Errors):
			why = res.Errors[j]
		}
		if why != "" {
			r.unadmit(admitted[j])
			results[i], errs[i] = api.AddTaskResult{}, why
		}
		id := admitted[j].res.TaskID
		delete(r.watched, id)
		delete(r.inStart, id)
		if r.reportedInStart[id] {
			delete(r.reportedInStart, id)
			r.noteReport(id)
		}
		r.starting--
	}
	r.wake.SendAsync(true)
	return results, errs
}

// startTasksOptions are the options of the StartTasks activity of a batch
// of n tasks, which the batch's add waits for (startHeartbeat).
func startTasksOptions(n int) workflow.ActivityOptions {
	return workflow.ActivityOptions{
		TaskQueue:           api.ControlTaskQueue,
		StartToCloseTimeout: 2 * time.Minute,
		HeartbeatTimeout:    startHeartbeat,
		RetryPolicy:         &temporal.RetryPolicy{InitialInterval: time.Second, MaximumInterval: startBackoff},
		Summary:             fmt.Sprintf("StartTasks %d tasks", n),
	}
}

// anyInStart says whether a task of ins is being started (r.inStart).
func (r *runWorkflow) anyInStart(ins []api.AddTaskInput) bool {
	for _, in := range ins {
		if r.inStart[in.Envelope.TaskID] {
			return true
		}
	}
	return false
}

// reconcileReadded looks up the tasks of a batch that the run lists as
// open but does not watch (ReconcileTasks by ID) and records those found
// closed, before the batch is admitted. Nothing is looked up in the
// common case (no such task) or once the run is closed.
func (r *runWorkflow) reconcileReadded(ctx workflow.Context, ins []api.AddTaskInput) {
	if r.st.Closed {
		return
	}
	var ids []string
	for _, in := range ins {
		if t := r.task(in.Envelope.TaskID); t != nil && !t.State.Terminal() && !r.watched[t.TaskID] {
			ids = append(ids, t.TaskID)
		}
	}
	if len(ids) == 0 {
		return
	}
	r.reconcileTasks(ctx, api.ReconcileTasksInput{RunID: r.st.RunID, TaskIDs: ids},
		fmt.Sprintf("ReconcileTasks %d re-added tasks", len(ids)))
}

// TaskStart is how a run starts a task as its child: the child options
// (workflow ID api.TaskWorkflowID, kind, run and state PENDING set at the
// start, abandoned when the run closes; summary, details and memo for the
// UI: api.TaskSummary, api.TaskDetails, api.MemoRunID) and the input, with
// every default of its options filled in so a later change of a default
// does not change a task that already started. Workflow tests start tasks
// through it.
func TaskStart(runID string, in api.AddTaskInput) (workflow.ChildWorkflowOptions, api.TaskInput) {
	opts := in.Options.WithDefaults()
	return workflow.ChildWorkflowOptions{
			WorkflowID:            api.TaskWorkflowID(in.Envelope.TaskID),
			TaskQueue:             api.ControlTaskQueue,
			ParentClosePolicy:     enumspb.PARENT_CLOSE_POLICY_ABANDON,
			WorkflowIDReusePolicy: api.TaskIDReusePolicy(false),
			TypedSearchAttributes: api.TaskStartAttributes(runID),
			StaticSummary:         api.TaskSummary(in.Envelope),
			StaticDetails:         api.TaskDetails(in.Envelope, in.EnvelopeDigest),
			Memo:                  api.TaskMemo(runID, in.EnvelopeDigest, opts.LeaseTTL),
		}, api.TaskInput{
			Envelope: in.Envelope, EnvelopeDigest: in.EnvelopeDigest, Options: opts, Authority: in.Authority,
		}
}

// startedTask is a task whose child start was requested; child is nil
// when the task was already in the run (res.Existing).
type startedTask struct {
	admittedTask
	child workflow.ChildWorkflowFuture
}

// admittedTask is a task admit recorded; res.Existing when it was already
// in the run (nothing to start).
type admittedTask struct {
	res api.AddTaskResult
	// rerun is set when an ABORTED task is started again.
	rerun bool
}

// startTask admits the task and requests its child; the caller awaits it
// (awaitStart) and then decrements r.starting.
func (r *runWorkflow) startTask(ctx workflow.Context, in api.AddTaskInput) startedTask {
	a := r.admit(in)
	if a.res.Existing {
		return startedTask{admittedTask: a}
	}
	opts, input := TaskStart(r.st.RunID, in)
	// A rerun may reuse the terminated execution's ID; a completed one's
	// never is.
	opts.WorkflowIDReusePolicy = api.TaskIDReusePolicy(a.rerun)
	child := workflow.ExecuteChildWorkflow(workflow.WithChildOptions(ctx, opts), WdcTask, input)
	return startedTask{admittedTask: a, child: child}
}

// admit records the task in the run as PENDING, watched and starting (the
// caller starts it, then decrements r.starting); a task already in the run
// is left as it is (res.Existing).
//
// A task that ended ABORTED (its workflow closed without an outcome: an
// operator terminated it) is started again when it is added again: a new
// execution of its workflow, whose selection reserves above every fence
// the terminated one published (activities.Control.SelectWorker), so its
// fences still only increase.
func (r *runWorkflow) admit(in api.AddTaskInput) admittedTask {
	res := api.AddTaskResult{TaskID: in.Envelope.TaskID, WorkflowID: api.TaskWorkflowID(in.Envelope.TaskID), EnvelopeDigest: in.EnvelopeDigest}
	t := r.task(in.Envelope.TaskID)
	rerun := t != nil && t.State == api.TaskAborted
	switch {
	case t != nil && !rerun:
		res.Existing = true
		return admittedTask{res: res}
	case rerun:
		r.st.TaskCounts.Aborted--
		t.State, t.EndDetail = api.TaskPending, ""
		delete(r.endedAs, t.TaskID)
	default:
		r.index[in.Envelope.TaskID] = len(r.st.Tasks)
		r.st.Tasks = append(r.st.Tasks, api.RunTask{TaskID: in.Envelope.TaskID, EnvelopeDigest: in.EnvelopeDigest, State: api.TaskPending})
		r.st.TaskCounts.Total++
	}
	r.st.TaskCounts.Open++
	r.st.PendingBytes += api.PendingTaskBytes(in.Envelope.TaskID)
	// Watched from now on: a task still starting is never looked up (and
	// taken for missing) by the reconcile.
	r.watched[in.Envelope.TaskID] = true
	r.admits++
	r.admittedAt[in.Envelope.TaskID] = r.admits
	r.starting++
	return admittedTask{res: res, rerun: rerun}
}

// unadmit takes out a task that could not start: a rerun is the ABORTED
// task it was, any other leaves the run.
func (r *runWorkflow) unadmit(a admittedTask) {
	if a.rerun {
		t := r.task(a.res.TaskID)
		t.State = api.TaskAborted
		r.st.TaskCounts.Open--
		r.st.TaskCounts.Aborted++
		r.st.PendingBytes -= api.PendingTaskBytes(t.TaskID)
	} else {
		r.removeTask(a.res.TaskID)
	}
	delete(r.watched, a.res.TaskID)
}

// awaitStart waits for a requested child to start and watches it; a child
// that cannot start (its ID was used before) is taken out of the run.
func (r *runWorkflow) awaitStart(ctx workflow.Context, st startedTask) error {
	if err := st.child.GetChildWorkflowExecution().Get(ctx, nil); err != nil {
		r.unadmit(st.admittedTask)
		return temporal.NewApplicationError(
			fmt.Sprintf("start task %s: %v (task IDs cannot be reused)", st.res.TaskID, err), api.ErrTypeConflict)
	}
	r.watchChild(ctx, st.res.TaskID, st.child)
	return nil
}

// onTaskEnded is parent ingest's last step: the task's outcome is recorded
// and an accepted result becomes one worker_result event (from the
// signal's compact reference, or from the child's own full result).
// Reports for unknown tasks and repeated reports are ignored.
func (r *runWorkflow) onTaskEnded(ctx workflow.Context, out api.TaskEndedSignal) {
	r.onTaskEndedDetail(ctx, out, "")
}

// onTaskEndedDetail is onTaskEnded with a note on how the task ended, kept
// for tasks that ended without reporting. The first outcome of a task is
// the one kept: a later one that differs (another state or result) is
// logged and counted (api.MetricTaskReportsConflicting), never applied.
func (r *runWorkflow) onTaskEndedDetail(ctx workflow.Context, out api.TaskEndedSignal, detail string) {
	t := r.task(out.TaskID)
	if t == nil || !out.State.Terminal() {
		return
	}
	key := endedKey(out)
	if t.State.Terminal() {
		first, known := r.endedAs[t.TaskID]
		if (known && first != key) || (!known && t.State != out.State) {
			workflow.GetLogger(ctx).Error("task reported a second, different outcome; keeping the first", "run", r.st.RunID, "task", t.TaskID,
				"first", first, "state", t.State, "second", key)
			count(ctx, api.MetricTaskReportsConflicting, "")
		}
		return
	}
	if r.endedAs == nil {
		r.endedAs = map[string]string{}
	}
	r.endedAs[t.TaskID] = key
	r.st.TaskCounts.Open--
	countEnded(&r.st.TaskCounts, out.State, 1)
	r.st.PendingBytes -= api.PendingTaskBytes(t.TaskID)
	t.State = out.State
	t.Attempts = out.Attempts
	if out.State == api.TaskAborted {
		t.EndDetail = detail
		if t.EndDetail == "" {
			t.EndDetail = "workflow closed without reporting"
		}
	}
	if out.State == api.TaskCompleted {
		ref := out.Ref
		if ref == nil && out.Result != nil {
			r, err := api.ResultRefOf(*out.Result)
			if err != nil {
				workflow.GetLogger(ctx).Error("result reference", "task", out.TaskID, "error", err)
			} else {
				ref = &r
			}
		}
		if ref != nil {
			ev := r.appendEvent(api.Event{Type: api.EventWorkerResult, Time: workflow.Now(ctx), Result: ref})
			r.st.PendingBytes += eventBytes(ev)
			r.st.WorkerResultEvents++
		}
	}
	if r.st.CloseWhenDone && r.allEnded() {
		r.st.Closed = true
	}
	r.refreshStatus()
	r.publish(ctx)
}

// endedKey identifies a task's outcome: its state and, for a completed
// task, the result's digest (api.ResultRef.ResultDigest).
func endedKey(out api.TaskEndedSignal) string {
	ref := out.Ref
	if ref == nil && out.Result != nil {
		if r, err := api.ResultRefOf(*out.Result); err == nil {
			ref = &r
		}
	}
	if ref == nil {
		return string(out.State)
	}
	return string(out.State) + " " + ref.ResultDigest
}

func (r *runWorkflow) validateCommit(ctx workflow.Context, in api.CommitInput) error {
	unsigned := in
	unsigned.Proof = nil
	if err := authenticateSubmitter(ctx, api.UpdateCommit, unsigned, in.Proof); err != nil {
		return err
	}
	if len(in.Note) > api.MaxNoteBytes {
		return temporal.NewApplicationError(fmt.Sprintf("note: at most %d bytes (got %d)", api.MaxNoteBytes, len(in.Note)), api.ErrTypeInvalidArgument)
	}
	if in.ExpectedParentTime != r.st.ParentTime {
		return temporal.NewApplicationError(fmt.Sprintf("expected_parent_time: %d, the run is at %d", in.ExpectedParentTime, r.st.ParentTime), api.ErrTypeConflict)
	}
	if len(in.EventSeqs) == 0 {
		return temporal.NewApplicationError("event_seqs: name at least one worker_result event", api.ErrTypeInvalidArgument)
	}
	seen := map[int64]bool{}
	for i, seq := range in.EventSeqs {
		if seq < 1 || seq > r.st.LastSeq {
			return temporal.NewApplicationError(fmt.Sprintf("event_seqs[%d]: no event %d", i, seq), api.ErrTypeInvalidArgument)
		}
		at := r.eventAt(seq)
		if at < 0 {
			// Only committed events and commit records leave the list.
			return temporal.NewApplicationError(fmt.Sprintf("event_seqs[%d]: event %d is already committed (or a commit record)", i, seq), api.ErrTypeConflict)
		}
		ev := r.st.Events[at]
		switch {
		case ev.Type != api.EventWorkerResult:
			return temporal.NewApplicationError(fmt.Sprintf("event_seqs[%d]: event %d is a %s, not a worker_result", i, seq, ev.Type), api.ErrTypeInvalidArgument)
		case ev.Committed:
			return temporal.NewApplicationError(fmt.Sprintf("event_seqs[%d]: event %d is already committed", i, seq), api.ErrTypeConflict)
		case seen[seq]:
			return temporal.NewApplicationError(fmt.Sprintf("event_seqs[%d]: event %d named twice", i, seq), api.ErrTypeInvalidArgument)
		}
		seen[seq] = true
	}
	return nil
}

// commit is the parent's own commit: the only code that changes evidence,
// parent_time and the TCD digest.
func (r *runWorkflow) commit(ctx workflow.Context, in api.CommitInput) (api.CommitResult, error) {
	seqs := append([]int64{}, in.EventSeqs...)
	sort.Slice(seqs, func(i, j int) bool { return seqs[i] < seqs[j] })
	committed := make([]api.ResultRef, 0, len(seqs))
	for _, seq := range seqs {
		ev := &r.st.Events[r.eventAt(seq)]
		r.st.PendingBytes -= eventBytes(*ev) // as it was counted: uncommitted
		ev.Committed = true
		committed = append(committed, *ev.Result)
	}
	r.carryTooLarge = false
	parentTime := r.st.ParentTime + 1
	tcd, err := NextTCD(r.st.TCDDigest, parentTime, committed)
	if err != nil {
		return api.CommitResult{}, err
	}
	r.st.ParentTime = parentTime
	r.st.Evidence += int64(len(committed))
	r.st.TCDDigest = tcd
	rec := api.CommitRecord{EventSeqs: seqs, ParentTime: parentTime, Evidence: r.st.Evidence, TCDDigest: tcd, Note: in.Note, CommittedBy: signerOf(in.Proof)}
	r.appendEvent(api.Event{Type: api.EventCommit, Time: workflow.Now(ctx), Commit: &rec})
	r.showDetails(ctx)
	return rec, nil
}

// appendEvent gives e the next Seq and appends it.
func (r *runWorkflow) appendEvent(e api.Event) api.Event {
	r.st.LastSeq++
	e.Seq = r.st.LastSeq
	r.st.Events = append(r.st.Events, e)
	return e
}

// eventAt is the position in st.Events of the event numbered seq, or -1
// when it is not listed (Events are sorted by Seq).
func (r *runWorkflow) eventAt(seq int64) int {
	i := sort.Search(len(r.st.Events), func(i int) bool { return r.st.Events[i].Seq >= seq })
	if i < len(r.st.Events) && r.st.Events[i].Seq == seq {
		return i
	}
	return -1
}

func (r *runWorkflow) task(id string) *api.RunTask {
	if i, ok := r.index[id]; ok {
		return &r.st.Tasks[i]
	}
	return nil
}

// removeTask takes out a task that could not start (it is open).
func (r *runWorkflow) removeTask(id string) {
	i, ok := r.index[id]
	if !ok {
		return
	}
	r.st.Tasks = append(r.st.Tasks[:i], r.st.Tasks[i+1:]...)
	r.st.TaskCounts.Total--
	r.st.TaskCounts.Open--
	r.st.PendingBytes -= api.PendingTaskBytes(id)
	r.rebuildIndex()
}

func (r *runWorkflow) allEnded() bool {
	return r.st.TaskCounts.Open == 0
}

func (r *runWorkflow) refreshStatus() {
	c := r.st.TaskCounts
	switch {
	case c.Total == 0 || c.Open > 0:
		r.st.Status = api.RunRunning
	case c.Completed == c.Total:
		r.st.Status = api.RunCompleted
	default:
		r.st.Status = api.RunIncomplete
	}
}

func (r *runWorkflow) publish(ctx workflow.Context) {
	if r.saDone {
		return
	}
	r.saDone = true
	if err := workflow.UpsertTypedSearchAttributes(ctx, api.SAKind.ValueSet(api.KindRun), api.SARunID.ValueSet(r.st.RunID)); err != nil {
		workflow.GetLogger(ctx).Warn("upsert search attributes", "error", err)
	}
}

// continueAsNew waits for update handlers, applies every buffered
// task-ended signal and every child outcome already delivered, and carries
// the state. Nothing blocks between the drain and the continue-as-new. A
// child that completes in the same workflow task may be missed here (its
// watcher runs after the drain); the next run's reconcile finds it, as it
// finds every task whose child it cannot watch.
func (r *runWorkflow) continueAsNew(ctx workflow.Context) error {
	if err := workflow.Await(ctx, func() bool { return workflow.AllHandlersFinished(ctx) }); err != nil {
		return err
	}
	for {
		var out api.TaskEndedSignal
		if r.endedCh.ReceiveAsync(&out) {
			r.noteTaskEnded(ctx, out)
			continue
		}
		if r.childDone.ReceiveAsync(&out) {
			r.onTaskEnded(ctx, out)
			continue
		}
		break
	}
	st := compacted(r.st)
	st.ContinuedAsNew++
	st.Reported = r.pendingReports()
	in := api.RunInput{RunID: st.RunID, WorldID: st.WorldID, CloseWhenDone: st.CloseWhenDone, Carry: &st}
	if b, err := json.Marshal(in); err != nil || len(b) > maxCarryBytes {
		// Only runs of pathological sizes get here (MaxRunPendingBytes
		// bounds the pending state): go on with a longer history.
		workflow.GetLogger(ctx).Warn("run state too large to continue as new; trying again after a commit", "run", st.RunID, "bytes", len(b), "error", err)
		r.carryTooLarge = true
		return nil
	}
	return workflow.NewContinueAsNewError(ctx, WdcRun, in)
}

// compacted is st as a run carries it into a continue-as-new: every open
// task and uncommitted worker_result, the last api.RunListedEndedTasks
// ended tasks, api.RunListedCommittedEvents committed worker_results and
// api.RunListedCommits commit records; the rest is counted as not listed.
func compacted(st api.RunState) api.RunState {
	ended := 0
	for _, t := range st.Tasks {
		if t.State.Terminal() {
			ended++
		}
	}
	tasks := make([]api.RunTask, 0, len(st.Tasks))
	for _, t := range st.Tasks {
		if t.State.Terminal() && ended > api.RunListedEndedTasks {
			ended--
			st.EndedNotListed++
			continue
		}
		tasks = append(tasks, t)
	}
	results, commits := 0, 0
	for _, e := range st.Events {
		switch {
		case e.Type == api.EventCommit:
			commits++
		case e.Committed:
			results++
		}
	}
	events := make([]api.Event, 0, len(st.Events))
	for _, e := range st.Events {
		switch {
		case e.Type == api.EventCommit && commits > api.RunListedCommits:
			commits--
			st.EventsNotListed++
			continue
		case e.Type == api.EventWorkerResult && e.Committed && results > api.RunListedCommittedEvents:
			results--
			st.EventsNotListed++
			continue
		}
		events = append(events, e)
	}
	st.Tasks, st.Events = tasks, events
	return st
}
