package ray

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/wdc-runtime/wdc/envelope"
	"github.com/wdc-runtime/wdc/launchers/external"
	"github.com/wdc-runtime/wdc/lease"
	"github.com/wdc-runtime/wdc/resource"
)

func TestFieldsFor(t *testing.T) {
	tests := []struct {
		version string
		want    Fields
		err     string
	}{
		{"2.0.1", Fields{RayVersion: "2.0.1"}, ""},
		{"2.2.0", Fields{RayVersion: "2.2.0", EntrypointCPUsGPUsResources: true}, ""},
		{"2.7.2", Fields{RayVersion: "2.7.2", EntrypointCPUsGPUsResources: true}, ""},
		{"2.8.0", Fields{RayVersion: "2.8.0", EntrypointCPUsGPUsResources: true, EntrypointMemory: true}, ""},
		{"2.10.0rc1", Fields{RayVersion: "2.10.0rc1", EntrypointCPUsGPUsResources: true, EntrypointMemory: true}, ""},
		{"3.0.0.dev0", Fields{RayVersion: "3.0.0.dev0", EntrypointCPUsGPUsResources: true, EntrypointMemory: true}, ""},
		{"1.13.0", Fields{}, "older than 2.0"},
		{"", Fields{}, "want MAJOR.MINOR"},
		{"latest", Fields{}, "want MAJOR.MINOR"},
	}
	for _, tc := range tests {
		t.Run(tc.version, func(t *testing.T) {
			f, err := FieldsFor(tc.version)
			if tc.err != "" {
				assert.ErrorContains(t, err, tc.err)
				return
			}
			require.NoError(t, err)
			assert.Equal(t, tc.want, f)
		})
	}
}

var testClaim = lease.Claim{TaskID: "t1", WorkerID: "ray-a", Attempt: 2, Fence: 3, EnvelopeDigest: "sha256:" + "ab" + "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcd"}

func testTarget() external.Target {
	return external.Target{Binary: "/opt/wdc", Address: "cp:7233", Namespace: "default", BlobURL: "s3://bucket?region=eu-1", APIKey: true}
}

func TestRequestWithoutPlacementGroup(t *testing.T) {
	env := envelope.Envelope{TaskID: "t1", RunID: "r1", WorldID: "w1", Command: []string{"true"}, Env: map[string]string{"SECRET_OF_TASK": "x"},
		Resources: resource.List{CPUMillis: 1500, MemoryBytes: 1 << 30, GPUs: 1, Slots: 1, Custom: map[string]int64{"licenses": 2}}}
	req, dropped := Request(RequestOptions{Target: testTarget(), Fields: LatestFields}, testClaim, env)
	assert.Empty(t, dropped)
	assert.Equal(t, "t1-a2-f3", req.SubmissionID)
	assert.Equal(t, "/opt/wdc exec", req.Entrypoint)
	require.NotNil(t, req.EntrypointNumCPUs)
	assert.Equal(t, 1.5, *req.EntrypointNumCPUs)
	assert.Equal(t, 1.0, *req.EntrypointNumGPUs)
	assert.Equal(t, int64(1<<30), *req.EntrypointMemory)
	assert.Equal(t, map[string]float64{"licenses": 2}, req.EntrypointResources)
	assert.Equal(t, map[string]string{
		"wdc_task": "t1", "wdc_lease": "ray-a/2/3", "wdc_attempt": "2", "wdc_fence": "3", "wdc_world": "w1", "wdc_run": "r1",
		"wdc_worker": "ray-a", "wdc_envelope_digest": testClaim.EnvelopeDigest,
	}, req.Metadata)
	vars := req.RuntimeEnv.EnvVars
	assert.Equal(t, map[string]string{
		"WDC_EXEC_TASK_ID": "t1", "WDC_EXEC_ATTEMPT": "2", "WDC_EXEC_FENCE": "3", "WDC_EXEC_WORKER_ID": "ray-a",
		"WDC_EXEC_ENVELOPE_DIGEST": testClaim.EnvelopeDigest, "TEMPORAL_ADDRESS": "cp:7233", "TEMPORAL_NAMESPACE": "default",
		"WDC_BLOB_URL": "s3://bucket?region=eu-1",
	}, vars, "the claim and connection only: no task env, no secret")

	old, err := FieldsFor("2.1.0")
	require.NoError(t, err)
	req, dropped = Request(RequestOptions{Target: testTarget(), Fields: old}, testClaim, env)
	assert.Equal(t, []string{"entrypoint_num_cpus", "entrypoint_num_gpus", "entrypoint_resources", "entrypoint_memory"}, dropped)
	b, err := json.Marshal(req)
	require.NoError(t, err)
	var keys map[string]any
	require.NoError(t, json.Unmarshal(b, &keys))
	for k := range keys {
		assert.Contains(t, []string{"entrypoint", "submission_id", "runtime_env", "metadata"}, k, "Ray 2.1 knows only these")
	}
}

func TestRequestWithPlacementGroup(t *testing.T) {
	env := envelope.Envelope{TaskID: "t1", RunID: "r1", WorldID: "w1", Command: []string{"true"}, Launcher: envelope.LauncherRay,
		Resources: resource.List{CPUMillis: 1000},
		Ray:       &envelope.RayOptions{PlacementGroup: &envelope.PlacementGroup{Bundles: []map[string]float64{{"CPU": 1}, {"GPU": 1}}, Strategy: "STRICT_SPREAD"}}}
	req, _ := Request(RequestOptions{Target: testTarget(), Fields: LatestFields}, testClaim, env)
	assert.Equal(t, `exec python3 -c "$WDC_RAY_DRIVER"`, req.Entrypoint)
	assert.Nil(t, req.EntrypointNumCPUs, "the driver reserves nothing; the bundles do")
	vars := req.RuntimeEnv.EnvVars
	assert.Equal(t, DriverSource, vars[EnvDriver])
	assert.JSONEq(t, `["/opt/wdc","exec"]`, vars[EnvExecArgv])
	assert.JSONEq(t, `{"bundles":[{"CPU":1},{"GPU":1}],"strategy":"STRICT_SPREAD","timeout_seconds":300,"name":"t1-a2-f3"}`, vars[EnvPlacement])
	assert.Equal(t, "t1", vars["WDC_EXEC_TASK_ID"])
}

// The driver compiles, and its unit tests (a stub `ray` module) pass.
// python3 is required: its absence fails the test.
func TestDriverCompilesAndItsUnitTestsPass(t *testing.T) {
	python, err := exec.LookPath("python3")
	require.NoError(t, err, "python3 is needed to check the placement-group driver (Debian: apt-get install python3)")
	cache := t.TempDir()
	run := func(args ...string) string {
		t.Helper()
		c := exec.Command(python, args...)
		c.Dir = "driver"
		c.Env = append(os.Environ(), "PYTHONPYCACHEPREFIX="+cache, "PYTHONDONTWRITEBYTECODE=1")
		out, err := c.CombinedOutput()
		require.NoError(t, err, "%s", out)
		return string(out)
	}
	run("-m", "py_compile", "wdc_ray_driver.py")
	out := run("-m", "unittest", "-v", "test_wdc_ray_driver")
	assert.Contains(t, out, "OK")
	assert.Contains(t, out, "test_group_not_placed_in_time")
	embedded, err := os.ReadFile(filepath.Join("driver", "wdc_ray_driver.py"))
	require.NoError(t, err)
	assert.Equal(t, string(embedded), DriverSource)
	assert.Contains(t, DriverSource, `PLACEMENT_TIMEOUT_MARKER = "`+placementTimeoutMarker+`"`, "the launcher recognises the driver's marker")
}
