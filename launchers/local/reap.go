package local

import (
	"strconv"
	"strings"

	"github.com/wdc-runtime/wdc/internal/executor"
)

// ReapOrphans kills processes left over from attempts of a previous agent
// on this work directory: every process whose environment has
// WDC_TASK_DIR under workDir (the executor sets it for a command and its
// children inherit it). When an agent dies, the kernel kills each
// attempt's process-group leader (Pdeathsig) but not the children it
// started; they can never submit (their executor died), and this removes
// them when the agent starts again. Call it before the agent launches
// anything. It returns the PIDs it killed; processes it may not read are
// skipped.
func ReapOrphans(workDir string) ([]int, error) {
	return executor.KillProcessesUnder(workDir)
}

// describePIDs renders PIDs for a log line.
func describePIDs(pids []int) string {
	s := make([]string, len(pids))
	for i, p := range pids {
		s[i] = strconv.Itoa(p)
	}
	return strings.Join(s, " ")
}
