// Package bench measures wdc against bare Temporal on the same server in
// the same run (`wdc bench`): throughput of trivial tasks, submitted
// through the public client and through `wdc tasks submit --batch`,
// against bare workflows that run one activity; history events per task
// and per lease heartbeat; failover time after an agent process is
// killed; worker selection time and false staleness with a large
// simulated fleet; and a sweep of many tasks in one run. The CLI paths
// are also priced in CPU seconds per task, process by process.
//
// Figures come from Temporal where Temporal records them (workflow start
// and close times, histories, lease grant times) and CPU times from the
// kernel (/proc, getrusage); the bench only counts and divides. It
// composes the real parts: the control plane and agents as subprocesses
// of the wdc binary, simulated fleet workers that register and heartbeat
// with the agent's own worker.Heartbeater.
package bench
