package cmd

import (
	"bytes"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// runEnv is run with environment variables (nothing else is set) and no
// server behind --address.
func runEnv(t *testing.T, env map[string]string, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	var out, errb bytes.Buffer
	code = Main(Deps{Stdout: &out, Stderr: &errb, Getenv: func(k string) string { return env[k] }},
		append(args, "--address", "127.0.0.1:1"))
	return code, out.String(), errb.String()
}

const goodDigest = "sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"

// execArgs is a complete, valid claim with one flag replaced or (value
// "-") left out.
func execArgs(override map[string]string) []string {
	args := []string{"exec"}
	for _, kv := range [][2]string{{"--task-id", "t1"}, {"--attempt", "1"}, {"--fence", "2"}, {"--worker-id", "w1"}, {"--envelope-digest", goodDigest}} {
		v, ok := override[kv[0]]
		if !ok {
			v = kv[1]
		}
		if v != "-" {
			args = append(args, kv[0], v)
		}
	}
	return args
}

// Every malformed or missing claim field is refused before anything is
// contacted (exit 2, one line naming the flag and its variable).
func TestExecRefusesBadClaimsWithExitTwo(t *testing.T) {
	for _, tc := range []struct {
		name     string
		override map[string]string
		env      map[string]string
		extra    []string
		want     string
	}{
		{"missing task", map[string]string{"--task-id": "-"}, nil, nil, "--task-id: required (or set WDC_EXEC_TASK_ID)"},
		{"bad task", map[string]string{"--task-id": "a/b"}, nil, nil, `--task-id: "a/b" is not a valid ID`},
		{"missing attempt", map[string]string{"--attempt": "-"}, nil, nil, "--attempt: required (or set WDC_EXEC_ATTEMPT)"},
		{"zero attempt", map[string]string{"--attempt": "0"}, nil, nil, `--attempt "0" (or WDC_EXEC_ATTEMPT): want a whole number from 1`},
		{"word attempt", map[string]string{"--attempt": "one"}, nil, nil, `--attempt "one"`},
		{"missing fence", map[string]string{"--fence": "-"}, nil, nil, "--fence: required (or set WDC_EXEC_FENCE)"},
		{"negative fence", map[string]string{"--fence": "-3"}, nil, nil, `--fence "-3" (or WDC_EXEC_FENCE): want a whole number from 1`},
		{"missing worker", map[string]string{"--worker-id": "-"}, nil, nil, "--worker-id: required (or set WDC_EXEC_WORKER_ID)"},
		{"bad worker", map[string]string{"--worker-id": "-w"}, nil, nil, `--worker-id: "-w" is not a valid ID`},
		{"missing digest", map[string]string{"--envelope-digest": "-"}, nil, nil, "--envelope-digest: required (or set WDC_EXEC_ENVELOPE_DIGEST)"},
		{"bad digest", map[string]string{"--envelope-digest": "sha256:XYZ"}, nil, nil, `--envelope-digest "sha256:XYZ" (or WDC_EXEC_ENVELOPE_DIGEST): want sha256:<64 lowercase hex>`},
		{"bad attempt from env", map[string]string{"--attempt": "-"}, map[string]string{"WDC_EXEC_ATTEMPT": "2x"}, nil, `--attempt "2x" (or WDC_EXEC_ATTEMPT)`},
		{"negative output limit", nil, nil, []string{"--max-output-files", "-1"}, "--max-output-files: must not be negative"},
		{"positional argument", nil, nil, []string{"extra"}, `unknown command "extra"`},
		{"bad output format", nil, nil, []string{"-o", "yaml"}, "--output"},
		{"key given twice", nil, map[string]string{"WDC_EXEC_ATTEMPT_KEY_DATA": "{}"}, []string{"--attempt-key", "/no/such/key"},
			"--attempt-key: the key is in WDC_EXEC_ATTEMPT_KEY_DATA already; give one or the other"},
		{"malformed key", nil, map[string]string{"WDC_EXEC_ATTEMPT_KEY_DATA": "not json"}, nil, "WDC_EXEC_ATTEMPT_KEY_DATA: invalid character"},
		{"key for another attempt", nil, map[string]string{"WDC_EXEC_ATTEMPT_KEY_DATA": "{}"}, nil, "WDC_EXEC_ATTEMPT_KEY_DATA is for attempt"},
		{"missing key file", nil, nil, []string{"--attempt-key", "/no/such/key"}, "--attempt-key: open /no/such/key"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			args := append(execArgs(tc.override), tc.extra...)
			code, stdout, stderr := runEnv(t, tc.env, args...)
			assert.Equal(t, ExitUsage, code, "stderr: %s", stderr)
			assert.Contains(t, stderr, tc.want)
			assert.Equal(t, 1, strings.Count(stderr, "\n"), "one line: %q", stderr)
			assert.Empty(t, stdout)
		})
	}
}

