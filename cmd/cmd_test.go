package cmd

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/wdc-runtime/wdc/api"
	wdcclient "github.com/wdc-runtime/wdc/client"
)

// run executes the CLI in-process with no server behind --address: every
// case here must be refused before anything is dialed.
func run(t *testing.T, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	var out, errb bytes.Buffer
	env := map[string]string{}
	code = Main(Deps{Stdout: &out, Stderr: &errb, Getenv: func(k string) string { return env[k] }},
		append(args, "--address", "127.0.0.1:1"))
	return code, out.String(), errb.String()
}

func TestBadInputIsExitTwoWithOneLineNamingTheProblem(t *testing.T) {
	dir := t.TempDir()
	bad := filepath.Join(dir, "bad.json")
	require.NoError(t, os.WriteFile(bad, []byte(`{"task_id":"t1","run_id":"r1","world_id":"w1","comand":["true"]}`), 0o644))
	missing := filepath.Join(dir, "missing.json")
	require.NoError(t, os.WriteFile(missing, []byte(`{"task_id":"t1","world_id":"w1"}`), 0o644))
	nomad := filepath.Join(dir, "nomad.json")
	require.NoError(t, os.WriteFile(nomad, []byte(`{"task_id":"t1","run_id":"r1","world_id":"w1","command":["true"],"launcher":"nomad"}`), 0o644))
	typo := filepath.Join(dir, "typo.json")
	require.NoError(t, os.WriteFile(typo, []byte(`{"task_id":"t1","run_id":"r1","world_id":"w1","command":["true"],"resources":{"cpu_millis":"2"}}`), 0o644))

	tests := []struct {
		name string
		args []string
		want string
	}{
		{"unknown flag", []string{"workers", "register", "--worker-id", "w1", "--cpus", "2"}, "unknown flag: --cpus"},
		{"unknown command", []string{"workers", "regster"}, `unknown command "regster"`},
		{"missing worker id", []string{"workers", "register"}, "--worker-id: required"},
		{"bad worker id", []string{"workers", "register", "--worker-id", "bad id"}, "not a valid ID"},
		{"negative cpu", []string{"workers", "register", "--worker-id", "w1", "--cpu", "-2"}, "--cpu"},
		{"malformed cpu", []string{"workers", "register", "--worker-id", "w1", "--cpu", "lots"}, `--cpu "lots"`},
		{"malformed memory", []string{"workers", "register", "--worker-id", "w1", "--memory", "8GB!"}, "--memory"},
		{"overflowing cpu", []string{"workers", "register", "--worker-id", "w1", "--cpu", "1e30"}, `--cpu "1e30": too large`},
		{"overflowing memory", []string{"workers", "register", "--worker-id", "w1", "--memory", "99999999999Ei"}, "--memory"},
		{"negative gpus", []string{"workers", "register", "--worker-id", "w1", "--gpus", "-1"}, "--gpus"},
		{"negative slots", []string{"workers", "register", "--worker-id", "w1", "--slots", "-2"}, "--slots"},
		{"malformed label", []string{"workers", "register", "--worker-id", "w1", "--label", "zone"}, `--label "zone": want KEY=VALUE`},
		{"invalid label value", []string{"workers", "register", "--worker-id", "w1", "--label", "zone=has space"}, "labels.zone"},
		{"bad resource count", []string{"workers", "register", "--worker-id", "w1", "--resource", "licenses=two"}, "--resource"},
		{"offline before stale", []string{"workers", "register", "--worker-id", "w1", "--stale-after", "1m", "--offline-after", "10s"}, "offline_after"},
		{"bad output", []string{"workers", "list", "-o", "yaml"}, "--output"},
		{"bad state", []string{"workers", "list", "--state", "SLEEPING"}, "--state"},
		{"unknown envelope field", []string{"tasks", "submit", bad}, "comand: unknown field"},
		{"missing envelope fields", []string{"tasks", "submit", missing}, "run_id: required"},
		{"wrong envelope type", []string{"tasks", "submit", typo}, "resources.cpu_millis: want an integer"},
		{"no such envelope file", []string{"tasks", "submit", filepath.Join(dir, "nope.json")}, "no such file"},
		{"envelope is a directory", []string{"tasks", "submit", dir}, "not a regular file"},
		{"unknown launcher", []string{"tasks", "submit", nomad}, `launcher: "nomad": want local, ray or k8s`},
		{"bad lease ttl", []string{"tasks", "submit", bad, "--lease-ttl", "10ms"}, "--lease-ttl"},
		{"heartbeat over ttl", []string{"tasks", "submit", bad, "--lease-ttl", "10s", "--heartbeat-interval", "20s"}, "--heartbeat-interval"},
		{"zero attempts", []string{"tasks", "submit", bad, "--max-attempts", "0"}, "--max-attempts"},
		{"too many attempts", []string{"tasks", "submit", bad, "--max-attempts", "101"}, "between 1 and 100"},
		{"heartbeat too often", []string{"tasks", "submit", bad, "--heartbeat-interval", "50ms"}, "at least 100ms"},
		{"too many args", []string{"tasks", "status", "a", "b"}, "accepts 1 arg"},
		{"start-dev bad port", []string{"server", "start-dev", "--port", "70000"}, "--port 70000"},
		{"start-dev bad ip", []string{"server", "start-dev", "--ip", "localhost"}, "not an IP address"},
		{"start-dev bad s3 port", []string{"server", "start-dev", "--s3-port", "70000"}, "--s3-port 70000: want 1-65535"},
		{"start-dev zero s3 port", []string{"server", "start-dev", "--s3-port", "0"}, "--s3-port 0: want 1-65535"},
		{"start-dev s3 port is the frontend's", []string{"server", "start-dev", "--s3-port", "7233"}, "--s3-port 7233: must differ from --port and --ui-port"},
		{"start-dev s3 port is the ui's", []string{"server", "start-dev", "--s3-port", "8233"}, "--s3-port 8233: must differ"},
		{"start-dev bad s3 bucket", []string{"server", "start-dev", "--s3-bucket", "Has_Caps"}, `--s3-bucket "Has_Caps"`},
		{"start-dev short s3 bucket", []string{"server", "start-dev", "--s3-bucket", "ab"}, `--s3-bucket "ab"`},
		{"start-dev s3 access key alone", []string{"server", "start-dev", "--s3-access-key", "AK"}, "--s3-access-key and --s3-secret-key: give both or neither"},
		{"revocations without identity", []string{"control-plane", "--identity", "off", "--revocations", "/no/such/list"}, "--revocations: needs --identity optional or required"},
		{"control plane with no trust bundle", []string{"control-plane"}, "identity: no trust bundle: give --trust-bundle, --spiffe-socket or --ca-dir (WDC_CA_DIR)"},
		{"agent with no SVID", []string{"agent", "--worker-id", "w1"}, "identity: no SVID: give --svid-dir, --spiffe-socket or --ca-dir (WDC_CA_DIR)"},
		{"agent checking launches with no SVID", []string{"agent", "--worker-id", "w1", "--identity", "required"}, "--identity required: needs the worker's SVID"},
		{"enroll two identities", []string{"workers", "enroll", "--ca-dir", "/tmp/ca", "--worker-id", "w", "--control-plane"}, "--worker-id, --submitter and --control-plane: give one"},
		{"enroll no identity", []string{"workers", "enroll", "--ca-dir", "/tmp/ca"}, "--worker-id, --submitter or --control-plane: required"},
		{"start-dev s3 secret key alone", []string{"server", "start-dev", "--s3-secret-key", "SK"}, "give both or neither"},
		{"start-dev s3 port not a number", []string{"server", "start-dev", "--s3-port", "web"}, "--s3-port"},
		{"render without worker", []string{"workers", "render-launch", bad}, "--worker-id"},
		{"commit without events", []string{"runs", "commit", "r1", "--expected-parent-time", "0"}, "--event"},
		{"commit without expected parent time", []string{"runs", "commit", "r1", "--event", "1"}, `required flag(s) "expected-parent-time"`},
		{"commit with a huge note", []string{"runs", "commit", "r1", "--event", "1", "--expected-parent-time", "0", "--note", strings.Repeat("x", 2000)}, "--note"},
		{"run with bad world", []string{"runs", "start", "r1", "--world-id", "a/b"}, "--world-id"},
		{"agent without id", []string{"agent"}, "--worker-id: required"},
		{"worker ID twice", []string{"workers", "drain", "a", "--worker-id", "b"}, "give the worker ID once"},
		{"drain without worker", []string{"workers", "drain"}, "--worker-id: required"},
		{"demo short ttl", []string{"demo", "worker-leases", "--lease-ttl", "1s"}, "--lease-ttl"},
		{"zero control plane timeout", []string{"workers", "register", "--worker-id", "w1", "--control-plane-timeout", "0s"}, "--control-plane-timeout 0s: must be at least 1s"},
		{"bad control plane timeout", []string{"tasks", "status", "t1", "--control-plane-timeout", "soon"}, "--control-plane-timeout"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			code, stdout, stderr := run(t, tc.args...)
			assert.Equal(t, ExitUsage, code, "stderr: %s", stderr)
			assert.Contains(t, stderr, tc.want)
			assert.Equal(t, 1, strings.Count(stderr, "\n"), "one line: %q", stderr)
			assert.True(t, strings.HasPrefix(stderr, "wdc: "))
			assert.Empty(t, stdout)
		})
	}
}

