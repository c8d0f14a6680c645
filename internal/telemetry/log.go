package telemetry

import (
	"fmt"
	"io"
	"log/slog"
)

// Log formats (--log-format).
const (
	// LogText is slog's key=value text.
	LogText = "text"
	// LogJSON is one JSON object per line: time, level, msg, then the
	// attributes (an attempt's lines carry task, attempt, fence, worker).
	LogJSON = "json"
)

// CheckLogFormat returns an error naming --log-format unless format is
// LogText or LogJSON.
func CheckLogFormat(format string) error {
	switch format {
	case LogText, LogJSON:
		return nil
	}
	return fmt.Errorf("--log-format %q: want %s or %s", format, LogText, LogJSON)
}

// NewLogHandler returns the slog handler for format (LogJSON, else text)
// writing to w at level. wdc's loggers and the Temporal SDK's (through
// go.temporal.io/sdk/log.NewStructuredLogger) use it, so a process writes
// one format only.
func NewLogHandler(w io.Writer, format string, level slog.Leveler) slog.Handler {
	opts := &slog.HandlerOptions{Level: level}
	if format == LogJSON {
		return slog.NewJSONHandler(w, opts)
	}
	return slog.NewTextHandler(w, opts)
}
