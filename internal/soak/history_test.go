package soak

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestJSONLRoundTrip(t *testing.T) {
	h := legalHistory()
	h.Commands[4].Stop = time.Time{} // a command never seen stopping
	var buf bytes.Buffer
	require.NoError(t, WriteJSONL(&buf, h))

	lines := strings.Split(strings.TrimSpace(buf.String()), "\n")
	assert.Len(t, lines, len(h.Ops)+len(h.Commands)+len(h.Tasks)+len(h.Artifacts)+len(h.Runs)+len(h.Inputs)+len(h.Store.Blobs)+len(h.Workers))
	assert.True(t, strings.HasPrefix(lines[0], `{"type":"op","kind":"grant",`), lines[0])
	assert.NotContains(t, buf.String(), `"stop":"0001`, "a zero Stop is left out")

	got, err := ReadJSONL(&buf)
	require.NoError(t, err)
	assert.Equal(t, h, got)
	assert.Equal(t, Check(h, opts()), Check(got, opts()))
}

func TestReadJSONLNamesTheLineAndField(t *testing.T) {
	good := `{"type":"task","task":"a","run_id":"r1","state":"COMPLETED"}`
	tests := []struct {
		name string
		line string
		want []string
	}{
		{"not JSON", `{"type":"op",`, []string{"line 3:", "not a record"}},
		{"no type", `{"task":"a"}`, []string{"line 3:", "field type: missing"}},
		{"unknown type", `{"type":"lease"}`, []string{"line 3:", `unknown record type "lease"`}},
		{"wrong value type", `{"type":"op","kind":"grant","fence":"two"}`, []string{"line 3:", "op: field fence:"}},
		{"bad time", `{"type":"command","task":"a","start":"yesterday"}`, []string{"line 3:", "command: field start:"}},
		{"unknown field", `{"type":"worker","worker_id":"w1","slot":4}`, []string{"line 3:", "worker: field slot:", "unknown field"}},
		{"unknown op kind", `{"type":"op","kind":"renew"}`, []string{"line 3:", "op: field kind:", `"renew"`}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			// Line 2 is blank: blank lines count but are skipped.
			_, err := ReadJSONL(strings.NewReader(good + "\n\n" + tt.line + "\n" + good + "\n"))
			require.Error(t, err)
			for _, w := range tt.want {
				assert.Contains(t, err.Error(), w)
			}
		})
	}
}
