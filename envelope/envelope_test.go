package envelope

import (
	"errors"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

const sealedDoc = `{
  "task_id": "t1", "run_id": "r1", "world_id": "w1",
  "command": ["/bin/sh", "-c", "echo hi"],
  "env": {"PATH": "/usr/bin:/bin", "LC_ALL": "C"},
  "inputs": [{"name": "data/obs.csv", "digest": "sha256:` + hex64 + `", "size_bytes": 10}],
  "resources": {"cpu_millis": 500, "memory_bytes": 1048576, "custom": {"licenses": 1}},
  "capabilities": ["docker", "cuda12"],
  "selector": {"zone": "eu-1"},
  "timeouts": {"execution_seconds": 60}
}`

const hex64 = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"

func TestDecodeSealed(t *testing.T) {
	e, err := Decode(strings.NewReader(sealedDoc), true)
	require.NoError(t, err)
	assert.Equal(t, "t1", e.TaskID)
	assert.Equal(t, LauncherLocal, e.Launcher, "launcher defaults to local")
	assert.Equal(t, []string{"cuda12", "docker"}, e.Capabilities, "capabilities are sorted")
	assert.Equal(t, int64(500), e.Resources.CPUMillis)
}

// The same envelope gives the same digest whatever the key order and
// whitespace of its JSON text.
func TestDigestIgnoresKeyOrderAndWhitespace(t *testing.T) {
	reordered := `{"world_id":"w1","timeouts":{"execution_seconds":60},"selector":{"zone":"eu-1"},
	"capabilities":["cuda12","docker"],"launcher":"local",
	"resources":{"custom":{"licenses":1},"memory_bytes":1048576,"cpu_millis":500},
	"inputs":[{"size_bytes":10,"digest":"sha256:` + hex64 + `","name":"data/obs.csv"}],
	"env":{"LC_ALL":"C","PATH":"/usr/bin:/bin"},"command":["/bin/sh","-c","echo hi"],"run_id":"r1","task_id":"t1"}`
	a, err := Decode(strings.NewReader(sealedDoc), true)
	require.NoError(t, err)
	b, err := Decode(strings.NewReader(reordered), true)
	require.NoError(t, err)
	da, err := a.Digest()
	require.NoError(t, err)
	db, err := b.Digest()
	require.NoError(t, err)
	assert.Equal(t, da, db)
	assert.Regexp(t, `^sha256:[0-9a-f]{64}$`, da)

	// A change of content changes the digest.
	b.Command[2] = "echo bye"
	dc, _ := b.Digest()
	assert.NotEqual(t, da, dc)
}

// The digest is pinned: the canonical form must not drift between
// versions or machines, or retries would no longer match.
func TestDigestIsStable(t *testing.T) {
	e := Envelope{TaskID: "t1", RunID: "r1", WorldID: "w1", Command: []string{"true"}}
	e.Normalize()
	canon, err := e.CanonicalJSON()
	require.NoError(t, err)
	assert.Equal(t, `{"command":["true"],"launcher":"local","run_id":"r1","task_id":"t1","world_id":"w1"}`, string(canon))
	d, err := e.Digest()
	require.NoError(t, err)
	assert.Equal(t, "sha256:ad27c0131a0743a2474773a07cd85885cf6b57b65fb556b9cda8bc68b51a65ac", d)
}

func TestDecodeRejections(t *testing.T) {
	base := func(extra string) string {
		return `{"task_id":"t1","run_id":"r1","world_id":"w1","command":["true"]` + extra + `}`
	}
	tests := []struct {
		name string
		doc  string
		want []string
	}{
		{"empty document", "  ", []string{"empty document"}},
		{"not an object", `[1,2]`, []string{"want a JSON object"}},
		{"syntax error", `{"task_id": "t1",`, []string{"not valid JSON"}},
		{"trailing data", base("") + ` {}`, []string{"more than one JSON value", "column 67"}},
		{"syntax error position", "{\n  \"task_id\": \"t1\",\n  \"run_id\" \"r1\"\n}", []string{"line 3, column 12"}},
		{"truncated", `{"task_id": "t1"`, []string{"ends early"}},
		{"duplicate key", `{"task_id":"t1","task_id":"t2","run_id":"r1","world_id":"w1","command":["true"]}`, []string{"not valid JSON", "task_id"}},
		{"unknown field", base(`,"comand":["x"]`), []string{"comand: unknown field (did you mean \"command\"?)"}},
		{"unknown nested field", base(`,"resources":{"cpu_milis":2}`), []string{"resources.cpu_milis: unknown field (did you mean \"cpu_millis\"?)"}},
		{"unknown field in a list", base(`,"inputs":[{"name":"a","digest":"sha256:` + hex64 + `","sha":"x"}]`), []string{"inputs[0].sha: unknown field"}},
		{"unknown field far from any", base(`,"colour":"red"`), []string{"colour: unknown field"}},
		{"wrong type", base(`,"resources":{"cpu_millis":"lots"}`), []string{"resources.cpu_millis", "want an integer"}},
		{"missing task_id", `{"run_id":"r1","world_id":"w1","command":["true"]}`, []string{"task_id: required"}},
		{"missing everything", `{}`, []string{"task_id: required", "run_id: required", "world_id: required", "command: required"}},
		{"bad id", `{"task_id":"a/b","run_id":"r1","world_id":"w1","command":["true"]}`, []string{"task_id", "not a valid ID"}},
		{"reserved env", base(`,"env":{"WDC_FENCE":"9"}`), []string{"env.WDC_FENCE", "set by the executor"}},
		{"bad env name", base(`,"env":{"1X":"y"}`), []string{"env.1X", "invalid name"}},
		{"negative resources", base(`,"resources":{"memory_bytes":-1}`), []string{"resources.memory_bytes", "negative"}},
		{"bad selector", base(`,"selector":{"zone":"has space"}`), []string{"selector"}},
		{"bad launcher", base(`,"launcher":"slurm"`), []string{"launcher", "local, ray or k8s"}},
		{"input dotdot", base(`,"inputs":[{"name":"../etc/passwd","digest":"sha256:` + hex64 + `"}]`), []string{"inputs[0].name", ".."}},
		{"input absolute", base(`,"inputs":[{"name":"/etc/passwd","digest":"sha256:` + hex64 + `"}]`), []string{"inputs[0].name", "absolute"}},
		{"input duplicate", base(`,"inputs":[{"name":"a","digest":"sha256:` + hex64 + `"},{"name":"a","digest":"sha256:` + hex64 + `"}]`), []string{"inputs[1].name", "duplicate"}},
		{"input bad digest", base(`,"inputs":[{"name":"a","digest":"md5:abc"}]`), []string{"inputs[0].digest"}},
		{"negative timeout", base(`,"timeouts":{"execution_seconds":-1}`), []string{"timeouts.execution_seconds"}},
		{"overflowing timeout", base(`,"timeouts":{"execution_seconds":10000000000}`), []string{"timeouts.execution_seconds", "ten years"}},
		{"keys are case-sensitive", `{"TASK_ID":"t1","run_id":"r1","world_id":"w1","command":["true"]}`, []string{`TASK_ID: unknown field (did you mean "task_id"?)`}},
		{"no case-folded duplicates", `{"task_id":"t1","Task_Id":"t2","run_id":"r1","world_id":"w1","command":["true"]}`, []string{"Task_Id: unknown field"}},
		{"ray options without launcher ray", base(`,"ray":{"placement_group":{"bundles":[{"CPU":1}]}}`), []string{`ray: only with launcher "ray"`}},
		{"placement group without bundles", base(`,"launcher":"ray","ray":{"placement_group":{"bundles":[]}}`), []string{"ray.placement_group.bundles: required"}},
		{"placement group bundles missing", base(`,"launcher":"ray","ray":{"placement_group":{}}`), []string{"ray.placement_group.bundles: required"}},
		{"empty bundle", base(`,"launcher":"ray","ray":{"placement_group":{"bundles":[{"CPU":1},{}]}}`), []string{"ray.placement_group.bundles[1]: empty"}},
		{"zero amount", base(`,"launcher":"ray","ray":{"placement_group":{"bundles":[{"CPU":0}]}}`), []string{"ray.placement_group.bundles[0].CPU: must be a positive amount"}},
		{"negative amount", base(`,"launcher":"ray","ray":{"placement_group":{"bundles":[{"GPU":-1}]}}`), []string{"ray.placement_group.bundles[0].GPU: must be a positive amount"}},
		{"unknown strategy", base(`,"launcher":"ray","ray":{"placement_group":{"bundles":[{"CPU":1}],"strategy":"TIGHT"}}`), []string{"ray.placement_group.strategy", "PACK, SPREAD, STRICT_PACK, STRICT_SPREAD"}},
		{"negative placement timeout", base(`,"launcher":"ray","ray":{"placement_group":{"bundles":[{"CPU":1}],"timeout_seconds":-1}}`), []string{"ray.placement_group.timeout_seconds"}},
		{"unknown placement field", base(`,"launcher":"ray","ray":{"placement_group":{"bundle":[{"CPU":1}]}}`), []string{"ray.placement_group.bundle: unknown field"}},
		{"input file under input file", base(`,"inputs":[{"name":"a/b","digest":"sha256:` + hex64 + `"},{"name":"a/b/c","digest":"sha256:` + hex64 + `"}]`), []string{"inputs[1].name", "directory of the other"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			e, err := Decode(strings.NewReader(tc.doc), true)
			require.Error(t, err)
			assert.Equal(t, Envelope{}, e, "nothing is returned on error")
			for _, w := range tc.want {
				assert.Contains(t, err.Error(), w)
			}
			assert.NotContains(t, err.Error(), "\n", "one line")
		})
	}
}

// Ray options: the strategy defaults to PACK; a "ray" task requires the
// "launcher/ray" capability; an envelope without them digests as before.
func TestRayPlacementGroup(t *testing.T) {
	doc := `{"task_id":"t1","run_id":"r1","world_id":"w1","command":["true"],"launcher":"ray",
	  "ray":{"placement_group":{"bundles":[{"CPU":1,"GPU":1},{"CPU":2,"accel":0.5}]}}}`
	e, err := Decode(strings.NewReader(doc), true)
	require.NoError(t, err)
	require.NotNil(t, e.Ray.PlacementGroup)
	assert.Equal(t, "PACK", e.Ray.PlacementGroup.Strategy)
	assert.Equal(t, []map[string]float64{{"CPU": 1, "GPU": 1}, {"CPU": 2, "accel": 0.5}}, e.Ray.PlacementGroup.Bundles)
	assert.Equal(t, []string{"launcher/ray"}, e.Requirements().Capabilities)
	assert.Empty(t, e.Capabilities, "the envelope itself is unchanged")

	local, err := Decode(strings.NewReader(sealedDoc), true)
	require.NoError(t, err)
	assert.Equal(t, []string{"cuda12", "docker"}, local.Requirements().Capabilities)
}

func TestEmptyProgramIsRefused(t *testing.T) {
	_, err := Decode(strings.NewReader(`{"task_id":"t1","run_id":"r1","world_id":"w1","command":["", "x"]}`), true)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "command[0]")
}

