package cmd

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	batchv1 "k8s.io/api/batch/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	"sigs.k8s.io/yaml"

	"github.com/wdc-runtime/wdc/launchers/k8s"
)

// render-launch --launcher k8s prints the Job and the Lease, as YAML
// documents or JSON, without contacting anything.
func TestRenderLaunchK8sPrintsTheJobAndLease(t *testing.T) {
	file := filepath.Join(t.TempDir(), "task.json")
	require.NoError(t, os.WriteFile(file, []byte(`{"task_id":"t1","run_id":"r1","world_id":"w1","command":["true"],
		"env":{"TOKEN":"task-only"},"launcher":"k8s","k8s":{"priority_class_name":"batch-low"}}`), 0o644))
	args := []string{"workers", "render-launch", "--launcher", "k8s", file, "--worker-id", "k8s-pool", "--attempt", "2", "--fence", "3",
		"--k8s-namespace", "wdc-jobs", "--k8s-image", "registry.example/wdc:1", "--exec-binary", "/usr/local/bin/wdc",
		"--k8s-executor-secret", "wdc-executor", "--blob-url", "s3://wdc?region=eu-1", "--k8s-allowed-priority-classes", "batch-*"}
	code, stdout, stderr := run(t, args...)
	require.Equal(t, ExitOK, code, stderr)
	docs := strings.Split(stdout, "\n---\n")
	require.Len(t, docs, 2, stdout)
	var job batchv1.Job
	require.NoError(t, yaml.UnmarshalStrict([]byte(docs[0]), &job))
	var l coordinationv1.Lease
	require.NoError(t, yaml.UnmarshalStrict([]byte(docs[1]), &l))
	assert.Equal(t, "wdc-t1-a2-f3", job.Name)
	assert.Equal(t, "wdc-jobs", job.Namespace)
	assert.Equal(t, "batch-low", job.Spec.Template.Spec.PriorityClassName)
	c := job.Spec.Template.Spec.Containers[0]
	assert.Equal(t, k8s.ContainerName, c.Name)
	assert.Equal(t, "registry.example/wdc:1", c.Image)
	assert.Equal(t, []string{"/usr/local/bin/wdc", "exec"}, c.Command[:2])
	assert.Contains(t, c.Command, "s3://wdc?region=eu-1")
	assert.Equal(t, "wdc-executor", c.EnvFrom[0].SecretRef.Name)
	assert.NotContains(t, stdout, "task-only", "the task's env is not in the Job")
	assert.Equal(t, "k8s-pool/2/3", *l.Spec.HolderIdentity)
	assert.Equal(t, job.Name, l.Name)

	code, stdout, stderr = run(t, append(args, "-o", "json")...)
	require.Equal(t, ExitOK, code, stderr)
	var out struct {
		Job   batchv1.Job          `json:"job"`
		Lease coordinationv1.Lease `json:"lease"`
	}
	require.NoError(t, json.Unmarshal([]byte(stdout), &out))
	assert.Equal(t, job.Spec, out.Job.Spec)

	code, _, stderr = run(t, "workers", "render-launch", file, "--worker-id", "k8s-pool")
	assert.Equal(t, ExitUsage, code)
	assert.Contains(t, stderr, "give --launcher k8s to render its launch")

	code, _, stderr = run(t, "workers", "render-launch", "--launcher", "k8s", file, "--worker-id", "k8s-pool", "--work-dir", "/w")
	assert.Equal(t, ExitUsage, code)
	assert.Contains(t, stderr, "--work-dir: not with --launcher k8s")

	code, _, stderr = run(t, "workers", "render-launch", "--launcher", "k8s", file, "--worker-id", "k8s-pool")
	assert.Equal(t, ExitUsage, code, "no image is bad input")
	assert.Contains(t, stderr, "--k8s-image: give the executor's container image")

	code, _, stderr = run(t, "workers", "render-launch", "--launcher", "ray", file, "--worker-id", "k8s-pool")
	assert.Equal(t, ExitUsage, code)
	assert.Contains(t, stderr, `envelope launcher "k8s": give --launcher k8s`)

	// Object names are refused as the API server would refuse them.
	for flag, value := range map[string]string{"--k8s-namespace": "Bad_NS", "--k8s-service-account": "Bad SA",
		"--k8s-task-pvc": "Bad_PVC", "--k8s-executor-secret": "x/y", "--k8s-executor-configmap": "-cm"} {
		code, _, stderr = run(t, "workers", "render-launch", "--launcher", "k8s", file, "--worker-id", "k8s-pool", "--k8s-image", "img", flag, value)
		assert.Equal(t, ExitUsage, code, "%s %s", flag, value)
		assert.Contains(t, stderr, fmt.Sprintf("%s %q: a lowercase RFC 1123", flag, value))
	}
}

