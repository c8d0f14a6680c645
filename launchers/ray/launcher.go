package ray

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/wdc-runtime/wdc/api"
	"github.com/wdc-runtime/wdc/identity"
	"github.com/wdc-runtime/wdc/internal/blobstore"
	"github.com/wdc-runtime/wdc/internal/executor"
	"github.com/wdc-runtime/wdc/internal/logrepeat"
	"github.com/wdc-runtime/wdc/launchers"
	"github.com/wdc-runtime/wdc/launchers/external"
	"github.com/wdc-runtime/wdc/lease"
)

// Options configures a Launcher.
type Options struct {
	// WorkerID is the fleet worker (the Ray cluster) whose attempts it
	// launches. Required.
	WorkerID string
	// Client talks to the cluster's dashboard. Required.
	Client *Client
	// Fields is the cluster's field set (FieldsFor of /api/version's
	// ray_version, read once when the agent starts).
	Fields Fields
	// Blobs is the artifact store the job's `wdc exec` reads the sealed
	// envelope from (the same store as Target.BlobURL). Required.
	Blobs *blobstore.Store
	// Control answers lease queries and takes failure reports. Required.
	Control executor.Control
	// Target is how the job's `wdc exec` connects.
	Target external.Target
	// Python runs the placement-group driver on the cluster (default
	// "python3").
	Python string
	// PendingTimeout is how long a job may stay PENDING (no node has the
	// entrypoint's resources) before it is stopped and the attempt
	// reported launch_failed (default 5 min).
	PendingTimeout time.Duration
	// PollInterval is how often each job's status is read (default 2 s).
	PollInterval time.Duration
	// LogLines is how many last lines of a failed job's log go into the
	// retry directive's detail (default 20, at most 4 KiB).
	LogLines int
	Logger   *slog.Logger
	// Signer, when set, is the worker's identity: each job's `wdc exec`
	// signs with a key delegated to its attempt alone, which travels in the
	// job's runtime_env.env_vars (external.EnvAttemptKeyData), and the
	// launcher signs its own failure reports likewise.
	Signer *identity.Signer
}

// Launcher runs attempts as jobs of one Ray cluster through its
// dashboard's Jobs REST API, and watches each job until it ends.
type Launcher struct {
	opts Options

	mu      sync.Mutex
	watches map[string]*watch // by submission ID
	closed  bool
	wg      sync.WaitGroup
}

// watch is one submitted job being followed.
type watch struct {
	claim     lease.Claim
	id        string
	submitted time.Time
	// stopped is closed when the launcher stopped the job itself (cancel,
	// fence loss, pending bound, shutdown): its end is then no news.
	stopped  chan struct{}
	stopOnce sync.Once
	done     chan struct{}
}

func (w *watch) markStopped() { w.stopOnce.Do(func() { close(w.stopped) }) }

var _ launchers.Launcher = (*Launcher)(nil)

