package cmd

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"github.com/spiffe/go-spiffe/v2/spiffeid"

	"github.com/wdc-runtime/wdc/api"
	wdcclient "github.com/wdc-runtime/wdc/client"
	"github.com/wdc-runtime/wdc/envelope"
	"github.com/wdc-runtime/wdc/fleet"
	"github.com/wdc-runtime/wdc/identity"
	"github.com/wdc-runtime/wdc/internal/blobstore"
	"github.com/wdc-runtime/wdc/internal/executor"
	"github.com/wdc-runtime/wdc/launchers/external"
	"github.com/wdc-runtime/wdc/lease"
)

func (a *app) newWorkersCommand() *cobra.Command {
	c := &cobra.Command{
		Use:   "workers",
		Short: "Register, inspect and manage fleet workers (the registry)",
		Long: `The worker registry: one WdcWorker workflow per fleet worker (ID wdc-worker/<id>).

A worker is ACTIVE while it heartbeats, STALE after --stale-after without a
heartbeat (its leases are revoked as worker_lost), OFFLINE after --offline-after
(it must register again, which starts a new incarnation), and DRAINING after
'workers drain' (no new reservations). 'wdc agent' registers and heartbeats by
itself; these commands are for operators and scripts.`,
	}
	c.AddCommand(
		a.newWorkersRegisterCommand(),
		a.newWorkersEnrollCommand(),
		a.newWorkersListCommand(),
		a.newWorkersHeartbeatCommand(),
		a.newWorkersDrainCommand(),
		a.newWorkersUndrainCommand(),
		a.newWorkersDeregisterCommand(),
		a.newWorkersRevokeCommand(),
		a.newWorkersSweepCommand(),
		a.newWorkersAssignCommand(),
		a.newWorkersLeaseCommand(),
		a.newWorkersRenderLaunchCommand(),
	)
	return c
}

func (a *app) newWorkersRegisterCommand() *cobra.Command {
	r := &registrationFlags{}
	c := &cobra.Command{
		Use:   "register",
		Short: "Register (or re-register) a fleet worker; prints its incarnation",
		Long: `Register a fleet worker in the registry (UpdateWithStart of its WdcWorker
workflow). Registering again starts a new incarnation: heartbeats of the old one
are ignored and leases held under it are revoked (worker_lost).

The registration is validated before anything is written: a bad ID, a negative
capacity or a malformed label is refused with exit code 2.

This command's registration is unsigned: a control plane with identity
required refuses it (unauthenticated). There, 'wdc agent' registers, signed
with the worker's SVID (--svid-dir, --spiffe-socket or --ca-dir).`,
		Example: `  wdc workers register --worker-id gpu-01 --cpu 32 --memory 128Gi --gpus 4 \
      --label zone=eu-1 --capability cuda12
  wdc workers register --worker-id small --cpu 500m --memory 512Mi -o json`,
		Args: cobra.NoArgs,
		RunE: func(c *cobra.Command, _ []string) error {
			reg, err := r.registration()
			if err != nil {
				return err
			}
			return a.withControlPlane(c.Context(), func(wc *wdcclient.Client) error {
				res, err := wc.RegisterWorker(c.Context(), reg)
				if err != nil {
					return appError(err)
				}
				return a.emitf(res, "registered worker %s, incarnation %d (%s)", res.WorkerID, res.Incarnation, formatResources(reg.Capacity))
			})
		},
	}
	r.bind(c.Flags())
	return c
}

