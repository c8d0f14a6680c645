package soak

import (
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

var base = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)

// at is base plus ms milliseconds.
func at(ms int) time.Time { return base.Add(time.Duration(ms) * time.Millisecond) }

// op builds an op of task/attempt/fence by worker over [call, ret] ms.
func op(kind OpKind, task string, attempt, fence int64, worker string, ok bool, reason string, call, ret int) Op {
	return Op{Kind: kind, Task: task, Attempt: attempt, Fence: fence, Worker: worker, OK: ok, Reason: reason, Call: at(call), Return: at(ret)}
}

func cmd(task string, attempt, fence int64, host string, start, stop int) Command {
	return Command{Task: task, Attempt: attempt, Fence: fence, Host: host, Start: at(start), Stop: at(stop)}
}

const (
	digestA  = "sha256:aaaa"
	digestB  = "sha256:bbbb"
	digestIn = "sha256:cccc"
	window   = 100 * time.Millisecond
)

// legalHistory is a soak that broke nothing: task a expires and is retried
// (its first attempt's late submit and heartbeat are refused stale_fence,
// its commands overlap 20 ms); b completes at once; c loses both workers
// and exhausts its retries (and refuses an unauthenticated submit).
func legalHistory() History {
	return History{
		Ops: []Op{
			op(OpGrant, "a", 1, 1, "w1", false, "", 0, 10),
			op(OpHeartbeat, "a", 1, 1, "w1", true, "", 100, 110),
			op(OpExpire, "a", 1, 1, "w1", false, "lease_expired", 1000, 1010),
			op(OpGrant, "a", 2, 2, "w2", false, "", 1050, 1060),
			op(OpSubmit, "a", 1, 1, "w1", false, "stale_fence", 1200, 1210),
			op(OpHeartbeat, "a", 1, 1, "w1", false, "stale_fence", 1250, 1260),
			op(OpHeartbeat, "a", 2, 2, "w2", true, "", 1300, 1310),
			op(OpSubmit, "a", 2, 2, "w2", true, "", 2000, 2010),

			op(OpGrant, "b", 1, 1, "w1", false, "", 50, 60),
			// Concurrent with the submit that ends the lease: either order.
			op(OpHeartbeat, "b", 1, 1, "w1", false, "lease_not_active", 895, 915),
			op(OpHeartbeat, "b", 1, 1, "w1", true, "", 500, 510),
			op(OpSubmit, "b", 1, 1, "w1", true, "", 900, 910),

			op(OpGrant, "c", 1, 1, "w1", false, "", 0, 10),
			op(OpRevoke, "c", 1, 1, "w1", false, "worker_lost", 300, 310),
			op(OpGrant, "c", 2, 3, "w2", false, "", 400, 410),
			op(OpSubmit, "c", 2, 3, "w3", false, "unauthenticated", 500, 510),
			op(OpRevoke, "c", 2, 3, "w2", false, "worker_lost", 700, 710),
		},
		Commands: []Command{
			cmd("a", 1, 1, "h1", 20, 1080),
			cmd("a", 2, 2, "h2", 1060, 1990),
			cmd("b", 1, 1, "h1", 70, 880),
			cmd("c", 1, 1, "h1", 20, 305),
			cmd("c", 2, 3, "h2", 420, 705),
		},
		Tasks: []TaskEnd{
			{Task: "a", RunID: "r1", State: StateCompleted},
			{Task: "b", RunID: "r1", State: StateCompleted},
			{Task: "c", RunID: "r1", State: StateRetriesExhausted, Reason: "2 of 2 attempts used"},
		},
		Artifacts: []Artifact{
			{Task: "a", Attempt: 2, Fence: 2, Name: "out.txt", Digest: digestA},
			{Task: "b", Attempt: 1, Fence: 1, Name: "out.txt", Digest: digestB},
		},
		Runs:    []RunEnd{{RunID: "r1", Committed: []string{"a", "b"}, Evidence: []string{"b", "a"}}},
		Inputs:  []string{digestIn},
		Store:   StoreState{Blobs: []string{digestA, digestB, digestIn}},
		Workers: []WorkerEnd{{WorkerID: "w1", FreeSlots: 4, Slots: 4}, {WorkerID: "w2", FreeSlots: 2, Slots: 2}},
	}
}

