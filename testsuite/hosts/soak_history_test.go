package hosts

import (
	"bufio"
	"cmp"
	"encoding/json"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/wdc-runtime/wdc/api"
	"github.com/wdc-runtime/wdc/internal/executor"
	"github.com/wdc-runtime/wdc/internal/soak"
	"github.com/wdc-runtime/wdc/lease"
	"github.com/wdc-runtime/wdc/workflows"
)

// record reads the history: each task's leases and result (`tasks status`),
// each command's trace, each run's events, the workers and the store.
func (s *soakRun) record() soakHistory {
	var h soakHistory
	views := make([]api.TaskView, len(s.tasks))
	runs := make([][]operatorRun, len(s.tasks))
	errs := make([]error, len(s.tasks))
	var wg sync.WaitGroup
	sem := make(chan struct{}, 4)
	for i, task := range s.tasks {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			views[i], errs[i] = s.c.status(task.ID)
			if errs[i] == nil && s.touched[task.ID] {
				var out []byte
				if out, errs[i] = s.c.a.operator("runs", task.ID); errs[i] == nil {
					errs[i] = json.Unmarshal(out, &runs[i])
				}
			}
		}()
	}
	wg.Wait()
	for i, task := range s.tasks {
		if errs[i] != nil {
			s.errorf("soak: status of %s: %v", task.ID, errs[i])
		}
		h.Tasks = append(h.Tasks, soakTaskRecord{Task: task, View: views[i], Runs: runs[i]})
		h.Commands = append(h.Commands, readSoakTrace(s.t, task.ID, filepath.Join(s.traces, task.ID))...)
	}
	for _, run := range s.runs {
		v, err := s.runView(run)
		require.NoError(s.t, err, "run %s", run)
		h.Runs = append(h.Runs, v)
	}
	b, err := s.c.a.cli("workers", "list", "-o", "json")
	require.NoError(s.t, err)
	require.NoError(s.t, json.Unmarshal(b, &h.Workers))
	h.Blobs, h.BlobTimes = storeBlobs(s.t, s.c.a.dir)
	for _, host := range s.c.all[3:] {
		h.Reports = append(h.Reports, readReports(s.t, filepath.Join(host.dir, "data", "work"))...)
	}
	h.Faults = s.faults
	s.mu.Lock()
	h.HeldBack = s.heldBack
	s.mu.Unlock()
	h.SelfExits = map[string]int{}
	for _, p := range s.procs {
		p.mu.Lock()
		h.SelfExits[p.role] += p.selfExit
		p.mu.Unlock()
	}
	return h
}

// soakHistory is what record read, before it becomes a soak.History.
type soakHistory struct {
	Tasks    []soakTaskRecord
	Commands []soakCommand
	Runs     []api.RunView
	Workers  []api.WorkerView
	Blobs    []string
	// BlobTimes is when each blob entered sha256/ (its file's mtime).
	BlobTimes map[string]time.Time
	Faults    []soakFault
	// Reports are the executors' result.json files.
	Reports []soakReport
	// HeldBack counts the batches the workload did not send while
	// maxOpenTasks were open.
	HeldBack int
	// SelfExits counts, by role, processes that exited on their own and
	// were started again.
	SelfExits map[string]int
}

// soakTaskRecord is a task at the end: its current view and, for a task
// an operator's fault hit, every execution of its workflow (oldest first).
type soakTaskRecord struct {
	Task soakTask
	View api.TaskView
	Runs []operatorRun
}

// grantedLease is a lease of a task, from the latest execution of its
// workflow that has it, and how that execution ended it when it closed
// without an outcome (an operator's terminate, or the reset that replaced
// it): byOperator, the close time, or void, a result it accepted that
// never became the task's.
type grantedLease struct {
	lease.Lease
	byOperator time.Time
	void       bool
}