// New returns a Launcher. Errors: a required option missing.
func New(opts Options) (*Launcher, error) {
	switch {
	case opts.WorkerID == "":
		return nil, errors.New("ray launcher: worker ID is required")
	case opts.Client == nil:
		return nil, errors.New("ray launcher: a dashboard client is required")
	case opts.Blobs == nil:
		return nil, errors.New("ray launcher: blob store is required")
	case opts.Control == nil:
		return nil, errors.New("ray launcher: control is required")
	}
	if opts.PendingTimeout <= 0 {
		opts.PendingTimeout = 5 * time.Minute
	}
	if opts.PollInterval <= 0 {
		opts.PollInterval = 2 * time.Second
	}
	if opts.LogLines <= 0 {
		opts.LogLines = 20
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	return &Launcher{opts: opts, watches: map[string]*watch{}}, nil
}

// JobURL is where a job's details are: <dashboard>/api/jobs/<id>.
func (l *Launcher) JobURL(id string) string { return l.opts.Client.Address() + "/api/jobs/" + id }

// Submit submits the attempt as a Ray job and returns once Ray has it
// (PENDING or later); a watcher then follows the job. The sealed envelope
// is stored in the blob store first (a content-addressed put). The
// submission ID (SubmissionID) is the idempotency key: Ray's "already
// exists" answer means an earlier submit of this attempt got through, so
// the job is read instead; a submit that got no answer (cut or timed out)
// is followed by a read of the job before anything else, and sent again
// only when Ray says it has no such job. The Submission's TaskDir is the
// job's URL.
//
// Errors (launch_failed): the attempt is for another worker; ctx is done
// or past its deadline; the envelope's digest is not the lease's; the
// store cannot be written; Ray refused the job (HTTP status and message)
// or could not be reached.
func (l *Launcher) Submit(ctx context.Context, a launchers.Attempt) (launchers.Submission, error) {
	claim, err := launchers.Accept(ctx, l.opts.WorkerID, a)
	if err != nil {
		return launchers.Submission{}, err
	}
	if err := launchers.StoreEnvelope(ctx, l.opts.Blobs, a); err != nil {
		return launchers.Submission{}, err
	}
	req, dropped := Request(RequestOptions{Target: l.opts.Target, Fields: l.opts.Fields, Python: l.opts.Python}, claim, a.Envelope)
	if l.opts.Signer != nil {
		b, err := external.AttemptKey(l.opts.Signer, claim)
		if err != nil {
			return launchers.Submission{}, err
		}
		req.RuntimeEnv.EnvVars[external.EnvAttemptKeyData] = string(b)
	}
	log := l.opts.Logger.With("task", claim.TaskID, "attempt", claim.Attempt, "fence", claim.Fence, "job", req.SubmissionID)
	if len(dropped) > 0 {
		log.Warn("Ray "+l.opts.Fields.RayVersion+" does not know these fields; not sent", "fields", dropped)
	}
	if err := launchers.CheckDeadline(ctx); err != nil {
		return launchers.Submission{}, err
	}
	job, err := l.submit(ctx, req)
	if err != nil {
		return launchers.Submission{}, err
	}
	log.Info("ray job submitted", "status", job.Status)
	l.follow(claim, req.SubmissionID)
	return launchers.Submission{TaskDir: l.JobURL(req.SubmissionID)}, nil
}

// submit sends the request and settles an unknown outcome by reading the
// job: it returns the job's details once Ray has the job.
func (l *Launcher) submit(ctx context.Context, req SubmitRequest) (JobDetails, error) {
	id := req.SubmissionID
	for try := 1; ; try++ {
		_, err := l.opts.Client.Submit(ctx, req)
		switch {
		case err == nil, IsAlreadyExists(err):
			// Ours from an earlier try (the ID names this attempt).
			job, gerr := l.opts.Client.Job(ctx, id)
			if gerr != nil {
				return JobDetails{}, fmt.Errorf("ray job %s submitted, but reading it failed: %w", id, gerr)
			}
			return job, nil
		case IsTransport(err):
			// The job may exist: read it before anything else.
			job, gerr := l.opts.Client.Job(ctx, id)
			switch {
			case gerr == nil:
				return job, nil
			case IsNotFound(gerr) && try < 2:
				continue // the submit never reached Ray: send it again, once
			case IsNotFound(gerr):
				return JobDetails{}, err
			}
			return JobDetails{}, fmt.Errorf("%w; and whether the job exists is unknown: %w", err, gerr)
		default:
			return JobDetails{}, err
		}
	}
}

// follow starts the watcher of a submitted job (once per job).
func (l *Launcher) follow(c lease.Claim, id string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if _, ok := l.watches[id]; ok || l.closed {
		return
	}
	w := &watch{claim: c, id: id, submitted: time.Now(), stopped: make(chan struct{}), done: make(chan struct{})}
	l.watches[id] = w
	l.wg.Add(1)
	go func() {
		defer l.wg.Done()
		defer close(w.done)
		defer func() {
			l.mu.Lock()
			delete(l.watches, id)
			l.mu.Unlock()
		}()
		l.watchJob(w)
	}()
}

// watchJob polls the job until it ends and judges its end:
//   - PENDING past PendingTimeout: stopped, reported launch_failed;
//   - RUNNING while the attempt lost its fence or lease (asked every
//     leaseCheckEvery polls): stopped;
//   - FAILED or STOPPED (not by wdc) without an accepted result: reported
//     infra_killed (launch_failed when the placement group was never
//     placed), with the last lines of the job's log;
//   - SUCCEEDED without an accepted result: reported launch_failed (the
//     entrypoint did not run the attempt).
//
// A job wdc stopped is deleted once terminal.
func (l *Launcher) watchJob(w *watch) {
	log := l.opts.Logger.With("task", w.claim.TaskID, "attempt", w.claim.Attempt, "fence", w.claim.Fence, "job", w.id)
	tick := time.NewTicker(l.opts.PollInterval)
	defer tick.Stop()
	polls := 0
	statusLog := &logrepeat.Failure{Log: log, Msg: "ray job status", Recovered: "ray job status answered again"}
	for {
		select {
		case <-tick.C:
		case <-w.stopped:
			l.deleteWhenTerminal(w.id, log)
			return
		}
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		job, err := l.opts.Client.Job(ctx, w.id)
		cancel()
		switch {
		case IsNotFound(err):
			log.Warn("ray job is gone (deleted by someone else)")
			l.report(w, lease.ReasonInfraKilled, fmt.Sprintf("ray job %s disappeared from the cluster", w.id), "", log)
			return
		case err != nil:
			statusLog.Fail(err)
			continue
		}
		statusLog.OK()
		switch job.Status {
		case StatusPending:
			if waited := time.Since(w.submitted); waited >= l.opts.PendingTimeout {
				log.Warn("ray job still PENDING; stopping it", "waited", waited.Round(time.Second))
				l.stopJob(w.id, log)
				w.markStopped()
				l.report(w, lease.ReasonLaunchFailed, fmt.Sprintf("ray job %s was still PENDING after %s (no node with the entrypoint's resources?); it was stopped", w.id, l.opts.PendingTimeout), "", log)
			}
		case StatusRunning:
			// The lease is asked every leaseCheckEvery polls only: the
			// task's own CancelAttempt is the usual way a job is stopped,
			// this check the fallback when that activity was lost.
			if polls++; polls%leaseCheckEvery != 0 {
				continue
			}
			if why := l.fenceLost(w.claim); why != "" {
				log.Warn("attempt no longer holds its lease; stopping its ray job", "why", why)
				l.stopJob(w.id, log)
				w.markStopped()
			}
		case StatusSucceeded:
			l.judgeEnd(w, job, log)
			return
		case StatusFailed, StatusStopped:
			l.judgeEnd(w, job, log)
			return
		}
	}
}

// leaseCheckEvery is how many status polls of a running job go by between
// two lease queries (10 s with the default 2 s poll interval).
const leaseCheckEvery = 5

// judgeEnd reports a job that ended on its own without an accepted
// result.
func (l *Launcher) judgeEnd(w *watch, job JobDetails, log *slog.Logger) {
	select {
	case <-w.stopped:
		l.deleteWhenTerminal(w.id, log)
		return
	default:
	}
	code := "none"
	if job.DriverExitCode != nil {
		code = fmt.Sprint(*job.DriverExitCode)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	logs, err := l.opts.Client.Logs(ctx, w.id)
	cancel()
	if err != nil {
		logs = "(logs unavailable: " + err.Error() + ")"
	}
	summary := fmt.Sprintf("ray job %s %s (driver exit code %s): %s", w.id, job.Status, code, firstLine(job.Message))
	reason := lease.ReasonInfraKilled
	switch {
	case job.Status == StatusSucceeded:
		reason = lease.ReasonLaunchFailed
		summary += "; the entrypoint exited without a result"
	case strings.Contains(logs, placementTimeoutMarker):
		reason = lease.ReasonLaunchFailed
	}
	l.report(w, reason, summary, logs, log)
}

// report tells the task that the attempt ended without a result, unless
// its result was accepted or the claim is no longer current (a stale
// report would be refused by the fence check anyway).
func (l *Launcher) report(w *watch, reason lease.RetryReason, summary, logs string, log *slog.Logger) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := executor.CheckLease(ctx, l.opts.Control, w.claim); err != nil {
		log.Info("ray job ended; nothing to report", "outcome", summary, "lease", err)
		return
	}
	detail := summary
	if t := lastLines(logs, l.opts.LogLines, 4096); t != "" {
		detail += "\nlast log lines:\n" + t
	}
	log.Warn("ray job ended without a result; reporting", "reason", reason, "outcome", summary)
	ctl := l.opts.Control
	if l.opts.Signer != nil {
		ctl = executor.Signed(ctl, l.opts.Signer.ForAttempt(w.claim))
	}
	if err := ctl.ReportFailure(ctx, api.AttemptFailedSignal{Claim: w.claim, Reason: reason, Detail: detail}); err != nil {
		log.Warn("report attempt failed", "error", err)
	}
}

// fenceLost says why the claim no longer holds its task's lease ("" while
// it does, while its result is being ingested, or when unknown).
func (l *Launcher) fenceLost(c lease.Claim) string {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	view, err := l.opts.Control.Lease(ctx, c.TaskID)
	switch {
	case errors.Is(err, executor.ErrTaskGone):
		return "the task has ended"
	case err != nil || view.Lease == nil:
		return ""
	case view.Lease.Fence != c.Fence:
		return fmt.Sprintf("fence %d is not the current fence %d", c.Fence, view.Lease.Fence)
	case view.Lease.State == lease.Expired || view.Lease.State == lease.Revoked:
		return fmt.Sprintf("the lease is %s", view.Lease.State)
	}
	return ""
}

// stopJob asks Ray to stop a job (best effort).
func (l *Launcher) stopJob(id string, log *slog.Logger) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := l.opts.Client.Stop(ctx, id); err != nil && !IsNotFound(err) {
		log.Warn("stop ray job", "error", err)
	}
}

