// Package replay replays the checked-in histories of wdc's workflows
// (testsuite/testdata) against the current workflow code: a change that is
// not backward compatible fails here. New histories are recorded with
// `go test ./testsuite -run TestDemoWorkerLeases -update-histories`; old ones
// stay, so old executions keep replaying (use workflow.GetVersion for
// changes).
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