// leases lists every lease the task's executions granted, by fence.
func (rec soakTaskRecord) leases() []grantedLease {
	if len(rec.Runs) == 0 {
		var out []grantedLease
		for _, l := range rec.View.Leases {
			out = append(out, grantedLease{Lease: l})
		}
		return out
	}
	byFence := map[int64]grantedLease{}
	for _, run := range rec.Runs {
		closedBy := run.Status != "WORKFLOW_EXECUTION_STATUS_RUNNING" && run.Status != "WORKFLOW_EXECUTION_STATUS_COMPLETED" &&
			run.Status != "WORKFLOW_EXECUTION_STATUS_CONTINUED_AS_NEW"
		for i, l := range run.View.Leases {
			last := i == len(run.View.Leases)-1
			switch {
			case run.FromHistory && !last:
				// Ended by the next grant at the latest.
				l.State, l.EndedAt, l.EndReason = lease.Revoked, run.View.Leases[i+1].GrantedAt, "next_grant"
			case closedBy && last && !run.UndecidedFrom.IsZero() && !l.EndedAt.Before(run.UndecidedFrom):
				// The query's replay of events the run never decided on
				// may have ended it (it cannot grant): held until the close.
				l.State, l.EndedAt, l.EndReason = lease.Active, time.Time{}, ""
			}
			g := grantedLease{Lease: l}
			if closedBy && l.EndedAt.IsZero() {
				g.byOperator = run.Close
			}
			g.void = closedBy && l.EndReason == "result_accepted"
			byFence[l.Fence] = g
		}
	}
	return slices.SortedFunc(maps.Values(byFence), func(a, b grantedLease) int { return cmp.Compare(a.Fence, b.Fence) })
}

// soakCommand is one run of an attempt's command as its trace saw it:
// its first and last line.
type soakCommand struct {
	Task           string
	Attempt, Fence int64
	Start, Last    time.Time
}

// readSoakTrace reads task's trace file (none: the task never ran).
func readSoakTrace(t *testing.T, task, path string) []soakCommand {
	f, err := os.Open(path)
	if os.IsNotExist(err) {
		return nil
	}
	require.NoError(t, err)
	defer f.Close()
	type key struct{ fence, pid int64 }
	byRun := map[key]*soakCommand{}
	var order []key
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) != 5 {
			continue // a line cut by a kill
		}
		secs, micros, ok := strings.Cut(fields[0], ".")
		sec, err1 := strconv.ParseInt(secs, 10, 64)
		us, err2 := strconv.ParseInt(micros, 10, 64)
		attempt, err3 := strconv.ParseInt(fields[1], 10, 64)
		fence, err4 := strconv.ParseInt(fields[2], 10, 64)
		pid, err5 := strconv.ParseInt(fields[3], 10, 64)
		if !ok || err1 != nil || err2 != nil || err3 != nil || err4 != nil || err5 != nil {
			continue
		}
		at := time.Unix(sec, us*1000)
		k := key{fence, pid}
		c := byRun[k]
		if c == nil {
			c = &soakCommand{Task: task, Attempt: attempt, Fence: fence, Start: at}
			byRun[k] = c
			order = append(order, k)
		}
		c.Last = at
	}
	var out []soakCommand
	for _, k := range order {
		out = append(out, *byRun[k])
	}
	return out
}

// soakReport is an executor's report of one attempt (its result.json)
// and when it was written.
type soakReport struct {
	executor.Report
	Written time.Time
}

// readReports reads every result.json under an agent's work directory
// (<worker>/<task>/<attempt>-<fence>/).
func readReports(t *testing.T, dir string) []soakReport {
	paths, err := filepath.Glob(filepath.Join(dir, "*", "*", "*", "result.json"))
	require.NoError(t, err)
	var out []soakReport
	for _, path := range paths {
		b, err := os.ReadFile(path)
		require.NoError(t, err)
		fi, err := os.Stat(path)
		require.NoError(t, err)
		r := soakReport{Written: fi.ModTime()}
		require.NoError(t, json.Unmarshal(b, &r.Report), path)
		out = append(out, r)
	}
	return out
}

// storeBlobs lists the digests of the blobs under sha256/ in the S3
// store of start-dev, whose data is under dir, and when each was written.
func storeBlobs(t *testing.T, dir string) ([]string, map[string]time.Time) {
	var blobs []string
	times := map[string]time.Time{}
	err := filepath.WalkDir(dir, func(path string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return nil
		}
		if parent := filepath.Base(filepath.Dir(path)); parent == "sha256" && len(d.Name()) == 64 {
			digest := "sha256:" + d.Name()
			blobs = append(blobs, digest)
			if fi, err := d.Info(); err == nil {
				times[digest] = fi.ModTime()
			}
		}
		return nil
	})
	require.NoError(t, err)
	return blobs, times
}

