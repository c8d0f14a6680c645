package logrepeat

import (
	"bytes"
	"errors"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
)

type fakeClock struct{ t time.Time }

func (c *fakeClock) now() time.Time          { return c.t }
func (c *fakeClock) advance(d time.Duration) { c.t = c.t.Add(d) }

func lines(buf *bytes.Buffer) []string {
	s := strings.TrimSpace(buf.String())
	if s == "" {
		return nil
	}
	return strings.Split(s, "\n")
}

// The case: a heartbeat every 1.5 s cut off for 35 s fails 23
// times and logs three lines (the start, one repeat at 30 s, the end)
// instead of 23.
func TestAFailureRepeatedEvery1500msLogsStartRepeatAndEnd(t *testing.T) {
	var buf bytes.Buffer
	clock := &fakeClock{t: time.Unix(1000, 0)}
	f := &Failure{Log: slog.New(slog.NewTextHandler(&buf, nil)), Msg: "worker heartbeat",
		Recovered: "worker heartbeat delivered again", Now: clock.now}
	err := errors.New("connection refused")

	f.OK() // not failing: nothing to say
	assert.Empty(t, lines(&buf))
	for i := 0; i < 23; i++ {
		f.Fail(err, "worker", "a1")
		assert.True(t, f.Failing())
		clock.advance(1600 * time.Millisecond)
	}
	// 23 failures from t=0 to t=35.2 s; the success at 36.8 s.
	f.OK("worker", "a1")
	assert.False(t, f.Failing())
	got := lines(&buf)
	if assert.Len(t, got, 3, "%s", buf.String()) {
		assert.Contains(t, got[0], `level=WARN msg="worker heartbeat" error="connection refused" worker=a1`)
		assert.Contains(t, got[1], `msg="worker heartbeat: still failing after 30.4 s, 20 attempts"`)
		assert.Contains(t, got[1], "attempts=20")
		assert.Contains(t, got[2], `level=INFO msg="worker heartbeat delivered again after 36.8 s, 23 attempts" attempts=23`)
	}

	// A new run of failures starts over: logged at once again.
	buf.Reset()
	f.Fail(err)
	clock.advance(29 * time.Second)
	f.Fail(err)
	assert.Len(t, lines(&buf), 1, "the second within 30 s is counted, not logged")
	clock.advance(time.Second)
	f.Fail(err)
	assert.Len(t, lines(&buf), 2, "30 s after the last line: logged with the count")
	f.OK()
	assert.Contains(t, lines(&buf)[2], `msg="worker heartbeat delivered again after 30.0 s, 3 attempts"`)
}

func TestDefaults(t *testing.T) {
	var buf bytes.Buffer
	clock := &fakeClock{t: time.Unix(1000, 0)}
	f := &Failure{Log: slog.New(slog.NewTextHandler(&buf, nil)), Msg: "submit", Every: 10 * time.Second, Now: clock.now}
	f.Fail(errors.New("x"))
	clock.advance(10 * time.Second)
	f.Fail(errors.New("y"))
	f.OK()
	got := lines(&buf)
	assert.Len(t, got, 3)
	assert.Contains(t, got[1], `still failing after 10.0 s, 2 attempts" error=y`)
	assert.Contains(t, got[2], `msg="submit succeeded again after 10.0 s, 2 attempts"`)
}
