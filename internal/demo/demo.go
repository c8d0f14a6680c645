package demo

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/spiffe/go-spiffe/v2/spiffeid"
	"go.temporal.io/sdk/client"

	"github.com/wdc-runtime/wdc/api"
	wdcclient "github.com/wdc-runtime/wdc/client"
	"github.com/wdc-runtime/wdc/envelope"
	"github.com/wdc-runtime/wdc/examples"
	"github.com/wdc-runtime/wdc/fleet"
	"github.com/wdc-runtime/wdc/identity"
	"github.com/wdc-runtime/wdc/internal/blobstore"
	"github.com/wdc-runtime/wdc/internal/executor"
	"github.com/wdc-runtime/wdc/lease"
	"github.com/wdc-runtime/wdc/resource"
	"github.com/wdc-runtime/wdc/worker"
)

// Options configures a demo run.
type Options struct {
	// Client reaches the Temporal namespace to use.
	Client client.Client
	// DataDir holds the agents' task dirs, and the blob store and staging
	// when BlobURL is empty.
	DataDir string
	// BlobURL is the artifact store (default file://<DataDir>/blobs).
	BlobURL string
	// Suffix makes IDs unique (run, task, workers); required when the
	// namespace is shared.
	Suffix string
	// LeaseTTL is the demo task's lease TTL. Default 3 s.
	LeaseTTL time.Duration
	// Logger receives progress lines (nil: discarded).
	Logger *slog.Logger
	// Progress, when set, is called with short human progress lines.
	Progress func(string)
	// Metrics is the agents' metrics handler (worker.AgentOptions.Metrics;
	// nil: none). The control plane's metrics go through Client's handler.
	Metrics client.MetricsHandler
}

// Result is what the demo observed; the JSON names are stable.
type Result struct {
	Attempt1            int64  `json:"attempt_1"`
	Fence1              int64  `json:"fence_1"`
	RetryReason         string `json:"retry_reason"`
	Attempt2            int64  `json:"attempt_2"`
	Fence2              int64  `json:"fence_2"`
	StaleResultRejected bool   `json:"stale_result_rejected"`
	// StaleRejectReason is the fence check's reason for the stale result.
	StaleRejectReason      string `json:"stale_reject_reason"`
	FinalRunStatus         string `json:"final_run_status"`
	FinalLeaseStatus       string `json:"final_lease_status"`
	WorkerResultEventCount int64  `json:"worker_result_event_count"`
	EvidenceBefore         int64  `json:"evidence_before"`
	EvidenceAfter          int64  `json:"evidence_after"`
	ParentTimeBefore       int64  `json:"parent_time_before"`
	ParentTimeAfter        int64  `json:"parent_time_after"`
	// AcceptedArtifact and AcceptedDigest name the accepted summary.
	AcceptedArtifact string `json:"accepted_artifact"`
	AcceptedDigest   string `json:"accepted_digest"`
	// StaleArtifactDigest is what attempt 1 produced; the demo must not have
	// put it in the blob store (StaleArtifactInStore false).
	StaleArtifactDigest  string `json:"stale_artifact_digest"`
	StaleArtifactInStore bool   `json:"stale_artifact_in_store"`
	// Workers that ran attempts 1 and 2.
	Worker1 string `json:"worker_1"`
	Worker2 string `json:"worker_2"`
	// EnvelopeDigest is the same on both attempts.
	EnvelopeDigest string  `json:"envelope_digest"`
	SameDigest     bool    `json:"same_digest"`
	ElapsedSeconds float64 `json:"elapsed_seconds"`
	RunID          string  `json:"run_id"`
	TaskID         string  `json:"task_id"`
}