// deleteWhenTerminal waits (up to two minutes) for a stopped job to be
// terminal and deletes it.
func (l *Launcher) deleteWhenTerminal(id string, log *slog.Logger) {
	deadline := time.Now().Add(2 * time.Minute)
	for time.Now().Before(deadline) {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		job, err := l.opts.Client.Job(ctx, id)
		if err == nil && Terminal(job.Status) {
			err = l.opts.Client.Delete(ctx, id)
			cancel()
			if err == nil || IsNotFound(err) {
				log.Info("ray job deleted", "status", job.Status)
				return
			}
		} else {
			cancel()
		}
		if IsNotFound(err) {
			return
		}
		time.Sleep(l.opts.PollInterval)
	}
	log.Warn("ray job not terminal two minutes after stop; left in place")
}

// Status reads the job: PENDING and RUNNING are launchers.PhaseRunning,
// the terminal states PhaseFinished; ErrUnknownAttempt when Ray has no
// such job.
func (l *Launcher) Status(ctx context.Context, c lease.Claim) (launchers.Status, error) {
	job, err := l.opts.Client.Job(ctx, SubmissionID(c))
	switch {
	case IsNotFound(err):
		return launchers.Status{Phase: launchers.PhaseUnknown}, launchers.ErrUnknownAttempt
	case err != nil:
		return launchers.Status{Phase: launchers.PhaseUnknown}, err
	case Terminal(job.Status):
		return launchers.Status{Phase: launchers.PhaseFinished, Detail: "ray job " + job.Status + ": " + firstLine(job.Message)}, nil
	}
	return launchers.Status{Phase: launchers.PhaseRunning, Detail: "ray job " + job.Status}, nil
}

