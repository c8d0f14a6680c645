package local

import (
	"bytes"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"

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
	abs, err := filepath.Abs(workDir)
	if err != nil {
		return nil, err
	}
	marker := []byte(executor.EnvTaskDir + "=" + abs + string(filepath.Separator))
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return nil, err
	}
	self := os.Getpid()
	var killed []int
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == self {
			continue
		}
		environ, err := os.ReadFile(filepath.Join("/proc", e.Name(), "environ"))
		if err != nil {
			continue
		}
		for _, kv := range bytes.Split(environ, []byte{0}) {
			if bytes.HasPrefix(kv, marker) {
				if syscall.Kill(pid, syscall.SIGKILL) == nil {
					killed = append(killed, pid)
				}
				break
			}
		}
	}
	return killed, nil
}

// describePIDs renders PIDs for a log line.
func describePIDs(pids []int) string {
	s := make([]string, len(pids))
	for i, p := range pids {
		s[i] = strconv.Itoa(p)
	}
	return strings.Join(s, " ")
}
