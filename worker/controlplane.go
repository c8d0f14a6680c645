package worker

import (
	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/client"
	sdkworker "go.temporal.io/sdk/worker"
	"go.temporal.io/sdk/workflow"

	"github.com/wdc-runtime/wdc/activities"
	"github.com/wdc-runtime/wdc/api"
	"github.com/wdc-runtime/wdc/internal/blobstore"
	"github.com/wdc-runtime/wdc/workflows"
)

// RegisterWorkflows registers wdc's workflows under their api names. The
// control plane and the replay tests both call it.
func RegisterWorkflows(r sdkworker.WorkflowRegistry) {
	r.RegisterWorkflowWithOptions(workflows.WdcWorker, workflow.RegisterOptions{Name: api.WorkerWorkflowType})
	r.RegisterWorkflowWithOptions(workflows.WdcTask, workflow.RegisterOptions{Name: api.TaskWorkflowType})
	r.RegisterWorkflowWithOptions(workflows.WdcRun, workflow.RegisterOptions{Name: api.RunWorkflowType})
}

// NewControlPlane returns an unstarted Temporal worker on api.ControlTaskQueue
// with every workflow and the Control activities.
func NewControlPlane(c client.Client, blobs *blobstore.Store) sdkworker.Worker {
	w := sdkworker.New(c, api.ControlTaskQueue, sdkworker.Options{})
	RegisterWorkflows(w)
	w.RegisterActivityWithOptions(&activities.Control{Client: c, Blobs: blobs}, activity.RegisterOptions{SkipInvalidStructFunctions: true})
	return w
}
