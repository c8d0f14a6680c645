package worker

import (
	"testing"
	"time"

	"google.golang.org/grpc/keepalive"
)

func TestKeepAliveFollowsHeartbeat(t *testing.T) {
	for _, tc := range []struct {
		heartbeat     time.Duration
		time, timeout time.Duration
	}{
		{0, 10 * time.Second, time.Second},
		{250 * time.Millisecond, 10 * time.Second, time.Second},
		{2 * time.Second, 10 * time.Second, 2 * time.Second}, // the agent's default
		{10 * time.Second, 10 * time.Second, 10 * time.Second},
		{12 * time.Second, 12 * time.Second, 12 * time.Second},
		{20 * time.Second, 20 * time.Second, 15 * time.Second},
		{time.Minute, 30 * time.Second, 15 * time.Second}, // never looser than the SDK
	} {
		got := KeepAlive(tc.heartbeat)
		want := keepalive.ClientParameters{Time: tc.time, Timeout: tc.timeout, PermitWithoutStream: true}
		if got != want {
			t.Errorf("KeepAlive(%s) = %+v, want %+v", tc.heartbeat, got, want)
		}
	}
}
