package cmd

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/spf13/cobra"

	"github.com/wdc-runtime/wdc/api"
	wdcclient "github.com/wdc-runtime/wdc/client"
	"github.com/wdc-runtime/wdc/envelope"
	"github.com/wdc-runtime/wdc/fleet"
	"github.com/wdc-runtime/wdc/internal/blobstore"
)

func (a *app) newRunsCommand() *cobra.Command {
	c := &cobra.Command{
		Use:   "runs",
		Short: "Start, inspect, commit and close runs (the parents of tasks)",
		Long: `A run is one WdcRun workflow (ID wdc-run/<run-id>). Its tasks are child
workflows. Each accepted result reaches the run through parent ingest as one
worker_result event; evidence, parent_time and the TCD digest change only when
the run commits (wdc runs commit).

Its status summarises its tasks: RUNNING while any runs, COMPLETED when every
task has an accepted result (whatever its program's exit code: see each result),
INCOMPLETE when some ended RETRIES_EXHAUSTED or CANCELLED. The run itself
stays open for more tasks and commits until 'wdc runs close' (or
--close-when-done), and its workflow ends once it is closed and every task ended.

  evidence     the number of worker results the run has committed as evidence
  parent_time  the run's logical clock: +1 per commit
  TCD digest   a hash chain over the commits (sha256 of the canonical JSON of
               the previous digest, the new parent_time and the committed results)`,
	}
	c.AddCommand(a.newRunsStartCommand(), a.newRunsStatusCommand(), a.newRunsCommitCommand(), a.newRunsCloseCommand())
	return c
}

func (a *app) newRunsStartCommand() *cobra.Command {
	var (
		worldID       string
		closeWhenDone bool
		dataDir       string
		blobURL       string
		opts          taskOptionFlags
		svid          svidFlags
	)
	c := &cobra.Command{
		Use:   "start RUN_ID [ENVELOPE...]",
		Short: "Start a run, optionally with tasks (envelopes whose run_id must be RUN_ID)",
		Long: `Start a run, optionally with tasks (envelopes whose run_id must be RUN_ID),
submitted as 'wdc tasks submit' does. A control plane with identity required
takes tasks only from a submitter: give your submitter SVID (--svid-dir,
--spiffe-socket), or --ca-dir (WDC_CA_DIR) to sign as submitter $USER.`,
		Example: `  wdc runs start run-7 --world-id world-1
  wdc runs start run-7 --world-id world-1 --close-when-done tasks/*.json`,
		Args: cobra.MinimumNArgs(1),
		RunE: func(c *cobra.Command, args []string) error {
			runID := args[0]
			if err := fleet.ValidateID("RUN_ID", runID); err != nil {
				return usageError{err}
			}
			if err := fleet.ValidateID("--world-id", worldID); err != nil {
				return usageError{err}
			}
			o, err := opts.options()
			if err != nil {
				return err
			}
			if err := a.global.validate(); err != nil {
				return err
			}
			// Decode every envelope before starting anything.
			var files []runFile
			for _, p := range args[1:] {
				env, base, err := decodeEnvelopeFile(p)
				if err != nil {
					return err
				}
				if env.RunID != runID || env.WorldID != worldID {
					return usagef("%s: run_id %q / world_id %q do not match the run %s in world %s", p, env.RunID, env.WorldID, runID, worldID)
				}
				files = append(files, runFile{p, base, env})
			}
			ctx := c.Context()
			return a.withControlPlane(ctx, func(wc *wdcclient.Client) error {
				return svid.withSigner(ctx, wc, func() error {
					return a.startRun(ctx, wc, runID, worldID, closeWhenDone, files, o, dataDir, blobURL)
				})
			})
		},
	}
	c.Flags().StringVar(&worldID, "world-id", "", "the world the run belongs to (required)")
	c.Flags().BoolVar(&closeWhenDone, "close-when-done", false, "end the run as soon as all given tasks have ended (it then takes no commits: leave it open to commit, then 'runs close')")
	c.Flags().StringVar(&dataDir, "data-dir", "", dataDirHelp)
	c.Flags().StringVar(&blobURL, "blob-url", "", blobURLHelp)
	opts.bind(c)
	svid.bindSubmitter(c.Flags(), a.deps.Getenv)
	return c
}

// runFile is an envelope file given to `runs start`.
type runFile struct {
	path, base string
	env        envelope.Envelope
}