// expect is the workload's pure function for legalHistory.
func expect(task, name string) (string, bool) {
	d, ok := map[string]string{"a/out.txt": digestA, "b/out.txt": digestB}[task+"/"+name]
	return d, ok
}

func opts() Options { return Options{OverlapWindow: window, Expect: expect} }

// kinds returns the distinct violation kinds of r, sorted.
func kinds(r Report) []Kind {
	var ks []Kind
	for _, v := range r.Violations {
		ks = append(ks, v.Kind)
	}
	slices.Sort(ks)
	return slices.Compact(ks)
}

// find returns the index of the op of task with kind and fence and call.
func find(t *testing.T, h History, task string, kind OpKind, fence int64, call int) int {
	t.Helper()
	for i, o := range h.Ops {
		if o.Task == task && o.Kind == kind && o.Fence == fence && o.Call.Equal(at(call)) {
			return i
		}
	}
	t.Fatalf("no %s of %s fence %d at %d ms", kind, task, fence, call)
	return -1
}

func TestALegalHistoryPasses(t *testing.T) {
	r := Check(legalHistory(), opts())
	assert.Empty(t, r.Violations)
	assert.True(t, r.OK(), r.Verdict())
	assert.True(t, r.Linearizable)
	assert.Equal(t, 3, r.Tasks)
	assert.Equal(t, 5, r.Attempts)
	assert.Equal(t, 2, r.Accepted)
	assert.Equal(t, map[string]int{"stale_fence": 1, "unauthenticated": 1}, r.Refused)
	assert.Equal(t, 1, r.Overlaps)
	assert.Equal(t, 20*time.Millisecond, r.LongestOverlap)
	assert.Contains(t, r.Verdict(), "ok: 3 tasks")
}