func (a *app) newWorkersListCommand() *cobra.Command {
	var state string
	c := &cobra.Command{
		Use:   "list",
		Short: "List registered workers from visibility, optionally in one state",
		Example: `  wdc workers list
  wdc workers list --state STALE -o json`,
		Args: cobra.NoArgs,
		RunE: func(c *cobra.Command, _ []string) error {
			state = strings.ToUpper(state)
			switch fleet.State(state) {
			case "", fleet.Active, fleet.Stale, fleet.Draining, fleet.Offline:
			default:
				return usagef("--state %q: want ACTIVE, STALE, DRAINING or OFFLINE", state)
			}
			return a.withClient(c.Context(), func(wc *wdcclient.Client) error {
				views, err := a.listWorkers(c.Context(), wc, state)
				if err != nil {
					return err
				}
				return emitTable(a, views, "no workers", "WORKER\tSTATE\tINCARNATION\tLAST HEARTBEAT\tCAPACITY\tFREE\tLEASES", func(v api.WorkerView) string {
					state := string(v.State)
					if v.State == fleet.Offline && !v.RevokedAt.IsZero() && !v.RevokedAt.Before(v.RegisteredAt) {
						state += " (revoked" + strings.TrimSuffix(": "+v.RevokeReason, ": ") + ")"
					}
					if v.DrainReason != "" {
						state += " (" + v.DrainReason + ")"
					}
					return fmt.Sprintf("%s\t%s\t%d\t%s\t%s\t%s\t%d", v.WorkerID, state, v.Incarnation,
						ago(v.LastHeartbeatAt), formatResources(v.Capacity), formatResources(v.Free), len(v.Reservations))
				})
			})
		},
	}
	c.Flags().StringVar(&state, "state", "", "only workers in this state: ACTIVE, STALE, DRAINING, OFFLINE")
	return c
}

// listWorkers lists workers for `workers list`: with a control plane,
// every worker's record (a worker that does not answer is warned about);
// without one, only the states visibility records, after one warning, and
// no query is sent (none could be answered).
func (a *app) listWorkers(ctx context.Context, wc *wdcclient.Client, state string) ([]api.WorkerView, error) {
	var unavailable *wdcclient.UnavailableError
	if err := wc.RequirePoller(ctx, api.ControlTaskQueue); errors.As(err, &unavailable) {
		states, err := wc.WorkerStates(ctx)
		if err != nil {
			return nil, err
		}
		fmt.Fprintf(a.deps.Stderr, "wdc: warning: %v; states below are from visibility, details unknown\n", unavailable)
		views := []api.WorkerView{}
		for _, ws := range states {
			if state != "" && string(ws.State) != state {
				continue
			}
			v := api.WorkerView{QueryError: unavailable.Error()}
			v.WorkerID, v.State = ws.WorkerID, ws.State
			views = append(views, v)
		}
		return views, nil
	} else if err != nil {
		return nil, err
	}
	views, err := wc.ListWorkers(ctx, state)
	if err != nil {
		return nil, err
	}
	for _, v := range views {
		if v.QueryError != "" {
			fmt.Fprintf(a.deps.Stderr, "wdc: warning: worker %s did not answer its query (is the control plane running?); its state is from visibility and its details are unknown\n", v.WorkerID)
		}
	}
	return views, nil
}

func ago(t time.Time) string {
	if t.IsZero() {
		return "-"
	}
	return time.Since(t).Round(time.Second).String() + " ago"
}

func (a *app) newWorkersHeartbeatCommand() *cobra.Command {
	var (
		workerID    string
		incarnation int64
		seq         int64
		every       time.Duration
	)
	c := &cobra.Command{
		Use:   "heartbeat [WORKER_ID]",
		Short: "Send a worker heartbeat (once, or every --every until interrupted)",
		Long: `Send worker heartbeats for one incarnation, as an agent does: to the worker's
liveness activity while its registry entry holds one (Temporal records it;
no signal), else as a worker-heartbeat signal, which brings a STALE worker
back. Without --incarnation the current one is used. A heartbeat of another
incarnation, or for an OFFLINE worker, is ignored by the registry (register
again instead). The signal is unsigned: a control plane with identity
required ignores it (unauthenticated), so there only the worker's own
agent, which signs with its SVID, brings it back.`,
		Example: `  wdc workers heartbeat --worker-id gpu-01
  wdc workers heartbeat --worker-id gpu-01 --every 5s`,
		Args: cobra.MaximumNArgs(1),
		RunE: func(c *cobra.Command, args []string) error {
			if err := workerArg(&workerID, args); err != nil {
				return err
			}
			if every < 0 {
				return usagef("--every: must not be negative")
			}
			ctx := c.Context()
			return a.withControlPlane(ctx, func(wc *wdcclient.Client) error {
				if incarnation == 0 {
					v, err := wc.Worker(ctx, workerID)
					if err != nil {
						return err
					}
					incarnation = v.Incarnation
				}
				for {
					seq++
					if _, err := wc.Heartbeat(ctx, api.WorkerHeartbeatSignal{WorkerID: workerID, Incarnation: incarnation, Seq: seq}); err != nil {
						return err
					}
					v, err := wc.Worker(ctx, workerID)
					if err != nil {
						return err
					}
					out := map[string]any{"worker_id": workerID, "incarnation": incarnation, "seq": seq, "state": v.State}
					if err := a.emit(out, func(w io.Writer) error {
						fmt.Fprintf(w, "heartbeat %d sent to %s (incarnation %d); state %s\n", seq, workerID, incarnation, v.State)
						return nil
					}); err != nil {
						return err
					}
					if every == 0 {
						return nil
					}
					select {
					case <-ctx.Done():
						return nil
					case <-time.After(every):
					}
				}
			})
		},
	}
	f := c.Flags()
	f.StringVar(&workerID, "worker-id", "", "the worker (required)")
	f.Int64Var(&incarnation, "incarnation", 0, "the incarnation to heartbeat for (default: the current one)")
	f.Int64Var(&seq, "seq", 0, "start sequence numbers after this value")
	f.DurationVar(&every, "every", 0, "keep sending at this interval until interrupted (0: once)")
	return c
}