// Cancel stops the attempt's job (its lease ended: expiry, revocation,
// cancel) and deletes it once terminal, in the background. An unknown or
// finished job is not an error. Errors: Ray could not be reached.
func (l *Launcher) Cancel(ctx context.Context, c lease.Claim, reason string) error {
	id := SubmissionID(c)
	log := l.opts.Logger.With("task", c.TaskID, "attempt", c.Attempt, "fence", c.Fence, "job", id)
	l.mu.Lock()
	w := l.watches[id]
	l.mu.Unlock()
	stopped, err := l.opts.Client.Stop(ctx, id)
	switch {
	case IsNotFound(err):
		return nil
	case err != nil:
		return err
	}
	log.Info("ray job stop requested", "reason", reason, "was_running", stopped)
	if w != nil {
		w.markStopped() // its watcher deletes it
		return nil
	}
	l.wg.Add(1)
	go func() {
		defer l.wg.Done()
		l.deleteWhenTerminal(id, log)
	}()
	return nil
}

// Adoptable lists the cluster's jobs of this worker (metadata wdc_worker)
// that are PENDING or RUNNING and whose lease is current, or cannot be
// verified; a job whose lease is no longer current (executor.NotCurrent)
// is stopped and deleted instead. Errors: the job list could not be read.
func (l *Launcher) Adoptable(ctx context.Context) ([]lease.Claim, error) {
	jobs, err := l.opts.Client.List(ctx)
	if err != nil {
		return nil, fmt.Errorf("ray: list jobs: %w", err)
	}
	var out []lease.Claim
	for _, job := range jobs {
		if job.Metadata[MetaWorker] != l.opts.WorkerID || Terminal(job.Status) {
			continue
		}
		c, err := ClaimOfJob(job)
		if err != nil {
			l.opts.Logger.Warn("ray job not adopted", "job", job.SubmissionID, "error", err)
			continue
		}
		err = executor.CheckLease(ctx, l.opts.Control, c)
		switch {
		case executor.NotCurrent(err):
			l.opts.Logger.Info("ray job not adopted: its lease is no longer current; stopping it", "job", job.SubmissionID, "why", err)
			if cerr := l.Cancel(ctx, c, "lease no longer current"); cerr != nil {
				l.opts.Logger.Warn("stop ray job", "job", job.SubmissionID, "error", cerr)
			}
			continue
		case err != nil:
			l.opts.Logger.Warn("ray job's lease could not be verified; claiming it, the registry decides", "job", job.SubmissionID, "error", err)
		}
		out = append(out, c)
	}
	return out, nil
}