// startRun is `runs start`: the run, then each file's task, through wc.
func (a *app) startRun(ctx context.Context, wc *wdcclient.Client, runID, worldID string, closeWhenDone bool, files []runFile, o api.TaskOptions, dataDir, blobURL string) error {
	if err := wc.StartRun(ctx, api.RunInput{RunID: runID, WorldID: worldID, CloseWhenDone: closeWhenDone && len(files) > 0}); err != nil {
		return err
	}
	var added []api.AddTaskResult
	var store *blobstore.Store
	var err error
	for _, f := range files {
		env := f.env
		put := blobstore.HashFile
		if hasInputPaths(env) {
			if store == nil {
				if store, err = a.openStore(ctx, dataDir, blobURL); err != nil {
					return err
				}
				defer store.Close()
			}
			put = putFile(ctx, store)
		}
		sealed, err := sealEnvelope(env, f.base, put)
		if err != nil {
			return err
		}
		if err := storeEnvelope(ctx, store, sealed); err != nil {
			return fmt.Errorf("%s: %w", f.path, err)
		}
		res, err := wc.SubmitTask(ctx, sealed, o)
		if err != nil {
			return fmt.Errorf("%s: %w", f.path, appError(err))
		}
		added = append(added, res)
	}
	out := map[string]any{"run_id": runID, "world_id": worldID, "workflow_id": api.RunWorkflowID(runID), "tasks": added}
	return a.emit(out, func(w io.Writer) error {
		fmt.Fprintf(w, "run %s started in world %s (workflow %s)\n", runID, worldID, api.RunWorkflowID(runID))
		for _, t := range added {
			fmt.Fprintf(w, "  task %s  %s\n", t.TaskID, t.EnvelopeDigest)
		}
		return nil
	})
}

func (a *app) newRunsStatusCommand() *cobra.Command {
	limit := 100
	c := &cobra.Command{
		Use:   "status RUN_ID",
		Short: "Show a run: status, task counts, tasks, worker_result events, evidence, parent_time and TCD digest",
		Long: `Show a run. The table lists the run's open tasks and its most recent ended
ones, and the events list every uncommitted worker_result and the most recent
committed ones: a run that continued as new keeps only those in its state (the
counts cover every task). List every task of a run with 'wdc tasks list --run'.
--limit caps the rows printed of each (-o json prints everything the run holds).`,
		Example: `  wdc runs status run-7
  wdc runs status run-7 --limit 0      # every listed task and event
  wdc runs status run-7 -o json`,
		Args: cobra.ExactArgs(1),
		RunE: func(c *cobra.Command, args []string) error {
			if limit < 0 {
				return usageError{fmt.Errorf("--limit %d: must be 0 (no limit) or more", limit)}
			}
			return a.withControlPlane(c.Context(), func(wc *wdcclient.Client) error {
				v, err := wc.RunWithLiveTasks(c.Context(), args[0])
				if err != nil {
					return err
				}
				return a.emit(v, func(w io.Writer) error {
					fmt.Fprintf(w, "run          %s (world %s)\nstatus       %s%s\nevidence     %d\nparent_time  %d\ntcd digest   %s\n",
						v.RunID, v.WorldID, v.Status, map[bool]string{true: ", closed", false: ", open (takes tasks and commits until closed)"}[v.Closed], v.Evidence, v.ParentTime, v.TCDDigest)
					n := v.TaskCounts
					fmt.Fprintf(w, "tasks        %d: %d open, %d completed, %d retries exhausted, %d cancelled, %d aborted\npending      %d of %d bytes (open tasks and uncommitted results)\n",
						n.Total, n.Open, n.Completed, n.RetriesExhausted, n.Cancelled, n.Aborted, v.PendingBytes, api.MaxRunPendingBytes)
					if v.EndedNotListed > 0 {
						fmt.Fprintf(w, "%d ended tasks are not listed here: wdc tasks list --run %s\n", v.EndedNotListed, v.RunID)
					}
					tw := table(w)
					fmt.Fprintln(tw, "TASK\tSTATE\tATTEMPTS\tWORKER\tENVELOPE")
					for i, t := range v.Tasks {
						if limit > 0 && i == limit {
							fmt.Fprintf(tw, "... %d more (--limit 0 for all)\n", len(v.Tasks)-limit)
							break
						}
						state := string(t.State)
						if t.EndDetail != "" {
							state += " (" + t.EndDetail + ")"
						}
						fmt.Fprintf(tw, "%s\t%s\t%d\t%s\t%s\n", t.TaskID, state, t.Attempts, orDash(t.WorkerID), t.EnvelopeDigest)
					}
					if err := tw.Flush(); err != nil {
						return err
					}
					if v.EventsNotListed > 0 {
						fmt.Fprintf(w, "%d committed events are not listed\n", v.EventsNotListed)
					}
					for i, e := range v.Events {
						if limit > 0 && i == limit {
							fmt.Fprintf(w, "... %d more events (--limit 0 for all)\n", len(v.Events)-limit)
							break
						}
						switch {
						case e.Result != nil:
							committed := ""
							if e.Committed {
								committed = " (committed)"
							}
							fmt.Fprintf(w, "event %d worker_result: task %s attempt %d fence %d from %s, exit %d, %d artifact(s)%s\n",
								e.Seq, e.Result.TaskID, e.Result.Attempt, e.Result.Fence, e.Result.WorkerID, e.Result.ExitCode, e.Result.Artifacts, committed)
						case e.Commit != nil:
							note := ""
							if e.Commit.Note != "" {
								note = fmt.Sprintf(" (%s)", e.Commit.Note)
							}
							if e.Commit.CommittedBy != "" {
								note += " by " + e.Commit.CommittedBy
							}
							fmt.Fprintf(w, "event %d commit: events %v -> parent_time %d, evidence %d%s\n", e.Seq, e.Commit.EventSeqs, e.Commit.ParentTime, e.Commit.Evidence, note)
						}
					}
					return nil
				})
			})
		},
	}
	c.Flags().IntVar(&limit, "limit", limit, "print at most this many tasks and events (0: all the run lists)")
	return c
}