func TestIllegalHistoriesAreCaught(t *testing.T) {
	tests := []struct {
		name   string
		mutate func(t *testing.T, h *History)
		want   []Kind
	}{
		{"stale acceptance", func(t *testing.T, h *History) {
			// a's late submit of fence 1, after fence 2 was granted, accepted.
			i := find(t, *h, "a", OpSubmit, 1, 1200)
			h.Ops[i].OK, h.Ops[i].Reason = true, ""
		}, []Kind{KindNotLinearizable, KindStaleAcceptance, KindTwoResults}},
		{"stale acceptance of a lease that ended only by the next grant", func(t *testing.T, h *History) {
			h.Ops = append(h.Ops,
				op(OpGrant, "d", 1, 1, "w1", false, "", 0, 10),
				op(OpGrant, "d", 2, 2, "w2", false, "", 100, 110),
				op(OpSubmit, "d", 1, 1, "w1", true, "", 200, 210))
			h.Tasks = append(h.Tasks, TaskEnd{Task: "d", RunID: "r1", State: StateCompleted})
		}, []Kind{KindNotLinearizable, KindStaleAcceptance}},
		{"reused fence", func(t *testing.T, h *History) {
			h.Ops[find(t, *h, "c", OpGrant, 3, 400)].Fence = 1
			h.Ops[find(t, *h, "c", OpRevoke, 3, 700)].Fence = 1
			h.Ops[find(t, *h, "c", OpSubmit, 3, 500)].Fence = 1
			h.Commands[4].Fence = 1
		}, []Kind{KindFenceReused, KindNotLinearizable}},
		{"decreasing fence", func(t *testing.T, h *History) {
			h.Ops[find(t, *h, "c", OpGrant, 1, 0)].Fence = 5
			h.Ops[find(t, *h, "c", OpRevoke, 1, 300)].Fence = 5
			h.Commands[3].Fence = 5
		}, []Kind{KindFenceDecreased, KindNotLinearizable}},
		{"two accepted results", func(t *testing.T, h *History) {
			h.Ops = append(h.Ops, op(OpSubmit, "b", 1, 1, "w1", true, "", 950, 960))
		}, []Kind{KindNotLinearizable, KindTwoResults}},
		{"overlap beyond the window", func(t *testing.T, h *History) {
			h.Commands[1].Start = at(900) // a's second command, 180 ms before the first stops
		}, []Kind{KindOverlap}},
		{"lost task", func(t *testing.T, h *History) {
			h.Tasks[2].State, h.Tasks[2].Reason = "", ""
		}, []Kind{KindLostTask}},
		{"ops of a task never submitted", func(t *testing.T, h *History) {
			h.Tasks = h.Tasks[:2]
		}, []Kind{KindLostTask}},
		{"retries exhausted without a reason", func(t *testing.T, h *History) {
			h.Tasks[2].Reason = ""
		}, []Kind{KindNoReason}},
		{"an end no guarantee allows", func(t *testing.T, h *History) {
			h.Tasks[2].State = "FAILED"
		}, []Kind{KindUnexpectedEnd}},
		{"completed without a result", func(t *testing.T, h *History) {
			h.Ops = slices.Delete(h.Ops, find(t, *h, "b", OpSubmit, 1, 900), find(t, *h, "b", OpSubmit, 1, 900)+1)
		}, []Kind{KindCompletedWithoutResult, KindStaleArtifact}},
		{"artifact not matching Expect", func(t *testing.T, h *History) {
			h.Artifacts[1].Digest = "sha256:dddd"
			h.Store.Blobs[1] = "sha256:dddd"
		}, []Kind{KindArtifactMismatch}},
		{"artifact Expect does not know", func(t *testing.T, h *History) {
			h.Artifacts = append(h.Artifacts, Artifact{Task: "b", Attempt: 1, Fence: 1, Name: "extra", Digest: digestB})
		}, []Kind{KindArtifactMismatch}},
		{"artifact of a refused result", func(t *testing.T, h *History) {
			h.Artifacts = append(h.Artifacts, Artifact{Task: "a", Attempt: 1, Fence: 1, Name: "out.txt", Digest: digestA})
		}, []Kind{KindStaleArtifact}},
		{"stale blob", func(t *testing.T, h *History) {
			h.Store.Blobs = append(h.Store.Blobs, "sha256:eeee")
		}, []Kind{KindStaleBlob}},
		{"evidence differing from commits", func(t *testing.T, h *History) {
			h.Runs[0].Evidence = []string{"b"}
		}, []Kind{KindEvidenceMismatch}},
		{"evidence counting a task twice", func(t *testing.T, h *History) {
			h.Runs[0].Evidence = []string{"a", "b", "b"}
		}, []Kind{KindEvidenceMismatch}},
		{"broken chain", func(t *testing.T, h *History) {
			h.Runs[0].ChainErr = "commit 2: digest mismatch"
		}, []Kind{KindBrokenChain}},
		{"held reservation", func(t *testing.T, h *History) {
			h.Workers[0].Reservations = 1
		}, []Kind{KindReservationHeld}},
		{"busy slot", func(t *testing.T, h *History) {
			h.Workers[1].FreeSlots = 1
		}, []Kind{KindSlotsBusy}},
		{"command running after its lease ended", func(t *testing.T, h *History) {
			h.Commands[4].Stop = at(900) // c's revoke returned at 710
		}, []Kind{KindRanAfterLease}},
		{"command never seen stopping", func(t *testing.T, h *History) {
			h.Commands[4].Stop = time.Time{}
		}, []Kind{KindNeverStopped}},
		{"command without a lease", func(t *testing.T, h *History) {
			h.Commands = append(h.Commands, cmd("b", 2, 2, "h3", 100, 300))
		}, []Kind{KindOverlap, KindRanWithoutLease}},
		{"interval running backwards", func(t *testing.T, h *History) {
			i := find(t, *h, "a", OpHeartbeat, 2, 1300)
			h.Ops[i].Return = at(1200)
		}, []Kind{KindMalformedOp}},
		{"only porcupine sees it", func(t *testing.T, h *History) {
			// Grant 2 is concurrent with both heartbeats, so each check of
			// pairs in real-time order passes; but the refusal of fence 1
			// as stale puts grant 2 before 310 ms, and the accepted
			// heartbeat of fence 1 at 400 ms needs it after.
			h.Ops = append(h.Ops,
				op(OpGrant, "d", 1, 1, "w1", false, "", 0, 10),
				op(OpGrant, "d", 2, 2, "w2", false, "", 200, 1000),
				op(OpHeartbeat, "d", 1, 1, "w1", false, "stale_fence", 300, 310),
				op(OpHeartbeat, "d", 1, 1, "w1", true, "", 400, 410))
			h.Tasks = append(h.Tasks, TaskEnd{Task: "d", RunID: "r1", State: StateRetriesExhausted, Reason: "cancelled by the harness"})
		}, []Kind{KindNotLinearizable}},
		{"a fence refusal of the current fence", func(t *testing.T, h *History) {
			i := find(t, *h, "a", OpHeartbeat, 2, 1300)
			h.Ops[i].OK, h.Ops[i].Reason = false, "stale_fence"
		}, []Kind{KindNotLinearizable}},
		{"a wrong_worker refusal of a stale fence", func(t *testing.T, h *History) {
			i := find(t, *h, "a", OpHeartbeat, 1, 1250)
			h.Ops[i].Reason = "wrong_worker"
		}, []Kind{KindNotLinearizable}},
		{"a heartbeat accepted after expiry", func(t *testing.T, h *History) {
			h.Ops = append(h.Ops, op(OpHeartbeat, "c", 2, 3, "w2", true, "", 800, 810))
		}, []Kind{KindNotLinearizable}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := legalHistory()
			tt.mutate(t, &h)
			r := Check(h, opts())
			slices.Sort(tt.want)
			assert.Equal(t, tt.want, kinds(r), "violations: %v", r.Violations)
			assert.False(t, r.OK())
			assert.Contains(t, r.Verdict(), "FAIL:")
			wantLin := !slices.Contains(tt.want, KindNotLinearizable)
			assert.Equal(t, wantLin, r.Linearizable)
		})
	}
}

