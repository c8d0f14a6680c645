// Package bench measures wdc against bare Temporal on the same server in
// the same run (`wdc bench`): throughput of trivial tasks against bare
// workflows that run one activity, history events per task and per lease
// heartbeat, failover time after an agent process is killed, and worker
// selection time and false staleness with a large simulated fleet.
//
// Figures come from Temporal where Temporal records them (workflow start
// and close times, histories, lease grant times); the bench only counts
// and divides. It composes the real parts: the control plane in process,
// agents as subprocesses of the wdc binary, simulated fleet workers that
// register and heartbeat with the agent's own worker.Heartbeater.
package bench
