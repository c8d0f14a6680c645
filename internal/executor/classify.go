package executor

import (
	"github.com/wdc-runtime/wdc/lease"
)

// StopSignals are the signals that stop a process from outside — a
// supervisor, kill(1) without a signal, a terminal — rather than the
// program's own crash. A command killed by one of them, when the executor
// did not send it, is infra_killed; any other signal (SIGSEGV, SIGABRT,
// SIGBUS, SIGILL, SIGFPE, SIGPIPE, ...) is the program's result. Who sent
// a signal cannot be known, so a program that raises one of these on
// itself is infra_killed too.
var StopSignals = map[string]bool{"SIGKILL": true, "SIGTERM": true, "SIGINT": true, "SIGHUP": true}

// classifyExit decides what a command's end that the executor did not cause
// means: the empty reason for the program's own result (any exit code, a
// crash signal), lease.ReasonOOMKilled when the attempt's memory cgroup
// counted an OOM kill (oomKills) and the command died of SIGKILL or exited
// 137 (a shell reporting its child's OOM kill), lease.ReasonInfraKilled
// for a stop signal (StopSignals) from outside.
func classifyExit(exitCode int, signal string, oomKills int64) lease.RetryReason {
	switch {
	case oomKills > 0 && (signal == "SIGKILL" || signal == "" && exitCode == ExitInfraKilled):
		return lease.ReasonOOMKilled
	case StopSignals[signal]:
		return lease.ReasonInfraKilled
	}
	return ""
}