// lockDelayOf is how long after l ended its command may still run by the
// task's own account: the lock-delay of the retry directive its end issued
// (the next grant waits it out; README guarantee 9), zero without one.
func lockDelayOf(ds []lease.RetryDirective, l lease.Lease) time.Duration {
	for _, d := range ds {
		if d.NextFence == l.Fence+1 && d.NextAttempt == l.Attempt+1 && d.LockDelayUntil.After(l.EndedAt) {
			return d.LockDelayUntil.Sub(l.EndedAt)
		}
	}
	return 0
}

// history turns what record read into the checker's history: each lease
// a grant and, once ended, an acceptance, expiry or revocation at its
// workflow times; each traced command with its first and last line.
func (r soakHistory) history() soak.History {
	var h soak.History
	worker := map[string]string{} // "task/fence" → worker
	accepted := map[string]bool{} // "task/fence" the task accepted
	for _, rec := range r.Tasks {
		v := rec.View
		for _, g := range rec.leases() {
			l := g.Lease
			worker[fmt.Sprintf("%s/%d", v.TaskID, l.Fence)] = l.WorkerID
			h.Ops = append(h.Ops, soak.Op{Kind: soak.OpGrant, Task: v.TaskID, Attempt: l.Attempt, Fence: l.Fence, Worker: l.WorkerID,
				OK: true, Call: l.GrantedAt, Return: l.GrantedAt})
			if !g.byOperator.IsZero() {
				// Its command may run until a TTL after: no heartbeat
				// could end it sooner (README guarantee 9; the lock-delay
				// keeps the next grant after it).
				h.Ops = append(h.Ops, soak.Op{Kind: soak.OpRevoke, Task: v.TaskID, Attempt: l.Attempt, Fence: l.Fence, Worker: l.WorkerID,
					Reason: "execution closed by an operator", Call: g.byOperator, Return: g.byOperator, Grace: l.TTL})
				continue
			}
			if l.EndedAt.IsZero() {
				continue
			}
			end := soak.Op{Kind: soak.OpRevoke, Task: v.TaskID, Attempt: l.Attempt, Fence: l.Fence, Worker: l.WorkerID,
				Reason: l.EndReason, Call: l.EndedAt, Return: l.EndedAt}
			switch {
			case g.void:
				// Accepted by an execution an operator then closed: the
				// result never became the task's (docs/operations.md).
				end.Reason = "result accepted by an execution an operator closed"
				accepted[fmt.Sprintf("%s/%d", v.TaskID, l.Fence)] = true
			case l.EndReason == "result_accepted":
				end.Kind, end.OK, end.Reason = soak.OpSubmit, true, ""
				accepted[fmt.Sprintf("%s/%d", v.TaskID, l.Fence)] = true
			case l.EndReason == string(lease.ReasonLeaseExpired):
				end.Kind = soak.OpExpire
			}
			if end.Kind != soak.OpSubmit {
				end.Grace = lockDelayOf(v.Directives, l)
			}
			h.Ops = append(h.Ops, end)
		}
		end := soak.TaskEnd{Task: rec.Task.ID, RunID: rec.Task.Run, State: string(v.State)}
		if !v.State.Terminal() {
			end.State = ""
		}
		if n := len(v.Directives); n > 0 && v.State == api.TaskRetriesExhausted {
			end.Reason = string(v.Directives[n-1].Reason)
		}
		h.Tasks = append(h.Tasks, end)
		if res := v.Result; res != nil {
			for _, a := range res.Artifacts {
				h.Artifacts = append(h.Artifacts, soak.Artifact{Task: v.TaskID, Attempt: res.Attempt, Fence: res.Fence, Name: a.Name, Digest: a.Digest})
			}
			for _, l := range res.Logs {
				h.Inputs = append(h.Inputs, l.Digest)
			}
		}
	}
	// What the executors say of their submissions: a refusal between the
	// command's end and the report's writing; an acceptance the task did
	// not record as its accepted lease is one more accepted result.
	for _, rep := range r.Reports {
		c := rep.Claim
		if rep.FinishedAt.IsZero() || rep.FinishedAt.After(rep.Written) {
			rep.FinishedAt = rep.Written // never started: refused at launch
		}
		switch rep.Outcome {
		case executor.OutcomeRejected:
			h.Ops = append(h.Ops, soak.Op{Kind: soak.OpSubmit, Task: c.TaskID, Attempt: c.Attempt, Fence: c.Fence, Worker: c.WorkerID,
				Reason: rep.Reason, Call: rep.FinishedAt, Return: rep.Written})
		case executor.OutcomeAccepted:
			if accepted[fmt.Sprintf("%s/%d", c.TaskID, c.Fence)] {
				continue
			}
			h.Ops = append(h.Ops, soak.Op{Kind: soak.OpSubmit, Task: c.TaskID, Attempt: c.Attempt, Fence: c.Fence, Worker: c.WorkerID,
				OK: true, Reason: "the executor's report only", Call: rep.FinishedAt, Return: rep.Written})
		}
	}
	for _, c := range r.Commands {
		h.Commands = append(h.Commands, soak.Command{Task: c.Task, Attempt: c.Attempt, Fence: c.Fence,
			Host: worker[fmt.Sprintf("%s/%d", c.Task, c.Fence)], Start: c.Start, Stop: c.Last})
	}
	for _, v := range r.Runs {
		h.Runs = append(h.Runs, runEnd(v))
	}
	h.Store.Blobs = r.Blobs
	// A blob of an attempt that still held the task's highest fence when
	// its executor's submission was answered is an orphan, not a stale attempt's output
	// (README guarantee 2): its ingest ran, and the task did not keep the
	// result (the ingest failed after promoting, or the lease ended
	// meanwhile). The checker is told of it as known; figures count it.
	h.Inputs = append(h.Inputs, r.orphans()...)
	for _, w := range r.Workers {
		h.Workers = append(h.Workers, soak.WorkerEnd{WorkerID: w.WorkerID, Reservations: len(w.Reservations),
			FreeSlots: int(w.Free.Slots), Slots: int(w.Capacity.Slots)})
	}
	return h
}

