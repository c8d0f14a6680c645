package workflows

import (
	"errors"
	"fmt"
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
// Tasks are added by the add-task update and run as child WdcTask
// workflows (parent-close policy ABANDON, so the run may continue as new
// without touching them); each reports its outcome with the task-ended
// signal. Parent ingest appends one worker_result event per accepted
// result. Evidence, parent_time and the TCD digest change only through the
// commit update (invariant 4).
//
// The run ends once it is closed (close update, or CloseWhenDone) and every
// task has ended.
func WdcRun(ctx workflow.Context, in api.RunInput) (api.RunState, error) {
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
	// watched are the tasks whose child this run watches.
	watched map[string]bool
	// reconcile is the armed timer after which tasks the run cannot watch
	// are looked up (nil when none is armed).
	reconcile workflow.Future
}

// reconcileInterval is how often a run looks up tasks it started before
// it continued as new and that have not reported (their children cannot
// be watched across continue-as-new).
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
		return &runWorkflow{st: *in.Carry}, nil
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
	}}, nil
}

func (r *runWorkflow) setup(ctx workflow.Context) error {
	r.wake = workflow.NewBufferedChannel(ctx, 1)
	r.endedCh = workflow.GetSignalChannel(ctx, api.SignalTaskEnded)
	r.childDone = workflow.NewBufferedChannel(ctx, api.MaxTasksPerRun)
	r.watched = map[string]bool{}
	if err := workflow.SetQueryHandler(ctx, api.QueryRun, func() (api.RunView, error) { return r.st, nil }); err != nil {
		return err
	}
	if err := workflow.SetUpdateHandlerWithOptions(ctx, api.UpdateAddTask, r.addTask, workflow.UpdateHandlerOptions{Validator: r.validateAddTask}); err != nil {
		return err
	}
	if err := workflow.SetUpdateHandlerWithOptions(ctx, api.UpdateAddTasks, r.addTasks, workflow.UpdateHandlerOptions{Validator: r.validateAddTasks}); err != nil {
		return err
	}
	if err := workflow.SetUpdateHandlerWithOptions(ctx, api.UpdateCommit, r.commit, workflow.UpdateHandlerOptions{Validator: r.validateCommit}); err != nil {
		return err
	}
	return workflow.SetUpdateHandler(ctx, api.UpdateCloseRun, func(ctx workflow.Context, in api.CloseRunInput) (api.RunView, error) {
		r.st.Closed = true
		r.wake.SendAsync(true)
		return r.st, nil
	})
}

func (r *runWorkflow) run(ctx workflow.Context) (api.RunState, error) {
	r.publish(ctx)
	for {
		r.refreshStatus()
		if r.st.Closed && r.starting == 0 && r.allEnded() {
			if err := workflow.Await(ctx, func() bool { return workflow.AllHandlersFinished(ctx) }); err != nil {
				return r.st, err
			}
			r.publish(ctx)
			return r.st, nil
		}
		if workflow.GetInfo(ctx).GetContinueAsNewSuggested() {
			return r.st, r.continueAsNew(ctx)
		}
		r.armReconcile(ctx)
		sel := workflow.NewSelector(ctx)
		sel.AddReceive(r.endedCh, func(c workflow.ReceiveChannel, _ bool) {
			var out api.TaskEndedSignal
			c.Receive(ctx, &out)
			r.onTaskEnded(ctx, out)
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
		sel.Select(ctx)
		if ctx.Err() != nil {
			return r.st, temporal.NewCanceledError("run cancelled")
		}
	}
}

// unwatched lists the tasks that have not ended and whose child this run
// does not watch (started before a continue-as-new).
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
	r.reconcile = workflow.NewTimer(ctx, reconcileInterval)
}

// reconcileUnwatched looks up the unwatched tasks and records those whose
// workflow has closed: with their outcome if they completed, else as
// ABORTED (ended without a result).
func (r *runWorkflow) reconcileUnwatched(ctx workflow.Context) {
	ids := r.unwatched()
	if len(ids) == 0 {
		return
	}
	actx := workflow.WithActivityOptions(ctx, workflow.ActivityOptions{
		TaskQueue:           api.ControlTaskQueue,
		StartToCloseTimeout: 2 * time.Minute,
		HeartbeatTimeout:    30 * time.Second,
		RetryPolicy:         &temporal.RetryPolicy{MaximumAttempts: 3},
	})
	var res api.ReconcileTasksResult
	if err := workflow.ExecuteActivity(actx, controlActs.ReconcileTasks, api.ReconcileTasksInput{RunID: r.st.RunID, TaskIDs: ids}).Get(ctx, &res); err != nil {
		workflow.GetLogger(ctx).Warn("reconcile tasks", "run", r.st.RunID, "error", err)
		return
	}
	for _, c := range res.Closed {
		out := api.TaskEndedSignal{TaskID: c.TaskID, RunID: r.st.RunID, State: api.TaskAborted}
		if c.Outcome != nil && c.Outcome.State.Terminal() {
			out = *c.Outcome
		}
		r.onTaskEndedDetail(ctx, out, "workflow "+c.Status)
	}
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
		return nil // idempotent re-add
	}
	if r.st.Closed {
		return temporal.NewApplicationError(fmt.Sprintf("run %s is closed", r.st.RunID), api.ErrTypeConflict)
	}
	if len(r.st.Tasks) >= api.MaxTasksPerRun {
		return temporal.NewApplicationError(fmt.Sprintf("run %s has %d tasks, the most a run takes; start another run", r.st.RunID, len(r.st.Tasks)), api.ErrTypeConflict)
	}
	return nil
}

