package cmd

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strconv"

	"github.com/spf13/cobra"

	"github.com/wdc-runtime/wdc/api"
	"github.com/wdc-runtime/wdc/envelope"
	"github.com/wdc-runtime/wdc/fleet"
	"github.com/wdc-runtime/wdc/identity"
	"github.com/wdc-runtime/wdc/internal/blobstore"
	"github.com/wdc-runtime/wdc/internal/executor"
	"github.com/wdc-runtime/wdc/launchers"
	"github.com/wdc-runtime/wdc/launchers/external"
	"github.com/wdc-runtime/wdc/lease"
)

// execOptions are `wdc exec`'s flags. The claim fields are kept as given
// (flag or environment) and parsed by claim, so that every error names
// both.
type execOptions struct {
	taskID, attempt, fence, workerID, digest string
	workDir                                  string
	attemptKey                               string
	// attemptKeyData is external.EnvAttemptKeyData: the key itself, never
	// a flag (argv is public).
	attemptKeyData   string
	keep             bool
	dataDir, blobURL string
	limits           outputLimitFlags
	runAs            runAsFlags
}

func (o *execOptions) bind(c *cobra.Command, getenv func(string) string) {
	f := c.Flags()
	f.StringVar(&o.taskID, "task-id", getenv(external.EnvTaskID), "the task (env "+external.EnvTaskID+"; required)")
	f.StringVar(&o.attempt, "attempt", getenv(external.EnvAttempt), "the attempt number, from 1 (env "+external.EnvAttempt+"; required)")
	f.StringVar(&o.fence, "fence", getenv(external.EnvFence), "the lease's fencing token, from 1 (env "+external.EnvFence+"; required)")
	f.StringVar(&o.workerID, "worker-id", getenv(external.EnvWorkerID), "the fleet worker the lease was granted to (env "+external.EnvWorkerID+"; required)")
	f.StringVar(&o.digest, "envelope-digest", getenv(external.EnvEnvelopeDigest), "the lease's envelope digest, sha256:<64 hex> (env "+external.EnvEnvelopeDigest+"; required)")
	f.StringVar(&o.workDir, "work-dir", getenv(external.EnvWorkDir), "root of the task directory <work-dir>/<task>/<attempt>-<fence>, kept afterwards (env "+external.EnvWorkDir+"; default: a new directory under the OS temp dir, removed at exit unless --keep)")
	f.StringVar(&o.attemptKey, "attempt-key", getenv(external.EnvAttemptKey), "file with the key the worker delegated to this attempt (the agent spools it, mode 0600); read and removed before the command starts, it signs the result (env "+external.EnvAttemptKey+"; default: unsigned)")
	o.attemptKeyData = getenv(external.EnvAttemptKeyData)
	f.BoolVar(&o.keep, "keep", false, "keep the default work directory (and so the task directory) after the attempt ends")
	f.StringVar(&o.dataDir, "data-dir", "", dataDirHelp)
	f.StringVar(&o.blobURL, "blob-url", "", blobURLHelp)
	o.limits.bind(f)
	o.runAs.bind(f)
}

// claim parses and validates the claim. Errors are usage errors naming
// the flag and its environment variable.
func (o *execOptions) claim() (lease.Claim, error) {
	req := func(flag, env, v string) error {
		if v == "" {
			return usagef("%s: required (or set %s)", flag, env)
		}
		return nil
	}
	num := func(flag, env, v string) (int64, error) {
		if err := req(flag, env, v); err != nil {
			return 0, err
		}
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil || n < 1 {
			return 0, usagef("%s %q (or %s): want a whole number from 1", flag, v, env)
		}
		return n, nil
	}
	var c lease.Claim
	var err error
	if err = req("--task-id", external.EnvTaskID, o.taskID); err != nil {
		return c, err
	}
	if err := fleet.ValidateID("--task-id", o.taskID); err != nil {
		return c, usageError{err}
	}
	if c.Attempt, err = num("--attempt", external.EnvAttempt, o.attempt); err != nil {
		return c, err
	}
	if c.Fence, err = num("--fence", external.EnvFence, o.fence); err != nil {
		return c, err
	}
	if err = req("--worker-id", external.EnvWorkerID, o.workerID); err != nil {
		return c, err
	}
	if err := fleet.ValidateID("--worker-id", o.workerID); err != nil {
		return c, usageError{err}
	}
	if err = req("--envelope-digest", external.EnvEnvelopeDigest, o.digest); err != nil {
		return c, err
	}
	if !envelope.DigestPattern.MatchString(o.digest) {
		return c, usagef("--envelope-digest %q (or %s): want sha256:<64 lowercase hex>", o.digest, external.EnvEnvelopeDigest)
	}
	c.TaskID, c.WorkerID, c.EnvelopeDigest = o.taskID, o.workerID, o.digest
	return c, nil
}

