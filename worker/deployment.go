package worker

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/api/serviceerror"
	"go.temporal.io/sdk/client"
	sdkworker "go.temporal.io/sdk/worker"
	"golang.org/x/sync/errgroup"

	"github.com/wdc-runtime/wdc/internal/buildinfo"
)

// DefaultDeploymentName is the Worker Deployment that control planes join
// unless told otherwise (`wdc control-plane --deployment-name`).
const DefaultDeploymentName = "wdc"

// DefaultSettleTimeout is ControlPlaneOptions.SettleTimeout's default: how
// long Start waits for Temporal to know the control plane's version (it
// learns it from the first polls, a few hundred milliseconds on the dev
// server) and, when the deployment has no current version, to make it
// current.
const DefaultSettleTimeout = 15 * time.Second

// settleRetry is the pause between two looks at the deployment while it
// does not know the version yet.
const settleRetry = 50 * time.Millisecond

// DefaultBuildID is the build ID of this binary's control plane unless
// told otherwise (`--build-id`): its module version, else its VCS commit,
// else buildinfo.DevBuildID (see buildinfo.From). Every process of one
// binary derives the same one.
func DefaultBuildID() string { return buildinfo.Read().BuildID }

// ValidateVersion checks a Worker Deployment Version against Temporal's
// rules (see ValidateDeploymentName and ValidateBuildID).
func ValidateVersion(v sdkworker.WorkerDeploymentVersion) error {
	if err := ValidateDeploymentName(v.DeploymentName); err != nil {
		return err
	}
	return ValidateBuildID(v.BuildID)
}

// ValidateDeploymentName checks a Worker Deployment name against
// Temporal's rules (server common/worker_versioning): non-empty, at most
// 255 bytes, not starting with "__", without '.' or ':'.
func ValidateDeploymentName(name string) error {
	if err := validateVersionPart("deployment name", name); err != nil {
		return err
	}
	if strings.ContainsAny(name, ".:") {
		return fmt.Errorf("deployment name %q: must not contain '.' or ':'", name)
	}
	return nil
}

// ValidateBuildID checks a build ID against Temporal's rules: non-empty,
// at most 255 bytes, not starting with "__".
func ValidateBuildID(id string) error { return validateVersionPart("build ID", id) }

func validateVersionPart(what, value string) error {
	switch {
	case value == "":
		return fmt.Errorf("%s: required", what)
	case len(value) > 255:
		return fmt.Errorf("%s %q: longer than 255 bytes", what, value)
	case strings.HasPrefix(value, "__"):
		return fmt.Errorf("%s %q: must not start with __ (reserved by Temporal)", what, value)
	}
	return nil
}

// VersionStatus is where a control plane's version stands in its Worker
// Deployment once Start returned.
type VersionStatus struct {
	// Version is the version the control plane serves.
	Version sdkworker.WorkerDeploymentVersion
	// Current is true when it is the deployment's current version: new
	// workflows, and auto-upgrading ones (WdcWorker, WdcRun), run on it.
	Current bool
	// Promoted is true when this control plane made it current, because
	// the deployment had none yet.
	Promoted bool
	// CurrentVersion is the deployment's current version when it is
	// another one; nil with Current false means an operator routed the
	// deployment to unversioned workers.
	CurrentVersion *sdkworker.WorkerDeploymentVersion
	// Took is how long Start waited for the deployment, from the workers'
	// start.
	Took time.Duration
}

// Describe is the status in one line for an operator. When the version is
// not current it names the temporal CLI command that makes it so, with
// temporalFlags (e.g. "--address h:7233 --namespace ns"; may be empty)
// inserted.
func (s VersionStatus) Describe(temporalFlags string) string {
	serving := fmt.Sprintf("serving build %s of worker deployment %s", s.Version.BuildID, s.Version.DeploymentName)
	switch {
	case s.Promoted:
		return serving + ", now current: the deployment had no current version"
	case s.Current:
		return serving + ", the current version"
	}
	current := "unversioned workers (an operator's choice)"
	if s.CurrentVersion != nil {
		current = s.CurrentVersion.BuildID
	}
	return fmt.Sprintf("%s, not current; current is %s; make it current with `%s`",
		serving, current, SetCurrentCommand(s.Version, temporalFlags))
}

// SetCurrentCommand is the temporal CLI (v1.5) command that makes v its
// deployment's current version, with temporalFlags (may be empty) before
// the version's flags.
func SetCurrentCommand(v sdkworker.WorkerDeploymentVersion, temporalFlags string) string {
	cmd := "temporal worker deployment set-current-version"
	if temporalFlags != "" {
		cmd += " " + temporalFlags
	}
	return cmd + " --deployment-name " + shellQuote(v.DeploymentName) + " --build-id " + shellQuote(v.BuildID)
}

