package modelscript

import (
	"encoding/json"
	"testing"
)

func FuzzParse(f *testing.F) {
	f.Add(`[{"content":"a","toolCalls":[{"name":"x","arguments":{"a":1}}],"quirks":["uuid-ids"]}]`)
	f.Add(`{"mode":"history","turns":[{"error":{"status":429,"retryAfter":"1"}},{"content":"b"}],"final":{"content":"c"}}`)
	f.Fuzz(func(t *testing.T, in string) {
		s, err := Parse([]byte(in))
		if err != nil {
			return
		}
		if err := s.Validate(); err != nil {
			t.Fatalf("Parse accepted a script Validate rejects: %v", err)
		}
		// Every accepted script renders every turn without panicking.
		h := NewHandler(s)
		for i, turn := range s.Turns {
			if !turn.IsError() {
				b, err := json.Marshal(h.render(i, i, turn, 10))
				if err != nil || !json.Valid(b) {
					t.Fatalf("turn %d renders invalid JSON: %v", i, err)
				}
			}
		}
	})
}
