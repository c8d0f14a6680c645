package api

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/wdc-runtime/wdc/envelope"
	"github.com/wdc-runtime/wdc/fleet"
	"github.com/wdc-runtime/wdc/resource"
)

func TestFormatResources(t *testing.T) {
	tests := []struct {
		name string
		l    resource.List
		want string
	}{
		{"none", resource.List{}, "none"},
		{"millicores", resource.List{CPUMillis: 100}, "cpu 100m"},
		{"whole cores and GiB", resource.List{CPUMillis: 2000, MemoryBytes: 1 << 30}, "cpu 2 · mem 1Gi"},
		{"odd bytes", resource.List{MemoryBytes: 1000}, "mem 1000B"},
		{"everything", resource.List{CPUMillis: 1500, MemoryBytes: 512 << 20, GPUs: 1, Slots: 4, Custom: map[string]int64{"z": 1, "a": 2}},
			"cpu 1500m · mem 512Mi · gpu 1 · slots 4 · a 2 · z 1"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) { assert.Equal(t, tt.want, FormatResources(tt.l)) })
	}
}

func TestShortCommandDropsTheShellAndCuts(t *testing.T) {
	assert.Equal(t, "echo hi > outputs/a.txt", ShortCommand([]string{"/bin/sh", "-c", "echo hi > outputs/a.txt"}, 60))
	assert.Equal(t, "python train.py --epochs 3", ShortCommand([]string{"python", "train.py", "--epochs", "3"}, 60))
	assert.Equal(t, "a b", ShortCommand([]string{"/bin/bash", "-c", "a\n  b"}, 60), "whitespace folded")
	long := ShortCommand([]string{strings.Repeat("x", 100)}, 10)
	assert.Equal(t, strings.Repeat("x", 9)+"…", long)
}

func TestSummariesNameTheirEntity(t *testing.T) {
	env := envelope.Envelope{TaskID: "t1", RunID: "r1", WorldID: "w1", Command: []string{"/bin/sh", "-c", "true"}, Resources: resource.List{CPUMillis: 100}}
	assert.Equal(t, "task t1 · run r1 · true", TaskSummary(env))
	d := TaskDetails(env, "sha256:abc")
	for _, want := range []string{"`sha256:abc`", "launcher: local", "resources: cpu 100m", "world: w1", "command: `/bin/sh -c true`"} {
		assert.Contains(t, d, want)
	}
	assert.Equal(t, "run r1 · world w1", RunSummary("r1", "w1"))
	assert.Equal(t, "worker k · k8s · cpu 8", WorkerSummary(fleet.Registration{WorkerID: "k", Capacity: resource.List{CPUMillis: 8000},
		Capabilities: []string{"cuda", envelope.LauncherCapability("k8s")}}))
	assert.Equal(t, "local", WorkerLauncher(nil))
	assert.Equal(t, "wdc-agent/w", AgentIdentity("w"))
	assert.Equal(t, "wdc-control-plane@h/42", ControlPlaneIdentity("h", 42))
	assert.Equal(t, "wdc-cli@h", CLIIdentity("h"))
}

// Temporal refuses a summary payload over 400 bytes: a command of quotes
// and angle brackets (escaped by JSON) or many custom resources cannot
// make one.
func TestSummariesStayUnderTemporalsLimits(t *testing.T) {
	env := envelope.Envelope{TaskID: strings.Repeat("t", 63), RunID: strings.Repeat("r", 63), Command: []string{strings.Repeat(`"<é>`, 100)}}
	for _, s := range []string{TaskSummary(env), ClipSummary(strings.Repeat("ü\\\x01", 500))} {
		b, err := json.Marshal(s)
		assert.NoError(t, err)
		assert.LessOrEqual(t, len(b), MaxSummaryBytes, s)
		assert.True(t, strings.HasSuffix(s, "…"), s)
	}
	env.Command = []string{strings.Repeat("x", 100000)}
	b, err := json.Marshal(TaskDetails(env, "d"))
	assert.NoError(t, err)
	assert.LessOrEqual(t, len(b), MaxDetailsBytes)
	assert.Equal(t, "short", ClipSummary("short"))
}