// shellQuote single-quotes s unless it consists of characters no shell
// treats specially.
func shellQuote(s string) string {
	if s != "" && strings.Trim(s, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_.+:/=@") == "" {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

// settler brings a control plane's version to where it stands in its
// Worker Deployment (settle).
type settler struct {
	// h is the deployment's handle.
	h client.WorkerDeploymentHandle
	// routing is the version a task queue's new workflows go to, as
	// matching knows it (DescribeTaskQueue; no workflow query): nil for
	// unversioned workers.
	routing func(ctx context.Context, taskQueue string) (*sdkworker.WorkerDeploymentVersion, error)
	// version is the control plane's; queues are what it polls.
	version sdkworker.WorkerDeploymentVersion
	queues  []client.WorkerDeploymentTaskQueueInfo
	// identity names the control plane in the deployment's
	// LastModifierIdentity when it makes itself current.
	identity string
}

// taskQueueRouting is settler.routing through c.
func taskQueueRouting(c client.Client) func(context.Context, string) (*sdkworker.WorkerDeploymentVersion, error) {
	return func(ctx context.Context, taskQueue string) (*sdkworker.WorkerDeploymentVersion, error) {
		d, err := c.DescribeTaskQueue(ctx, taskQueue, enumspb.TASK_QUEUE_TYPE_WORKFLOW)
		if err != nil {
			return nil, err
		}
		v := d.GetVersioningInfo().GetCurrentDeploymentVersion()
		if v.GetBuildId() == "" {
			return nil, nil
		}
		return &sdkworker.WorkerDeploymentVersion{DeploymentName: v.GetDeploymentName(), BuildID: v.GetBuildId()}, nil
	}
}

// settle waits until the control plane's version is current, or known to
// the deployment on every one of its task queues, and reports where it
// stands. When the deployment has never had a current version it makes
// the version current (zero setup: the first control plane of a
// deployment serves at once); it never replaces a current version, nor an
// operator's choice of unversioned workers — an upgrade is the operator's
// `temporal worker deployment set-current-version`, which succeeds from
// then on (Temporal refuses a version that lacks a task queue of the
// current one).
//
// A control plane whose version is current already (a restart) is
// answered by the task queues, without a workflow query. The deployment
// and the version come into being with the workers' first polls: until
// then Describe and DescribeVersion answer NotFound, and they are retried
// every settleRetry until ctx ends. The conflict token makes a race
// between two first control planes of different builds safe: the loser
// finds the winner current.
func (s *settler) settle(ctx context.Context) (VersionStatus, error) {
	st := VersionStatus{Version: s.version}
	if s.routedHere(ctx) {
		st.Current = true
		return st, nil
	}
	registered := false
	for {
		done, err := s.step(ctx, &st, &registered)
		if done {
			return st, nil
		}
		if permanent(err) {
			return st, err
		}
		select {
		case <-ctx.Done():
			return st, fmt.Errorf("the deployment did not take version %s/%s in time (%v); last answer: %w", s.version.DeploymentName, s.version.BuildID, ctx.Err(), err)
		case <-time.After(settleRetry):
		}
	}
}

// step looks once. done is false when it must look again; *registered
// records that the version was seen on all its task queues.
func (s *settler) step(ctx context.Context, st *VersionStatus, registered *bool) (done bool, err error) {
	d, err := s.h.Describe(ctx, client.WorkerDeploymentDescribeOptions{})
	if err != nil {
		return false, err
	}
	rc := d.Info.RoutingConfig
	if rc.CurrentVersion != nil && *rc.CurrentVersion == s.version {
		st.Current = true // its task queues learn it shortly
		return true, nil
	}
	if rc.CurrentVersion != nil || !rc.CurrentVersionChangedTime.IsZero() {
		// Another version is current, or an operator chose unversioned
		// workers: done once the version can be made current.
		if !*registered {
			if err := s.registered(ctx); err != nil {
				return false, err
			}
			*registered = true
		}
		if rc.CurrentVersion != nil {
			cur := *rc.CurrentVersion
			st.CurrentVersion = &cur
		}
		return true, nil
	}
	// No current version ever: make this one current. A task queue of it
	// that Temporal has not seen yet learns the routing when it does.
	if _, err := s.h.SetCurrentVersion(ctx, client.WorkerDeploymentSetCurrentVersionOptions{
		BuildID: s.version.BuildID, ConflictToken: d.ConflictToken, Identity: s.identity,
	}); err != nil {
		return false, err // e.g. FailedPrecondition: another control plane changed the deployment first
	}
	st.Current, st.Promoted = true, true
	return true, nil
}

// routedHere reports whether every task queue routes new workflows to the
// control plane's version (asked in parallel); an error is a no.
func (s *settler) routedHere(ctx context.Context) bool {
	var names []string
	for _, q := range s.queues {
		if !slices.Contains(names, q.Name) {
			names = append(names, q.Name)
		}
	}
	here := make([]bool, len(names))
	g, gctx := errgroup.WithContext(ctx)
	for i, n := range names {
		g.Go(func() error {
			v, err := s.routing(gctx, n)
			here[i] = err == nil && v != nil && *v == s.version
			return err
		})
	}
	return g.Wait() == nil && !slices.Contains(here, false)
}

// registered returns nil when the version's description lists every one
// of its task queues.
func (s *settler) registered(ctx context.Context) error {
	d, err := s.h.DescribeVersion(ctx, client.WorkerDeploymentDescribeVersionOptions{BuildID: s.version.BuildID})
	if err != nil {
		return err
	}
	var missing []string
	for _, q := range s.queues {
		if !slices.Contains(d.Info.TaskQueuesInfos, q) && !slices.Contains(missing, q.Name) {
			missing = append(missing, q.Name)
		}
	}
	if len(missing) > 0 {
		return fmt.Errorf("the version has not polled %s yet", strings.Join(missing, ", "))
	}
	return nil
}

// permanent reports whether err is one that no retry fixes.
func permanent(err error) bool {
	var denied *serviceerror.PermissionDenied
	var invalid *serviceerror.InvalidArgument
	var unimplemented *serviceerror.Unimplemented
	return errors.As(err, &denied) || errors.As(err, &invalid) || errors.As(err, &unimplemented)
}
