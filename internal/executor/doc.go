// Package executor runs one attempt of a task: it lays out the task
// directory (<root>/<task>/<attempt>-<fence>/ with envelope.json, inputs/,
// outputs/, result.json), starts the command in its own process group with
// only the envelope's environment plus WDC_TASK_ID, WDC_ATTEMPT, WDC_FENCE
// and WDC_TASK_DIR, heartbeats the lease every interval, fences itself
// (kills the command) when its fence is no longer current or Temporal has
// been unreachable for a whole lease TTL, and on exit stages and hashes
// outputs/ and submits the result (DESIGN §5).
//
// The agent runs it in-process for Local attempts; `wdc exec` will run it
// inside Ray jobs and Kubernetes pods. It talks to Temporal only through the
// small Control interface, so it is unit-tested with a fake.
package executor