func (a *app) newExecCommand() *cobra.Command {
	o := &execOptions{}
	c := &cobra.Command{
		Use:   "exec --task-id T --attempt N --fence F --worker-id W --envelope-digest D",
		Short: "Run one granted attempt here, as the agent would: the executor as a standalone process",
		Long: `Run one attempt whose lease was granted to a worker that does not run it
itself: the command a Kubernetes Job's pod (wdc agent --launcher k8s), a Ray
job (--launcher ray) or any other scheduler (--launcher external) runs on the
machine that does the work. 'wdc workers render-launch --task T' and the agent's spool files
give the exact command line.

It asks the control plane whether the claim (task, attempt, fence, worker,
envelope digest) holds the task's current lease, reads the sealed envelope
from the blob store under its digest (re-hashed and decoded strictly), and
then runs the same executor as the agent: the task directory
<work-dir>/<task>/<attempt>-<fence>, inputs copied from the blob store, the
command in its own process group with only the envelope's environment plus
WDC_TASK_ID, WDC_ATTEMPT, WDC_FENCE and WDC_TASK_DIR (nothing of this
process's environment: no WDC_*, TEMPORAL_* or AWS_* variable is passed to
the task), heartbeats, self-fencing, outputs staged in the blob store and the
result submitted. Right before the command starts the lease is checked once
more; an attempt that is not current starts nothing. While it runs, a
heartbeat is sent every TTL/3 — the first as a signal, the rest by ID on
the task's lease activity, which writes no history — and the lease is
checked once per TTL: a lost fence kills the command within that, and a
lease the task ended while its activity was pending within one heartbeat
(a launcher that can, such as the Kubernetes or Ray one, also kills it at
once when the lease ends).

This process makes itself non-dumpable before it connects, so a command of
its own user cannot read its environment, memory or open files through
/proc (in a container without CAP_SYS_PTRACE that holds for root too);
--run-as-user runs the command as another user, which also keeps it from
this process's files. A command run as root on a host can read everything.

With a worker identity the result is signed by a key the worker delegated
to this attempt alone: --attempt-key names its file (the external
launcher spools it; the file is removed before the command starts), or
WDC_EXEC_ATTEMPT_KEY_DATA holds it (a Kubernetes Job's pod takes it from
the attempt's Secret; it is unset before the command starts).

Every claim flag can be given as an environment variable instead
(WDC_EXEC_TASK_ID, WDC_EXEC_ATTEMPT, WDC_EXEC_FENCE, WDC_EXEC_WORKER_ID,
WDC_EXEC_ENVELOPE_DIGEST, WDC_EXEC_WORK_DIR); the connection comes from the
global flags and their variables (TEMPORAL_ADDRESS, TEMPORAL_NAMESPACE,
TEMPORAL_API_KEY, ...) and --blob-url (WDC_BLOB_URL; S3 credentials from the
AWS default chain). Progress goes to stderr; the outcome to stdout, with
-o json the executor's report (what result.json holds).

SIGINT or SIGTERM kills the command's process group and reports the attempt
infra_killed, so its task retries at once. If this process is killed with
SIGKILL the command dies with it and the lease expires.

Exit codes:
  0  the result was submitted and accepted (whatever the program's exit code)
  1  infrastructure failure: the lease was lost or Temporal unreachable for a
     TTL (self-fenced), the command was killed, the result could not be
     delivered, the blob store or Temporal could not be reached, or the
     attempt could not start (reported launch_failed)
  2  bad input: a claim flag is missing or malformed; nothing was contacted
  5  no control plane polls wdc-control: nothing was started
  6  not current: the claim does not hold the task's current lease (stale
     fence, lease ended, task ended) so nothing was started, or the result
     was rejected`,
		Example: `  wdc exec --task-id checksum-1 --attempt 1 --fence 1 --worker-id k8s-pool \
      --envelope-digest sha256:f729... --blob-url 's3://wdc?region=eu-1'
  WDC_EXEC_TASK_ID=checksum-1 WDC_EXEC_ATTEMPT=1 WDC_EXEC_FENCE=1 \
      WDC_EXEC_WORKER_ID=k8s-pool WDC_EXEC_ENVELOPE_DIGEST=sha256:f729... wdc exec -o json`,
		Args: cobra.NoArgs,
		RunE: func(c *cobra.Command, _ []string) error {
			return a.runExec(c.Context(), o)
		},
	}
	o.bind(c, a.deps.Getenv)
	return c
}

