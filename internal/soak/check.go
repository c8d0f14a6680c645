package soak

import (
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/anishathalye/porcupine"
)

// DefaultLinearizabilityTimeout bounds porcupine's search per task.
const DefaultLinearizabilityTimeout = 10 * time.Second

// Options tunes Check. The zero value checks everything it can with no
// tolerance.
type Options struct {
	// OverlapWindow is how long two commands of one task may overlap, and
	// how long a command may outlive its lease. The guarantee
	// (docs/architecture.md, invariant 9) is no overlap, so the default is
	// 0; a harness passes its clock and recording slack here.
	OverlapWindow time.Duration
	// Expect returns the digest each accepted artifact must have (the
	// workload is a pure function of its inputs); ok false means none is
	// expected, a violation. Nil skips the check.
	Expect func(task, name string) (digest string, ok bool)
	// VisualizeDir, an existing directory when set, receives porcupine's
	// HTML visualisation <task>.html of each task whose lease history is not
	// linearizable (bytes outside [A-Za-z0-9._-] of the ID become "_").
	VisualizeDir string
	// LinearizabilityTimeout bounds porcupine per task; default
	// DefaultLinearizabilityTimeout. A timeout is a violation,
	// KindLinearizabilityUnknown, never a pass.
	LinearizabilityTimeout time.Duration
}

// defaulted returns o with its defaults filled in.
func (o Options) defaulted() Options {
	if o.LinearizabilityTimeout <= 0 {
		o.LinearizabilityTimeout = DefaultLinearizabilityTimeout
	}
	return o
}

// Kind names a violated guarantee.
type Kind string

const (
	// KindMalformedOp: an op's interval is missing or runs backwards.
	KindMalformedOp Kind = "malformed_op"
	// KindNotLinearizable: no order of a task's lease ops is legal.
	KindNotLinearizable Kind = "not_linearizable"
	// KindLinearizabilityUnknown: porcupine timed out on a task's lease ops.
	KindLinearizabilityUnknown Kind = "linearizability_unknown"
	// KindTwoResults: a task had more than one result accepted.
	KindTwoResults Kind = "two_accepted_results"
	// KindStaleAcceptance: a result was accepted after a higher fence was granted.
	KindStaleAcceptance Kind = "stale_acceptance"
	// KindFenceReused: a fence was granted twice for a task.
	KindFenceReused Kind = "fence_reused"
	// KindFenceDecreased: a later grant carried a lower fence.
	KindFenceDecreased Kind = "fence_decreased"
	// KindOverlap: two commands of a task overlapped by more than the window.
	KindOverlap Kind = "command_overlap"
	// KindRanAfterLease: a command stopped later than its lease's end + window.
	KindRanAfterLease Kind = "ran_after_lease_end"
	// KindRanWithoutLease: a command's attempt and fence were never granted.
	KindRanWithoutLease Kind = "ran_without_lease"
	// KindNeverStopped: a command was never seen stopping.
	KindNeverStopped Kind = "never_stopped"
	// KindStaleBlob: a blob under sha256/ is no accepted artifact or input.
	KindStaleBlob Kind = "stale_blob"
	// KindStaleArtifact: an accepted artifact is not of its task's accepted result.
	KindStaleArtifact Kind = "stale_artifact"
	// KindArtifactMismatch: an accepted artifact is not what Expect says.
	KindArtifactMismatch Kind = "artifact_mismatch"
	// KindLostTask: a task never ended, or has ops but no TaskEnd.
	KindLostTask Kind = "lost_task"
	// KindNoReason: a task ended RETRIES_EXHAUSTED without a reason.
	KindNoReason Kind = "exhausted_without_reason"
	// KindUnexpectedEnd: a task ended in a state other than the two allowed.
	KindUnexpectedEnd Kind = "unexpected_end"
	// KindCompletedWithoutResult: a task is COMPLETED but no result was accepted.
	KindCompletedWithoutResult Kind = "completed_without_result"
	// KindEvidenceMismatch: a run's evidence is not the set it committed.
	KindEvidenceMismatch Kind = "evidence_mismatch"
	// KindBrokenChain: a run's TCD chain did not verify.
	KindBrokenChain Kind = "broken_chain"
	// KindReservationHeld: a worker still holds reservations at the end.
	KindReservationHeld Kind = "reservation_held"
	// KindSlotsBusy: a worker's free slots are not all its slots at the end.
	KindSlotsBusy Kind = "slots_busy"
)