// workerUpdateCommand builds a command that applies one update to one
// worker (named by argument or --worker-id) and prints the worker after it.
func (a *app) workerUpdateCommand(c *cobra.Command, apply func(ctx context.Context, wc *wdcclient.Client, workerID string) (api.WorkerView, error), line func(api.WorkerView) string) *cobra.Command {
	var workerID string
	c.Use += " [WORKER_ID]"
	c.Args = cobra.MaximumNArgs(1)
	c.RunE = func(c *cobra.Command, args []string) error {
		if err := workerArg(&workerID, args); err != nil {
			return err
		}
		return a.withControlPlane(c.Context(), func(wc *wdcclient.Client) error {
			v, err := apply(c.Context(), wc, workerID)
			if err != nil {
				return err
			}
			return a.emitf(v, "%s", line(v))
		})
	}
	c.Flags().StringVar(&workerID, "worker-id", "", "the worker (required, or give it as the argument)")
	return c
}

// signedNote is the help's paragraph on the identity a command to a
// registry entry needs.
const signedNote = `A control plane with identity required takes it only signed by a submitter
(--svid-dir, --spiffe-socket, or --ca-dir / WDC_CA_DIR: as submitter $USER)
or by the worker itself.`

func (a *app) newWorkersDrainCommand() *cobra.Command {
	var (
		reason string
		svid   svidFlags
	)
	c := a.workerUpdateCommand(&cobra.Command{
		Use:     "drain",
		Short:   "Stop new reservations on a worker; running attempts finish",
		Long:    "Stop new reservations on a worker; running attempts finish.\n\n" + signedNote,
		Example: `  wdc workers drain gpu-01 --reason "kernel upgrade"`,
	}, func(ctx context.Context, wc *wdcclient.Client, id string) (v api.WorkerView, err error) {
		err = svid.withSigner(ctx, wc, func() error { v, err = wc.DrainWorker(ctx, id, reason); return err })
		return v, err
	}, func(v api.WorkerView) string {
		return fmt.Sprintf("worker %s is %s; %d lease(s) still running", v.WorkerID, v.State, len(v.Reservations))
	})
	c.Flags().StringVar(&reason, "reason", "", "why, for operators")
	svid.bindSubmitter(c.Flags(), a.deps.Getenv)
	return c
}

func (a *app) newWorkersUndrainCommand() *cobra.Command {
	var svid svidFlags
	c := a.workerUpdateCommand(&cobra.Command{
		Use:     "undrain",
		Short:   "Let a drained worker take new reservations again",
		Long:    "Let a drained worker take new reservations again.\n\n" + signedNote,
		Example: `  wdc workers undrain gpu-01`,
	}, func(ctx context.Context, wc *wdcclient.Client, id string) (v api.WorkerView, err error) {
		err = svid.withSigner(ctx, wc, func() error { v, err = wc.UndrainWorker(ctx, id); return err })
		return v, err
	}, func(v api.WorkerView) string {
		return fmt.Sprintf("worker %s is %s", v.WorkerID, v.State)
	})
	svid.bindSubmitter(c.Flags(), a.deps.Getenv)
	return c
}

