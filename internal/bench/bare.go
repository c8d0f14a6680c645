package bench

import (
	"context"
	"fmt"
	"os/exec"
	"time"

	"go.temporal.io/sdk/workflow"
)

// BareWorkflowType and BareActivityType name the bare-Temporal baseline:
// a workflow that runs one activity, which execs TrueCommand.
const (
	BareWorkflowType = "WdcBenchBare"
	BareActivityType = "WdcBenchExecTrue"
	// TrueCommand is the trivial program both sides run.
	TrueCommand = "/bin/true"
)

// BareInput is the bare workflow's input (empty: every run is the same).
type BareInput struct{}

// BareResult is the bare workflow's result: the program's exit code.
type BareResult struct {
	ExitCode int `json:"exit_code"`
}

// BareWorkflow is the baseline: one activity that execs /bin/true, with a
// one-minute start-to-close timeout and Temporal's default retry policy.
// It is what a team would write on bare Temporal for "run this program".
func BareWorkflow(ctx workflow.Context, _ BareInput) (BareResult, error) {
	ctx = workflow.WithActivityOptions(ctx, workflow.ActivityOptions{StartToCloseTimeout: time.Minute})
	var res BareResult
	err := workflow.ExecuteActivity(ctx, BareActivityType, BareInput{}).Get(ctx, &res)
	return res, err
}

// ExecTrue is the bare activity: it runs TrueCommand and returns its exit
// code. Errors: the program could not be started, or exited non-zero.
func ExecTrue(ctx context.Context, _ BareInput) (BareResult, error) {
	if err := exec.CommandContext(ctx, TrueCommand).Run(); err != nil {
		return BareResult{ExitCode: -1}, fmt.Errorf("%s: %w", TrueCommand, err)
	}
	return BareResult{}, nil
}