func TestUnreachableServerIsExitOneWithAHint(t *testing.T) {
	code, _, stderr := run(t, "workers", "register", "--worker-id", "w1", "--cpu", "1", "--memory", "1Gi")
	assert.Equal(t, ExitFailure, code)
	assert.Contains(t, stderr, "connect to Temporal at 127.0.0.1:1")
	assert.Contains(t, stderr, "wdc server start-dev")
}

func TestExitCodes(t *testing.T) {
	unavailable := &wdcclient.UnavailableError{TaskQueue: api.ControlTaskQueue, Address: "h:1"}
	for _, tc := range []struct {
		err  error
		want int
	}{
		{errors.New("boom"), ExitFailure},
		{usagef("--cpu: bad"), ExitUsage},
		{errors.New(`required flag(s) "event" not set`), ExitUsage},
		{exitError{ExitNoResult, errors.New("ended CANCELLED")}, ExitNoResult},
		{exitError{ExitProgramFailed, errors.New("exit code 1")}, ExitProgramFailed},
		{unavailable, ExitUnavailable},
		{fmt.Errorf("run r1: %w", unavailable), ExitUnavailable},
	} {
		assert.Equal(t, tc.want, exitCode(tc.err), tc.err.Error())
	}
}

func TestRenderLaunchNeedsNoServer(t *testing.T) {
	dir := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(dir, "data.csv"), []byte("x\n"), 0o644))
	file := filepath.Join(dir, "task.json")
	require.NoError(t, os.WriteFile(file, []byte(`{"task_id":"t1","run_id":"r1","world_id":"w1",
		"command":["sh","-c","cat inputs/data.csv"],"env":{"PATH":"/usr/bin:/bin"},
		"inputs":[{"name":"data.csv","path":"data.csv"}]}`), 0o644))
	code, stdout, stderr := run(t, "workers", "render-launch", file, "--worker-id", "w-a", "--attempt", "2", "--fence", "3", "--work-dir", "/work", "-o", "json")
	require.Equal(t, ExitOK, code, stderr)
	assert.Contains(t, stdout, `"task_dir": "/work/t1/2-3"`)
	assert.Contains(t, stdout, `"WDC_FENCE=3"`)
	assert.Contains(t, stdout, `"PATH=/usr/bin:/bin"`)
	assert.Contains(t, stdout, `"program": "/usr/bin/sh"`)
	assert.NotContains(t, stdout, "HOME=", "nothing inherited")
}

