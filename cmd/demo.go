package cmd

import (
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/wdc-runtime/wdc/internal/demo"
)

func (a *app) newDemoCommand() *cobra.Command {
	c := &cobra.Command{
		Use:   "demo",
		Short: "Self-contained demonstrations",
	}
	c.AddCommand(a.newDemoWorkerLeasesCommand())
	return c
}

func (a *app) newDemoWorkerLeasesCommand() *cobra.Command {
	var (
		dataDir  string
		blobURL  string
		keep     bool
		leaseTTL time.Duration
	)
	c := &cobra.Command{
		Use:   "worker-leases",
		Short: "The reference retry demo: a stale attempt's late result is refused by the fence",
		Long: `Run wdc's reference retry scenario on real parts: an in-process Temporal
server (unless --address or TEMPORAL_ADDRESS is given), the control plane and two
agents, and a real command (sh: sha256sum, wc) over a real input file staged
into the task directory.

Attempt 1 runs on worker A, then its executor stalls before submitting, so its
lease expires; attempt 2 runs on worker B with the same envelope digest and a
new fence and is accepted; then attempt 1 wakes up, submits its result and is
refused (stale_fence). The observed values are printed one per line
(attempt, fence, retry reason, rejection, run and lease status, evidence,
parent time), then the accepted artifact. The exit code is 1 if any value breaks an invariant.

Progress goes to stderr; stdout carries only the result (-o json for JSON).

With --address the demo runs its own control plane and agents against that
server; any control plane already polling the namespace must share the demo's
--data-dir (the default data dir is used, as control planes do).`,
		Example: `  wdc demo worker-leases
  wdc demo worker-leases -o json
  wdc demo worker-leases --address 127.0.0.1:7233 --data-dir /tmp/wdc-demo`,
		Args: cobra.NoArgs,
		RunE: func(c *cobra.Command, _ []string) error {
			if err := a.global.validate(); err != nil {
				return err
			}
			if leaseTTL < 2*time.Second {
				return usagef("--lease-ttl %s: must be at least 2s", leaseTTL)
			}
			ctx := c.Context()
			progress := func(s string) {
				fmt.Fprintf(a.deps.Stderr, "%s  %s\n", time.Now().Format("15:04:05.000"), s)
			}
			sc, err := a.startScratch(ctx, c, "wdc-demo-", dataDir, blobURL, keep, progress)
			if err != nil {
				return err
			}
			defer sc.Close()
			dataDir = sc.DataDir
			res, err := demo.Run(ctx, demo.Options{Client: sc.Client, DataDir: sc.DataDir, BlobURL: sc.BlobURL, Suffix: sc.Suffix, LeaseTTL: leaseTTL, Progress: progress, Logger: a.logger()})
			if err != nil {
				return err
			}
			if keep {
				progress("data kept in " + dataDir)
			}
			if err := a.emit(res, func(w io.Writer) error {
				for _, l := range res.Lines() {
					fmt.Fprintln(w, l)
				}
				return nil
			}); err != nil {
				return err
			}
			if v := res.Violations(); len(v) > 0 {
				return fmt.Errorf("invariant broken: %s", strings.Join(v, "; "))
			}
			progress(fmt.Sprintf("all invariants held (%.1fs)", res.ElapsedSeconds))
			return nil
		},
	}
	c.Flags().StringVar(&dataDir, "data-dir", "", "where the blob store and task directories go (default: a temporary directory, removed afterwards; with --address the standard data dir, shared with control planes there: env WDC_DATA_DIR)")
	c.Flags().StringVar(&blobURL, "blob-url", "", blobURLHelp)
	c.Flags().BoolVar(&keep, "keep", false, "keep the temporary data directory to inspect task dirs and blobs")
	c.Flags().DurationVar(&leaseTTL, "lease-ttl", 3*time.Second, "the demo task's lease TTL")
	return c
}
