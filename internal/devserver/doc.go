// Package devserver embeds a complete Temporal server (go.temporal.io/server)
// in the current process: SQLite persistence (a file, or memory), a frontend
// on a fixed or random port, wdc's namespaces and search attributes
// registered before the first workflow starts, optionally the Temporal
// Web UI (github.com/temporalio/ui-server/v2), and optionally an S3
// endpoint for the artifact store (internal/s3gw; devopts.S3Options): a
// bucket under "<db-filename>.s3/" with credentials generated once and kept
// there (mode 0600), or under a temporary directory removed at Stop.
//
// It is what `wdc server start-dev` runs, and what tests and
// `wdc demo worker-leases` start in-process. It is the only non-test package
// of wdc that imports go.temporal.io/server (see docs/architecture.md,
// "Processes and task queues"): linking the server is slow, so keep
// everything else on the SDK.
package devserver