// The whole claim may come from the environment: it passes validation and
// the command goes on to connect (and fails there: no server, exit 1).
func TestExecTakesItsClaimFromTheEnvironment(t *testing.T) {
	env := map[string]string{"WDC_EXEC_TASK_ID": "t1", "WDC_EXEC_ATTEMPT": "1", "WDC_EXEC_FENCE": "1",
		"WDC_EXEC_WORKER_ID": "w1", "WDC_EXEC_ENVELOPE_DIGEST": goodDigest, "WDC_DATA_DIR": t.TempDir()}
	code, _, stderr := runEnv(t, env, "exec")
	assert.Equal(t, ExitFailure, code, stderr)
	assert.Contains(t, stderr, "connect to Temporal at 127.0.0.1:1")
}

func TestExecHelpDocumentsExitCodesAndVariables(t *testing.T) {
	code, stdout, _ := run(t, "exec", "--help")
	require.Equal(t, ExitOK, code)
	for _, want := range []string{"WDC_EXEC_TASK_ID", "WDC_EXEC_ENVELOPE_DIGEST", "env WDC_EXEC_FENCE", "infra_killed",
		"  6  not current", "  1  infrastructure failure", "  0  the result was submitted and accepted", "--keep"} {
		assert.Contains(t, stdout, want)
	}
	assert.Equal(t, 6, ExitNotCurrent)
	assert.Equal(t, ExitNotCurrent, exitCode(exitError{ExitNotCurrent, assert.AnError}))
}

