// Package cmd is the wdc command tree (cobra): one file per command group,
// each command an options struct completed, validated and run with injected
// stdout/stderr so tests drive it in-process (see docs/architecture.md,
// "Conventions"). cmd/wdc/main.go only calls Main.
//
// Exit codes: 0 success; 1 the operation failed; 2 bad input (unknown flag,
// malformed value, invalid envelope): nothing was changed; 3 a waited-for
// task ended without a result (RETRIES_EXHAUSTED or CANCELLED); 4 a
// waited-for task COMPLETED but its program failed (non-zero exit code or
// rejected outputs); 5 no control plane (or agent) is there to answer:
// none polls its task queue (nothing was sent), or it did not answer within
// --control-plane-timeout (the request may still take effect); 6 (`wdc
// exec`) the attempt's claim is not current, so nothing was started, or
// its result was rejected.
package cmd
