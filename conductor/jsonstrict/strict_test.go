package jsonstrict

import (
	"encoding/json"
	"strings"
	"testing"
)

func TestDecodePaths(t *testing.T) {
	type inner struct {
		Name string `json:"name"`
		N    int    `json:"n"`
	}
	type outer struct {
		Items []inner          `json:"items"`
		ByKey map[string]inner `json:"byKey"`
		Flag  bool             `json:"flag"`
		Ptr   *inner           `json:"ptr"`
		Raw   json.RawMessage  `json:"raw"`
	}
	tests := []struct{ in, want string }{
		{`{"items":[{"name":"a"},{"nam":"b"}]}`, `cfg.items[1]: unknown field "nam" (known: n, name)`},
		{`{"byKey":{"k":{"n":1.5}}}`, `cfg.byKey.k.n: want an integer, got 1.5`},
		{`{"flag":"yes"}`, `cfg.flag: want true or false, got a JSON string`},
		{`{"ptr":{"n":"1"}}`, `cfg.ptr.n: want an integer, got a JSON string`},
		{`{"items":{}}`, `cfg.items: want an array, got a JSON object`},
		{`{"Flag":true}`, `cfg: unknown field "Flag"`},
		{`{"raw":{"anything":[1,2]}} `, ``},
		{`{"items":[]} x`, `trailing data`},
		{`{"items":[}`, `line 1, column 11`},
		{`{"items":[`, `unexpected end of JSON input`},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			var v outer
			err := Decode([]byte(tt.in), &v, "cfg")
			if tt.want == "" {
				if err != nil {
					t.Fatal(err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("got %v, want %q", err, tt.want)
			}
		})
	}
}
