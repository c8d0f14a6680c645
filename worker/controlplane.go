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

// ControlPlane is the control plane's Temporal workers: one on
// api.ControlTaskQueue with every workflow and the Control activities, one
// on api.RunTaskQueue for the workflow tasks of runs.
type ControlPlane struct {
	control, runs sdkworker.Worker
}

// NewControlPlane returns an unstarted control plane.
func NewControlPlane(c client.Client, blobs *blobstore.Store) *ControlPlane {
	control := sdkworker.New(c, api.ControlTaskQueue, sdkworker.Options{})
	RegisterWorkflows(control)
	control.RegisterActivityWithOptions(&activities.Control{Client: c, Blobs: blobs}, activity.RegisterOptions{SkipInvalidStructFunctions: true})
	runs := sdkworker.New(c, api.RunTaskQueue, sdkworker.Options{})
	RegisterWorkflows(runs)
	return &ControlPlane{control: control, runs: runs}
}

// Start starts both workers; on an error neither runs.
func (p *ControlPlane) Start() error {
	if err := p.control.Start(); err != nil {
		return err
	}
	if err := p.runs.Start(); err != nil {
		p.control.Stop()
		return err
	}
	return nil
}

// Stop stops both workers.
func (p *ControlPlane) Stop() {
	p.runs.Stop()
	p.control.Stop()
}