// Violations lists every observed value that breaks an invariant or the
// scenario's expected values; empty means the demo passed.
func (r Result) Violations() []string {
	var v []string
	check := func(ok bool, format string, args ...any) {
		if !ok {
			v = append(v, fmt.Sprintf(format, args...))
		}
	}
	check(r.Attempt1 == 1 && r.Fence1 == 1, "attempt_1/fence_1 = %d/%d, want 1/1", r.Attempt1, r.Fence1)
	check(r.RetryReason == string(lease.ReasonLeaseExpired), "retry_reason = %q, want lease_expired", r.RetryReason)
	check(r.Attempt2 == 2 && r.Fence2 == 2, "attempt_2/fence_2 = %d/%d, want 2/2", r.Attempt2, r.Fence2)
	check(r.Fence2 > r.Fence1, "fence did not grow")
	check(r.StaleResultRejected, "the stale result was not rejected")
	check(r.StaleRejectReason == string(lease.RejectStaleFence), "stale result refused for %q, want stale_fence", r.StaleRejectReason)
	check(r.FinalRunStatus == string(api.RunCompleted), "final_run_status = %s, want COMPLETED", r.FinalRunStatus)
	check(r.FinalLeaseStatus == string(lease.Completed), "final_lease_status = %s, want COMPLETED", r.FinalLeaseStatus)
	check(r.WorkerResultEventCount == 1, "worker_result_event_count = %d, want 1", r.WorkerResultEventCount)
	check(r.EvidenceBefore == r.EvidenceAfter && r.EvidenceAfter == 0, "evidence changed without a commit: %d -> %d", r.EvidenceBefore, r.EvidenceAfter)
	check(r.ParentTimeBefore == r.ParentTimeAfter && r.ParentTimeAfter == 0, "parent_time changed without a commit: %d -> %d", r.ParentTimeBefore, r.ParentTimeAfter)
	check(r.SameDigest, "the retry changed the envelope digest")
	check(!r.StaleArtifactInStore, "the stale attempt's artifact %s entered the blob store", r.StaleArtifactDigest)
	check(r.Worker1 != r.Worker2, "both attempts ran on %s", r.Worker1)
	return v
}