func TestSealedRequiresDigests(t *testing.T) {
	doc := `{"task_id":"t1","run_id":"r1","world_id":"w1","command":["true"],"inputs":[{"name":"a.csv","path":"a.csv"}]}`
	_, err := Decode(strings.NewReader(doc), false)
	require.NoError(t, err, "a task file may name inputs by path")
	_, err = Decode(strings.NewReader(doc), true)
	var v *ValidationError
	require.True(t, errors.As(err, &v))
	assert.Equal(t, "inputs[0].path", v.Problems[0].Field)

	_, err = Decode(strings.NewReader(`{"task_id":"t1","run_id":"r1","world_id":"w1","command":["true"],"inputs":[{"name":"a"}]}`), false)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "give path")
}

func TestDecodeSizeLimit(t *testing.T) {
	big := `{"task_id":"t1","run_id":"r1","world_id":"w1","command":["` + strings.Repeat("x", MaxEnvelopeBytes) + `"]}`
	_, err := Decode(strings.NewReader(big), true)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "larger than")
}

func TestValidateRelativePath(t *testing.T) {
	for _, ok := range []string{"a", "a/b.csv", "deep/er/file.txt", ".hidden", "a..b"} {
		assert.NoError(t, ValidateRelativePath(ok), ok)
	}
	for _, bad := range []string{"", "/abs", "../x", "a/../b", "a/./b", "./a", "a//b", "a/", `a\b`, "a\x00b", ".."} {
		assert.Error(t, ValidateRelativePath(bad), bad)
	}
}