func (a *app) newWorkersDeregisterCommand() *cobra.Command {
	var (
		reason string
		force  bool
		svid   svidFlags
	)
	c := a.workerUpdateCommand(&cobra.Command{
		Use:   "deregister",
		Short: "Remove a worker from the registry (its WdcWorker workflow completes)",
		Long: `Remove a worker from the registry. A worker holding leases is refused unless
--force, which tells those tasks the worker is lost (they retry elsewhere).
Registering the same worker ID later starts a new registry entry whose
incarnations continue above the old one's. Stop the worker's agent first, or it
registers again.

` + signedNote,
		Example: `  wdc workers deregister old-box
  wdc workers deregister broken-box --force --reason "disk failed"`,
	}, func(ctx context.Context, wc *wdcclient.Client, id string) (v api.WorkerView, err error) {
		err = svid.withSigner(ctx, wc, func() error { v, err = wc.DeregisterWorker(ctx, id, force, reason); return err })
		return v, err
	}, func(v api.WorkerView) string {
		return fmt.Sprintf("worker %s deregistered (last incarnation %d)", v.WorkerID, v.Incarnation)
	})
	c.Flags().BoolVar(&force, "force", false, "deregister even while it holds leases (their tasks retry elsewhere)")
	c.Flags().StringVar(&reason, "reason", "", "why, for operators")
	svid.bindSubmitter(c.Flags(), a.deps.Getenv)
	return c
}

func (a *app) newWorkersRevokeCommand() *cobra.Command {
	var (
		reason, revocations, domain string
		svid                        svidFlags
	)
	c := a.workerUpdateCommand(&cobra.Command{
		Use:   "revoke",
		Short: "Revoke a worker's identity: its leases move and its certificate is refused",
		Long: `Revoke a worker's identity, e.g. when its key may have leaked. Its incarnation
ends OFFLINE at once: its liveness and lease activities are cancelled, so its
agent's next heartbeat is refused and its attempts fence themselves; their tasks
retry on other workers. From then on the worker registers only with a
certificate issued after the revoke: enroll it again ('wdc workers enroll',
then restart its agent). With SPIRE, evict or re-attest its node first (see
docs/security.md). The revocation outlives incarnations, but not the registry
entry's termination, reset or deletion by a namespace client: --revocations FILE
also appends it to a revocation list that control planes given the same list
(wdc control-plane --revocations FILE) consult whatever the registry remembers.

Needs a control plane with --identity optional or required, and is signed with
your submitter SVID (--svid-dir or --spiffe-socket).`,
		Example: `  wdc workers revoke gpu-01 --reason "key leaked" --svid-dir ~/.wdc/submitter
  wdc workers revoke gpu-01 --reason "key leaked" --revocations /shared/wdc/revoked.jsonl`,
	}, func(ctx context.Context, wc *wdcclient.Client, id string) (v api.WorkerView, err error) {
		td, err := spiffeid.TrustDomainFromString(domain)
		if err != nil {
			return v, usagef("--trust-domain %q: %v", domain, err)
		}
		sid, err := identity.WorkerID(td, id)
		if err != nil {
			return v, usagef("worker %q: %v", id, err)
		}
		err = svid.withSigner(ctx, wc, func() error {
			v, err = wc.RevokeWorker(ctx, id, reason)
			return err
		})
		if err != nil || revocations == "" {
			return v, err
		}
		listed := sid.String()
		if v.Identity != "" {
			// The ID it registered with (SPIRE's trust domain, say), not
			// one --trust-domain made up.
			listed = v.Identity
		}
		return v, appendRevocation(revocations, identity.Revocation{SPIFFEID: listed, RevokedThrough: v.RevokedThrough, Reason: reason})
	}, func(v api.WorkerView) string {
		return fmt.Sprintf("worker %s revoked: incarnation %d is %s; certificates issued through %s are refused",
			v.WorkerID, v.Incarnation, v.State, v.RevokedThrough.Format(time.RFC3339))
	})
	c.Flags().StringVar(&reason, "reason", "", "why, kept in the worker's record")
	c.Flags().StringVar(&revocations, "revocations", a.deps.Getenv(envRevocations), "also append the revocation to this revocation list (JSON lines, created if absent), for control planes' --revocations (env "+envRevocations+")")
	bindTrustDomain(c.Flags(), &domain, a.deps.Getenv)
	svid.bindSubmitter(c.Flags(), a.deps.Getenv)
	return c
}

