package worker

import (
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"
)

// Reconnect bounds of an agent's connection to the Temporal frontend (see
// AgentDialOptions).
const (
	// AgentRedialMaxDelay is the longest wait between two attempts to
	// re-establish a lost connection (gRPC's reconnect backoff, ±20 %
	// jitter; it starts at 100 ms). The SDK's own bound is 10 s, gRPC's
	// 120 s.
	AgentRedialMaxDelay = 500 * time.Millisecond
	// AgentConnectTimeout is how long one connection attempt may take
	// before it is abandoned for a new one (the SDK's default is 20 s).
	AgentConnectTimeout = 2 * time.Second
)

// AgentDialOptions are the gRPC dial options for an agent's Temporal client
// (client.Options.ConnectionOptions.DialOptions). Attempt heartbeats must
// reach the frontend within a fraction of their interval once a network
// partition heals, or a short partition costs a lease:
//
//   - a lost connection is redialled at most AgentRedialMaxDelay after the
//     previous try (gRPC's default backoff grows to 120 s, the SDK's to
//     10 s: after a 3 s cut the first redial could come 2.5 s after the
//     heal), and a connection attempt that hangs is given up after
//     AgentConnectTimeout;
//   - calls wait for the connection to be ready (until their deadline)
//     instead of failing at once while it is being re-established, so a
//     pending heartbeat goes out as soon as the connection is back.
//
// Every call the agent and the SDK make has a deadline, so waiting for
// readiness never blocks forever. A heartbeat reaches the frontend within
// about AgentRedialMaxDelay × 1.2 plus a round trip after the heal, which
// lets the executors ride out partitions shorter than TTL − 2 × heartbeat
// interval for heartbeat intervals of 1 s and more.
func AgentDialOptions() []grpc.DialOption {
	bo := backoff.DefaultConfig // multiplier 1.6, jitter 0.2
	bo.BaseDelay = 100 * time.Millisecond
	bo.MaxDelay = AgentRedialMaxDelay
	return []grpc.DialOption{
		grpc.WithConnectParams(grpc.ConnectParams{Backoff: bo, MinConnectTimeout: AgentConnectTimeout}),
		grpc.WithDefaultCallOptions(grpc.WaitForReady(true)),
	}
}
