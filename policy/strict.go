package policy

import (
	"encoding/json"
	"fmt"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"sync"
)

type fieldInfo struct {
	name string
	typ  reflect.Type
}

var fieldCache sync.Map // reflect.Type → map[string]fieldInfo

func typeOf(v any) reflect.Type {
	t := reflect.TypeOf(v)
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	return t
}

func fieldsOf(t reflect.Type) map[string]fieldInfo {
	if m, ok := fieldCache.Load(t); ok {
		return m.(map[string]fieldInfo)
	}
	m := map[string]fieldInfo{}
	for i := 0; i < t.NumField(); i++ {
		f := t.Field(i)
		tag := f.Tag.Get("json")
		name, _, _ := strings.Cut(tag, ",")
		if name == "-" || !f.IsExported() {
			continue
		}
		if name == "" {
			name = f.Name
		}
		m[name] = fieldInfo{name: name, typ: f.Type}
	}
	fieldCache.Store(t, m)
	return m
}

func jsonKind(v any) string {
	switch v.(type) {
	case nil:
		return "null"
	case map[string]any:
		return "an object"
	case []any:
		return "an array"
	case string:
		return "a string"
	case bool:
		return "a boolean"
	case json.Number:
		return "a number"
	}
	return fmt.Sprintf("%T", v)
}

func wantKind(t reflect.Type) string {
	switch t.Kind() {
	case reflect.Struct, reflect.Map:
		return "an object"
	case reflect.Slice:
		return "an array"
	case reflect.String:
		return "a string"
	case reflect.Bool:
		return "a boolean"
	case reflect.Int, reflect.Int64, reflect.Int32:
		return "an integer"
	}
	return t.String()
}

// walkType checks a decoded JSON value against a Go type.
func walkType(file, field string, v any, t reflect.Type, probs *[]Problem) {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	bad := func(msg string) {
		*probs = append(*probs, Problem{File: file, Field: field, Message: msg})
	}
	if v == nil {
		bad("null is not allowed: want " + wantKind(t) + " (leave the field out to keep the default)")
		return
	}
	switch t.Kind() {
	case reflect.Struct:
		obj, ok := v.(map[string]any)
		if !ok {
			bad("want " + wantKind(t) + ", got " + jsonKind(v))
			return
		}
		fields := fieldsOf(t)
		for _, k := range sortedKeys(obj) {
			sub := k
			if field != "" {
				sub = field + "." + k
			}
			fi, ok := fields[k]
			if !ok {
				*probs = append(*probs, Problem{File: file, Field: sub,
					Message: "unknown field (known: " + knownFields(fields) + ")"})
				continue
			}
			walkType(file, sub, obj[k], fi.typ, probs)
		}
	case reflect.Slice:
		arr, ok := v.([]any)
		if !ok {
			bad("want " + wantKind(t) + ", got " + jsonKind(v))
			return
		}
		for i, e := range arr {
			walkType(file, field+"["+strconv.Itoa(i)+"]", e, t.Elem(), probs)
		}
	case reflect.String:
		if _, ok := v.(string); !ok {
			bad("want a string, got " + jsonKind(v))
		}
	case reflect.Bool:
		if _, ok := v.(bool); !ok {
			bad("want a boolean (true or false), got " + jsonKind(v))
		}
	case reflect.Int, reflect.Int64, reflect.Int32:
		n, ok := v.(json.Number)
		if !ok {
			bad("want an integer, got " + jsonKind(v))
			return
		}
		if _, err := strconv.ParseInt(n.String(), 10, t.Bits()); err != nil {
			bad("want an integer, got " + n.String())
		}
	default:
		bad("unsupported type " + t.String())
	}
}

func sortedKeys(m map[string]any) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}
