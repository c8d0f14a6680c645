package cmd

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/wdc-runtime/wdc/launchers/external"
	"github.com/wdc-runtime/wdc/launchers/ray"
	"github.com/wdc-runtime/wdc/lease"
)

// Every Ray flag rejection, before anything is contacted.
func TestRayFlagRejections(t *testing.T) {
	dir := t.TempDir()
	env := filepath.Join(dir, "env.json")
	require.NoError(t, os.WriteFile(env, []byte(`{"task_id":"t1","run_id":"r1","world_id":"w1","command":["true"]}`), 0o644))
	agent := []string{"agent", "--worker-id", "ray-a"}
	withRay := append(append([]string{}, agent...), "--launcher", "ray", "--ray-address", "http://head:8265")
	tests := []struct {
		name string
		args []string
		want string
	}{
		{"unknown launcher", append(agent, "--launcher", "slurm"), `--launcher "slurm": want local, external, ray or k8s`},
		{"ray address without ray", append(agent, "--ray-address", "http://head:8265"), "--ray-address goes with --launcher ray"},
		{"ray timeout without ray", append(agent, "--launcher", "external", "--ray-pending-timeout", "1m"), "--ray-pending-timeout goes with --launcher ray"},
		{"ray python without ray", append(agent, "--ray-python", "python3.11"), "--ray-python goes with --launcher ray"},
		{"ray without address", append(agent, "--launcher", "ray"), "--ray-address: required with --launcher ray"},
		{"ray address not a URL", append(agent, "--launcher", "ray", "--ray-address", "head:8265"), "--ray-address: ray address \"head:8265\": want http://HOST:PORT"},
		{"ray zero pending timeout", append(withRay, "--ray-pending-timeout", "0s"), "--ray-pending-timeout 0s: must be positive"},
		{"ray zero poll interval", append(withRay, "--ray-poll-interval", "0s"), "--ray-poll-interval 0s: must be positive"},
		{"ray negative request timeout", append(withRay, "--ray-request-timeout", "-1s"), "--ray-request-timeout -1s: must be positive"},
		{"ray with a spool dir", append(withRay, "--spool-dir", dir), "--spool-dir goes with --launcher external, not ray"},
		{"ray with a work dir", append(withRay, "--work-dir", dir), "--work-dir: applies to attempts run here, not with --launcher ray"},
		{"render bad launcher", []string{"workers", "render-launch", env, "--worker-id", "w", "--launcher", "slurm"}, `--launcher "slurm": want local, ray or k8s`},
		{"render ray version without ray", []string{"workers", "render-launch", env, "--worker-id", "w", "--ray-version", "2.9.0"}, "--ray-version goes with --launcher ray"},
		{"render bad ray version", []string{"workers", "render-launch", env, "--worker-id", "w", "--launcher", "ray", "--ray-version", "two"}, `--ray-version: ray version "two": want MAJOR.MINOR`},
		{"render old ray version", []string{"workers", "render-launch", env, "--worker-id", "w", "--launcher", "ray", "--ray-version", "1.13.0"}, "older than 2.0"},
		{"render ray without worker", []string{"workers", "render-launch", env, "--launcher", "ray"}, "--worker-id"},
		{"render ray zero fence", []string{"workers", "render-launch", env, "--worker-id", "w", "--launcher", "ray", "--fence", "0"}, "--fence 0: must be at least 1"},
		{"render zero attempt", []string{"workers", "render-launch", env, "--worker-id", "w", "--attempt", "0"}, "--attempt 0: must be at least 1"},
		{"render k8s flag with ray", []string{"workers", "render-launch", env, "--worker-id", "w", "--launcher", "ray", "--k8s-image", "x"}, "--k8s-image goes with --launcher k8s"},
		{"render ray envelope as k8s", []string{"workers", "render-launch", rayEnvelopeFile(t, dir), "--worker-id", "w", "--launcher", "k8s", "--k8s-image", "x"}, `envelope launcher "ray": give --launcher ray to render its launch (a ray task runs only on a ray worker)`},
		{"render ray with work dir", []string{"workers", "render-launch", env, "--worker-id", "w", "--launcher", "ray", "--work-dir", dir}, "--work-dir: not with --launcher ray"},
		{"render launcher with task", []string{"workers", "render-launch", "--task", "t1", "--launcher", "ray"}, "--launcher: not with --task"},
		{"render ray envelope as local", []string{"workers", "render-launch", rayEnvelopeFile(t, dir), "--worker-id", "w"}, `envelope launcher "ray": give --launcher ray to render its launch`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			code, stdout, stderr := run(t, tc.args...)
			assert.Equal(t, ExitUsage, code, "stderr: %s", stderr)
			assert.Contains(t, stderr, tc.want)
			assert.Equal(t, 1, strings.Count(stderr, "\n"), "one line: %q", stderr)
			assert.Empty(t, stdout)
		})
	}
}

