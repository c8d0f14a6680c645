package envelope

import (
	"fmt"
	"reflect"
	"sort"
	"strings"
)

// unknownFields walks a decoded JSON value against the Go type it will be
// decoded into and reports every object key that type does not have, with
// its full path ("resources.cpu_milis") and, when one is close, the field
// that was probably meant. encoding/json names only the key, not where.
func unknownFields(v any, t reflect.Type, path string) []Problem {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	var out []Problem
	switch t.Kind() {
	case reflect.Struct:
		obj, ok := v.(map[string]any)
		if !ok {
			return nil // a type error; the decoder names it
		}
		fields := jsonFields(t)
		keys := make([]string, 0, len(obj))
		for k := range obj {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		for _, k := range keys {
			f, ok := fields[k]
			if !ok {
				msg := "unknown field"
				if s := closest(k, fields); s != "" {
					msg += fmt.Sprintf(" (did you mean %q?)", s)
				}
				out = append(out, Problem{Field: join(path, k), Message: msg})
				continue
			}
			out = append(out, unknownFields(obj[k], f.Type, join(path, k))...)
		}
	case reflect.Slice, reflect.Array:
		arr, ok := v.([]any)
		if !ok {
			return nil
		}
		for i, e := range arr {
			out = append(out, unknownFields(e, t.Elem(), fmt.Sprintf("%s[%d]", path, i))...)
		}
	}
	return out
}

// jsonFields maps a struct's JSON names to its fields.
func jsonFields(t reflect.Type) map[string]reflect.StructField {
	out := map[string]reflect.StructField{}
	for i := 0; i < t.NumField(); i++ {
		f := t.Field(i)
		if !f.IsExported() {
			continue
		}
		name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		if name == "-" {
			continue
		}
		if name == "" {
			name = f.Name
		}
		out[name] = f
	}
	return out
}

func join(path, key string) string {
	if path == "" {
		return key
	}
	return path + "." + key
}

// closest returns the known name within edit distance 2 of k, if exactly
// one is nearest.
func closest(k string, fields map[string]reflect.StructField) string {
	best, bestD, tie := "", 3, false
	for name := range fields {
		d := editDistance(strings.ToLower(k), name)
		switch {
		case d < bestD:
			best, bestD, tie = name, d, false
		case d == bestD:
			tie = true
		}
	}
	if tie {
		return ""
	}
	return best
}

// editDistance is the Levenshtein distance between a and b.
func editDistance(a, b string) int {
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}

// lineCol turns a byte offset into 1-based line and column.
func lineCol(raw []byte, offset int64) (line, col int) {
	line, col = 1, 1
	for i := int64(0); i < offset && i < int64(len(raw)); i++ {
		if raw[i] == '\n' {
			line, col = line+1, 1
		} else {
			col++
		}
	}
	return line, col
}
