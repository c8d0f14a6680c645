package cmd

import (
	"fmt"

	"github.com/wdc-runtime/wdc/envelope"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func envelopeLine(id string, extra string) string {
	return fmt.Sprintf(`{"task_id":%q,"run_id":"r1","world_id":"w1","command":["true"]%s}`, id, extra)
}

// Every way a batch file is refused before anything is submitted: exit 2,
// each bad line named with its number and field, the good lines not sent
// (the server address is unreachable, so nothing could be).
func TestBatchSubmitRefusesBadInputUpFront(t *testing.T) {
	dir := t.TempDir()
	write := func(name string, lines ...string) string {
		p := filepath.Join(dir, name)
		require.NoError(t, os.WriteFile(p, []byte(strings.Join(lines, "\n")+"\n"), 0o644))
		return p
	}
	var many []string
	for i := range 30 {
		many = append(many, envelopeLine(fmt.Sprint("t", i), `,"bogus":1`))
	}
	tests := []struct {
		name string
		args []string
		want []string
	}{
		{"unknown field on one line", []string{"--batch", write("a.jsonl", envelopeLine("t1", ""), envelopeLine("t2", `,"comand":1`), envelopeLine("t3", ""))},
			[]string{"1 of 3 lines refused; nothing was submitted", "line 2:", "comand"}},
		{"not JSON", []string{"--batch", write("b.jsonl", envelopeLine("t1", ""), "{not json")}, []string{"line 2:"}},
		{"missing field", []string{"--batch", write("c.jsonl", `{"task_id":"t1","world_id":"w1","command":["true"]}`)}, []string{"line 1:", "run_id"}},
		{"task id twice", []string{"--batch", write("d.jsonl", envelopeLine("t1", ""), "", envelopeLine("t1", ""))}, []string{`line 3: task_id: "t1" is also on line 1`}},
		{"missing input file", []string{"--batch", write("e.jsonl", envelopeLine("t1", `,"inputs":[{"name":"x","path":"nope.dat"}]`))}, []string{"line 1: inputs[0].path", "nope.dat"}},
		{"input is a directory", []string{"--batch", write("f.jsonl", envelopeLine("t1", `,"inputs":[{"name":"x","path":"."}]`))}, []string{"line 1: inputs[0].path", "not a regular file"}},
		{"unknown launcher", []string{"--batch", write("g.jsonl", envelopeLine("t1", `,"launcher":"nomad"`))}, []string{"line 1:", "launcher"}},
		{"many bad lines are capped", []string{"--batch", write("h.jsonl", many...)}, []string{"30 of 30 lines refused", "line 20:", "… and 10 more"}},
		{"empty file", []string{"--batch", write("i.jsonl", "", "  ")}, []string{"no envelopes"}},
		{"no such file", []string{"--batch", filepath.Join(dir, "absent.jsonl")}, []string{"--batch:", "absent.jsonl"}},
		{"envelope and batch", []string{"x.json", "--batch", write("j.jsonl", envelopeLine("t1", ""))}, []string{"not both"}},
		{"batch with wait", []string{"--batch", write("k.jsonl", envelopeLine("t1", "")), "--wait"}, []string{"--wait follows one task"}},
		{"neither", []string{}, []string{"give an ENVELOPE file"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			code, stdout, stderr := run(t, append([]string{"tasks", "submit"}, tc.args...)...)
			assert.Equal(t, ExitUsage, code, stderr)
			assert.Empty(t, stdout)
			for _, w := range tc.want {
				assert.Contains(t, stderr, w)
			}
			assert.NotContains(t, stderr, "connect", "nothing may be dialed for bad input")
		})
	}
}

// A chunk holds one run's consecutive lines, at most batchChunk of them and
// at most batchChunkBytes of envelopes, but always at least one line.
func TestNextChunkSplitsByRunCountAndBytes(t *testing.T) {
	line := func(run string, size int) batchLine {
		return batchLine{size: size, env: envelope.Envelope{RunID: run, WorldID: "w"}}
	}
	var same []batchLine
	for range batchChunk + 5 {
		same = append(same, line("r1", 100))
	}
	assert.Len(t, nextChunk(same), batchChunk)
	assert.Len(t, nextChunk([]batchLine{line("r1", 1), line("r1", 1), line("r2", 1)}), 2, "a chunk is one run")
	big := []batchLine{line("r1", batchChunkBytes/2), line("r1", batchChunkBytes/2), line("r1", 1)}
	assert.Len(t, nextChunk(big), 2)
	huge := []batchLine{line("r1", 2*batchChunkBytes), line("r1", 1)}
	assert.Len(t, nextChunk(huge), 1, "one line even when it alone passes the bound")
}
