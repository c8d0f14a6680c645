package telemetry

import (
	"context"
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

// NewSDKLogHandler returns the handler for the Temporal SDK's logger: a
// line the SDK tags WorkflowType or ActivityType (a workflow's or an
// activity's own, or the SDK's about one, such as a failed workflow task)
// shows from level up; the SDK's other lines from error up, or from info
// when level is debug. Tags are looked for in With attributes and in a
// record's top-level attributes.
func NewSDKLogHandler(w io.Writer, format string, level slog.Level) slog.Handler {
	internal := slog.LevelError
	if level <= slog.LevelDebug {
		internal = slog.LevelInfo
	}
	return &sdkHandler{h: NewLogHandler(w, format, level), internal: internal}
}

// sdkHandler applies internal, the level of the SDK's untagged lines;
// tagged is whether its With attributes carry a tag.
type sdkHandler struct {
	h        slog.Handler
	internal slog.Level
	tagged   bool
}

func (s *sdkHandler) Enabled(ctx context.Context, l slog.Level) bool { return s.h.Enabled(ctx, l) }

func (s *sdkHandler) Handle(ctx context.Context, r slog.Record) error {
	if r.Level < s.internal && !s.tagged {
		tagged := false
		r.Attrs(func(a slog.Attr) bool {
			tagged = isCodeTag(a.Key)
			return !tagged
		})
		if !tagged {
			return nil
		}
	}
	return s.h.Handle(ctx, r)
}

func (s *sdkHandler) WithAttrs(attrs []slog.Attr) slog.Handler {
	tagged := s.tagged
	for _, a := range attrs {
		tagged = tagged || isCodeTag(a.Key)
	}
	return &sdkHandler{h: s.h.WithAttrs(attrs), internal: s.internal, tagged: tagged}
}

func (s *sdkHandler) WithGroup(name string) slog.Handler {
	return &sdkHandler{h: s.h.WithGroup(name), internal: s.internal, tagged: s.tagged}
}

// isCodeTag reports whether key is the SDK's tag of a workflow's or an
// activity's own logger.
func isCodeTag(key string) bool { return key == "WorkflowType" || key == "ActivityType" }
