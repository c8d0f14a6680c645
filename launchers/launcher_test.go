package launchers

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestLaunchExpired(t *testing.T) {
	now := time.Now()
	assert.NoError(t, Expired(context.Background(), now.Add(time.Second), now))
	assert.NoError(t, Expired(context.Background(), time.Time{}, now), "no deadline")
	err := Expired(context.Background(), now.Add(-1500*time.Millisecond), now)
	require.ErrorIs(t, err, ErrLaunchExpired)
	assert.Contains(t, err.Error(), "passed 1.5s ago")
	assert.ErrorIs(t, Expired(context.Background(), now, now), ErrLaunchExpired, "at the deadline")
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	assert.ErrorIs(t, Expired(ctx, now.Add(time.Hour), now), ErrLaunchExpired, "cancelled")
}

func TestCheckDeadlineUsesTheContextsDeadline(t *testing.T) {
	require.NoError(t, CheckDeadline(context.Background()), "no deadline")
	ctx, cancel := context.WithDeadline(context.Background(), time.Now().Add(-time.Second))
	defer cancel()
	require.ErrorIs(t, CheckDeadline(ctx), ErrLaunchExpired)
}
