// Package replay replays the checked-in histories of wdc's workflows
// (testsuite/testdata) against the current workflow code: a change that is
// not backward compatible fails here. Histories are recorded from the
// current code with `go test ./testsuite -run 'TestName' -update-histories`
// (the tests that record one call writeHistory); recorded ones stay, so
// running executions keep replaying. WdcTask is pinned to its build
// (Worker Deployment Versioning); a change to WdcWorker or WdcRun gates
// itself with workflow.GetVersion under docs/architecture.md's retirement
// rule.
package replay

import (
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
	sdkworker "go.temporal.io/sdk/worker"

	"github.com/wdc-runtime/wdc/worker"
)

func TestReplayCheckedInHistories(t *testing.T) {
	files, err := filepath.Glob(filepath.Join("..", "testdata", "*.json"))
	require.NoError(t, err)
	require.NotEmpty(t, files, "no histories checked in")
	for _, f := range files {
		t.Run(filepath.Base(f), func(t *testing.T) {
			r := sdkworker.NewWorkflowReplayer()
			worker.RegisterWorkflows(r)
			require.NoError(t, r.ReplayWorkflowHistoryFromJSONFile(nil, f))
		})
	}
}