// addTask starts the task as a child and returns once it has started.
func (r *runWorkflow) addTask(ctx workflow.Context, in api.AddTaskInput) (api.AddTaskResult, error) {
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
// past api.MaxTasksPerRun.
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
	added := 0
	for i, t := range in.Tasks {
		if j, dup := seen[t.Envelope.TaskID]; dup {
			return bad("tasks[%d]: task_id %q is also tasks[%d]", i, t.Envelope.TaskID, j)
		}
		seen[t.Envelope.TaskID] = i
		if err := r.validateAddTask(ctx, t); err != nil {
			var appErr *temporal.ApplicationError
			if errors.As(err, &appErr) {
				return temporal.NewApplicationError(fmt.Sprintf("tasks[%d] (%s): %s", i, t.Envelope.TaskID, appErr.Message()), appErr.Type())
			}
			return fmt.Errorf("tasks[%d]: %w", i, err)
		}
		if r.task(t.Envelope.TaskID) == nil {
			added++
		}
	}
	if len(r.st.Tasks)+added > api.MaxTasksPerRun {
		return temporal.NewApplicationError(fmt.Sprintf("run %s has %d tasks; %d more would pass the %d a run takes; start another run", r.st.RunID, len(r.st.Tasks), added, api.MaxTasksPerRun), api.ErrTypeConflict)
	}
	return nil
}

// addTasks starts every task of the batch as a child at once and returns
// when all have started (or failed to).
func (r *runWorkflow) addTasks(ctx workflow.Context, in api.AddTasksInput) (api.AddTasksResult, error) {
	out := api.AddTasksResult{Results: make([]api.AddTaskResult, len(in.Tasks)), Errors: make([]string, len(in.Tasks))}
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

// startedTask is a task whose child start was requested; child is nil
// when the task was already in the run (res.Existing).
type startedTask struct {
	res   api.AddTaskResult
	child workflow.ChildWorkflowFuture
}

// startTask records the task in the run and requests its child; the
// caller awaits it (awaitStart) and then decrements r.starting.
func (r *runWorkflow) startTask(ctx workflow.Context, in api.AddTaskInput) startedTask {
	res := api.AddTaskResult{TaskID: in.Envelope.TaskID, WorkflowID: api.TaskWorkflowID(in.Envelope.TaskID), EnvelopeDigest: in.EnvelopeDigest}
	if r.task(in.Envelope.TaskID) != nil {
		res.Existing = true
		return startedTask{res: res}
	}
	r.st.Tasks = append(r.st.Tasks, api.RunTask{TaskID: in.Envelope.TaskID, EnvelopeDigest: in.EnvelopeDigest, State: api.TaskPending})
	// Watched from now on: a task still starting is never looked up (and
	// taken for missing) by the reconcile.
	r.watched[in.Envelope.TaskID] = true
	r.starting++
	cctx := workflow.WithChildOptions(ctx, workflow.ChildWorkflowOptions{
		WorkflowID:            res.WorkflowID,
		TaskQueue:             api.ControlTaskQueue,
		ParentClosePolicy:     enumspb.PARENT_CLOSE_POLICY_ABANDON,
		WorkflowIDReusePolicy: enumspb.WORKFLOW_ID_REUSE_POLICY_REJECT_DUPLICATE,
		TypedSearchAttributes: temporal.NewSearchAttributes(
			api.SAKind.ValueSet(api.KindTask),
			api.SARunID.ValueSet(r.st.RunID),
			api.SATaskState.ValueSet(string(api.TaskPending)),
		),
	})
	// The task gets its options with every default filled in, so a later
	// change of a default does not change a task that already started.
	child := workflow.ExecuteChildWorkflow(cctx, WdcTask, api.TaskInput{
		Envelope: in.Envelope, EnvelopeDigest: in.EnvelopeDigest, Options: in.Options.WithDefaults(),
		Generation: api.TaskGeneration,
	})
	return startedTask{res: res, child: child}
}

// awaitStart waits for a requested child to start and watches it; a child
// that cannot start (its ID was used before) is taken out of the run.
func (r *runWorkflow) awaitStart(ctx workflow.Context, st startedTask) error {
	if err := st.child.GetChildWorkflowExecution().Get(ctx, nil); err != nil {
		r.removeTask(st.res.TaskID)
		delete(r.watched, st.res.TaskID)
		return temporal.NewApplicationError(
			fmt.Sprintf("start task %s: %v (task IDs cannot be reused)", st.res.TaskID, err), api.ErrTypeConflict)
	}
	r.watchChild(ctx, st.res.TaskID, st.child)
	return nil
}

// onTaskEnded is parent ingest's last step: the task's outcome is recorded
// and an accepted result becomes one worker_result event (from the
// signal's compact reference, or from a full result sent by older tasks).
// Reports for unknown tasks and repeated reports are ignored.
func (r *runWorkflow) onTaskEnded(ctx workflow.Context, out api.TaskEndedSignal) {
	r.onTaskEndedDetail(ctx, out, "")
}

// onTaskEndedDetail is onTaskEnded with a note on how the task ended, kept
// for tasks that ended without reporting.
func (r *runWorkflow) onTaskEndedDetail(ctx workflow.Context, out api.TaskEndedSignal, detail string) {
	t := r.task(out.TaskID)
	if t == nil || t.State.Terminal() || !out.State.Terminal() {
		return
	}
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
			r.st.Events = append(r.st.Events, api.Event{
				Seq: int64(len(r.st.Events)) + 1, Type: api.EventWorkerResult, Time: workflow.Now(ctx), Result: ref,
			})
			r.st.WorkerResultEvents++
		}
	}
	if r.st.CloseWhenDone && r.allEnded() {
		r.st.Closed = true
	}
	r.refreshStatus()
	r.publish(ctx)
}

