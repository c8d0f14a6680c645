package worker

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.temporal.io/api/serviceerror"
	"go.temporal.io/sdk/client"
	sdkworker "go.temporal.io/sdk/worker"
)

// fakeDeployment answers DescribeVersion from a script of task queue
// lists and Describe from a script of routing configs (the last of each
// repeats) and records SetCurrentVersion calls.
type fakeDeployment struct {
	client.WorkerDeploymentHandle
	queues   [][]client.WorkerDeploymentTaskQueueInfo // nil: NotFound
	describe []describeAnswer
	setErr   []error // SetCurrentVersion's answers in turn; nil once used up
	set      []client.WorkerDeploymentSetCurrentVersionOptions
}

type describeAnswer struct {
	rc  client.WorkerDeploymentRoutingConfig
	err error
}

func (f *fakeDeployment) DescribeVersion(context.Context, client.WorkerDeploymentDescribeVersionOptions) (client.WorkerDeploymentVersionDescription, error) {
	var q []client.WorkerDeploymentTaskQueueInfo
	if len(f.queues) > 0 {
		q = f.queues[0]
	}
	if len(f.queues) > 1 {
		f.queues = f.queues[1:]
	}
	if q == nil {
		return client.WorkerDeploymentVersionDescription{}, serviceerror.NewNotFound("build ID 'v2' not found in Worker Deployment 'wdc'")
	}
	return client.WorkerDeploymentVersionDescription{Info: client.WorkerDeploymentVersionInfo{TaskQueuesInfos: q}}, nil
}

func (f *fakeDeployment) Describe(context.Context, client.WorkerDeploymentDescribeOptions) (client.WorkerDeploymentDescribeResponse, error) {
	a := f.describe[0]
	if len(f.describe) > 1 {
		f.describe = f.describe[1:]
	}
	return client.WorkerDeploymentDescribeResponse{ConflictToken: []byte("token"), Info: client.WorkerDeploymentInfo{RoutingConfig: a.rc}}, a.err
}

func (f *fakeDeployment) SetCurrentVersion(_ context.Context, o client.WorkerDeploymentSetCurrentVersionOptions) (client.WorkerDeploymentSetCurrentVersionResponse, error) {
	f.set = append(f.set, o)
	if len(f.setErr) == 0 {
		return client.WorkerDeploymentSetCurrentVersionResponse{}, nil
	}
	err := f.setErr[0]
	f.setErr = f.setErr[1:]
	return client.WorkerDeploymentSetCurrentVersionResponse{}, err
}

// settleCase is one scripted deployment and what settling v2 in it gives.
type settleCase struct {
	name     string
	routing  []*sdkworker.WorkerDeploymentVersion // what the task queues route to, in turn (nil: unversioned)
	queues   [][]client.WorkerDeploymentTaskQueueInfo
	describe []describeAnswer
	setErr   []error
	want     VersionStatus
	sets     int
	err      string
}

