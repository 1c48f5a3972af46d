// Package jsonstrict decodes configuration JSON strictly: unknown fields,
// values of the wrong JSON type and trailing data are errors naming the
// field path; syntax errors name the line and column. It is a leaf: it
// imports nothing of conductor's, so production config (the model
// registry) and test doubles (scripted models) share it without either
// importing the other.
package jsonstrict

import (
	"bytes"
	"encoding"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"reflect"
	"strings"
)

// Decode decodes one JSON value into v (a pointer). Unknown object
// fields, values of the wrong JSON type and trailing data are errors that
// name the field path from root, e.g. `turns[2].toolCalls[0].name: unknown
// field "nmae"`. Syntax errors name the line and column.
func Decode(data []byte, v any, root string) error {
	rv := reflect.ValueOf(v)
	if rv.Kind() != reflect.Pointer || rv.IsNil() {
		return errors.New("jsonstrict.Decode: want a non-nil pointer")
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	var raw json.RawMessage
	if err := dec.Decode(&raw); err != nil {
		return describeSyntax(data, err)
	}
	if _, err := dec.Token(); err != io.EOF {
		line, col := lineCol(data, dec.InputOffset())
		return fmt.Errorf("line %d, column %d: trailing data after the JSON value", line, col)
	}
	if err := checkShape(raw, rv.Type().Elem(), root); err != nil {
		return err
	}
	if err := json.Unmarshal(raw, v); err != nil {
		// checkShape catches the usual mistakes; this names what remains.
		var typ *json.UnmarshalTypeError
		if errors.As(err, &typ) {
			return fmt.Errorf("%s: want %s, got JSON %s", joinPath(root, typ.Field), typ.Type, typ.Value)
		}
		return fmt.Errorf("%s: %w", pathOrTop(root), err)
	}
	return nil
}

func describeSyntax(data []byte, err error) error {
	var syn *json.SyntaxError
	if errors.As(err, &syn) {
		// Offset counts the offending byte; point at it.
		line, col := lineCol(data, max(syn.Offset-1, 0))
		return fmt.Errorf("line %d, column %d: %v", line, col, strings.TrimPrefix(syn.Error(), "json: "))
	}
	if errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, io.EOF) {
		return errors.New("unexpected end of JSON input")
	}
	return err
}

// LineCol is the 1-based line and column of byte offset off in data.
func LineCol(data []byte, off int64) (int, int) { return lineCol(data, off) }

func lineCol(data []byte, off int64) (int, int) {
	if off > int64(len(data)) {
		off = int64(len(data))
	}
	before := data[:off]
	line := bytes.Count(before, []byte("\n")) + 1
	col := int(off) - bytes.LastIndexByte(before, '\n')
	return line, col
}

func joinPath(root, field string) string {
	switch {
	case root == "":
		return pathOrTop(field)
	case field == "":
		return root
	default:
		return root + "." + field
	}
}

func pathOrTop(p string) string {
	if p == "" {
		return "(top level)"
	}
	return p
}

var (
	rawMessageType = reflect.TypeFor[json.RawMessage]()
	unmarshalerT   = reflect.TypeFor[json.Unmarshaler]()
	textUnmarshalT = reflect.TypeFor[encoding.TextUnmarshaler]()
)

// jsonKind is the JSON type of a raw value: object, array, string, number,
// boolean or null.
func jsonKind(raw json.RawMessage) string {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 {
		return "nothing"
	}
	switch raw[0] {
	case '{':
		return "object"
	case '[':
		return "array"
	case '"':
		return "string"
	case 't', 'f':
		return "boolean"
	case 'n':
		return "null"
	default:
		return "number"
	}
}

