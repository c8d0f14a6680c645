package local

import (
	"strconv"
	"strings"

	"github.com/wdc-runtime/wdc/internal/executor"
)

// ReapOrphans kills processes left over from attempts of a previous agent
// on this work directory: everything left in the cgroups recorded in its
// task directories (executor.ReapContained; a cgroup holds every
// descendant of a command, whatever it did), then every process whose
// environment has WDC_TASK_DIR under workDir (the second net, and the
// only one where no cgroup could be made). When an agent dies, the kernel
// kills each attempt's process-group leader (Pdeathsig) but not the
// children it started; they can never submit (their executor died), and
// this removes them when the agent starts again. Call it before the agent
// launches anything. It returns the PIDs it killed; processes it may not
// read are skipped.
func ReapOrphans(workDir string) ([]int, error) {
	contained := executor.ReapContained(workDir)
	byEnv, err := executor.KillProcessesUnder(workDir)
	return append(contained, byEnv...), err
}

// describePIDs renders PIDs for a log line.
func describePIDs(pids []int) string {
	s := make([]string, len(pids))
	for i, p := range pids {
		s[i] = strconv.Itoa(p)
	}
	return strings.Join(s, " ")
}