// appendRevocation appends r to the revocation list at path as one line.
func appendRevocation(path string, r identity.Revocation) error {
	line, err := json.Marshal(r)
	if err != nil {
		return err
	}
	f, err := os.OpenFile(path, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644)
	if err != nil {
		return fmt.Errorf("--revocations: %w (the registry's revocation is in place)", err)
	}
	if _, err := f.Write(append(line, '\n')); err != nil {
		f.Close()
		return fmt.Errorf("--revocations %s: %w (the registry's revocation is in place)", path, err)
	}
	return f.Close()
}

func (a *app) newWorkersSweepCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "sweep",
		Short: "Make every worker re-evaluate its liveness now",
		Long: `Signal 'sweep' to every registered worker: each re-applies its stale-after and
offline-after windows immediately instead of at its next timer.`,
		Args: cobra.NoArgs,
		RunE: func(c *cobra.Command, _ []string) error {
			// Signals are accepted without a control plane, but nothing
			// would re-evaluate anything: refuse rather than pretend.
			return a.withControlPlane(c.Context(), func(wc *wdcclient.Client) error {
				n, err := wc.Sweep(c.Context())
				if err != nil {
					return err
				}
				return a.emitf(map[string]int{"swept": n}, "swept %d worker(s)", n)
			})
		},
	}
}

// assignment is `workers assign` output.
type assignment struct {
	TaskID    string             `json:"task_id"`
	Chosen    string             `json:"chosen,omitempty"`
	Eligible  []string           `json:"eligible"`
	Passed    []fleet.Ineligible `json:"passed_over"`
	Avoid     string             `json:"avoid,omitempty"`
	Requested string             `json:"requested"`
}

func (a *app) newWorkersAssignCommand() *cobra.Command {
	var avoid string
	c := &cobra.Command{
		Use:   "assign ENVELOPE",
		Short: "Show which worker a task would be assigned to, and why the others would not (dry run)",
		Long: `Apply the selection rule to an envelope without reserving anything: ACTIVE
workers whose free capacity, capabilities and labels fit, in preference order
(--avoid last, then most free CPU and memory). WdcTask uses the same rule and
then reserves on the first worker that accepts.`,
		Example: `  wdc workers assign examples/checksum.json
  wdc workers assign task.json --avoid worker-a -o json`,
		Args: cobra.ExactArgs(1),
		RunE: func(c *cobra.Command, args []string) error {
			env, err := readEnvelopeFile(args[0])
			if err != nil {
				return err
			}
			return a.withControlPlane(c.Context(), func(wc *wdcclient.Client) error {
				views, err := wc.ListWorkers(c.Context(), "")
				if err != nil {
					return err
				}
				workers := make([]fleet.Worker, 0, len(views))
				for _, v := range views {
					workers = append(workers, v.Worker)
				}
				ranked, passed := fleet.Rank(workers, env.Requirements(), avoid)
				out := assignment{TaskID: env.TaskID, Avoid: avoid, Passed: passed, Eligible: []string{}, Requested: formatResources(env.Resources)}
				for _, w := range ranked {
					out.Eligible = append(out.Eligible, w.WorkerID)
				}
				if len(ranked) > 0 {
					out.Chosen = ranked[0].WorkerID
				}
				return a.emit(out, func(w io.Writer) error {
					fmt.Fprintf(w, "task %s requests %s\n", env.TaskID, out.Requested)
					if out.Chosen == "" {
						fmt.Fprintln(w, "no eligible worker")
					} else {
						fmt.Fprintf(w, "would assign to %s (eligible in order: %s)\n", out.Chosen, strings.Join(out.Eligible, ", "))
					}
					for _, p := range passed {
						fmt.Fprintf(w, "  %s: %s (%s)\n", p.WorkerID, p.Reason, p.Detail)
					}
					return nil
				})
			})
		},
	}
	c.Flags().StringVar(&avoid, "avoid", "", "a worker to prefer last (the previous holder on a retry)")
	return c
}

func (a *app) newWorkersLeaseCommand() *cobra.Command {
	c := &cobra.Command{
		Use:   "lease TASK_ID",
		Short: "Show a task's current lease and its lease history",
		Example: `  wdc workers lease checksum-1
  wdc workers lease checksum-1 -o json`,
		Args: cobra.ExactArgs(1),
		RunE: func(c *cobra.Command, args []string) error {
			return a.withControlPlane(c.Context(), func(wc *wdcclient.Client) error {
				v, err := wc.Task(c.Context(), args[0])
				if err != nil {
					return err
				}
				out := struct {
					TaskID     string                 `json:"task_id"`
					Lease      *lease.Lease           `json:"lease"`
					Leases     []lease.Lease          `json:"leases"`
					Directives []lease.RetryDirective `json:"directives"`
				}{v.TaskID, v.Lease, v.Leases, v.Directives}
				return a.emit(out, func(w io.Writer) error { return printLeases(w, v) })
			})
		},
	}
	return c
}

