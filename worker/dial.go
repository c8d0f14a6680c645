package worker

import (
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"
)

// Reconnect bounds of an agent's or a control plane's connection to the
// Temporal frontend (see DialOptions).
const (
	// RedialMaxDelay is the longest wait between two attempts to
	// re-establish a lost connection (gRPC's reconnect backoff, ±20 %
	// jitter; it starts at 100 ms). The SDK's own bound is 10 s, gRPC's
	// 120 s.
	RedialMaxDelay = 500 * time.Millisecond
	// ConnectTimeout is how long one connection attempt may take before it
	// is abandoned for a new one (the SDK's default is 20 s).
	ConnectTimeout = 2 * time.Second
)

// DialOptions are the gRPC dial options for the Temporal client of an
// agent and of a control plane (client.Options.ConnectionOptions.
// DialOptions). Both must be back within a fraction of a heartbeat
// interval once a network partition heals or the server restarts:
//
//   - a lost connection is redialled at most RedialMaxDelay after the
//     previous try (gRPC's default backoff grows to 120 s, the SDK's to
//     10 s: after a 3 s cut the first redial could come 2.5 s after the
//     heal), and a connection attempt that hangs is given up after
//     ConnectTimeout;
//   - calls wait for the connection to be ready (until their deadline)
//     instead of failing at once while it is being re-established, so a
//     pending heartbeat goes out as soon as the connection is back, and
//     the SDK's task pollers do not fail — a failed poll puts them in the
//     SDK's own backoff, which grows to 10 s and cannot be configured:
//     after a 6 s server outage the control plane picked up the workflow
//     task that expires a lease 9 s after the server was back.
//
// Every call the agent, the control plane and the SDK make has a
// deadline, so waiting for readiness never blocks forever. A heartbeat
// reaches the frontend within about RedialMaxDelay × 1.2 plus a round trip
// after the heal, which lets the executors ride out partitions shorter
// than TTL − 2 × heartbeat interval for heartbeat intervals of 1 s and
// more.
func DialOptions() []grpc.DialOption {
	bo := backoff.DefaultConfig // multiplier 1.6, jitter 0.2
	bo.BaseDelay = 100 * time.Millisecond
	bo.MaxDelay = RedialMaxDelay
	return []grpc.DialOption{
		grpc.WithConnectParams(grpc.ConnectParams{Backoff: bo, MinConnectTimeout: ConnectTimeout}),
		grpc.WithDefaultCallOptions(grpc.WaitForReady(true)),
	}
}