func TestHelpTeaches(t *testing.T) {
	code, stdout, _ := run(t, "tasks", "submit", "--help")
	assert.Equal(t, ExitOK, code)
	for _, want := range []string{"--wait", "--lease-ttl", "--max-attempts", "Example", "RETRIES_EXHAUSTED", "env TEMPORAL_ADDRESS"} {
		assert.Contains(t, stdout, want)
	}
}

func TestQuantityParsing(t *testing.T) {
	for in, want := range map[string]int64{"4": 4000, "1.5": 1500, "500m": 500} {
		got, err := parseCPU(in)
		require.NoError(t, err)
		assert.Equal(t, want, got, in)
	}
	for in, want := range map[string]int64{"1Gi": 1 << 30, "512Mi": 512 << 20, "1e9": 1e9} {
		got, err := parseMemory(in)
		require.NoError(t, err)
		assert.Equal(t, want, got, in)
	}
	n, err := parseCPU("")
	require.NoError(t, err)
	assert.Positive(t, n, "default is this machine's cores")
}

func TestStartDevHelpExplainsTheS3Endpoint(t *testing.T) {
	code, stdout, _ := run(t, "server", "start-dev", "--help")
	assert.Equal(t, ExitOK, code)
	for _, want := range []string{"--s3-port", "--no-s3", "--s3-bucket", "AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY",
		"<db-filename>.s3/credentials", "env WDC_DEV_S3_SECRET_KEY", "--blob-url"} {
		assert.Contains(t, stdout, want)
	}
}