// FuzzDecode: Decode never panics, and whatever it accepts re-encodes to
// a document that decodes to the same digest (canonical form is a fixed
// point).
func FuzzDecode(f *testing.F) {
	for _, seed := range []string{
		sealedDoc,
		`{"task_id":"t1","run_id":"r1","world_id":"w1","command":["true"]}`,
		`{"task_id":"t1","run_id":"r1","world_id":"w1","command":["true"],"env":{"A":"\u00e9"}}`,
		`{"task_id":"t1","task_id":"t1"}`,
		`{"resources":{"cpu_millis":1e400}}`,
		`[]`, `null`, `"x"`, `{`, ``,
	} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, doc []byte) {
		e, err := Decode(strings.NewReader(string(doc)), true)
		if err != nil {
			return
		}
		d1, err := e.Digest()
		if err != nil {
			t.Fatalf("accepted envelope has no digest: %v", err)
		}
		canon, err := e.CanonicalJSON()
		if err != nil {
			t.Fatal(err)
		}
		again, err := Decode(strings.NewReader(string(canon)), true)
		if err != nil {
			t.Fatalf("canonical form %s does not decode: %v", canon, err)
		}
		d2, _ := again.Digest()
		if d1 != d2 {
			t.Fatalf("digest changed after a round trip: %s vs %s", d1, d2)
		}
	})
}
