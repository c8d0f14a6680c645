package bench

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/wdc-runtime/wdc/api"
)

// cliSubmit is one `wdc tasks submit --batch` subprocess as the bench saw
// it.
type cliSubmit struct {
	// began is when the subprocess was started; took until it exited.
	began time.Time
	took  time.Duration
	// cpu is its user plus system time (rusage).
	cpu time.Duration
	// submitted and failed are its report's counts.
	submitted, failed int
	// waitedForRoom: some chunk waited for room in the full run.
	waitedForRoom bool
}

// writeBatch writes n trivial task envelopes of run runID, one JSON line
// each (the `tasks submit --batch` format), to a file under the data dir.
func (b *bench) writeBatch(runID, prefix string, n int) (string, error) {
	path := filepath.Join(b.opts.DataDir, runID+".jsonl")
	f, err := os.Create(path)
	if err != nil {
		return "", err
	}
	w := bufio.NewWriter(f)
	enc := json.NewEncoder(w)
	for i := range n {
		if err := enc.Encode(b.trueTask(fmt.Sprintf("%s-%05d", prefix, i+1), runID, true)); err != nil {
			f.Close()
			return "", err
		}
	}
	if err := w.Flush(); err != nil {
		f.Close()
		return "", err
	}
	return path, f.Close()
}

// submitBatch runs `<Executable> tasks submit --batch path -o json` with
// the agents' connection flags and waits for it to exit. Errors: it
// exited non-zero, or its report is not what it should print.
func (b *bench) submitBatch(ctx context.Context, path string) (cliSubmit, error) {
	args := append(append([]string{"tasks", "submit", "--batch", path, "-o", "json"}, b.opts.AgentArgs...), b.ids.submitterArgs()...)
	c := exec.CommandContext(ctx, b.opts.Executable, args...)
	c.Env = append(os.Environ(), b.opts.AgentEnv...)
	var stdout, stderr bytes.Buffer
	c.Stdout, c.Stderr = &stdout, &stderr
	c.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	s := cliSubmit{began: time.Now()}
	err := c.Run()
	s.took = time.Since(s.began)
	if c.ProcessState != nil {
		s.cpu = c.ProcessState.UserTime() + c.ProcessState.SystemTime()
	}
	if err != nil {
		return s, fmt.Errorf("wdc tasks submit --batch %s: %w; its stderr:\n%s", path, err, tail(stderr.String(), 2000))
	}
	var rep struct {
		Submitted int `json:"submitted"`
		Failed    int `json:"failed"`
	}
	if err := json.Unmarshal(stdout.Bytes(), &rep); err != nil {
		return s, fmt.Errorf("wdc tasks submit --batch: its report: %w", err)
	}
	s.submitted, s.failed = rep.Submitted, rep.Failed
	s.waitedForRoom = strings.Contains(stderr.String(), "wait for room in run")
	return s, nil
}

// tail is the last n bytes of s.
func tail(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return "…" + s[len(s)-n:]
}

// waitRunDone polls run runID's query every interval until n tasks have
// ended; it returns the last view. Errors: a task ended other than
// COMPLETED, timeout, ctx.
func (b *bench) waitRunDone(ctx context.Context, runID string, n int, interval, timeout time.Duration, each func(api.RunView)) (api.RunView, error) {
	deadline := time.Now().Add(timeout)
	for {
		v, err := b.wc.Run(ctx, runID)
		if err == nil {
			if each != nil {
				each(v)
			}
			tc := v.TaskCounts
			if ended := tc.Total - tc.Open; tc.Total >= int64(n) && ended >= int64(n) {
				if tc.Completed != int64(n) {
					return v, fmt.Errorf("run %s: %d of %d tasks completed (%+v)", runID, tc.Completed, n, tc)
				}
				return v, nil
			}
		}
		if time.Now().After(deadline) {
			return v, fmt.Errorf("run %s: not every task of %d ended within %s (last: %+v, %v)", runID, n, timeout, v.TaskCounts, err)
		}
		select {
		case <-ctx.Done():
			return v, ctx.Err()
		case <-time.After(interval):
		}
	}
}