func TestAgentLauncherAndRenderLaunchFlagsAreChecked(t *testing.T) {
	for _, tc := range []struct {
		name string
		args []string
		want string
	}{
		{"unknown launcher", []string{"agent", "--worker-id", "w1", "--launcher", "nomad"}, `--launcher "nomad": want local, external, ray or k8s`},
		{"k8s flag without k8s", []string{"agent", "--worker-id", "w1", "--k8s-apply"}, "--k8s-apply goes with --launcher k8s"},
		{"kubeconfig with external", []string{"agent", "--worker-id", "w1", "--launcher", "external", "--kubeconfig", "x"}, "--kubeconfig goes with --launcher k8s"},
		{"kubeconfig with ray", []string{"agent", "--worker-id", "w1", "--launcher", "ray", "--ray-address", "http://127.0.0.1:8265", "--kubeconfig", "x"}, "--kubeconfig goes with --launcher k8s"},
		{"spool dir with k8s", []string{"agent", "--worker-id", "w1", "--launcher", "k8s", "--spool-dir", "/tmp/x"}, "--spool-dir goes with --launcher external"},
		{"spool dir with ray", []string{"agent", "--worker-id", "w1", "--launcher", "ray", "--ray-address", "http://127.0.0.1:8265", "--spool-dir", "/tmp/x"}, "--spool-dir goes with --launcher external"},
		{"work dir with k8s", []string{"agent", "--worker-id", "w1", "--launcher", "k8s", "--work-dir", "/tmp/w"}, "--work-dir: applies to attempts run here, not with --launcher k8s"},
		{"bad k8s ttl", []string{"agent", "--worker-id", "w1", "--launcher", "k8s", "--k8s-ttl-after-finished", "-2"}, "--k8s-ttl-after-finished -2: want -1"},
		{"bad pending bound", []string{"agent", "--worker-id", "w1", "--launcher", "k8s", "--k8s-pending-bound", "0s"}, "--k8s-pending-bound 0s: must be positive"},
		{"spool dir without external", []string{"agent", "--worker-id", "w1", "--spool-dir", "/tmp/x"}, "--spool-dir and --exec-binary go with --launcher external"},
		{"exec binary without external", []string{"agent", "--worker-id", "w1", "--exec-binary", "/bin/wdc"}, "go with --launcher external"},
		{"work dir with external", []string{"agent", "--worker-id", "w1", "--launcher", "external", "--work-dir", "/tmp/w"}, "--work-dir: applies to attempts run here, not with --launcher external"},
		{"output limit with external", []string{"agent", "--worker-id", "w1", "--launcher", "external", "--max-output-files", "5"}, "--max-output-files: applies to attempts run here"},
		{"run as with external", []string{"agent", "--worker-id", "w1", "--launcher", "external", "--run-as-user", "nobody"}, "--run-as-user: applies to attempts run here, not with --launcher external"},
		{"run as no such user", []string{"agent", "--worker-id", "w1", "--run-as-user", "no-such-user-wdc"}, `--run-as-user "no-such-user-wdc": no such user`},
		{"run as root", []string{"agent", "--worker-id", "w1", "--run-as-user", "root"}, `--run-as-user "root": is root`},
		{"run as group alone", []string{"agent", "--worker-id", "w1", "--run-as-group", "nogroup"}, `--run-as-group "nogroup": goes with --run-as-user`},
		{"uid range malformed", []string{"agent", "--worker-id", "w1", "--run-as-uid-range", "70000"}, `--run-as-uid-range "70000": want FIRST-LAST, e.g. 70000-70999`},
		{"uid range backwards", []string{"agent", "--worker-id", "w1", "--run-as-uid-range", "70010-70000"}, `--run-as-uid-range "70010-70000": want 0 < FIRST <= LAST`},
		{"uid range with a user", []string{"agent", "--worker-id", "w1", "--run-as-uid-range", "70000-70009", "--run-as-user", "nobody"}, "--run-as-uid-range and --run-as-user: give one"},
		{"uid range with ray", []string{"agent", "--worker-id", "w1", "--launcher", "ray", "--ray-address", "http://127.0.0.1:8265", "--run-as-uid-range", "70000-70009"}, "--run-as-uid-range: applies to attempts run here, not with --launcher ray"},
		{"negative agent limit", []string{"agent", "--worker-id", "w1", "--max-output-bytes", "-5"}, "--max-output-bytes: must not be negative"},
		{"render task with worker", []string{"workers", "render-launch", "--task", "t1", "--worker-id", "w1"}, "--worker-id: not with --task"},
		{"render task with fence", []string{"workers", "render-launch", "--task", "t1", "--fence", "2"}, "--fence: not with --task"},
		{"render task and file", []string{"workers", "render-launch", "--task", "t1", "task.json"}, "give an envelope file or --task, not both"},
		{"render bad task", []string{"workers", "render-launch", "--task", "t/1"}, `--task: "t/1" is not a valid ID`},
		{"render nothing", []string{"workers", "render-launch"}, "give an envelope file, or --task TASK_ID"},
		{"exec binary without task", []string{"workers", "render-launch", "task.json", "--worker-id", "w1", "--exec-binary", "x"}, "--exec-binary: only with --task, --launcher ray or --launcher k8s"},
		{"k8s render flag without k8s", []string{"workers", "render-launch", "task.json", "--worker-id", "w1", "--k8s-image", "x"}, "--k8s-image goes with --launcher k8s"},
		{"render unknown launcher", []string{"workers", "render-launch", "task.json", "--worker-id", "w1", "--launcher", "nomad"}, `--launcher "nomad": want local, ray or k8s`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, stdout, stderr := run(t, tc.args...)
			assert.Equal(t, ExitUsage, code, "stderr: %s", stderr)
			assert.Contains(t, stderr, tc.want)
			assert.Empty(t, stdout)
		})
	}
}