// Run runs the scenario and returns what it observed. Errors mean the
// scenario could not be carried out (server unreachable, timeout); a
// scenario that ran but broke an invariant returns a Result whose
// Violations are not empty.
func Run(ctx context.Context, opts Options) (Result, error) {
	began := time.Now()
	if opts.LeaseTTL == 0 {
		opts.LeaseTTL = 3 * time.Second
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	say := func(format string, args ...any) {
		if opts.Progress != nil {
			opts.Progress(fmt.Sprintf(format, args...))
		}
	}
	ctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	sfx := opts.Suffix
	ids := struct{ run, task, world, a, b string }{
		"demo-run" + sfx, "checksum" + sfx, "demo-world" + sfx, "worker-a" + sfx, "worker-b" + sfx,
	}
	res := Result{RunID: ids.run, TaskID: ids.task}
	blobURL := opts.BlobURL
	if blobURL == "" {
		u, err := blobstore.DefaultURL(opts.DataDir)
		if err != nil {
			return res, err
		}
		blobURL = u
	}
	store, err := blobstore.Open(ctx, blobURL)
	if err != nil {
		return res, err
	}
	defer store.Close()
	wc := &wdcclient.Client{C: opts.Client}

	// Identity, zero setup: an issuer of the demo's own enrolls both
	// workers, and the control plane refuses anything they did not sign.
	iss, err := identity.NewIssuer(spiffeid.RequireTrustDomainFromString(identity.DefaultTrustDomain))
	if err != nil {
		return res, err
	}
	verifier, err := identity.NewVerifier(identity.ModeRequired, iss.TrustDomain(), iss.Bundle())
	if err != nil {
		return res, err
	}
	// The demo submits, closes and reads as submitter "demo".
	subID, err := identity.SubmitterID(iss.TrustDomain(), "demo")
	if err != nil {
		return res, err
	}
	subSVID, err := iss.Issue(subID, time.Hour)
	if err != nil {
		return res, err
	}
	if wc.Signer, err = identity.NewSigner(subSVID); err != nil {
		return res, err
	}

	// The control plane: every workflow and the control activities.
	cp := worker.NewControlPlaneWith(opts.Client, store, worker.ControlPlaneOptions{Identity: verifier})
	if err := cp.Start(); err != nil {
		return res, fmt.Errorf("start control plane: %w", err)
	}
	defer cp.Stop()
	say("control plane %s", cp.Status().Describe(""))

	// Two agents. Attempt 1 of the demo task freezes its executor after the
	// command ran, until attempt 2 has been accepted.
	thaw := make(chan struct{})
	var thawOnce sync.Once
	release := func() { thawOnce.Do(func() { close(thaw) }) }
	defer release()
	reports := make(chan executor.Report, 4)
	// What attempt 1 produced, hashed while it is frozen, and whether the
	// store held that content before (content addressing: an identical
	// earlier result may be there legitimately).
	var staleDigest string
	var stalePreexisting bool
	faults := executor.Faults{Freeze: func(c lease.Claim) {
		if c.TaskID == ids.task && c.Attempt == 1 {
			summary := filepath.Join(executor.TaskDir(filepath.Join(opts.DataDir, "work", c.WorkerID), c), "outputs", "summary.json")
			if d, _, err := blobstore.HashFile(summary); err == nil {
				staleDigest = d
				stalePreexisting, _ = store.Has(ctx, d) // an error counts as absent: the check after the run then fails loudly
			}
			say("attempt 1 on %s finished its command; its executor is frozen before submitting (no heartbeats)", c.WorkerID)
			select {
			case <-thaw:
			case <-ctx.Done():
			}
			say("attempt 1 on %s wakes up and submits its result", c.WorkerID)
		}
	}}
	label := map[string]string{"wdc-demo": "worker-leases" + sfx}
	var agents []*worker.Agent
	defer func() {
		// Stop the demo's agents and take their workers out of the registry.
		sctx, c := context.WithTimeout(context.Background(), 10*time.Second)
		defer c()
		for _, ag := range agents {
			ag.Stop(sctx)
			if _, err := wc.DeregisterWorker(sctx, ag.WorkerID(), true, "demo finished"); err != nil {
				opts.Logger.Warn("deregister demo worker", "worker", ag.WorkerID(), "error", err)
			}
		}
	}()
	for _, id := range []string{ids.a, ids.b} {
		svid, err := iss.IssueWorker(id, time.Hour)
		if err != nil {
			return res, err
		}
		signer, err := identity.NewSigner(svid)
		if err != nil {
			return res, err
		}
		ag, err := worker.StartAgent(ctx, opts.Client, worker.AgentOptions{
			Identity: signer, Verifier: verifier,
			Registration: fleet.Registration{
				WorkerID: id, Capacity: resource.List{CPUMillis: 2000, MemoryBytes: 1 << 30}, Labels: label,
				StaleAfter: 15 * time.Second, OfflineAfter: 60 * time.Second,
			},
			WorkDir: filepath.Join(opts.DataDir, "work", id), Blobs: store, Faults: faults, Logger: opts.Logger, Metrics: opts.Metrics,
			OnReport: func(r executor.Report) {
				if r.Claim.TaskID == ids.task {
					reports <- r
				}
			},
		})
		if err != nil {
			return res, fmt.Errorf("start agent %s: %w", id, err)
		}
		agents = append(agents, ag)
		say("agent %s registered (incarnation %d) as %s", id, ag.Incarnation(), signer.ID())
	}
	if err := waitActive(ctx, wc, ids.a, ids.b); err != nil {
		return res, err
	}

	// A real input file and the script, staged through the blob store.
	dataDigest, dataSize, err := store.Put(ctx, strings.NewReader(examples.Observations))
	if err != nil {
		return res, err
	}
	scriptDigest, scriptSize, err := store.Put(ctx, strings.NewReader(examples.ChecksumScript))
	if err != nil {
		return res, err
	}
	env := envelope.Envelope{
		TaskID: ids.task, RunID: ids.run, WorldID: ids.world,
		Command: []string{"/bin/sh", "inputs/checksum.sh"},
		Env:     map[string]string{"PATH": "/usr/bin:/bin", "LC_ALL": "C"},
		Inputs: []envelope.Input{
			{Name: "checksum.sh", Digest: scriptDigest, SizeBytes: scriptSize},
			{Name: "observations.csv", Digest: dataDigest, SizeBytes: dataSize},
		},
		Resources: resource.List{CPUMillis: 500, MemoryBytes: 64 << 20},
		Selector:  label,
	}
	// The sealed envelope goes beside its inputs, for a `wdc exec` that
	// reads it by digest.
	env.Normalize()
	if _, err := store.PutEnvelope(ctx, env); err != nil {
		return res, err
	}
	if err := wc.StartRun(ctx, api.RunInput{RunID: ids.run, WorldID: ids.world}); err != nil {
		return res, err
	}
	before, err := wc.Run(ctx, ids.run)
	if err != nil {
		return res, err
	}
	res.EvidenceBefore, res.ParentTimeBefore = before.Evidence, before.ParentTime
	added, err := wc.SubmitTask(ctx, env, api.TaskOptions{
		LeaseTTL: opts.LeaseTTL, MaxAttempts: 3, SelectInterval: 200 * time.Millisecond,
		Backoff: lease.Backoff{Initial: 200 * time.Millisecond, Max: time.Second, Multiplier: 2, Jitter: 0.2},
	})
	if err != nil {
		return res, err
	}
	say("task %s submitted to run %s (envelope %s)", ids.task, ids.run, added.EnvelopeDigest)

	outcome, err := wc.WaitTask(ctx, ids.task)
	if err != nil {
		return res, err
	}
	say("task %s ended %s after %d attempts", ids.task, outcome.State, outcome.Attempts)

	// Now the stale attempt wakes up and submits.
	release()
	var stale executor.Report
	for stale.Claim.Attempt != 1 {
		select {
		case r := <-reports:
			if r.Claim.Attempt == 1 {
				stale = r
			}
		case <-ctx.Done():
			return res, errors.New("attempt 1 never reported after waking up")
		}
	}
	say("attempt 1's result: %s (%s: %s)", stale.Outcome, stale.Reason, stale.Message)
	res.StaleResultRejected = stale.Outcome == executor.OutcomeRejected
	res.StaleRejectReason = stale.Reason
	res.StaleArtifactDigest = staleDigest
	staleInStore, err := store.Has(ctx, staleDigest)
	if staleDigest != "" && err != nil {
		return res, err
	}
	res.StaleArtifactInStore = staleDigest == "" || (staleInStore && !stalePreexisting)
	if keys, err := store.List(ctx, blobstore.StagingPrefix(ids.task, 1, 1)); err != nil || len(keys) > 0 {
		return res, fmt.Errorf("attempt 1's staging was not cleaned up (%d objects left; %v)", len(keys), err)
	}

	view, err := wc.Task(ctx, ids.task)
	if err != nil {
		return res, err
	}
	if len(view.Leases) >= 1 {
		res.Attempt1, res.Fence1, res.Worker1 = view.Leases[0].Attempt, view.Leases[0].Fence, view.Leases[0].WorkerID
	}
	if len(view.Leases) >= 2 {
		res.Attempt2, res.Fence2, res.Worker2 = view.Leases[1].Attempt, view.Leases[1].Fence, view.Leases[1].WorkerID
		res.SameDigest = view.Leases[0].EnvelopeDigest == view.Leases[1].EnvelopeDigest
		res.EnvelopeDigest = view.Leases[1].EnvelopeDigest
	}
	if len(view.Directives) > 0 {
		res.RetryReason = string(view.Directives[0].Reason)
	}
	if view.Lease != nil {
		res.FinalLeaseStatus = string(view.Lease.State)
	}
	if view.Result != nil && len(view.Result.Artifacts) > 0 {
		res.AcceptedArtifact = "outputs/" + view.Result.Artifacts[0].Name
		res.AcceptedDigest = view.Result.Artifacts[0].Digest
	}

	// The run reads the task's outcome from the task (one activity after
	// the task ended): wait for it before closing, or the run's state
	// read below can predate it.
	for {
		r, err := wc.Run(ctx, ids.run)
		if err != nil {
			return res, err
		}
		if r.TaskCounts.Open == 0 {
			break
		}
		select {
		case <-ctx.Done():
			return res, fmt.Errorf("run %s did not record its task's outcome: %w", ids.run, ctx.Err())
		case <-time.After(50 * time.Millisecond):
		}
	}
	run, err := wc.CloseRun(ctx, ids.run)
	if err != nil {
		return res, err
	}
	res.FinalRunStatus = string(run.Status)
	res.WorkerResultEventCount = run.WorkerResultEvents
	res.EvidenceAfter, res.ParentTimeAfter = run.Evidence, run.ParentTime
	res.ElapsedSeconds = time.Since(began).Seconds()
	return res, nil
}

// waitActive waits until the workers are ACTIVE in visibility, which is
// where task placement looks for them.
func waitActive(ctx context.Context, wc *wdcclient.Client, ids ...string) error {
	for {
		views, err := wc.ListWorkers(ctx, string(fleet.Active))
		if err == nil {
			found := 0
			for _, v := range views {
				for _, id := range ids {
					if v.WorkerID == id {
						found++
					}
				}
			}
			if found == len(ids) {
				return nil
			}
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("workers %s not visible as ACTIVE: %w", strings.Join(ids, ", "), ctx.Err())
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// Lines renders the demo's values, one per line, then the accepted artifact.
func (r Result) Lines() []string {
	return []string{
		fmt.Sprintf("attempt_1 = %d", r.Attempt1),
		fmt.Sprintf("fence_1 = %d", r.Fence1),
		fmt.Sprintf("retry_reason = %s", r.RetryReason),
		fmt.Sprintf("attempt_2 = %d", r.Attempt2),
		fmt.Sprintf("fence_2 = %d", r.Fence2),
		fmt.Sprintf("stale_result_rejected = %t", r.StaleResultRejected),
		fmt.Sprintf("final_run_status = %s", r.FinalRunStatus),
		fmt.Sprintf("final_lease_status = %s", r.FinalLeaseStatus),
		fmt.Sprintf("worker_result_event_count = %d", r.WorkerResultEventCount),
		fmt.Sprintf("evidence = %d -> %d", r.EvidenceBefore, r.EvidenceAfter),
		fmt.Sprintf("parent_time = %d -> %d", r.ParentTimeBefore, r.ParentTimeAfter),
		fmt.Sprintf("accepted_artifact = %s %s", r.AcceptedArtifact, r.AcceptedDigest),
	}
}