func (a *app) newRunsCommitCommand() *cobra.Command {
	var (
		expected int64
		events   []int64
		note     string
		svid     svidFlags
	)
	c := &cobra.Command{
		Use:   "commit RUN_ID",
		Short: "Commit worker_result events as evidence (the only way evidence, parent_time and the TCD change)",
		Long: `Commit worker_result events of a run as evidence. --expected-parent-time must
equal the run's current parent_time (see 'runs status'); a concurrent commit makes
it stale and this one is refused. Each event can be committed once.`,
		Example: `  wdc runs commit run-7 --expected-parent-time 0 --event 1 --event 2`,
		Args:    cobra.ExactArgs(1),
		RunE: func(c *cobra.Command, args []string) error {
			if len(note) > api.MaxNoteBytes {
				return usagef("--note: at most %d bytes (got %d)", api.MaxNoteBytes, len(note))
			}
			if len(events) == 0 {
				return usagef("--event: name at least one worker_result event (see 'wdc runs status %s')", args[0])
			}
			return a.withControlPlane(c.Context(), func(wc *wdcclient.Client) error {
				var res api.CommitResult
				err := svid.withSigner(c.Context(), wc, func() (err error) {
					res, err = wc.Commit(c.Context(), args[0], api.CommitInput{ExpectedParentTime: expected, EventSeqs: events, Note: note})
					return err
				})
				var we *wdcclient.Error
				if errors.As(err, &we) {
					// Name the flags, not the payload fields.
					we.Message = strings.NewReplacer("event_seqs", "--event", "expected_parent_time", "--expected-parent-time").Replace(we.Message)
				}
				if err != nil {
					return appError(err)
				}
				return a.emitf(res, "committed events %v: parent_time %d, evidence %d, tcd %s", res.EventSeqs, res.ParentTime, res.Evidence, res.TCDDigest)
			})
		},
	}
	c.Flags().Int64Var(&expected, "expected-parent-time", 0, "the run's parent_time you based the commit on (required; see 'wdc runs status')")
	_ = c.MarkFlagRequired("expected-parent-time")
	c.Flags().Int64SliceVar(&events, "event", nil, "worker_result event number to commit (repeatable)")
	c.Flags().StringVar(&note, "note", "", "kept with the commit")
	svid.bindSubmitter(c.Flags(), a.deps.Getenv)
	return c
}

func (a *app) newRunsCloseCommand() *cobra.Command {
	var svid svidFlags
	c := &cobra.Command{
		Use:   "close RUN_ID",
		Short: "Close a run: no more tasks; it ends once its tasks have ended",
		Long: `Close a run: it takes no more tasks or commits, and its workflow ends once
every task it holds has ended. A control plane with identity required
believes the close only when a submitter signs it (--svid-dir, or --ca-dir /
WDC_CA_DIR with the dev issuer).`,
		Example: `  wdc runs close sweep-7
  wdc runs close sweep-7 --svid-dir ~/.wdc/alice -o json`,
		Args: cobra.ExactArgs(1),
		RunE: func(c *cobra.Command, args []string) error {
			return a.withControlPlane(c.Context(), func(wc *wdcclient.Client) error {
				var v api.RunView
				err := svid.withSigner(c.Context(), wc, func() (err error) {
					v, err = wc.CloseRun(c.Context(), args[0])
					return err
				})
				if err != nil {
					return err
				}
				return a.emitf(v, "run %s closed (status %s)", v.RunID, v.Status)
			})
		},
	}
	svid.bindSubmitter(c.Flags(), a.deps.Getenv)
	return c
}

// orDash shows an empty table cell as "-".
func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}