// Adopt watches the adopted attempts' jobs again, as Submit does (their
// end is judged and reported, Cancel stops them; the pending bound counts
// from now), and stops the refused ones.
func (l *Launcher) Adopt(ctx context.Context, adopted, refused []lease.Claim) {
	for _, c := range adopted {
		l.opts.Logger.Info("attempt adopted", "task", c.TaskID, "attempt", c.Attempt, "fence", c.Fence, "job", SubmissionID(c))
		l.follow(c, SubmissionID(c))
	}
	for _, c := range refused {
		l.opts.Logger.Info("adoption refused by the registry; stopping the ray job", "task", c.TaskID, "attempt", c.Attempt, "fence", c.Fence, "job", SubmissionID(c))
		if err := l.Cancel(ctx, c, "adoption refused by the registry"); err != nil {
			l.opts.Logger.Warn("stop ray job", "job", SubmissionID(c), "error", err)
		}
	}
}

// ClaimOfJob is the claim a job was submitted for, read from its metadata
// (MetaTask, MetaWorker, MetaAttempt, MetaFence, MetaEnvelope). Errors: a
// key missing or not a number, or a submission ID that is not the claim's.
func ClaimOfJob(job JobDetails) (lease.Claim, error) {
	m := job.Metadata
	c := lease.Claim{TaskID: m[MetaTask], WorkerID: m[MetaWorker], EnvelopeDigest: m[MetaEnvelope]}
	var err1, err2 error
	c.Attempt, err1 = strconv.ParseInt(m[MetaAttempt], 10, 64)
	c.Fence, err2 = strconv.ParseInt(m[MetaFence], 10, 64)
	if err := errors.Join(err1, err2); err != nil || c.TaskID == "" || c.WorkerID == "" || c.EnvelopeDigest == "" {
		return c, fmt.Errorf("ray job %s: metadata names no complete claim (%v)", job.SubmissionID, err)
	}
	if id := SubmissionID(c); id != job.SubmissionID {
		return c, fmt.Errorf("ray job %s: its metadata names the job %s", job.SubmissionID, id)
	}
	return c, nil
}

// Running counts the jobs being watched (submitted, not yet ended).
func (l *Launcher) Running() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.watches)
}

// Shutdown stops every watched job, reporting each attempt infra_killed
// so its task retries elsewhere at once (as a Local agent does with its
// processes), and waits for the watchers or ctx.
func (l *Launcher) Shutdown(ctx context.Context, reason string) {
	l.mu.Lock()
	l.closed = true
	ws := make([]*watch, 0, len(l.watches))
	for _, w := range l.watches {
		ws = append(ws, w)
	}
	l.mu.Unlock()
	for _, w := range ws {
		log := l.opts.Logger.With("task", w.claim.TaskID, "attempt", w.claim.Attempt, "fence", w.claim.Fence, "job", w.id)
		l.stopJob(w.id, log)
		w.markStopped()
		l.report(w, lease.ReasonInfraKilled, fmt.Sprintf("ray job %s stopped: %s", w.id, reason), "", log)
	}
	done := make(chan struct{})
	go func() { l.wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-ctx.Done():
	}
}

func firstLine(s string) string {
	s, _, _ = strings.Cut(strings.TrimSpace(s), "\n")
	return s
}

// lastLines returns the last n lines of s, at most max bytes.
func lastLines(s string, n, max int) string {
	s = strings.TrimRight(s, "\n")
	if s == "" {
		return ""
	}
	lines := strings.Split(s, "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	out := strings.Join(lines, "\n")
	if len(out) > max {
		out = "…" + out[len(out)-max:]
	}
	return out
}