func rayEnvelopeFile(t *testing.T, dir string) string {
	p := filepath.Join(dir, "ray.json")
	require.NoError(t, os.WriteFile(p, []byte(`{"task_id":"t1","run_id":"r1","world_id":"w1","command":["true"],"launcher":"ray",
	  "resources":{"cpu_millis":2000,"memory_bytes":1048576},"ray":{"placement_group":{"bundles":[{"CPU":2}],"strategy":"STRICT_PACK"}}}`), 0o644))
	return p
}

// render-launch --launcher ray prints exactly the body the launcher
// sends (ray.Body of ray.Request), and --ray-version leaves out what an
// older Ray does not know, saying so on stderr.
func TestRenderLaunchRayPrintsTheSubmitBody(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "env.json")
	require.NoError(t, os.WriteFile(path, []byte(`{"task_id":"t1","run_id":"r1","world_id":"w1","command":["true"],"env":{"TASK_SECRET":"s3cr3t"},"resources":{"cpu_millis":500,"memory_bytes":1048576}}`), 0o644))
	code, stdout, stderr := run(t, "workers", "render-launch", path, "--launcher", "ray", "--worker-id", "ray-a", "--attempt", "2", "--fence", "5",
		"--exec-binary", "/opt/wdc", "--blob-url", "s3://bucket?region=eu-1")
	require.Equal(t, ExitOK, code, stderr)
	assert.Empty(t, stderr)

	env, err := readEnvelopeFile(path)
	require.NoError(t, err)
	digest, err := env.Digest()
	require.NoError(t, err)
	claim := lease.Claim{TaskID: "t1", WorkerID: "ray-a", Attempt: 2, Fence: 5, EnvelopeDigest: digest}
	req, _ := ray.Request(ray.RequestOptions{Fields: ray.LatestFields,
		Target: external.Target{Binary: "/opt/wdc", Address: "127.0.0.1:1", Namespace: "default", BlobURL: "s3://bucket?region=eu-1"}}, claim, env)
	want, err := ray.Body(req)
	require.NoError(t, err)
	assert.Equal(t, string(want)+"\n", stdout, "the exact bytes the launcher sends")
	assert.NotContains(t, stdout, "s3cr3t", "the task's env is the executor's business, not the request's")
	var body map[string]any
	require.NoError(t, json.Unmarshal([]byte(stdout), &body))
	assert.Equal(t, "t1-a2-f5", body["submission_id"])
	assert.Equal(t, "/opt/wdc exec", body["entrypoint"])
	assert.Equal(t, 0.5, body["entrypoint_num_cpus"])
	assert.Equal(t, float64(1048576), body["entrypoint_memory"])

	code, stdout, stderr = run(t, "workers", "render-launch", path, "--launcher", "ray", "--worker-id", "ray-a", "--ray-version", "2.7.0")
	require.Equal(t, ExitOK, code, stderr)
	assert.Contains(t, stderr, "Ray 2.7.0 does not know [entrypoint_memory]: not sent")
	assert.NotContains(t, stdout, "entrypoint_memory")
	assert.Contains(t, stdout, "entrypoint_num_cpus")
}

// An agent whose attempts run on other machines warns about a blob store
// on its own disk, and says nothing about an S3 one.
func TestWarnLocalStore(t *testing.T) {
	var stderr strings.Builder
	a := &app{deps: Deps{Stderr: &stderr}}
	a.warnLocalStore("s3://wdc?region=eu-1", launcherRay)
	assert.Empty(t, stderr.String())
	a.warnLocalStore("file:///var/lib/wdc/blobs", launcherK8s)
	assert.Equal(t, 1, strings.Count(stderr.String(), "\n"), "one line: %q", stderr.String())
	assert.Contains(t, stderr.String(), "warning: with --launcher k8s the attempts run on other machines, but the blob store is file:///var/lib/wdc/blobs")
}
