package worker

import (
	"context"
	"fmt"
	"os"
	"time"

	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/interceptor"
	sdkworker "go.temporal.io/sdk/worker"
	"go.temporal.io/sdk/workflow"

	"github.com/wdc-runtime/wdc/activities"
	"github.com/wdc-runtime/wdc/api"
	"github.com/wdc-runtime/wdc/identity"
	"github.com/wdc-runtime/wdc/internal/blobstore"
	"github.com/wdc-runtime/wdc/workflows"
)

// RegisterWorkflows registers wdc's workflows under their api names, each
// with its versioning behaviour (docs/upgrading.md): a task (WdcTask) is
// pinned, it runs its whole life on the build it started on; the registry
// entries (WdcWorker) and runs (WdcRun) live as long as the fleet and the
// run, so they auto-upgrade to the current version at their next workflow
// task. The control plane and the replay tests both call it.
func RegisterWorkflows(r sdkworker.WorkflowRegistry) {
	r.RegisterWorkflowWithOptions(workflows.WdcWorker, workflow.RegisterOptions{Name: api.WorkerWorkflowType, VersioningBehavior: workflow.VersioningBehaviorAutoUpgrade})
	r.RegisterWorkflowWithOptions(workflows.WdcTask, workflow.RegisterOptions{Name: api.TaskWorkflowType, VersioningBehavior: workflow.VersioningBehaviorPinned})
	r.RegisterWorkflowWithOptions(workflows.WdcRun, workflow.RegisterOptions{Name: api.RunWorkflowType, VersioningBehavior: workflow.VersioningBehaviorAutoUpgrade})
}

// ControlPlaneOptions configures NewControlPlaneWith; the zero value is
// the defaults.
type ControlPlaneOptions struct {
	// Version is the Worker Deployment Version that the workers poll as.
	// An empty DeploymentName is DefaultDeploymentName, an empty BuildID
	// DefaultBuildID(); see ValidateVersion.
	Version sdkworker.WorkerDeploymentVersion
	// SettleTimeout bounds how long Start waits for the deployment to take
	// the version (see Start). Default DefaultSettleTimeout.
	SettleTimeout time.Duration
	// Identity judges signed messages in the workflows' validators
	// (workflows.Interceptor); nil is identity off.
	Identity *identity.Verifier
}

// withDefaults fills in the defaults.
func (o ControlPlaneOptions) withDefaults() ControlPlaneOptions {
	if o.Version.DeploymentName == "" {
		o.Version.DeploymentName = DefaultDeploymentName
	}
	if o.Version.BuildID == "" {
		o.Version.BuildID = DefaultBuildID()
	}
	if o.SettleTimeout <= 0 {
		o.SettleTimeout = DefaultSettleTimeout
	}
	return o
}

// ControlPlane is the control plane's Temporal workers: one on
// api.ControlTaskQueue with every workflow and the Control activities, one
// on api.RunTaskQueue for the workflow tasks of runs and one on
// api.RegistryTaskQueue for those of registry entries. All poll as one
// Worker Deployment Version (ControlPlaneOptions.Version).
type ControlPlane struct {
	c    client.Client
	opts ControlPlaneOptions
	// workers are on the control, run and registry queues, in the order
	// they start (Stop: reversed).
	workers []sdkworker.Worker
	status  VersionStatus
}

// NewControlPlane returns an unstarted control plane with the default
// options: deployment DefaultDeploymentName, build DefaultBuildID().
func NewControlPlane(c client.Client, blobs *blobstore.Store) *ControlPlane {
	return NewControlPlaneWith(c, blobs, ControlPlaneOptions{})
}

