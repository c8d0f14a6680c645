package cmd

import (
	"bytes"
	"testing"

	"github.com/stretchr/testify/assert"
)

// A control plane's deployment flags are checked before anything is
// dialled, naming the flag; the environment supplies their defaults.
func TestControlPlaneDeploymentFlags(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--deployment-name", "wdc.prod"}, `--deployment-name: deployment name "wdc.prod": must not contain '.' or ':'`},
		{[]string{"--deployment-name", "__wdc"}, "--deployment-name: deployment name \"__wdc\": must not start with __"},
		{[]string{"--build-id", "__unversioned__"}, "--build-id: build ID \"__unversioned__\": must not start with __"},
	} {
		code, _, stderr := run(t, append([]string{"control-plane"}, tc.args...)...)
		assert.Equal(t, ExitUsage, code, tc.args)
		assert.Contains(t, stderr, tc.want)
	}

	var out, errb bytes.Buffer
	env := map[string]string{"WDC_BUILD_ID": "__bad", "WDC_DEPLOYMENT_NAME": "ok"}
	code := Main(Deps{Stdout: &out, Stderr: &errb, Getenv: func(k string) string { return env[k] }},
		[]string{"control-plane", "--address", "127.0.0.1:1"})
	assert.Equal(t, ExitUsage, code)
	assert.Contains(t, errb.String(), `--build-id: build ID "__bad"`, "WDC_BUILD_ID is --build-id's default")
}

// The printed set-current-version command reaches the same server and
// namespace as the control plane; defaults are left out.
func TestTemporalFlags(t *testing.T) {
	for _, tc := range []struct{ address, namespace, want string }{
		{defaultAddress, "default", ""},
		{"temporal.example:7233", "default", "--address temporal.example:7233"},
		{defaultAddress, "prod", "--namespace prod"},
		{"temporal.example:7233", "prod", "--address temporal.example:7233 --namespace prod"},
	} {
		a := &app{global: globalOptions{address: tc.address, namespace: tc.namespace}}
		assert.Equal(t, tc.want, a.temporalFlags())
	}
}
