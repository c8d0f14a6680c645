package testsuite

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/wdc-runtime/wdc/api"
	wdcclient "github.com/wdc-runtime/wdc/client"
	"github.com/wdc-runtime/wdc/internal/blobstore"
	"go.temporal.io/sdk/client"
	"google.golang.org/protobuf/encoding/protojson"

	enumspb "go.temporal.io/api/enums/v1"
	historypb "go.temporal.io/api/history/v1"
)

func countEvents(t *testing.T, wfID string, eventType enumspb.EventType) int {
	t.Helper()
	return countMatching(t, suite.client, wfID, func(ev *historypb.HistoryEvent) bool {
		if ev.GetEventType() != eventType {
			return false
		}
		if a := ev.GetWorkflowTaskFailedEventAttributes(); a != nil {
			t.Logf("%s: event %d: workflow task failed: %s: %s", wfID, ev.GetEventId(), a.GetCause(), a.GetFailure().GetMessage())
		}
		return true
	})
}

// countMatching counts the events of a workflow's current run, reached
// through c, for which match is true.
func countMatching(t *testing.T, c client.Client, wfID string, match func(*historypb.HistoryEvent) bool) int {
	t.Helper()
	iter := c.GetWorkflowHistory(context.Background(), wfID, "", false, 0)
	n := 0
	for iter.HasNext() {
		ev, err := iter.Next()
		require.NoError(t, err)
		if match(ev) {
			n++
		}
	}
	return n
}

// countFailedWorkflowTasks counts a workflow's failed workflow tasks other
// than those failed with cause UnhandledCommand: Temporal's own answer to
// a completion that raced a new event (a signal, a timeout), which the
// next workflow task handles; every other cause is a fault of the code.
func countFailedWorkflowTasks(t *testing.T, wfID string) int {
	t.Helper()
	iter := suite.client.GetWorkflowHistory(context.Background(), wfID, "", false, 0)
	n := 0
	for iter.HasNext() {
		ev, err := iter.Next()
		require.NoError(t, err)
		a := ev.GetWorkflowTaskFailedEventAttributes()
		if a == nil {
			continue
		}
		t.Logf("%s: event %d: workflow task failed: %s: %s", wfID, ev.GetEventId(), a.GetCause(), a.GetFailure().GetMessage())
		if a.GetCause() != enumspb.WORKFLOW_TASK_FAILED_CAUSE_UNHANDLED_COMMAND {
			n++
		}
	}
	return n
}

// writeHistory saves a workflow's history (current run) as JSON in
// testdata/, for the replay tests.
func writeHistory(t *testing.T, wfID string) {
	t.Helper()
	writeHistoryFrom(t, suite.client, wfID, "")
}

// writeHistoryFrom saves one run (runID, "" for the current one) of a
// workflow reached through c as JSON in testdata/.
func writeHistoryFrom(t *testing.T, c client.Client, wfID, runID string) {
	t.Helper()
	iter := c.GetWorkflowHistory(context.Background(), wfID, runID, false, 0)
	var h historypb.History
	for iter.HasNext() {
		ev, err := iter.Next()
		require.NoError(t, err)
		h.Events = append(h.Events, ev)
	}
	b, err := protojson.MarshalOptions{Indent: "  "}.Marshal(&h)
	require.NoError(t, err)
	// Never overwrite: old histories must keep replaying next to new ones.
	name := filepath.Join("testdata", historyFileName(wfID)+".json")
	for i := 2; ; i++ {
		if _, err := os.Stat(name); os.IsNotExist(err) {
			break
		}
		name = filepath.Join("testdata", historyFileName(wfID)+"-"+strconv.Itoa(i)+".json")
	}
	require.NoError(t, os.WriteFile(name, b, 0o644))
	t.Logf("wrote %s (%d events)", name, len(h.Events))
}

func historyFileName(wfID string) string {
	out := []byte{}
	for _, c := range []byte(wfID) {
		if c == '/' {
			c = '_'
		}
		out = append(out, c)
	}
	return string(out)
}

// processesIn lists live processes whose working directory is dir (a
// command that outlived its attempt).
func processesIn(dir string) []string {
	entries, _ := os.ReadDir("/proc")
	var out []string
	for _, e := range entries {
		if _, err := strconv.Atoi(e.Name()); err != nil {
			continue
		}
		cwd, err := os.Readlink(filepath.Join("/proc", e.Name(), "cwd"))
		if err != nil || cwd != dir {
			continue
		}
		stat, _ := os.ReadFile(filepath.Join("/proc", e.Name(), "stat"))
		if i := bytes.LastIndexByte(stat, ')'); i > 0 && bytes.HasPrefix(bytes.TrimSpace(stat[i+1:]), []byte("Z")) {
			continue // a zombie is dead
		}
		out = append(out, string(stat))
	}
	return out
}

// stopAtCleanup ends the subprocess c when the test ends: SIGTERM, then
// SIGKILL if it has not exited within grace; then after runs (closing its
// logs, showing them when the test failed).
func stopAtCleanup(t *testing.T, c *exec.Cmd, grace time.Duration, after func()) {
	t.Cleanup(func() {
		_ = c.Process.Signal(syscall.SIGTERM)
		done := make(chan struct{})
		go func() { _, _ = c.Process.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(grace):
			_ = c.Process.Kill()
			<-done
		}
		after()
	})
}

// syncBuffer is a bytes.Buffer safe for one writer and concurrent readers.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// Contains reports whether what was written so far contains sub.
func (s *syncBuffer) Contains(sub string) bool { return strings.Contains(s.String(), sub) }

// has is Has for a store that must answer.
func has(t testing.TB, s *blobstore.Store, digest string) bool {
	t.Helper()
	ok, err := s.Has(context.Background(), digest)
	require.NoError(t, err)
	return ok
}

// runWithEndedTasks polls run runID until it lists every task as ended:
// the run reads a task's outcome from the task a moment after the task's
// workflow closed.
func runWithEndedTasks(t *testing.T, wc *wdcclient.Client, runID string) api.RunView {
	t.Helper()
	var v api.RunView
	waitFor(t, 10*time.Second, "run "+runID+" has its tasks' outcomes", func() bool {
		var err error
		v, err = wc.Run(context.Background(), runID)
		return err == nil && v.TaskCounts.Total > 0 && v.TaskCounts.Open == 0
	})
	return v
}