// NewControlPlaneWith returns an unstarted control plane. It panics when
// opts.Version is invalid (check it with ValidateVersion first).
func NewControlPlaneWith(c client.Client, blobs *blobstore.Store, opts ControlPlaneOptions) *ControlPlane {
	opts = opts.withDefaults()
	if err := ValidateVersion(opts.Version); err != nil {
		panic("worker.NewControlPlaneWith: " + err.Error())
	}
	wo := sdkworker.Options{Identity: controlPlaneIdentity(), DeploymentOptions: sdkworker.DeploymentOptions{
		UseVersioning: true,
		Version:       opts.Version,
		// None: RegisterWorkflows gives each workflow its behaviour, and
		// the SDK refuses a workflow registered without one.
		DefaultVersioningBehavior: workflow.VersioningBehaviorUnspecified,
	}}
	if opts.Identity != nil {
		wo.Interceptors = []interceptor.WorkerInterceptor{workflows.Interceptor(opts.Identity)}
	}
	control := sdkworker.New(c, api.ControlTaskQueue, wo)
	RegisterWorkflows(control)
	control.RegisterActivityWithOptions(&activities.Control{Client: c, Blobs: blobs}, activity.RegisterOptions{SkipInvalidStructFunctions: true})
	runs := sdkworker.New(c, api.RunTaskQueue, wo)
	RegisterWorkflows(runs)
	registry := sdkworker.New(c, api.RegistryTaskQueue, wo)
	RegisterWorkflows(registry)
	return &ControlPlane{c: c, opts: opts, workers: []sdkworker.Worker{control, runs, registry}}
}

// controlPlaneIdentity is the identity of the control plane's workflow
// and activity events: api.ControlPlaneIdentity of this host.
func controlPlaneIdentity() string {
	h, err := os.Hostname()
	if err != nil || h == "" {
		h = "unknown"
	}
	return api.ControlPlaneIdentity(h, os.Getpid())
}

// Start is StartContext without a context of its own.
func (p *ControlPlane) Start() error { return p.StartContext(context.Background()) }

// StartContext starts the workers and waits, at most
// ControlPlaneOptions.SettleTimeout (or until ctx ends), for the Worker
// Deployment to take their version: when the deployment has never had a
// current version, the control plane makes its own current, so the first
// control plane serves at once; otherwise it leaves the current version
// alone (Status says which it is) and returns once Temporal has seen the
// version on all four of its task queues (wdc-control's workflows and
// activities, wdc-control-runs' and wdc-control-registry's workflows), so
// that it can be made current. Workflows started meanwhile wait in their
// task queue and run once a version is current.
//
// On an error no worker runs: a worker did not start, or the
// deployment did not answer in time or refused (permission denied, or a
// server without Worker Deployment Versioning).
func (p *ControlPlane) StartContext(ctx context.Context) error {
	began := time.Now()
	for i, w := range p.workers {
		if err := w.Start(); err != nil {
			for j := i - 1; j >= 0; j-- {
				p.workers[j].Stop()
			}
			return err
		}
	}
	sctx, cancel := context.WithTimeout(ctx, p.opts.SettleTimeout)
	defer cancel()
	queues := []client.WorkerDeploymentTaskQueueInfo{
		{Name: api.ControlTaskQueue, Type: client.TaskQueueTypeWorkflow},
		{Name: api.ControlTaskQueue, Type: client.TaskQueueTypeActivity},
		{Name: api.RunTaskQueue, Type: client.TaskQueueTypeWorkflow},
		{Name: api.RegistryTaskQueue, Type: client.TaskQueueTypeWorkflow},
	}
	s := settler{
		h:        p.c.WorkerDeploymentClient().GetHandle(p.opts.Version.DeploymentName),
		routing:  taskQueueRouting(p.c),
		version:  p.opts.Version,
		queues:   queues,
		identity: "wdc control-plane " + p.opts.Version.BuildID,
	}
	st, err := s.settle(sctx)
	if err != nil {
		p.Stop()
		return fmt.Errorf("control plane version %s/%s: %w", p.opts.Version.DeploymentName, p.opts.Version.BuildID, err)
	}
	st.Took = time.Since(began)
	p.status = st
	return nil
}

// Status is where the control plane's version stood when Start returned.
func (p *ControlPlane) Status() VersionStatus { return p.status }

// Stop stops the workers.
func (p *ControlPlane) Stop() {
	for i := len(p.workers) - 1; i >= 0; i-- {
		p.workers[i].Stop()
	}
}