// orphans lists the blobs under sha256/ that no accepted result names and
// that are the output of an attempt whose fence was the task's highest
// granted: by an executor's report, when the report was written (after
// its submission was answered: a late submission after a newer grant
// stays a stale blob); or, when the attempt left no report (its agent was
// killed), by the blob's own contents (fence.txt names its attempt:
// expectedFence) and its write time in the store.
func (r soakHistory) orphans() []string {
	inStore := map[string]bool{}
	for _, b := range r.Blobs {
		inStore[b] = true
	}
	named := map[string]bool{}
	highest := map[string][]grantedLease{} // task → its leases
	for _, rec := range r.Tasks {
		highest[rec.View.TaskID] = rec.leases()
		if res := rec.View.Result; res != nil {
			for _, a := range append(slices.Clone(res.Artifacts), res.Logs...) {
				named[a.Digest] = true
			}
		}
	}
	var out []string
	for _, rep := range r.Reports {
		current := true
		for _, l := range highest[rep.Claim.TaskID] {
			if l.Fence > rep.Claim.Fence && !l.GrantedAt.After(rep.Written) {
				current = false
			}
		}
		if !current {
			continue
		}
		for _, a := range rep.Artifacts {
			if inStore[a.Digest] && !named[a.Digest] && !slices.Contains(out, a.Digest) {
				out = append(out, a.Digest)
			}
		}
	}
	for task, leases := range highest {
		for _, l := range leases {
			d := expectedFence(task, l.Attempt, l.Fence)
			at, ok := r.BlobTimes[d]
			if !ok || named[d] || slices.Contains(out, d) {
				continue
			}
			current := true
			for _, later := range leases {
				if later.Fence > l.Fence && !later.GrantedAt.After(at) {
					current = false
				}
			}
			if current {
				out = append(out, d)
			}
		}
	}
	return out
}