func TestOverlapAndLateStopAreMeasuredAgainstTheWindow(t *testing.T) {
	h := legalHistory()
	// Window 0: a's commands overlap 20 ms, and its first stops 70 ms
	// after its lease expired.
	r := Check(h, Options{Expect: expect})
	assert.Equal(t, []Kind{KindOverlap, KindRanAfterLease}, kinds(r), "violations: %v", r.Violations)
	assert.Equal(t, 20*time.Millisecond, r.LongestOverlap)
}

// An end with a grace (an operator's terminate) lets the command run
// until the grace is over, not beyond, and a grant of the next fence still
// ends it at once.
func TestAGraceExtendsTheLeasesEndForItsCommandOnly(t *testing.T) {
	withGrace := func(stop, next int) History {
		h := legalHistory()
		end := op(OpRevoke, "c", 2, 3, "w2", false, "execution closed by an operator", 700, 710)
		end.Grace = time.Second
		h.Ops[len(h.Ops)-1] = end
		h.Ops = append(h.Ops, op(OpGrant, "c", 1, 4, "w1", false, "", next, next+10))
		h.Commands[len(h.Commands)-1].Stop = at(stop)
		h.Commands = append(h.Commands, cmd("c", 1, 4, "h1", next+20, next+300))
		return h
	}
	assert.Empty(t, Check(withGrace(1600, 2000), opts()).Violations, "stopped within the grace, before the next grant")
	r := Check(withGrace(1900, 2000), opts())
	assert.Equal(t, []Kind{KindRanAfterLease}, kinds(r), "stopped after the grace: %v", r.Violations)
	assert.Contains(t, r.Violations[0].Detail, "1s grace")
	r = Check(withGrace(1600, 1400), opts())
	assert.Equal(t, []Kind{KindOverlap, KindRanAfterLease}, kinds(r), "the next grant came within the grace: %v", r.Violations)
}

func TestAnExpectOfNilSkipsTheArtifactCheck(t *testing.T) {
	h := legalHistory()
	h.Artifacts[0].Digest, h.Store.Blobs[0] = "sha256:ffff", "sha256:ffff"
	assert.Empty(t, Check(h, Options{OverlapWindow: window}).Violations)
	assert.Equal(t, []Kind{KindArtifactMismatch}, kinds(Check(h, opts())))
}

func TestVisualizeDirWritesTheFailingTasksHTML(t *testing.T) {
	dir := t.TempDir()
	h := legalHistory()
	h.Ops = append(h.Ops,
		op(OpGrant, "task/d", 1, 1, "w1", false, "", 0, 10),
		op(OpGrant, "task/d", 2, 2, "w2", false, "", 200, 1000),
		op(OpHeartbeat, "task/d", 1, 1, "w1", false, "stale_fence", 300, 310),
		op(OpHeartbeat, "task/d", 1, 1, "w1", true, "", 400, 410))
	h.Tasks = append(h.Tasks, TaskEnd{Task: "task/d", RunID: "r1", State: StateRetriesExhausted, Reason: "x"})
	o := opts()
	o.VisualizeDir = dir
	r := Check(h, o)
	require.NoError(t, r.VisualizeErr)
	path := filepath.Join(dir, "task_d.html")
	assert.Equal(t, []string{path}, r.Visualized)
	html, err := os.ReadFile(path)
	require.NoError(t, err)
	assert.Contains(t, string(html), "<html")
	entries, err := os.ReadDir(dir)
	require.NoError(t, err)
	assert.Len(t, entries, 1, "only the failing task is visualised")
	assert.Contains(t, r.Violations[0].Detail, path)
}

