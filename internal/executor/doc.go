// Package executor runs one attempt of a task: it lays out the task
// directory (<root>/<task>/<attempt>-<fence>/ with envelope.json, inputs/,
// outputs/, result.json), starts the command in its own process group with
// only the envelope's environment plus WDC_TASK_ID, WDC_ATTEMPT, WDC_FENCE
// and WDC_TASK_DIR, heartbeats the lease every interval (retrying every
// interval/4 while heartbeats fail), fences itself (kills the command) when
// its fence is no longer current or no heartbeat was accepted for a whole
// lease TTL (counted from the last accepted heartbeat's send time), and on
// exit stages and hashes outputs/ and submits the result.
//
// The agent runs it in-process for Local attempts; `wdc exec` will run it
// inside Ray jobs and Kubernetes pods. It talks to Temporal only through the
// small Control interface, so it is unit-tested with a fake.
package executor