// The allowlists' patterns are checked at parse time, on the agent as on
// render-launch, and render-launch refuses what the agent would refuse.
func TestK8sAllowlistFlags(t *testing.T) {
	file := filepath.Join(t.TempDir(), "task.json")
	require.NoError(t, os.WriteFile(file, []byte(`{"task_id":"t1","run_id":"r1","world_id":"w1","command":["true"],
		"launcher":"k8s","k8s":{"image":"evil/img:1","tolerations":[{"operator":"Exists"}]}}`), 0o644))
	render := []string{"workers", "render-launch", "--launcher", "k8s", file, "--worker-id", "k8s-pool", "--k8s-image", "registry.example/wdc:1"}
	agent := []string{"agent", "--worker-id", "k8s-pool", "--launcher", "k8s", "--k8s-image", "registry.example/wdc:1"}
	for _, c := range []struct{ flag, value, want string }{
		{"--k8s-allowed-images", "registry.example.com/[sim", `--k8s-allowed-images "registry.example.com/[sim": syntax error in pattern`},
		{"--k8s-allowed-tolerations", "gpu=[x", `--k8s-allowed-tolerations "gpu=[x": syntax error in pattern`},
		{"--k8s-allowed-tolerations", ":NoSchedule", `--k8s-allowed-tolerations ":NoSchedule": no key`},
		{"--k8s-allowed-priority-classes", `batch-\`, `--k8s-allowed-priority-classes "batch-\\": syntax error in pattern`},
		{"--k8s-allowed-runtime-classes", "[a-", `--k8s-allowed-runtime-classes "[a-": syntax error in pattern`},
	} {
		for _, args := range [][]string{render, agent} {
			code, _, stderr := run(t, append(args, c.flag, "ok,"+c.value)...)
			assert.Equal(t, ExitUsage, code, "%s %s %s", args[0], c.flag, c.value)
			assert.Contains(t, stderr, c.want)
		}
	}
	code, _, stderr := run(t, "agent", "--worker-id", "w", "--k8s-allowed-images", "x/*")
	assert.Equal(t, ExitUsage, code)
	assert.Contains(t, stderr, "--k8s-allowed-images goes with --launcher k8s")

	code, _, stderr = run(t, render...)
	assert.Equal(t, ExitUsage, code)
	assert.Contains(t, stderr, `k8s.image "evil/img:1" is not on the agent's --k8s-allowed-images`)
	code, _, stderr = run(t, append(render, "--k8s-allowed-images", "evil/*")...)
	assert.Equal(t, ExitUsage, code)
	assert.Contains(t, stderr, `k8s.tolerations[0] "" is not on the agent's --k8s-allowed-tolerations (an empty key with operator Exists tolerates every taint`)
	code, stdout, stderr := run(t, append(render, "--k8s-allowed-images", "other/*", "--k8s-allowed-images", "evil/*", "--k8s-allowed-tolerations", "*")...)
	require.Equal(t, ExitOK, code, stderr)
	assert.Contains(t, stdout, "image: evil/img:1")
}

// The cluster is found as kubectl finds it: --kubeconfig first, then
// KUBECONFIG; the namespace is --k8s-namespace, else the context's.
func TestK8sRESTConfigFollowsKubeconfigRules(t *testing.T) {
	dir := t.TempDir()
	write := func(name, server, ns string) string {
		path := filepath.Join(dir, name)
		require.NoError(t, os.WriteFile(path, []byte(`apiVersion: v1
kind: Config
clusters: [{name: c, cluster: {server: "`+server+`"}}]
users: [{name: u, user: {token: t0k3n}}]
contexts: [{name: x, context: {cluster: c, user: u, namespace: `+ns+`}}]
current-context: x
`), 0o600))
		return path
	}
	fromEnv := write("env.kubeconfig", "https://env.example:6443", "env-ns")
	explicit := write("flag.kubeconfig", "https://flag.example:6443", "flag-ns")
	a := &app{deps: Deps{Getenv: func(k string) string {
		if k == "KUBECONFIG" {
			return fromEnv
		}
		return ""
	}}}

	cfg, ns, err := a.k8sRESTConfig(&k8sFlags{})
	require.NoError(t, err)
	assert.Equal(t, "https://env.example:6443", cfg.Host)
	assert.Equal(t, "env-ns", ns)
	assert.Equal(t, "t0k3n", cfg.BearerToken)

	cfg, ns, err = a.k8sRESTConfig(&k8sFlags{kubeconfig: explicit, namespace: "mine"})
	require.NoError(t, err)
	assert.Equal(t, "https://flag.example:6443", cfg.Host, "--kubeconfig wins over KUBECONFIG")
	assert.Equal(t, "mine", ns, "--k8s-namespace wins over the context's")

	_, _, err = a.k8sRESTConfig(&k8sFlags{kubeconfig: filepath.Join(dir, "missing")})
	assert.ErrorContains(t, err, "(--kubeconfig "+filepath.Join(dir, "missing")+"): stat")
	assert.NotContains(t, err.Error(), "give --kubeconfig", "it was given")
}