func (r *runWorkflow) validateCommit(ctx workflow.Context, in api.CommitInput) error {
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
		if seq < 1 || seq > int64(len(r.st.Events)) {
			return temporal.NewApplicationError(fmt.Sprintf("event_seqs[%d]: no event %d", i, seq), api.ErrTypeInvalidArgument)
		}
		ev := r.st.Events[seq-1]
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
		r.st.Events[seq-1].Committed = true
		committed = append(committed, *r.st.Events[seq-1].Result)
	}
	parentTime := r.st.ParentTime + 1
	tcd, err := NextTCD(r.st.TCDDigest, parentTime, committed)
	if err != nil {
		return api.CommitResult{}, err
	}
	r.st.ParentTime = parentTime
	r.st.Evidence += int64(len(committed))
	r.st.TCDDigest = tcd
	rec := api.CommitRecord{EventSeqs: seqs, ParentTime: parentTime, Evidence: r.st.Evidence, TCDDigest: tcd, Note: in.Note}
	r.st.Events = append(r.st.Events, api.Event{Seq: int64(len(r.st.Events)) + 1, Type: api.EventCommit, Time: workflow.Now(ctx), Commit: &rec})
	return rec, nil
}

func (r *runWorkflow) task(id string) *api.RunTask {
	for i := range r.st.Tasks {
		if r.st.Tasks[i].TaskID == id {
			return &r.st.Tasks[i]
		}
	}
	return nil
}

func (r *runWorkflow) removeTask(id string) {
	for i := range r.st.Tasks {
		if r.st.Tasks[i].TaskID == id {
			r.st.Tasks = append(r.st.Tasks[:i], r.st.Tasks[i+1:]...)
			return
		}
	}
}

func (r *runWorkflow) allEnded() bool {
	for _, t := range r.st.Tasks {
		if !t.State.Terminal() {
			return false
		}
	}
	return true
}

func (r *runWorkflow) refreshStatus() {
	switch {
	case len(r.st.Tasks) == 0 || !r.allEnded():
		r.st.Status = api.RunRunning
	default:
		r.st.Status = api.RunCompleted
		for _, t := range r.st.Tasks {
			if t.State != api.TaskCompleted {
				r.st.Status = api.RunIncomplete
			}
		}
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
			r.onTaskEnded(ctx, out)
			continue
		}
		if r.childDone.ReceiveAsync(&out) {
			r.onTaskEnded(ctx, out)
			continue
		}
		break
	}
	r.st.ContinuedAsNew++
	st := r.st
	return workflow.NewContinueAsNewError(ctx, WdcRun, api.RunInput{RunID: st.RunID, WorldID: st.WorldID, CloseWhenDone: st.CloseWhenDone, Carry: &st})
}
