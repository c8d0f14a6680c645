// Package client is wdc's Go client: the one client the `wdc` CLI, the
// agents and the control plane's activities use, and the way programs
// submit and follow tasks without the CLI.
//
// A Client wraps a Temporal SDK connection (go.temporal.io/sdk/client) to
// the namespace the control plane serves:
//
//	tc, err := sdkclient.Dial(sdkclient.Options{HostPort: "127.0.0.1:7233", Namespace: "default"})
//	wdc := &client.Client{C: tc, CallTimeout: 30 * time.Second}
//	env, err := envelope.Decode(taskFile, false)                  // a task file, strictly
//	env, err = client.SealInputs(ctx, blobURL, env, dir)          // inputs by path -> uploaded, by digest
//	res, err := wdc.SubmitTask(ctx, env, api.TaskOptions{})
//	out, err := wdc.WaitTask(ctx, res.TaskID)                     // its end: state, attempts, result
//
// SubmitTask takes a sealed envelope: inputs named by content digest and
// already in the artifact store the control plane and agents share
// (blobURL: s3://bucket?... or file:///dir, as their --blob-url).
// SealInputs does that for inputs given by path, as `wdc tasks submit`
// does; an envelope without inputs needs no sealing.
//
// Tasks: SealInputs, SubmitTask, SubmitTasks (a batch, validated whole before
// anything is sent), Task (status), ListTasks, WaitTask, WaitEnded,
// CancelTask, TaskEnvelope. Runs: StartRun, Run, Commit, CloseRun. The
// registry: RegisterWorker, WorkerHeartbeat, DrainWorker, UndrainWorker,
// DeregisterWorker, Worker, ListWorkers, Sweep.
//
// Errors: a refusal by a wdc workflow is an *Error whose Type is an
// api.ErrType* or a lease.RejectReason and whose Message names the field;
// ErrNotFound when there is no such task, run or worker; an
// *UnavailableError when no control plane answered within CallTimeout
// (it names the task queue and the command that serves it). Other errors
// are Temporal's, wrapped with what was being done.
package client