// checkShape walks raw against the Go type t: every object key must be a
// field of the struct, every value of a JSON type the field can hold.
func checkShape(raw json.RawMessage, t reflect.Type, path string) error {
	kind := jsonKind(raw)
	if kind == "null" {
		return nil // json leaves the zero value
	}
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if t == rawMessageType {
		return nil
	}
	// Types that decode themselves (durations and the like) are checked by
	// decoding, so their errors get the path too.
	if reflect.PointerTo(t).Implements(unmarshalerT) {
		u := reflect.New(t).Interface().(json.Unmarshaler)
		if err := u.UnmarshalJSON(raw); err != nil {
			return fmt.Errorf("%s: %v", pathOrTop(path), err)
		}
		return nil
	}
	if reflect.PointerTo(t).Implements(textUnmarshalT) {
		if kind != "string" {
			return fmt.Errorf("%s: want a string, got a JSON %s", pathOrTop(path), kind)
		}
		return nil
	}
	want := func(desc string) error {
		return fmt.Errorf("%s: want %s, got a JSON %s", pathOrTop(path), desc, kind)
	}
	switch t.Kind() {
	case reflect.Interface:
		return nil
	case reflect.String:
		if kind != "string" {
			return want("a string")
		}
	case reflect.Bool:
		if kind != "boolean" {
			return want("true or false")
		}
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		if kind != "number" {
			return want("an integer")
		}
		var n json.Number
		if err := json.Unmarshal(raw, &n); err != nil {
			return want("an integer")
		}
		if _, err := n.Int64(); err != nil {
			return fmt.Errorf("%s: want an integer, got %s", pathOrTop(path), n)
		}
	case reflect.Float32, reflect.Float64:
		if kind != "number" {
			return want("a number")
		}
	case reflect.Slice, reflect.Array:
		if kind != "array" {
			return want("an array")
		}
		var items []json.RawMessage
		if err := json.Unmarshal(raw, &items); err != nil {
			return fmt.Errorf("%s: %w", pathOrTop(path), err)
		}
		for i, item := range items {
			if err := checkShape(item, t.Elem(), fmt.Sprintf("%s[%d]", path, i)); err != nil {
				return err
			}
		}
	case reflect.Map:
		if kind != "object" {
			return want("an object")
		}
		var m map[string]json.RawMessage
		if err := json.Unmarshal(raw, &m); err != nil {
			return fmt.Errorf("%s: %w", pathOrTop(path), err)
		}
		for _, k := range sortedKeys(m) {
			if err := checkShape(m[k], t.Elem(), joinPath(path, k)); err != nil {
				return err
			}
		}
	case reflect.Struct:
		if kind != "object" {
			return want("an object")
		}
		var m map[string]json.RawMessage
		if err := json.Unmarshal(raw, &m); err != nil {
			return fmt.Errorf("%s: %w", pathOrTop(path), err)
		}
		fields := structFields(t)
		for _, k := range sortedKeys(m) {
			f, ok := fields[k]
			if !ok {
				return fmt.Errorf("%s: unknown field %q (known: %s)", pathOrTop(path), k, strings.Join(sortedKeys(fields), ", "))
			}
			if err := checkShape(m[k], f.Type, joinPath(path, k)); err != nil {
				return err
			}
		}
	}
	return nil
}

// structFields maps the JSON names of t's exported fields (as encoding/json
// sees them, without case folding: configuration keys are exact) to fields.
func structFields(t reflect.Type) map[string]reflect.StructField {
	out := map[string]reflect.StructField{}
	for i := 0; i < t.NumField(); i++ {
		f := t.Field(i)
		if !f.IsExported() {
			continue
		}
		tag := f.Tag.Get("json")
		if tag == "-" {
			continue
		}
		name, _, _ := strings.Cut(tag, ",")
		if name == "" {
			name = f.Name
		}
		out[name] = f
	}
	return out
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	for i := 1; i < len(keys); i++ {
		for j := i; j > 0 && keys[j] < keys[j-1]; j-- {
			keys[j], keys[j-1] = keys[j-1], keys[j]
		}
	}
	return keys
}
