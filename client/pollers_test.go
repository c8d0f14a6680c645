package client

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/api/serviceerror"
	taskqueuepb "go.temporal.io/api/taskqueue/v1"
	"go.temporal.io/api/workflowservice/v1"
	"go.temporal.io/sdk/client"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/wdc-runtime/wdc/api"
)

// describer is a client.Client whose DescribeTaskQueue answers from a
// script; any other method panics (nil embedded interface).
type describer struct {
	client.Client
	pollers []time.Time // last access times reported
	err     error
	calls   []enumspb.TaskQueueType
}

func (d *describer) DescribeTaskQueue(_ context.Context, _ string, typ enumspb.TaskQueueType) (*workflowservice.DescribeTaskQueueResponse, error) {
	d.calls = append(d.calls, typ)
	if d.err != nil {
		return nil, d.err
	}
	resp := &workflowservice.DescribeTaskQueueResponse{}
	for _, at := range d.pollers {
		resp.Pollers = append(resp.Pollers, &taskqueuepb.PollerInfo{LastAccessTime: timestamppb.New(at), Identity: "p"})
	}
	return resp, nil
}

func TestRequirePollerAcceptsARecentPollerAtOnce(t *testing.T) {
	d := &describer{pollers: []time.Time{time.Now().Add(-10 * time.Minute), time.Now().Add(-30 * time.Second)}}
	c := &Client{C: d}
	require.NoError(t, c.RequirePoller(context.Background(), api.ControlTaskQueue))
	assert.Equal(t, []enumspb.TaskQueueType{enumspb.TASK_QUEUE_TYPE_WORKFLOW}, d.calls, "one RPC, workflow pollers for the control queue")
}

func TestRequirePollerNamesTheQueueServerAndCommand(t *testing.T) {
	for _, tc := range []struct {
		name    string
		pollers []time.Time
	}{
		{"no poller", nil},
		{"only a poller older than PollerRecency", []time.Time{time.Now().Add(-PollerRecency - time.Minute)}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d := &describer{pollers: tc.pollers}
			c := &Client{C: d, Address: "10.0.0.1:7233", Namespace: "science", pollerGrace: time.Millisecond}
			err := c.RequirePoller(context.Background(), api.ControlTaskQueue)
			var unavailable *UnavailableError
			require.ErrorAs(t, err, &unavailable)
			assert.Equal(t, "no control plane is polling wdc-control on 10.0.0.1:7233 (namespace science); start `wdc control-plane`", err.Error())
			assert.Zero(t, unavailable.Waited, "nothing was sent")
		})
	}
}

func TestRequirePollerOnAnAgentQueueAsksForActivityPollers(t *testing.T) {
	d := &describer{}
	c := &Client{C: d, Address: "a:1", pollerGrace: time.Millisecond}
	err := c.RequirePoller(context.Background(), api.AgentTaskQueue("gpu-01"))
	var unavailable *UnavailableError
	require.ErrorAs(t, err, &unavailable)
	assert.Equal(t, "no agent is polling wdc-agent/gpu-01 on a:1; start `wdc agent --worker-id gpu-01`", err.Error())
	require.NotEmpty(t, d.calls)
	assert.Equal(t, enumspb.TASK_QUEUE_TYPE_ACTIVITY, d.calls[0])
}

func TestRequirePollerReturnsDescribeErrorsAsTheyAre(t *testing.T) {
	boom := errors.New("permission denied")
	c := &Client{C: &describer{err: boom}}
	err := c.RequirePoller(context.Background(), api.ControlTaskQueue)
	assert.ErrorIs(t, err, boom)
	var unavailable *UnavailableError
	assert.False(t, errors.As(err, &unavailable), "a failing server is not a missing control plane")
}

func TestRequirePollerStopsWithItsContext(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	c := &Client{C: &describer{}, pollerGrace: time.Hour}
	assert.ErrorIs(t, c.RequirePoller(ctx, api.ControlTaskQueue), context.Canceled)
}

func TestWithinTurnsItsOwnDeadlineIntoUnavailable(t *testing.T) {
	c := &Client{Address: "h:1", Namespace: "default", CallTimeout: 20 * time.Millisecond}
	err := wrap("task t1", c.within(context.Background(), "submit task t1", func(ctx context.Context) error {
		<-ctx.Done() // a control plane that never answers
		return ctx.Err()
	}))
	var unavailable *UnavailableError
	require.ErrorAs(t, err, &unavailable)
	assert.Equal(t, 20*time.Millisecond, unavailable.Waited)
	assert.Equal(t, "submit task t1: no answer within 20ms from the control plane polling wdc-control on h:1 (namespace default); "+
		"is it still running? (start `wdc control-plane`) The request was sent and may still take effect when it is back", err.Error())
}

// The server enforces the same deadline and may cancel the call a moment
// before the local timer fires: that is the bound too.
func TestWithinRecognisesTheServerEndingTheCallAtTheDeadline(t *testing.T) {
	c := &Client{CallTimeout: time.Hour}
	for _, early := range []error{
		client.NewWorkflowUpdateServiceTimeoutOrCanceledError(status.Error(codes.Canceled, "stream terminated by RST_STREAM with error code: CANCEL")),
		status.Error(codes.DeadlineExceeded, "deadline exceeded"),
		serviceerror.NewDeadlineExceeded("deadline exceeded"),
	} {
		err := c.within(context.Background(), "op", func(context.Context) error { return early })
		var unavailable *UnavailableError
		assert.ErrorAs(t, err, &unavailable, "%v", early)
	}
}

func TestWithinLeavesTheCallersDeadlineAndOtherErrorsAlone(t *testing.T) {
	c := &Client{CallTimeout: time.Hour}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	err := c.within(ctx, "op", func(ctx context.Context) error { return ctx.Err() })
	assert.ErrorIs(t, err, context.Canceled)

	boom := errors.New("boom")
	assert.Equal(t, boom, c.within(context.Background(), "op", func(context.Context) error { return boom }))

	// The caller's deadline is earlier than the bound: a timeout is the
	// caller's, even when the server reports it first.
	short, cancelShort := context.WithTimeout(context.Background(), time.Minute)
	defer cancelShort()
	early := status.Error(codes.DeadlineExceeded, "deadline exceeded")
	assert.Equal(t, early, c.within(short, "op", func(context.Context) error { return early }))

	unbounded := &Client{}
	called := false
	require.NoError(t, unbounded.within(context.Background(), "op", func(ctx context.Context) error {
		_, has := ctx.Deadline()
		called = !has
		return nil
	}))
	assert.True(t, called, "CallTimeout 0 adds no deadline")
}

func TestRetryNotReady(t *testing.T) {
	notReady := serviceerror.NewWorkflowNotReady("Unable to perform workflow execution update due to unexpected workflow task failure.")
	calls := 0
	err := retryNotReady(context.Background(), func(context.Context) error {
		calls++
		if calls < 3 {
			return notReady
		}
		return nil
	})
	require.NoError(t, err)
	require.Equal(t, 3, calls, "tried again until the workflow took it")

	calls = 0
	err = retryNotReady(context.Background(), func(context.Context) error { calls++; return notReady })
	require.ErrorAs(t, err, &notReady)
	require.Equal(t, notReadyTries, calls, "bounded")

	calls = 0
	other := errors.New("invalid argument")
	require.ErrorIs(t, retryNotReady(context.Background(), func(context.Context) error { calls++; return other }), other)
	require.Equal(t, 1, calls, "other errors are not retried")
}