// Violation is one broken guarantee; Detail names the fences, attempts and
// times involved.
type Violation struct {
	Kind   Kind
	Task   string
	Detail string
}

// String renders v as "kind: task t: detail".
func (v Violation) String() string {
	if v.Task == "" {
		return fmt.Sprintf("%s: %s", v.Kind, v.Detail)
	}
	return fmt.Sprintf("%s: task %s: %s", v.Kind, v.Task, v.Detail)
}

// Report is Check's verdict on a History.
type Report struct {
	Violations []Violation
	// Tasks counts TaskEnds; Attempts counts grants; Accepted and Refused
	// count submits, Refused by reason.
	Tasks, Attempts, Accepted int
	Refused                   map[string]int
	// Overlaps counts pairs of one task's commands that overlapped at all;
	// LongestOverlap is the longest of them.
	Overlaps       int
	LongestOverlap time.Duration
	// Linearizable is true when porcupine found every task's lease history
	// linearizable (false on Illegal and on Unknown).
	Linearizable bool
	// Visualized lists the HTML files written to Options.VisualizeDir;
	// VisualizeErr is why any could not be written.
	Visualized   []string
	VisualizeErr error
}

// OK reports whether the history broke no guarantee.
func (r Report) OK() bool { return len(r.Violations) == 0 }

// Verdict is a one-line summary: "ok: …" or "FAIL: …" with the kinds seen.
func (r Report) Verdict() string {
	counts := fmt.Sprintf("%d tasks, %d attempts, %d accepted, %d overlaps (longest %s)",
		r.Tasks, r.Attempts, r.Accepted, r.Overlaps, r.LongestOverlap)
	if r.OK() {
		return "ok: " + counts
	}
	byKind := map[Kind]int{}
	for _, v := range r.Violations {
		byKind[v.Kind]++
	}
	kinds := make([]string, 0, len(byKind))
	for k, n := range byKind {
		kinds = append(kinds, fmt.Sprintf("%s×%d", k, n))
	}
	sort.Strings(kinds)
	return fmt.Sprintf("FAIL: %d violations (%s); %s", len(r.Violations), strings.Join(kinds, ", "), counts)
}

// Check judges h against the guarantees in README "What wdc guarantees"
// and returns every violation it finds; it never stops at the first.
func Check(h History, opts Options) Report {
	opts = opts.defaulted()
	ops, malformed := wellFormed(h.Ops)
	c := &checker{h: h, opts: opts, ops: byTask(ops), report: Report{Refused: map[string]int{}, Linearizable: true}}
	c.add(malformed...)
	c.count()
	c.linearizable()
	c.oneResult()
	c.highestFence()
	c.fencesIncrease()
	c.noOverlap()
	c.nothingAfterEnd()
	c.noStaleBlob()
	c.artifactsOfResult()
	c.artifactsExpected()
	c.tasksEnd()
	c.evidence()
	c.workersReleased()
	return c.report
}

// checker carries what the checks share.
type checker struct {
	h      History
	opts   Options
	ops    map[string][]Op // well-formed ops by task, by Call
	report Report
}

func (c *checker) add(vs ...Violation) { c.report.Violations = append(c.report.Violations, vs...) }

func (c *checker) violate(kind Kind, task, format string, args ...any) {
	c.add(Violation{Kind: kind, Task: task, Detail: fmt.Sprintf(format, args...)})
}

