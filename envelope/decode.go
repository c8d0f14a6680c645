package envelope

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"reflect"
	"strings"

	"github.com/gowebpki/jcs"
)

// MaxEnvelopeBytes is the largest envelope document Decode reads (1 MiB);
// Temporal payloads should stay far below its 2 MB blob limit.
const MaxEnvelopeBytes = 1 << 20

// Problem is one invalid field: its JSON path and what is wrong.
type Problem struct {
	Field   string `json:"field"`
	Message string `json:"message"`
}

// ValidationError lists every problem found in an envelope.
type ValidationError struct {
	Problems []Problem `json:"problems"`
}

func (v *ValidationError) add(field, msg string) {
	v.Problems = append(v.Problems, Problem{Field: field, Message: msg})
}

// Error renders "envelope: field: problem; field: problem" on one line.
func (v *ValidationError) Error() string {
	parts := make([]string, len(v.Problems))
	for i, p := range v.Problems {
		parts[i] = p.Field + ": " + p.Message
	}
	return "envelope: " + strings.Join(parts, "; ")
}

// Decode reads one envelope strictly: the document must be a single JSON
// object of at most MaxEnvelopeBytes, with no duplicate keys, no unknown
// fields and the right JSON types; then it is normalized and validated
// (sealed says whether inputs must be digests already). Every error names
// the field at fault, and nothing is returned on error.
func Decode(r io.Reader, sealed bool) (Envelope, error) {
	raw, err := io.ReadAll(io.LimitReader(r, MaxEnvelopeBytes+1))
	if err != nil {
		return Envelope{}, fmt.Errorf("envelope: read: %w", err)
	}
	if len(raw) > MaxEnvelopeBytes {
		return Envelope{}, fmt.Errorf("envelope: larger than %d bytes", MaxEnvelopeBytes)
	}
	if len(bytes.TrimSpace(raw)) == 0 {
		return Envelope{}, errors.New("envelope: empty document; want a JSON object")
	}
	// Syntax first, with a line and column.
	var generic any
	gen := json.NewDecoder(bytes.NewReader(raw))
	gen.UseNumber()
	if err := gen.Decode(&generic); err != nil {
		var syntaxErr *json.SyntaxError
		if errors.As(err, &syntaxErr) {
			line, col := lineCol(raw, syntaxErr.Offset-1) // Offset is just past the bad byte
			return Envelope{}, fmt.Errorf("envelope: not valid JSON at line %d, column %d: %v", line, col, strings.TrimPrefix(err.Error(), "json: "))
		}
		if errors.Is(err, io.ErrUnexpectedEOF) {
			return Envelope{}, errors.New("envelope: not valid JSON: the document ends early (unclosed object, array or string)")
		}
		return Envelope{}, fmt.Errorf("envelope: not valid JSON: %v", err)
	}
	if gen.More() {
		line, col := lineCol(raw, gen.InputOffset())
		return Envelope{}, fmt.Errorf("envelope: more than one JSON value in the document (the second starts near line %d, column %d)", line, col)
	}
	if _, ok := generic.(map[string]any); !ok {
		return Envelope{}, fmt.Errorf("envelope: want a JSON object, got %s", jsonKind(generic))
	}
	// The JCS parser is strict JSON (RFC 8259 + I-JSON): it rejects
	// duplicate keys, which encoding/json would silently resolve.
	if _, err := jcs.Transform(raw); err != nil {
		return Envelope{}, fmt.Errorf("envelope: not valid JSON: %v", err)
	}
	if probs := unknownFields(generic, reflect.TypeOf(Envelope{}), ""); len(probs) > 0 {
		return Envelope{}, &ValidationError{Problems: probs}
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	var e Envelope
	if err := dec.Decode(&e); err != nil {
		return Envelope{}, describeJSONError(err)
	}
	e.Normalize()
	if err := e.Validate(sealed); err != nil {
		return Envelope{}, err
	}
	return e, nil
}

// describeJSONError turns encoding/json errors into field-named messages.
func describeJSONError(err error) error {
	var typeErr *json.UnmarshalTypeError
	var syntaxErr *json.SyntaxError
	switch {
	case errors.As(err, &typeErr):
		field := typeErr.Field
		if field == "" {
			return fmt.Errorf("envelope: want a JSON object, got %s", typeErr.Value)
		}
		return &ValidationError{Problems: []Problem{{Field: field, Message: fmt.Sprintf("want %s, got %s", jsonTypeName(typeErr.Type.Kind().String()), typeErr.Value)}}}
	case errors.As(err, &syntaxErr):
		return fmt.Errorf("envelope: not valid JSON at byte %d: %v", syntaxErr.Offset, err)
	case strings.HasPrefix(err.Error(), "json: unknown field "):
		name := strings.TrimPrefix(err.Error(), "json: unknown field ")
		return &ValidationError{Problems: []Problem{{Field: strings.Trim(name, `"`), Message: "unknown field"}}}
	}
	return fmt.Errorf("envelope: %w", err)
}

func jsonKind(v any) string {
	switch v.(type) {
	case []any:
		return "an array"
	case string:
		return "a string"
	case json.Number:
		return "a number"
	case bool:
		return "a boolean"
	case nil:
		return "null"
	}
	return "an object"
}

func jsonTypeName(kind string) string {
	switch kind {
	case "int64", "int", "int32":
		return "an integer"
	case "string":
		return "a string"
	case "slice":
		return "a list"
	case "map", "struct":
		return "an object"
	case "float64":
		return "a number"
	case "bool":
		return "true or false"
	}
	return kind
}
