package worker

import (
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"
	"google.golang.org/grpc/keepalive"
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

// Keepalive bounds (see KeepAlive).
const (
	// MinKeepAliveTime is the shortest ping period: gRPC's client floor
	// (shorter values are raised to it) and the Temporal frontend's default
	// enforcement minimum (frontend.keepAliveMinTime, 10 s; a client that
	// pings more often is sent GOAWAY "too_many_pings").
	MinKeepAliveTime = 10 * time.Second
	// MaxKeepAliveTime and MaxKeepAliveTimeout are the SDK's defaults
	// (30 s, 15 s): wdc never detects a dead connection later than they do.
	MaxKeepAliveTime    = 30 * time.Second
	MaxKeepAliveTimeout = 15 * time.Second
	// MinKeepAliveTimeout keeps a connection whose ACKs are briefly late
	// (a lossy link's retransmissions) from being torn down.
	MinKeepAliveTimeout = time.Second
)

// KeepAlive is the gRPC keepalive of a process whose most frequent
// heartbeat to Temporal is every heartbeat: Timeout = heartbeat and Time =
// heartbeat, each clamped to [MinKeepAliveTimeout, MaxKeepAliveTimeout]
// and [MinKeepAliveTime, MaxKeepAliveTime], pings allowed without calls.
//
// gRPC sets TCP_USER_TIMEOUT to Timeout, so a heartbeat written into a
// connection whose packets are silently dropped aborts it Timeout later:
// a heartbeat interval or two after the cut the connection is abandoned
// and redialled (DialOptions). A connection with nothing to write (a
// control plane's long polls) is pinged after Time without a read and
// abandoned Timeout later. Time never goes below the Temporal frontend's
// default enforcement minimum, so it works against a stock server.
func KeepAlive(heartbeat time.Duration) keepalive.ClientParameters {
	return keepalive.ClientParameters{
		Time:                min(max(heartbeat, MinKeepAliveTime), MaxKeepAliveTime),
		Timeout:             min(max(heartbeat, MinKeepAliveTimeout), MaxKeepAliveTimeout),
		PermitWithoutStream: true,
	}
}

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
// A connection whose packets are silently dropped is given up by its
// keepalive (KeepAlive, set in client.ConnectionOptions), then redialled
// as above.
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
