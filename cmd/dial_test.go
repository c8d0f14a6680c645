package cmd

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/wdc-runtime/wdc/api"
	"github.com/wdc-runtime/wdc/worker"
)

// Every connection's keepalive follows the process's heartbeat: the
// agent's worker heartbeat, else the default 2 s (control plane, exec,
// the CLI's commands).
func TestConnectionKeepAliveFollowsTheHeartbeat(t *testing.T) {
	for _, tc := range []struct {
		name      string
		heartbeat time.Duration
		want      time.Duration // worker.KeepAlive's argument
	}{
		{"default", 0, 2 * time.Second},
		{"agent heartbeat 500ms", 500 * time.Millisecond, 500 * time.Millisecond},
		{"agent heartbeat 12s", 12 * time.Second, 12 * time.Second},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a := &app{global: globalOptions{address: "127.0.0.1:7233", namespace: "default", logLevel: "info", logFormat: "text"}, heartbeat: tc.heartbeat}
			opts, err := a.clientOptions(a.global.address, worker.DialOptions()...)
			require.NoError(t, err)
			ka := worker.KeepAlive(tc.want)
			require.Equal(t, ka.Time, opts.ConnectionOptions.KeepAliveTime)
			require.Equal(t, ka.Timeout, opts.ConnectionOptions.KeepAliveTimeout)
			require.False(t, opts.ConnectionOptions.DisableKeepAliveCheck)
			require.False(t, opts.ConnectionOptions.DisableKeepAlivePermitWithoutStream)
		})
	}
}

func TestAgentHeartbeatIsTheWorkersPeriod(t *testing.T) {
	require.Equal(t, 2*time.Second, agentHeartbeat(0, 0))
	require.Equal(t, 2*time.Second, agentHeartbeat(0, 8*time.Second))
	require.Equal(t, 250*time.Millisecond, agentHeartbeat(0, time.Second))
	require.Equal(t, 3*time.Second, agentHeartbeat(3*time.Second, 20*time.Second))
}

// Every connection names its process: the CLI by default, an agent or a
// control plane once its command set a.identity.
func TestConnectionIdentityNamesTheProcess(t *testing.T) {
	a := &app{global: globalOptions{address: "127.0.0.1:7233", namespace: "default", logLevel: "info", logFormat: "text"}}
	opts, err := a.clientOptions(a.global.address)
	require.NoError(t, err)
	require.Equal(t, api.CLIIdentity(hostname()), opts.Identity)
	a.identity = api.AgentIdentity("worker-a")
	opts, err = a.clientOptions(a.global.address)
	require.NoError(t, err)
	require.Equal(t, "wdc-agent/worker-a", opts.Identity)
}