// renderedLaunch is what a Local launch would run.
type renderedLaunch struct {
	Launcher string   `json:"launcher"`
	WorkerID string   `json:"worker_id"`
	TaskDir  string   `json:"task_dir"`
	Program  string   `json:"program"`
	Args     []string `json:"args"`
	Env      []string `json:"env"`
	Digest   string   `json:"envelope_digest"`
	Attempt  int64    `json:"attempt"`
	Fence    int64    `json:"fence"`
}

func (a *app) newWorkersRenderLaunchCommand() *cobra.Command {
	var (
		workerID       string
		workDir        string
		attempt, fence int64
		taskID         string
		execBin        string
		dataDir        string
		blobURL        string
		launcher       string
		rr             rayRenderFlags
		k8sf           k8sFlags
	)
	c := &cobra.Command{
		Use:   "render-launch ENVELOPE | --task TASK_ID",
		Short: "Print the exact Local launch of an envelope, or the `wdc exec` command of a task's granted lease",
		Long: `Render a launch without running anything.

With an envelope file: the Local launch — the resolved program and
arguments, the complete environment (the envelope's env plus WDC_TASK_ID,
WDC_ATTEMPT, WDC_FENCE, WDC_TASK_DIR — nothing is inherited), and the task
directory <work-dir>/<task>/<attempt>-<fence>. No server is contacted.

With --launcher ray and an envelope file: the exact JSON body the Ray
launcher POSTs to the dashboard's /api/jobs/ for that attempt on
--worker-id (one line; pipe it to jq): entrypoint ` + "`wdc exec`" + ` (or the
placement-group driver), runtime_env.env_vars with the claim and this
command's connection settings and blob store (--exec-binary, --blob-url),
entrypoint_* resources, metadata. --ray-version leaves out the fields an
older Ray does not know. No secret value is rendered.

With --launcher k8s and an envelope file: the batch/v1 Job and the
coordination.k8s.io/v1 Lease of the attempt as YAML documents (JSON with
-o json), exactly as ` + "`wdc agent --launcher k8s`" + ` sends them, except the
Lease's owner reference to the Job (added once the Job exists) and its
times. Its ` + "`wdc exec`" + ` connects with this command's settings (--address,
--blob-url, ...). No server is contacted.

With --task: the ` + "`wdc exec`" + ` command an external launcher runs for the task's
current lease (it must be granted and ACTIVE), with this command's own
connection settings and blob store. It stores the task's sealed envelope in
the blob store first (a content-addressed put: nothing changes when it is
there), so the command works whoever submitted the task. With -o json: the
claim, argv, the same settings as environment variables (env), and the
names of the credentials the launcher must supply itself (secret_env:
TEMPORAL_API_KEY, AWS_* for an s3:// store); values of secrets are never
printed. Needs a control plane (exit 5 without one).`,
		Example: `  wdc workers render-launch examples/checksum.json --worker-id worker-a
  wdc workers render-launch task.json --worker-id w1 --attempt 2 --fence 2 -o json
  wdc workers render-launch --task checksum-1 --exec-binary /usr/local/bin/wdc -o json
  wdc workers render-launch task.json --launcher ray --worker-id ray-prod --ray-version 2.9.3 --blob-url 's3://wdc?region=eu-1' | jq .
  wdc workers render-launch --launcher k8s task.json --worker-id k8s-pool --k8s-namespace wdc-jobs \
    --k8s-image registry.example/wdc:1.0 --exec-binary /usr/local/bin/wdc --blob-url 's3://wdc?region=eu-1'`,
		Args: cobra.MaximumNArgs(1),
		RunE: func(c *cobra.Command, args []string) error {
			if taskID != "" {
				for _, name := range []string{"worker-id", "work-dir", "attempt", "fence", "launcher", "ray-version"} {
					if c.Flags().Changed(name) {
						return usagef("--%s: not with --task (the task's lease says where and which attempt)", name)
					}
				}
				if len(args) > 0 {
					return usagef("give an envelope file or --task, not both")
				}
				if err := fleet.ValidateID("--task", taskID); err != nil {
					return usageError{err}
				}
				return a.renderExec(c.Context(), taskID, execBin, dataDir, blobURL)
			}
			if len(args) == 0 {
				return usagef("give an envelope file, or --task TASK_ID (see '%s --help')", c.CommandPath())
			}
			if err := rr.validate(c, launcher); err != nil {
				return err
			}
			if err := k8sf.check(c, launcher); err != nil {
				return err
			}
			switch launcher {
			case launcherLocal:
			case launcherRay:
				if c.Flags().Changed("work-dir") {
					return usagef("--work-dir: not with --launcher ray (the job's wdc exec picks its own)")
				}
				return a.renderRayLaunch(rr, args[0], workerID, attempt, fence, execBin, dataDir, blobURL)
			case launcherK8s:
				return a.renderK8sLaunch(c, args[0], workerID, attempt, fence, execBin, dataDir, blobURL, &k8sf)
			default:
				return usagef("--launcher %q: want %s, %s or %s", launcher, launcherLocal, launcherRay, launcherK8s)
			}
			for _, name := range []string{"exec-binary", "data-dir", "blob-url"} {
				if c.Flags().Changed(name) {
					return usagef("--%s: only with --task, --launcher %s or --launcher %s", name, launcherRay, launcherK8s)
				}
			}
			env, claim, err := renderClaim(args[0], launcherLocal, workerID, attempt, fence)
			if err != nil {
				return err
			}
			if workDir == "" {
				workDir = defaultWorkDir(a.defaultDataDir(), workerID)
			}
			dir := executor.TaskDir(workDir, claim)
			out := renderedLaunch{Launcher: env.Launcher, WorkerID: workerID, TaskDir: dir, Args: env.Command,
				Env: executor.Environ(env, claim, dir), Digest: claim.EnvelopeDigest, Attempt: attempt, Fence: fence}
			prog, err := executor.ResolveCommand(env, dir)
			if err != nil {
				prog = env.Command[0] + "  (" + err.Error() + ")"
			}
			out.Program = prog
			return a.emit(out, func(w io.Writer) error {
				fmt.Fprintf(w, "launcher  local on %s\n", workerID)
				fmt.Fprintf(w, "task dir  %s\n", dir)
				fmt.Fprintf(w, "program   %s\n", prog)
				fmt.Fprintf(w, "argv      %s\n", external.ShellQuote(env.Command))
				fmt.Fprintln(w, "env (complete; nothing inherited):")
				for _, kv := range out.Env {
					fmt.Fprintf(w, "  %s\n", kv)
				}
				fmt.Fprintf(w, "process   own process group, SIGKILL if the agent dies\n")
				return nil
			})
		},
	}
	f := c.Flags()
	f.StringVar(&workerID, "worker-id", "", "the worker that would run it (required with an envelope file)")
	f.StringVar(&workDir, "work-dir", "", "the agent's work directory (default <data-dir>/work/<worker-id>)")
	f.Int64Var(&attempt, "attempt", 1, "attempt number")
	f.Int64Var(&fence, "fence", 1, "fencing token")
	f.StringVar(&taskID, "task", "", "render the 'wdc exec' command of this task's granted lease instead")
	f.StringVar(&execBin, "exec-binary", "wdc", "with --task, --launcher ray or k8s: "+execBinaryHelp)
	f.StringVar(&dataDir, "data-dir", "", "with --task, --launcher ray or k8s: "+dataDirHelp)
	f.StringVar(&blobURL, "blob-url", "", "with --task, --launcher ray or k8s: "+blobURLHelp)
	f.StringVar(&launcher, "launcher", launcherLocal, "with an envelope file: render the launch of this launcher: local (the process the agent starts), ray (the exact JSON body of the Ray job submission, POST /api/jobs/) or k8s (the Job and Lease as YAML, exactly as 'wdc agent --launcher k8s' sends them)")
	rr.bind(f)
	k8sf.bindRender(f)
	return c
}

