// Package external hands attempts to a system outside the agent — a
// Kubernetes Job, a Ray job, a batch scheduler, a person — that runs them
// with `wdc exec`: the standalone executor, which takes the attempt's
// claim, reads the sealed envelope from the blob store and runs the same
// executor the Local launcher runs in-process (heartbeats, self-fencing,
// result submission).
//
// Render builds the `wdc exec` command line (argv, and the same settings
// as environment variables) for one claim; credentials are never part of
// it, only the names of the ones the launcher must provide. Launcher is
// the launchers.Launcher of `wdc agent --launcher external`: it stores the
// sealed envelope, writes the rendered command to a spool file per
// attempt and returns; whoever runs that command keeps the lease alive,
// and if nobody does the lease expires and the task retries.
package external