func TestStepLease(t *testing.T) {
	held := leaseState{Fence: 2, Held: true}
	ended := leaseState{Fence: 2}
	tests := []struct {
		name  string
		state leaseState
		in    leaseInput
		ok    bool
		legal bool
		next  leaseState
	}{
		{"grant above", held, leaseInput{Kind: OpGrant, Fence: 3}, true, true, leaseState{Fence: 3, Held: true}},
		{"grant equal", held, leaseInput{Kind: OpGrant, Fence: 2}, true, false, leaseState{Fence: 2, Held: true}},
		{"heartbeat current", held, leaseInput{Kind: OpHeartbeat, Fence: 2}, true, true, held},
		{"heartbeat ended", ended, leaseInput{Kind: OpHeartbeat, Fence: 2}, true, false, ended},
		{"submit current ends", held, leaseInput{Kind: OpSubmit, Fence: 2}, true, true, ended},
		{"submit old", held, leaseInput{Kind: OpSubmit, Fence: 1}, true, false, ended},
		{"stale_fence of old", held, leaseInput{Kind: OpSubmit, Fence: 1, Reason: "stale_fence"}, false, true, held},
		{"stale_fence of current", held, leaseInput{Kind: OpSubmit, Fence: 2, Reason: "stale_fence"}, false, false, held},
		{"wrong_attempt of current", held, leaseInput{Kind: OpSubmit, Fence: 2, Reason: "wrong_attempt"}, false, true, held},
		{"wrong_worker of old", held, leaseInput{Kind: OpSubmit, Fence: 1, Reason: "wrong_worker"}, false, false, held},
		{"lease_not_active before a grant", leaseState{}, leaseInput{Kind: OpHeartbeat, Fence: 1, Reason: "lease_not_active"}, false, true, leaseState{}},
		{"lease_not_active of ended", ended, leaseInput{Kind: OpHeartbeat, Fence: 2, Reason: "lease_not_active"}, false, true, ended},
		{"lease_not_active of old", ended, leaseInput{Kind: OpHeartbeat, Fence: 1, Reason: "lease_not_active"}, false, false, ended},
		{"other reason anywhere", held, leaseInput{Kind: OpSubmit, Fence: 2, Reason: "artifact_mismatch"}, false, true, held},
		{"expire current", held, leaseInput{Kind: OpExpire, Fence: 2}, true, true, ended},
		{"revoke ended", ended, leaseInput{Kind: OpRevoke, Fence: 2}, true, false, ended},
		{"expire old", held, leaseInput{Kind: OpExpire, Fence: 1}, true, false, ended},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			legal, next := stepLease(tt.state, tt.in, tt.ok)
			assert.Equal(t, tt.legal, legal)
			if legal {
				assert.Equal(t, tt.next, next)
			}
		})
	}
}

func TestATimeoutIsItsOwnViolation(t *testing.T) {
	// 30 concurrent grants admit 2^30 partial orders before the heartbeat
	// of a fence never granted can be judged: porcupine cannot finish.
	h := legalHistory()
	for f := int64(1); f <= 30; f++ {
		h.Ops = append(h.Ops, op(OpGrant, "d", f, f, "w1", false, "", 0, 1000))
	}
	h.Ops = append(h.Ops, op(OpHeartbeat, "d", 99, 99, "w1", true, "", 2000, 2010))
	h.Tasks = append(h.Tasks, TaskEnd{Task: "d", RunID: "r1", State: StateRetriesExhausted, Reason: "x"})
	o := opts()
	o.LinearizabilityTimeout = 50 * time.Millisecond
	r := Check(h, o)
	assert.Equal(t, []Kind{KindLinearizabilityUnknown}, kinds(r), "violations: %v", r.Violations)
	assert.False(t, r.Linearizable)
}