// renderExec is `workers render-launch --task`: the `wdc exec` command of
// the task's current lease, after storing its sealed envelope. A task
// without an ACTIVE lease is an error (exit 1).
func (a *app) renderExec(ctx context.Context, taskID, execBin, dataDir, blobURL string) error {
	return a.withControlPlane(ctx, func(wc *wdcclient.Client) error {
		v, err := wc.Task(ctx, taskID)
		if err != nil {
			return err
		}
		if v.Lease == nil || v.Lease.State != lease.Active || v.Lease.ResultPending {
			state := "none granted yet"
			if v.Lease != nil {
				state = fmt.Sprintf("attempt %d, fence %d is %s", v.Lease.Attempt, v.Lease.Fence, v.Lease.State)
				if v.Lease.ResultPending {
					state += " with its result being ingested"
				}
			}
			return fmt.Errorf("task %s (%s) has no granted lease to run: %s", taskID, v.State, state)
		}
		env, err := wc.TaskEnvelope(ctx, taskID)
		if err != nil {
			return err
		}
		u, err := a.storeURL(dataDir, blobURL)
		if err != nil {
			return err
		}
		store, err := blobstore.Open(ctx, u)
		if err != nil {
			return err
		}
		defer store.Close()
		digest, err := store.PutEnvelope(ctx, env)
		if err != nil {
			return err
		}
		if digest != v.Lease.EnvelopeDigest {
			return fmt.Errorf("task %s: its envelope hashes to %s, its lease names %s", taskID, digest, v.Lease.EnvelopeDigest)
		}
		cmd := external.Render(a.execTarget(execBin, u), lease.ClaimOf(*v.Lease))
		return a.emit(cmd, func(w io.Writer) error {
			fmt.Fprintf(w, "# attempt %s; lease expires %s unless heartbeats renew it; envelope %s is in %s\n",
				cmd.Claim, v.Lease.ExpiresAt.Local().Format("15:04:05.000"), digest, store)
			fmt.Fprintln(w, cmd)
			fmt.Fprintln(w, "# or, as environment for `wdc exec` without flags:")
			for _, kv := range cmd.Env {
				fmt.Fprintf(w, "#   %s\n", kv)
			}
			if len(cmd.SecretEnv) > 0 {
				fmt.Fprintf(w, "# credentials the launcher must supply (never rendered): %s\n", strings.Join(cmd.SecretEnv, ", "))
			}
			return nil
		})
	})
}