// runEnd is a run's committed results (its events marked committed), its
// evidence (the events its commit records name) and whether its TCD
// chain, recomputed from those records, ends at the run's digest.
func runEnd(v api.RunView) soak.RunEnd {
	end := soak.RunEnd{RunID: v.RunID}
	bySeq := map[int64]api.Event{}
	for _, e := range v.Events {
		bySeq[e.Seq] = e
		if e.Type == api.EventWorkerResult && e.Committed && e.Result != nil {
			end.Committed = append(end.Committed, e.Result.TaskID)
		}
	}
	var problems []string
	if v.EventsNotListed > 0 {
		problems = append(problems, fmt.Sprintf("%d events not listed: the chain cannot be recomputed", v.EventsNotListed))
	}
	tcd, err := workflows.InitialTCD(v.RunID, v.WorldID)
	if err != nil {
		problems = append(problems, err.Error())
	}
	var evidence int64
	for _, e := range v.Events {
		if e.Type != api.EventCommit || e.Commit == nil {
			continue
		}
		seqs := slices.Sorted(slices.Values(e.Commit.EventSeqs))
		var refs []api.ResultRef
		for _, seq := range seqs {
			ev, ok := bySeq[seq]
			if !ok || ev.Result == nil {
				problems = append(problems, fmt.Sprintf("commit %d names event %d, not a listed worker_result", e.Commit.ParentTime, seq))
				continue
			}
			refs = append(refs, *ev.Result)
			end.Evidence = append(end.Evidence, ev.Result.TaskID)
		}
		evidence += int64(len(seqs))
		if tcd, err = workflows.NextTCD(tcd, e.Commit.ParentTime, refs); err != nil {
			problems = append(problems, err.Error())
		} else if tcd != e.Commit.TCDDigest {
			problems = append(problems, fmt.Sprintf("commit %d: tcd %s, recomputed %s", e.Commit.ParentTime, e.Commit.TCDDigest, tcd))
		}
	}
	if tcd != v.TCDDigest {
		problems = append(problems, fmt.Sprintf("run tcd %s, recomputed %s", v.TCDDigest, tcd))
	}
	if evidence != v.Evidence {
		problems = append(problems, fmt.Sprintf("evidence %d, commit records name %d", v.Evidence, evidence))
	}
	end.ChainErr = strings.Join(problems, "; ")
	return end
}

// check writes the history, runs the checker on it and prints the
// figures; any violation fails the test.
func (s *soakRun) check(r soakHistory) {
	h := r.history()
	accepted := map[string][2]int64{} // task → the accepted attempt and fence
	for _, rec := range r.Tasks {
		if res := rec.View.Result; res != nil {
			accepted[res.TaskID] = [2]int64{res.Attempt, res.Fence}
		}
	}
	f, err := os.Create(filepath.Join(s.out, "history.jsonl"))
	require.NoError(s.t, err)
	require.NoError(s.t, soak.WriteJSONL(f, h))
	require.NoError(s.t, f.Close())
	rep := soak.Check(h, soak.Options{
		Expect: func(task, name string) (string, bool) {
			switch name {
			case "id.txt":
				return expectedOutput(task), true
			case "fence.txt":
				a, ok := accepted[task]
				return expectedFence(task, a[0], a[1]), ok
			}
			return "", false
		},
		VisualizeDir: filepath.Join(s.out, "porcupine"),
	})
	var table strings.Builder
	s.figures(&table, r, rep)
	require.NoError(s.t, os.WriteFile(filepath.Join(s.out, "figures.txt"), []byte(table.String()), 0o644))
	s.t.Logf("soak figures:\n%s", table.String())
	for _, v := range rep.Violations {
		s.errorf("soak: violation %s", v)
	}
}

