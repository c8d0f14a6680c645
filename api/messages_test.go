package api

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
)

func TestTaskOptionsValidateNamesTheField(t *testing.T) {
	tests := []struct {
		name string
		opts TaskOptions
		want string // "" for valid
	}{
		{"defaults", TaskOptions{}, ""},
		{"longest lease", TaskOptions{LeaseTTL: MaxLeaseTTL}, ""},
		{"lease too short", TaskOptions{LeaseTTL: 500 * time.Millisecond}, "lease_ttl"},
		{"lease past the bound", TaskOptions{LeaseTTL: MaxLeaseTTL + time.Second}, "lease_ttl"},
		{"heartbeat not below the TTL", TaskOptions{LeaseTTL: 10 * time.Second, HeartbeatInterval: 10 * time.Second}, "heartbeat_interval"},
		{"too many attempts", TaskOptions{MaxAttempts: MaxAttemptsLimit + 1}, "max_attempts"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.opts.WithDefaults().Validate()
			if tc.want == "" {
				assert.NoError(t, err)
				return
			}
			assert.ErrorContains(t, err, tc.want+":")
		})
	}
}

func TestSubmitResultValidateNamesTheField(t *testing.T) {
	const digest = "sha256:0000000000000000000000000000000000000000000000000000000000000001"
	tests := []struct {
		name string
		in   SubmitResultInput
		want string
	}{
		{"no artifacts", SubmitResultInput{}, ""},
		{"one artifact and a log", SubmitResultInput{Artifacts: []Artifact{{Name: "a/b.csv", Digest: digest}}, Logs: []Artifact{{Name: LogStdout, Digest: digest}}}, ""},
		{"escaping name", SubmitResultInput{Artifacts: []Artifact{{Name: "../x", Digest: digest}}}, "artifacts[0].name"},
		{"duplicate name", SubmitResultInput{Artifacts: []Artifact{{Name: "x", Digest: digest}, {Name: "x", Digest: digest}}}, "artifacts[1].name"},
		{"bad digest", SubmitResultInput{Artifacts: []Artifact{{Name: "x", Digest: "md5:1"}}}, "artifacts[0].digest"},
		{"negative size", SubmitResultInput{Artifacts: []Artifact{{Name: "x", Digest: digest, SizeBytes: -1}}}, "artifacts[0].size_bytes"},
		{"too many", SubmitResultInput{Artifacts: make([]Artifact, MaxArtifacts+1)}, "artifacts:"},
		{"unknown log", SubmitResultInput{Logs: []Artifact{{Name: "other.log", Digest: digest}}}, "logs[0]"},
		{"log too big", SubmitResultInput{Logs: []Artifact{{Name: LogStderr, Digest: digest, SizeBytes: MaxLogBytes + 1}}}, "logs[0]"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.in.Validate()
			if tc.want == "" {
				assert.NoError(t, err)
				return
			}
			assert.ErrorContains(t, err, tc.want)
		})
	}
}