func defaultWorkDir(dataDir, workerID string) string {
	return dataDir + string(os.PathSeparator) + "work" + string(os.PathSeparator) + workerID
}

// workerArg takes the worker ID from a positional argument or --worker-id
// (not both) and validates it.
func workerArg(id *string, args []string) error {
	if len(args) == 1 {
		if *id != "" && *id != args[0] {
			return usagef("give the worker ID once: as an argument or with --worker-id")
		}
		*id = args[0]
	}
	if err := fleet.ValidateID("--worker-id", *id); err != nil {
		return usageError{err}
	}
	return nil
}

// renderClaim is what every render-launch of an envelope file starts
// from: the envelope in path, read strictly, and the claim of its attempt
// on workerID by the launcher kind. Errors (exit 2): an invalid
// --worker-id, --attempt or --fence below 1, an envelope file that cannot
// be read or decoded, an envelope for another launcher than kind (a local
// envelope may run on any worker; a ray or k8s one only on its own kind).
func renderClaim(path, kind, workerID string, attempt, fence int64) (envelope.Envelope, lease.Claim, error) {
	if err := fleet.ValidateID("--worker-id", workerID); err != nil {
		return envelope.Envelope{}, lease.Claim{}, usageError{err}
	}
	if attempt < 1 {
		return envelope.Envelope{}, lease.Claim{}, usagef("--attempt %d: must be at least 1", attempt)
	}
	if fence < 1 {
		return envelope.Envelope{}, lease.Claim{}, usagef("--fence %d: must be at least 1", fence)
	}
	env, err := readEnvelopeFile(path)
	if err != nil {
		return envelope.Envelope{}, lease.Claim{}, err
	}
	if l := env.Launcher; l != "" && l != envelope.LauncherLocal && l != kind {
		return envelope.Envelope{}, lease.Claim{}, usagef("envelope launcher %q: give --launcher %s to render its launch (a %s task runs only on a %s worker)", l, l, l, l)
	}
	digest, err := env.Digest()
	if err != nil {
		return envelope.Envelope{}, lease.Claim{}, err
	}
	return env, lease.Claim{TaskID: env.TaskID, WorkerID: workerID, Attempt: attempt, Fence: fence, EnvelopeDigest: digest}, nil
}