// figures prints the soak's table: faults by kind with their time to
// recover (from the heal to the next grant or acceptance on the faulted
// agent's worker, of the task an operator's fault hit, or anywhere for the
// other hosts), the lease figures and the checker's verdict.
func (s *soakRun) figures(w *strings.Builder, r soakHistory, rep soak.Report) {
	var events []time.Time
	byWorker, byTask := map[string][]time.Time{}, map[string][]time.Time{}
	for _, rec := range r.Tasks {
		for _, l := range rec.leases() {
			at := []time.Time{l.GrantedAt}
			if l.EndReason == "result_accepted" {
				at = append(at, l.EndedAt)
			}
			events = append(events, at...)
			byWorker[l.WorkerID] = append(byWorker[l.WorkerID], at...)
			byTask[rec.Task.ID] = append(byTask[rec.Task.ID], at...)
		}
	}
	recovered := map[string][]time.Duration{}
	count := map[string]int{}
	for _, f := range r.Faults {
		count[f.Kind]++
		after := events
		switch {
		case f.Task != "":
			after = byTask[f.Task]
		case f.Host == "d" || f.Host == "e" || f.Host == "f":
			after = byWorker["soak-"+f.Host]
		}
		var next time.Time
		for _, at := range after {
			if at.After(f.Healed) && (next.IsZero() || at.Before(next)) {
				next = at
			}
		}
		if !next.IsZero() {
			recovered[f.Kind] = append(recovered[f.Kind], next.Sub(f.Healed))
		}
	}
	kinds := slices.Sorted(maps.Keys(count))
	fmt.Fprintf(w, "%-20s %7s %12s %12s\n", "fault", "count", "recover p50", "recover p99")
	total := 0
	for _, k := range kinds {
		total += count[k]
		fmt.Fprintf(w, "%-20s %7d %12s %12s\n", k, count[k], percentile(recovered[k], 0.50), percentile(recovered[k], 0.99))
	}
	fmt.Fprintf(w, "%-20s %7d\n", "all faults", total)
	fmt.Fprintf(w, "processes that exited on their own and were started again: %v\n", r.SelfExits)
	fmt.Fprintf(w, "batches held back while %d tasks were open: %d\n", maxOpenTasks, r.HeldBack)
	fmt.Fprintf(w, "orphan blobs (a current attempt's outputs, its result not kept): %d\n", len(r.orphans()))
	fmt.Fprintf(w, "tasks %d, attempts %d, accepted %d, refused %v, overlaps %d (longest %s)\n",
		rep.Tasks, rep.Attempts, rep.Accepted, rep.Refused, rep.Overlaps, rep.LongestOverlap)
	fmt.Fprintf(w, "checker: %s\n", rep.Verdict())
}

// percentile is the q-quantile of ds (nearest rank), "-" for none.
func percentile(ds []time.Duration, q float64) string {
	if len(ds) == 0 {
		return "-"
	}
	ds = slices.Sorted(slices.Values(ds))
	i := int(q*float64(len(ds)) + 0.5)
	i = min(max(i-1, 0), len(ds)-1)
	return ds[i].Round(10 * time.Millisecond).String()
}

// Of a run an operator closed with undecided events, the last lease's end
// from UndecidedFrom on is held until the close; earlier leases' ends
// stand, and a run read from history ends each lease at the next grant.
func TestLeasesOfAClosedRunHoldUndecidedEnds(t *testing.T) {
	at := func(s int) time.Time { return time.Date(2026, 12, 4, 21, 14, s, 0, time.UTC) }
	ended := func(fence int64, granted, end time.Time) lease.Lease {
		return lease.Lease{TaskID: "t", Fence: fence, Attempt: fence, State: lease.Revoked, GrantedAt: granted, EndedAt: end, EndReason: "worker_lost"}
	}
	// Fence 1 revoked and fence 2 granted in the workflow task that
	// began at 20 s; fence 2's end at 30 s is the query's.
	run := operatorRun{RunID: "r1", Status: "WORKFLOW_EXECUTION_STATUS_TERMINATED", Close: at(50), UndecidedFrom: at(20),
		View: api.TaskView{Leases: []lease.Lease{ended(1, at(5), at(20)), ended(2, at(21), at(30))}}}
	got := soakTaskRecord{Runs: []operatorRun{run}}.leases()
	require.Len(t, got, 2)
	assert.Equal(t, at(20), got[0].EndedAt, "an earlier fence's end stands")
	assert.True(t, got[0].byOperator.IsZero())
	assert.True(t, got[1].EndedAt.IsZero(), "the last fence's end from UndecidedFrom on is held")
	assert.Equal(t, at(50), got[1].byOperator)

	run.UndecidedFrom = time.Time{}
	got = soakTaskRecord{Runs: []operatorRun{run}}.leases()
	assert.Equal(t, at(30), got[1].EndedAt, "nothing undecided: every end stands")

	granted := func(fence int64, t time.Time) lease.Lease {
		return lease.Lease{TaskID: "t", Fence: fence, Attempt: fence, State: lease.Active, GrantedAt: t}
	}
	run = operatorRun{RunID: "r2", Status: "WORKFLOW_EXECUTION_STATUS_TERMINATED", Close: at(50), FromHistory: true,
		View: api.TaskView{Leases: []lease.Lease{granted(1, at(5)), granted(2, at(21))}}}
	got = soakTaskRecord{Runs: []operatorRun{run}}.leases()
	require.Len(t, got, 2)
	assert.Equal(t, at(21), got[0].EndedAt, "read from history: ended by the next grant")
	assert.Equal(t, at(50), got[1].byOperator)
}