// tasks returns the task IDs that have ops, sorted.
func (c *checker) tasks() []string {
	ids := make([]string, 0, len(c.ops))
	for id := range c.ops {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	return ids
}

// wellFormed splits ops into those with a forward [Call, Return] and
// violations for the rest (which no other check then sees).
func wellFormed(ops []Op) ([]Op, []Violation) {
	var good []Op
	var bad []Violation
	for _, op := range ops {
		if op.Call.IsZero() || op.Return.IsZero() || op.Return.Before(op.Call) {
			bad = append(bad, Violation{Kind: KindMalformedOp, Task: op.Task,
				Detail: fmt.Sprintf("%s of fence %d (attempt %d): interval [%s, %s] is missing or backwards",
					op.Kind, op.Fence, op.Attempt, stamp(op.Call), stamp(op.Return))})
			continue
		}
		good = append(good, op)
	}
	return good, bad
}

// byTask groups ops by task, each group sorted by Call.
func byTask(ops []Op) map[string][]Op {
	m := map[string][]Op{}
	for _, op := range ops {
		m[op.Task] = append(m[op.Task], op)
	}
	for _, g := range m {
		slices.SortStableFunc(g, func(a, b Op) int { return a.Call.Compare(b.Call) })
	}
	return m
}

// count fills the report's counters.
func (c *checker) count() {
	c.report.Tasks = len(c.h.Tasks)
	for _, g := range c.ops {
		for _, op := range g {
			switch {
			case op.Kind == OpGrant:
				c.report.Attempts++
			case op.Kind == OpSubmit && op.OK:
				c.report.Accepted++
			case op.Kind == OpSubmit:
				c.report.Refused[op.Reason]++
			}
		}
	}
}

// linearizable checks each task's lease as a fence register with porcupine
// (guarantees 2, 3, 5, 7: only the current fence's lease acts).
func (c *checker) linearizable() {
	for _, task := range c.tasks() {
		ops := porcupineOps(c.ops[task])
		res, info := porcupine.CheckOperationsVerbose(leaseModel, ops, c.opts.LinearizabilityTimeout)
		switch res {
		case porcupine.Ok:
			continue
		case porcupine.Unknown:
			c.report.Linearizable = false
			c.violate(KindLinearizabilityUnknown, task, "porcupine timed out after %s on %d lease ops", c.opts.LinearizabilityTimeout, len(ops))
			continue
		}
		c.report.Linearizable = false
		longest := 0
		for _, partition := range info.PartialLinearizations() {
			for _, lin := range partition {
				longest = max(longest, len(lin))
			}
		}
		detail := fmt.Sprintf("no order of its %d lease ops is legal (the longest legal prefix has %d)", len(ops), longest)
		if c.opts.VisualizeDir != "" {
			path := filepath.Join(c.opts.VisualizeDir, fileName(task)+".html")
			if err := porcupine.VisualizePath(leaseModel, info, path); err != nil {
				c.report.VisualizeErr = errors.Join(c.report.VisualizeErr, fmt.Errorf("visualize task %s: %w", task, err))
			} else {
				c.report.Visualized = append(c.report.Visualized, path)
				detail += "; see " + path
			}
		}
		c.violate(KindNotLinearizable, task, "%s", detail)
	}
}

// fileName makes a task ID safe as a file name.
func fileName(task string) string {
	return strings.Map(func(r rune) rune {
		switch {
		case r >= 'a' && r <= 'z', r >= 'A' && r <= 'Z', r >= '0' && r <= '9', r == '-', r == '_', r == '.':
			return r
		}
		return '_'
	}, task)
}

// accepted returns a task's accepted submits, by Call.
func (c *checker) accepted(task string) []Op {
	var out []Op
	for _, op := range c.ops[task] {
		if op.Kind == OpSubmit && op.OK {
			out = append(out, op)
		}
	}
	return out
}

// grants returns a task's grants, by Call.
func (c *checker) grants(task string) []Op {
	var out []Op
	for _, op := range c.ops[task] {
		if op.Kind == OpGrant {
			out = append(out, op)
		}
	}
	return out
}

// oneResult checks that at most one result per task is accepted (guarantee 4:
// a run's view of a task's outcome is decided once).
func (c *checker) oneResult() {
	for _, task := range c.tasks() {
		acc := c.accepted(task)
		if len(acc) <= 1 {
			continue
		}
		var which []string
		for _, op := range acc {
			which = append(which, fmt.Sprintf("fence %d (attempt %d) at %s", op.Fence, op.Attempt, stamp(op.Call)))
		}
		c.violate(KindTwoResults, task, "%d results accepted: %s", len(acc), strings.Join(which, ", "))
	}
}

// highestFence checks that an accepted result carries the highest fence
// granted before its acceptance began (guarantee 2).
func (c *checker) highestFence() {
	for _, task := range c.tasks() {
		for _, sub := range c.accepted(task) {
			for _, g := range c.grants(task) {
				if g.Fence > sub.Fence && g.Return.Before(sub.Call) {
					c.violate(KindStaleAcceptance, task,
						"result of fence %d (attempt %d) accepted at %s after fence %d (attempt %d) was granted at %s",
						sub.Fence, sub.Attempt, stamp(sub.Call), g.Fence, g.Attempt, stamp(g.Return))
					break
				}
			}
		}
	}
}

// fencesIncrease checks that fences strictly increase in grant order and
// none is granted twice (guarantee 3).
func (c *checker) fencesIncrease() {
	for _, task := range c.tasks() {
		gs := c.grants(task)
		for i, a := range gs {
			for _, b := range gs[i+1:] {
				switch {
				case a.Fence == b.Fence:
					c.violate(KindFenceReused, task, "fence %d granted to attempt %d at %s and to attempt %d at %s",
						a.Fence, a.Attempt, stamp(a.Return), b.Attempt, stamp(b.Return))
				case a.Return.Before(b.Call) && b.Fence < a.Fence:
					c.violate(KindFenceDecreased, task, "fence %d (attempt %d) granted at %s after fence %d (attempt %d) at %s",
						b.Fence, b.Attempt, stamp(b.Call), a.Fence, a.Attempt, stamp(a.Return))
				}
			}
		}
	}
}

// commandsByTask groups commands by task, sorted by task ID then Start.
func (c *checker) commandsByTask() ([]string, map[string][]Command) {
	m := map[string][]Command{}
	for _, cmd := range c.h.Commands {
		m[cmd.Task] = append(m[cmd.Task], cmd)
	}
	ids := make([]string, 0, len(m))
	for id, g := range m {
		ids = append(ids, id)
		slices.SortStableFunc(g, func(a, b Command) int { return a.Start.Compare(b.Start) })
	}
	sort.Strings(ids)
	return ids, m
}

// horizon is the latest time in h, standing in for a Stop never seen.
func (c *checker) horizon() time.Time {
	var t time.Time
	later := func(u time.Time) {
		if u.After(t) {
			t = u
		}
	}
	for _, op := range c.h.Ops {
		later(op.Return)
	}
	for _, cmd := range c.h.Commands {
		later(cmd.Start)
		later(cmd.Stop)
	}
	return t
}

// noOverlap checks that no two commands of one task overlap by more than
// OverlapWindow (docs/architecture.md invariant 9; README guarantee 5).
func (c *checker) noOverlap() {
	horizon := c.horizon()
	stop := func(cmd Command) time.Time {
		if cmd.Stop.IsZero() {
			return horizon
		}
		return cmd.Stop
	}
	ids, cmds := c.commandsByTask()
	for _, task := range ids {
		g := cmds[task]
		for i, a := range g {
			for _, b := range g[i+1:] {
				overlap := minTime(stop(a), stop(b)).Sub(maxTime(a.Start, b.Start))
				if overlap <= 0 {
					continue
				}
				c.report.Overlaps++
				c.report.LongestOverlap = max(c.report.LongestOverlap, overlap)
				if overlap > c.opts.OverlapWindow {
					c.violate(KindOverlap, task,
						"attempt %d (fence %d, %s, %s–%s) and attempt %d (fence %d, %s, %s–%s) overlap by %s, over the %s window",
						a.Attempt, a.Fence, a.Host, stamp(a.Start), stamp(a.Stop),
						b.Attempt, b.Fence, b.Host, stamp(b.Start), stamp(b.Stop), overlap, c.opts.OverlapWindow)
				}
			}
		}
	}
}

// nothingAfterEnd checks that no command stops later than its lease's end
// plus OverlapWindow, and that every command stops (README guarantee 8).
func (c *checker) nothingAfterEnd() {
	for _, cmd := range c.h.Commands {
		if cmd.Stop.IsZero() {
			c.violate(KindNeverStopped, cmd.Task, "attempt %d (fence %d) on %s started at %s and was never seen stopping",
				cmd.Attempt, cmd.Fence, cmd.Host, stamp(cmd.Start))
		}
		end, endedBy, granted := c.leaseEnd(cmd.Task, cmd.Attempt, cmd.Fence)
		if !granted {
			c.violate(KindRanWithoutLease, cmd.Task, "attempt %d (fence %d) on %s ran at %s but was never granted a lease",
				cmd.Attempt, cmd.Fence, cmd.Host, stamp(cmd.Start))
			continue
		}
		if cmd.Stop.IsZero() || end.IsZero() {
			continue
		}
		if late := cmd.Stop.Sub(end); late > c.opts.OverlapWindow {
			c.violate(KindRanAfterLease, cmd.Task, "attempt %d (fence %d) on %s stopped at %s, %s after its lease ended (%s at %s), over the %s window",
				cmd.Attempt, cmd.Fence, cmd.Host, stamp(cmd.Stop), late, endedBy, stamp(end), c.opts.OverlapWindow)
		}
	}
}

// leaseEnd returns when the command of attempt/fence must have stopped by —
// the earliest of its expiry's or revocation's Return (plus its Grace) and
// of the Return of the first grant called after its own grant returned —
// what ended it, and whether it was granted at all. end is zero when
// nothing ended it.
func (c *checker) leaseEnd(task string, attempt, fence int64) (end time.Time, endedBy string, granted bool) {
	var grant Op
	for _, op := range c.ops[task] {
		if op.Kind == OpGrant && op.Attempt == attempt && op.Fence == fence {
			grant, granted = op, true
			break
		}
	}
	if !granted {
		return time.Time{}, "", false
	}
	for _, op := range c.ops[task] {
		var by string
		at := op.Return
		switch {
		case (op.Kind == OpExpire || op.Kind == OpRevoke) && op.Attempt == attempt && op.Fence == fence:
			by = string(op.Kind)
			if op.Grace > 0 {
				at = at.Add(op.Grace)
				by = fmt.Sprintf("%s (%s) and its %s grace", op.Kind, op.Reason, op.Grace)
			}
		case op.Kind == OpGrant && op.Call.After(grant.Return):
			by = fmt.Sprintf("grant of fence %d", op.Fence)
		default:
			continue
		}
		if end.IsZero() || at.Before(end) {
			end, endedBy = at, by
		}
	}
	return end, endedBy, true
}

// noStaleBlob checks that every blob under sha256/ is an accepted artifact
// or a workload input (README guarantee 2: no stale artifact enters the store).
func (c *checker) noStaleBlob() {
	known := map[string]bool{}
	for _, d := range c.h.Inputs {
		known[d] = true
	}
	for _, a := range c.h.Artifacts {
		known[a.Digest] = true
	}
	for _, b := range c.h.Store.Blobs {
		if !known[b] {
			c.violate(KindStaleBlob, "", "blob %s is under sha256/ but no accepted artifact or input names it", b)
		}
	}
}

// artifactsOfResult checks that every accepted artifact belongs to its
// task's accepted result (README guarantee 2).
func (c *checker) artifactsOfResult() {
	for _, a := range c.h.Artifacts {
		ok := false
		for _, sub := range c.accepted(a.Task) {
			ok = ok || (sub.Attempt == a.Attempt && sub.Fence == a.Fence)
		}
		if !ok {
			c.violate(KindStaleArtifact, a.Task, "artifact %s (%s) of attempt %d, fence %d was accepted, but no result of that fence was",
				a.Name, a.Digest, a.Attempt, a.Fence)
		}
	}
}

// artifactsExpected checks every accepted artifact against Options.Expect
// (the workload's pure function of its inputs).
func (c *checker) artifactsExpected() {
	if c.opts.Expect == nil {
		return
	}
	for _, a := range c.h.Artifacts {
		want, ok := c.opts.Expect(a.Task, a.Name)
		switch {
		case !ok:
			c.violate(KindArtifactMismatch, a.Task, "artifact %s (attempt %d, fence %d) is %s; none was expected",
				a.Name, a.Attempt, a.Fence, a.Digest)
		case want != a.Digest:
			c.violate(KindArtifactMismatch, a.Task, "artifact %s (attempt %d, fence %d) is %s, want %s",
				a.Name, a.Attempt, a.Fence, a.Digest, want)
		}
	}
}

// tasksEnd checks that every task ends COMPLETED with an accepted result or
// RETRIES_EXHAUSTED with a reason (README guarantee 1).
func (c *checker) tasksEnd() {
	ended := map[string]bool{}
	for _, t := range c.h.Tasks {
		ended[t.Task] = true
		switch t.State {
		case StateCompleted:
			if len(c.accepted(t.Task)) == 0 {
				c.violate(KindCompletedWithoutResult, t.Task, "run %s: COMPLETED, but no result was accepted", t.RunID)
			}
		case StateRetriesExhausted:
			if t.Reason == "" {
				c.violate(KindNoReason, t.Task, "run %s: RETRIES_EXHAUSTED without a reason", t.RunID)
			}
		case "":
			c.violate(KindLostTask, t.Task, "run %s: the task never ended", t.RunID)
		default:
			c.violate(KindUnexpectedEnd, t.Task, "run %s: ended %s (%s)", t.RunID, t.State, t.Reason)
		}
	}
	for _, task := range c.tasks() {
		if !ended[task] {
			c.violate(KindLostTask, task, "%d lease ops recorded, but the task is not among the submitted tasks", len(c.ops[task]))
		}
	}
}

// evidence checks that each run's evidence is exactly the set it committed
// and its TCD chain verified (README guarantee 4).
func (c *checker) evidence() {
	for _, r := range c.h.Runs {
		committed, evidence := slices.Sorted(slices.Values(r.Committed)), slices.Sorted(slices.Values(r.Evidence))
		if !slices.Equal(committed, evidence) {
			c.violate(KindEvidenceMismatch, "", "run %s: evidence %v, committed %v", r.RunID, evidence, committed)
		}
		if r.ChainErr != "" {
			c.violate(KindBrokenChain, "", "run %s: TCD chain: %s", r.RunID, r.ChainErr)
		}
	}
}

// workersReleased checks that at the end no worker holds a reservation or a
// busy slot (README guarantee 1: a task's reservation is released).
func (c *checker) workersReleased() {
	for _, w := range c.h.Workers {
		if w.Reservations != 0 {
			c.violate(KindReservationHeld, "", "worker %s holds %d reservations at the end", w.WorkerID, w.Reservations)
		}
		if w.FreeSlots != w.Slots {
			c.violate(KindSlotsBusy, "", "worker %s has %d of %d slots free at the end", w.WorkerID, w.FreeSlots, w.Slots)
		}
	}
}

// stamp renders t for a Detail, "never" when zero.
func stamp(t time.Time) string {
	if t.IsZero() {
		return "never"
	}
	return t.UTC().Format(time.RFC3339Nano)
}

func minTime(a, b time.Time) time.Time {
	if a.Before(b) {
		return a
	}
	return b
}

func maxTime(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}
