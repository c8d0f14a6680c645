package worker

import (
	"context"
	"errors"
	"log/slog"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	sdkworker "go.temporal.io/sdk/worker"
)

// shutdownOrder is a launcher that notes whether the agent had reported
// Lost when Shutdown ran.
type shutdownOrder struct {
	AgentLauncher
	lost           <-chan struct{}
	shutDown       bool
	lostAtShutdown bool
}

func (l *shutdownOrder) Shutdown(context.Context, string) {
	l.shutDown = true
	select {
	case <-l.lost:
		l.lostAtShutdown = true
	default:
	}
}

// stopOnly is a Temporal worker of which giveWay calls only Stop.
type stopOnly struct{ sdkworker.Worker }

func (stopOnly) Stop() {}

// An agent giving way stops its launcher (killing Local attempts) before
// it reports Lost: a process that exits on Lost leaves none running.
func TestGiveWayStopsTheLauncherBeforeLost(t *testing.T) {
	a := &Agent{log: slog.New(slog.DiscardHandler), lost: make(chan struct{}), worker: stopOnly{}}
	l := &shutdownOrder{lost: a.lost}
	a.launcher = l
	why := errors.New("another agent registered worker w (incarnation 2, this agent has 1); this agent stops")
	a.giveWay(why)
	require.True(t, l.shutDown, "the launcher was not stopped")
	assert.False(t, l.lostAtShutdown, "Lost was reported before the launcher stopped")
	assert.Equal(t, why, a.LostErr())
	assert.True(t, a.givingWay.Load(), "Stop would drain the entry another registration owns")
}