// runExec is `wdc exec`: validate, check the claim, run the executor and
// map its report to the exit code.
func (a *app) runExec(ctx context.Context, o *execOptions) error {
	claim, err := o.claim()
	if err != nil {
		return err
	}
	limits, err := o.limits.limits()
	if err != nil {
		return err
	}
	runAs, err := o.runAs.lookup()
	if err != nil {
		return err
	}
	if err := a.global.validate(); err != nil {
		return err
	}
	progress := func(format string, args ...any) {
		fmt.Fprintf(a.deps.Stderr, "wdc exec: attempt %s: "+format+"\n", append([]any{claim}, args...)...)
	}
	a.identity = api.ExecIdentity(o.workerID)
	// Non-dumpable before any credential is used; the root warning only
	// once there is an attempt to start.
	a.protectProcess(false)
	var key *identity.AttemptKey
	if o.attemptKeyData != "" {
		if o.attemptKey != "" {
			return usagef("--attempt-key: the key is in %s already; give one or the other", external.EnvAttemptKeyData)
		}
		if key, err = external.ParseAttemptKey([]byte(o.attemptKeyData), claim, external.EnvAttemptKeyData); err != nil {
			return usagef("%v", err)
		}
		// Gone from this process's environment (the command gets only its
		// envelope's, and this process is not dumpable).
		_ = os.Unsetenv(external.EnvAttemptKeyData)
	}
	if o.attemptKey != "" {
		if key, err = external.ReadAttemptKey(o.attemptKey, claim); err != nil {
			return usagef("--attempt-key: %v", err)
		}
		// The command must not find it: it lives in this process now.
		if err := os.Remove(o.attemptKey); err != nil {
			fmt.Fprintf(a.deps.Stderr, "wdc exec: warning: could not remove the attempt key %s: %v\n", o.attemptKey, err)
		}
	}
	tc, store, err := a.connectExecutor(ctx, o.dataDir, o.blobURL)
	if err != nil {
		return err
	}
	defer tc.Close()
	defer store.Close()
	// The attempt's key signs its result and failure reports.
	var ctl executor.Control = &executor.TemporalControl{Client: tc}
	if key != nil {
		ctl = executor.Signed(ctl, key)
	}
	// bounded gives each control-plane check its own --control-plane-timeout.
	bounded := func(f func(context.Context) error) error {
		cctx, cancel := context.WithTimeout(ctx, a.global.controlPlaneTimeout)
		defer cancel()
		return f(cctx)
	}
	var attempt launchers.Attempt
	err = bounded(func(ctx context.Context) error {
		var err error
		attempt, err = executor.ClaimedAttempt(ctx, ctl, store, claim)
		return err
	})
	if err != nil {
		return a.execNotStarted(ctx, ctl, claim, err)
	}

	workDir := o.workDir
	if workDir == "" {
		if workDir, err = os.MkdirTemp("", "wdc-exec-"); err != nil {
			return err
		}
		if o.keep {
			progress("work dir %s is kept", workDir)
		} else {
			defer os.RemoveAll(workDir)
		}
		if o.runAs.user != "" {
			// Created 0700; the command's user must enter it.
			if err := os.Chmod(workDir, 0o711); err != nil {
				return err
			}
		}
	}
	if err := checkWorkDir(runAs, workDir); err != nil {
		return err
	}
	a.warnRootCommands(runAs == nil)
	ex, err := executor.Start(executor.Options{
		Attempt: attempt, Root: workDir, Blobs: store, Control: ctl, Limits: limits, Logger: a.logger().With("worker", claim.WorkerID),
		// Whatever runs this process may have no way to cancel it: one
		// lease query per TTL finds a lost fence without the agent.
		LeaseCheckInterval: attempt.Lease.TTL,
		RunAs:              runAs,
		BeforeExec: func() error {
			return bounded(func(ctx context.Context) error { return executor.LeaseCheck(ctx, ctl, claim, nil)() })
		},
	})
	if err != nil {
		return a.execNotStarted(ctx, ctl, claim, err)
	}
	progress("started pid %d in %s", ex.PID(), ex.Dir())
	select {
	case <-ex.Done():
	case <-ctx.Done():
		progress("stopped by a signal: killing process group %d, reporting infra_killed", ex.PID())
		ex.Kill("wdc exec stopped by a signal")
	}
	rep := ex.Report()
	progress("%s", describeReport(rep))
	if err := a.emitf(rep, "attempt %s %s", claim, describeReport(rep)); err != nil {
		return err
	}
	switch rep.Outcome {
	case executor.OutcomeAccepted:
		return nil
	case executor.OutcomeRejected:
		return exitError{ExitNotCurrent, fmt.Errorf("attempt %s: result rejected: %s: %s", claim, rep.Reason, rep.Message)}
	}
	return fmt.Errorf("attempt %s ended without a result: %s", claim, describeReport(rep))
}