func TestSettle(t *testing.T) {
	v1 := sdkworker.WorkerDeploymentVersion{DeploymentName: "wdc", BuildID: "v1"}
	v2 := sdkworker.WorkerDeploymentVersion{DeploymentName: "wdc", BuildID: "v2"}
	notFound := describeAnswer{err: serviceerror.NewNotFound("no Worker Deployment found with name 'wdc'; does your Worker Deployment have pollers?")}
	none := describeAnswer{}
	current := func(v sdkworker.WorkerDeploymentVersion) describeAnswer {
		return describeAnswer{rc: client.WorkerDeploymentRoutingConfig{CurrentVersion: &v, CurrentVersionChangedTime: time.Unix(1, 0)}}
	}
	unversioned := describeAnswer{rc: client.WorkerDeploymentRoutingConfig{CurrentVersionChangedTime: time.Unix(1, 0)}}
	never := describeAnswer{err: serviceerror.NewPermissionDenied("the deployment must not be asked", "")}
	wf := client.WorkerDeploymentTaskQueueInfo{Name: "q", Type: client.TaskQueueTypeWorkflow}
	act := client.WorkerDeploymentTaskQueueInfo{Name: "q", Type: client.TaskQueueTypeActivity}
	all := [][]client.WorkerDeploymentTaskQueueInfo{{act, wf}}
	unrouted := []*sdkworker.WorkerDeploymentVersion{nil}
	tests := []settleCase{
		{"first version of a new deployment", unrouted, all, []describeAnswer{notFound, notFound, none}, nil,
			VersionStatus{Version: v2, Current: true, Promoted: true}, 1, ""},
		{"set before the version polled", unrouted, all, []describeAnswer{none}, []error{serviceerror.NewFailedPrecondition("no pollers")},
			VersionStatus{Version: v2, Current: true, Promoted: true}, 2, ""},
		{"a restart: the task queues route here", []*sdkworker.WorkerDeploymentVersion{&v2}, nil, []describeAnswer{never}, nil,
			VersionStatus{Version: v2, Current: true}, 0, ""},
		{"current, the task queues not told yet", []*sdkworker.WorkerDeploymentVersion{&v1}, nil, []describeAnswer{current(v2)}, nil,
			VersionStatus{Version: v2, Current: true}, 0, ""},
		{"another version is current", []*sdkworker.WorkerDeploymentVersion{&v1}, all, []describeAnswer{notFound, current(v1)}, nil,
			VersionStatus{Version: v2, CurrentVersion: &v1}, 0, ""},
		{"another control plane won the race", unrouted, all, []describeAnswer{none, current(v1)}, []error{serviceerror.NewFailedPrecondition("conflict token mismatch")},
			VersionStatus{Version: v2, CurrentVersion: &v1}, 1, ""},
		{"an operator chose unversioned workers", unrouted, all, []describeAnswer{unversioned}, nil,
			VersionStatus{Version: v2}, 0, ""},
		{"permission denied", unrouted, all, []describeAnswer{none}, []error{serviceerror.NewPermissionDenied("not an admin", "")},
			VersionStatus{Version: v2}, 1, "not an admin"},
		{"never there", unrouted, all, []describeAnswer{notFound}, nil,
			VersionStatus{Version: v2}, 0, "the deployment did not take version wdc/v2 in time (context deadline exceeded); last answer: no Worker Deployment found"},
		{"another version is current, this one polls one queue after the other", unrouted, [][]client.WorkerDeploymentTaskQueueInfo{nil, {wf}, {wf, act}}, []describeAnswer{current(v1)}, nil,
			VersionStatus{Version: v2, CurrentVersion: &v1}, 0, ""},
		{"a queue never polled", unrouted, [][]client.WorkerDeploymentTaskQueueInfo{{wf}}, []describeAnswer{current(v1)}, nil,
			VersionStatus{Version: v2}, 0, "last answer: the version has not polled q yet"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			f := &fakeDeployment{queues: tc.queues, describe: tc.describe, setErr: tc.setErr}
			routing := tc.routing
			s := settler{
				h: f,
				routing: func(context.Context, string) (*sdkworker.WorkerDeploymentVersion, error) {
					v := routing[0]
					if len(routing) > 1 {
						routing = routing[1:]
					}
					return v, nil
				},
				version: v2, queues: []client.WorkerDeploymentTaskQueueInfo{wf, act}, identity: "wdc control-plane v2",
			}
			ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
			defer cancel()
			got, err := s.settle(ctx)
			if tc.err != "" {
				require.Error(t, err)
				assert.Contains(t, err.Error(), tc.err)
			} else {
				require.NoError(t, err)
			}
			assert.Equal(t, tc.want, got)
			require.Len(t, f.set, tc.sets)
			for _, o := range f.set {
				assert.Equal(t, client.WorkerDeploymentSetCurrentVersionOptions{BuildID: "v2", ConflictToken: []byte("token"), Identity: "wdc control-plane v2"}, o,
					"only ever v2, and only against the deployment it described")
			}
		})
	}
}

