// Package activities holds wdc's activities on two structs that carry their
// dependencies (docs/architecture.md, "Conventions"): Control (task queue wdc-control: worker selection
// and reservation, parent ingest, staging cleanup) and Agent (task queue
// wdc-agent/<worker>: launching and cancelling Local attempts). Workflows
// reference them through typed nils; this package never imports workflows.
package activities