// execNotStarted maps an attempt that did not start to its exit code: not
// current (exit 6, with a rejected report for -o json); unverified or
// unreachable (exit 1); anything else failed the launch, which is reported
// launch_failed (best effort) so the task retries at once instead of
// waiting for the lease to expire.
func (a *app) execNotStarted(ctx context.Context, ctl executor.Control, claim lease.Claim, err error) error {
	if executor.NotCurrent(err) {
		rep := executor.Report{Claim: claim, Outcome: executor.OutcomeRejected, Reason: "not_current", Message: err.Error()}
		var rej *executor.Rejected
		if errors.As(err, &rej) {
			rep.Reason = rej.Reason
		}
		if a.global.output == "json" {
			_ = printJSON(a.deps.Stdout, rep)
		}
		return exitError{ExitNotCurrent, fmt.Errorf("%w; nothing was started", err)}
	}
	if errors.Is(err, executor.ErrLeaseUnverified) || errors.Is(err, os.ErrExist) || ctx.Err() != nil {
		return fmt.Errorf("%w; nothing was started", err)
	}
	detail := err.Error()
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), a.global.controlPlaneTimeout)
	defer cancel()
	if rerr := ctl.ReportFailure(rctx, api.AttemptFailedSignal{Claim: claim, Reason: lease.ReasonLaunchFailed, Detail: detail}); rerr != nil {
		return fmt.Errorf("%w; nothing was started, and reporting launch_failed failed too: %v", err, rerr)
	}
	if errors.Is(err, blobstore.ErrNotFound) {
		detail += " (is this the blob store the agent and control plane use?)"
	}
	return fmt.Errorf("%s; nothing was started; reported launch_failed", detail)
}