func TestVersionStatusDescribe(t *testing.T) {
	v1 := sdkworker.WorkerDeploymentVersion{DeploymentName: "wdc", BuildID: "v1"}
	v2 := sdkworker.WorkerDeploymentVersion{DeploymentName: "wdc", BuildID: "v2"}
	assert.Equal(t, "serving build v2 of worker deployment wdc, now current: the deployment had no current version",
		VersionStatus{Version: v2, Current: true, Promoted: true}.Describe(""))
	assert.Equal(t, "serving build v2 of worker deployment wdc, the current version",
		VersionStatus{Version: v2, Current: true}.Describe(""))
	assert.Equal(t, "serving build v2 of worker deployment wdc, not current; current is v1; make it current with "+
		"`temporal worker deployment set-current-version --namespace prod --deployment-name wdc --build-id v2`",
		VersionStatus{Version: v2, CurrentVersion: &v1}.Describe("--namespace prod"))
	assert.Contains(t, VersionStatus{Version: v2}.Describe(""), "not current; current is unversioned workers (an operator's choice)")
	assert.Equal(t, "temporal worker deployment set-current-version --deployment-name wdc --build-id 'v2 rc'\\''1'",
		SetCurrentCommand(sdkworker.WorkerDeploymentVersion{DeploymentName: "wdc", BuildID: "v2 rc'1"}, ""))
	assert.Equal(t, "temporal worker deployment set-current-version --deployment-name wdc --build-id v0.0.0-20261201120000-0123456789ab+dirty",
		SetCurrentCommand(sdkworker.WorkerDeploymentVersion{DeploymentName: "wdc", BuildID: "v0.0.0-20261201120000-0123456789ab+dirty"}, ""))
}

func TestValidateVersion(t *testing.T) {
	ok := sdkworker.WorkerDeploymentVersion{DeploymentName: "wdc", BuildID: "v1.4.0+dirty"}
	require.NoError(t, ValidateVersion(ok))
	for _, tc := range []struct {
		v    sdkworker.WorkerDeploymentVersion
		want string
	}{
		{sdkworker.WorkerDeploymentVersion{BuildID: "v1"}, "deployment name: required"},
		{sdkworker.WorkerDeploymentVersion{DeploymentName: "wdc"}, "build ID: required"},
		{sdkworker.WorkerDeploymentVersion{DeploymentName: "wdc.prod", BuildID: "v1"}, "must not contain '.' or ':'"},
		{sdkworker.WorkerDeploymentVersion{DeploymentName: "wdc:prod", BuildID: "v1"}, "must not contain '.' or ':'"},
		{sdkworker.WorkerDeploymentVersion{DeploymentName: "wdc", BuildID: "__unversioned__"}, "must not start with __"},
		{sdkworker.WorkerDeploymentVersion{DeploymentName: "wdc", BuildID: string(make([]byte, 256))}, "longer than 255 bytes"},
	} {
		err := ValidateVersion(tc.v)
		require.Error(t, err)
		assert.Contains(t, err.Error(), tc.want)
	}
}

// The SDK refuses to register a workflow without a versioning behaviour on
// a versioned worker: every one RegisterWorkflows registers has one.
func TestEveryWorkflowHasAVersioningBehavior(t *testing.T) {
	c, err := client.NewLazyClient(client.Options{HostPort: "127.0.0.1:1"})
	require.NoError(t, err)
	defer c.Close()
	w := sdkworker.New(c, "q", sdkworker.Options{DeploymentOptions: sdkworker.DeploymentOptions{
		UseVersioning: true, Version: sdkworker.WorkerDeploymentVersion{DeploymentName: "wdc", BuildID: "v1"},
	}})
	assert.NotPanics(t, func() { RegisterWorkflows(w) })
}
