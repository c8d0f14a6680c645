package executor

import (
	"bytes"
	"os"
	"path/filepath"
	"strconv"
	"syscall"
)

// KillProcessesUnder kills every process whose environment has
// WDC_TASK_DIR equal to dir or below it. The executor sets WDC_TASK_DIR for
// a command and everything it starts inherits it, even a child that left
// the process group (setsid) or whose parent died; so this finds what a
// process-group kill misses. Processes it may not read are skipped. It
// returns the PIDs it killed.
func KillProcessesUnder(dir string) ([]int, error) {
	abs, err := filepath.Abs(dir)
	if err != nil {
		return nil, err
	}
	exact := []byte(EnvTaskDir + "=" + abs)
	under := append(append([]byte{}, exact...), filepath.Separator)
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
			if bytes.Equal(kv, exact) || bytes.HasPrefix(kv, under) {
				if syscall.Kill(pid, syscall.SIGKILL) == nil {
					killed = append(killed, pid)
				}
				break
			}
		}
	}
	return killed, nil
}
