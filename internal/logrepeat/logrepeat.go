package logrepeat

import (
	"fmt"
	"log/slog"
	"sync"
	"time"
)

// DefaultEvery is the least time between two WARN lines of one failure.
const DefaultEvery = 30 * time.Second

// Failure is one kind of failure that a loop retries (a heartbeat not
// delivered). Fail logs the first failure at WARN, repeats at most once
// every Every with their count; OK, after failures, logs their end once
// at INFO: "<Recovered> after 35.2 s, 23 attempts". The zero value of
// the optional fields takes the defaults; safe for concurrent use.
type Failure struct {
	// Log receives the lines (nil: slog.Default()).
	Log *slog.Logger
	// Msg is the WARN message of a failure, e.g. "worker heartbeat".
	Msg string
	// Recovered starts the INFO line of the end, e.g. "worker heartbeat
	// delivered again" ("": Msg + " succeeded again").
	Recovered string
	// Every is the least time between two WARN lines (0: DefaultEvery).
	Every time.Duration
	// Now is the clock (nil: time.Now).
	Now func() time.Time

	mu       sync.Mutex
	since    time.Time // first failure of the current run; zero: not failing
	lastLog  time.Time
	attempts int
}

func (f *Failure) now() time.Time {
	if f.Now != nil {
		return f.Now()
	}
	return time.Now()
}

func (f *Failure) log() *slog.Logger {
	if f.Log != nil {
		return f.Log
	}
	return slog.Default()
}

// Fail records one failed try with err and attrs (key-value pairs, as
// slog takes them); it logs the first of a run, then one every Every
// with "attempts" (failed tries so far) and "failing_for".
func (f *Failure) Fail(err error, attrs ...any) {
	f.mu.Lock()
	defer f.mu.Unlock()
	now := f.now()
	f.attempts++
	if f.since.IsZero() {
		f.since, f.lastLog = now, now
		f.log().Warn(f.Msg, append([]any{"error", err}, attrs...)...)
		return
	}
	every := f.Every
	if every <= 0 {
		every = DefaultEvery
	}
	if now.Sub(f.lastLog) < every {
		return
	}
	f.lastLog = now
	d := now.Sub(f.since)
	f.log().Warn(fmt.Sprintf("%s: still failing after %.1f s, %d attempts", f.Msg, d.Seconds(), f.attempts),
		append([]any{"error", err, "attempts", f.attempts, "failing_for", d.Round(time.Millisecond)}, attrs...)...)
}

// OK records a successful try; after failures it logs their end once,
// with how long they lasted and how many tries failed.
func (f *Failure) OK(attrs ...any) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.since.IsZero() {
		return
	}
	d, n := f.now().Sub(f.since), f.attempts
	f.since, f.attempts = time.Time{}, 0
	msg := f.Recovered
	if msg == "" {
		msg = f.Msg + " succeeded again"
	}
	f.log().Info(fmt.Sprintf("%s after %.1f s, %d attempts", msg, d.Seconds(), n),
		append([]any{"attempts", n, "failing_for", d.Round(time.Millisecond)}, attrs...)...)
}

// Failing reports whether the last try failed.
func (f *Failure) Failing() bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return !f.since.IsZero()
}
