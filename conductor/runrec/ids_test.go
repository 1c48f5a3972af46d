package runrec

import (
	"strings"
	"testing"
)

func TestValidName(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		s  string
		ok bool
	}{
		{"r-20260101T000000Z-abcd", true}, {"t.demo_1", true}, {"A", true},
		{"", false}, {".", false}, {"..", false}, {"a..b", false}, {"-x", false}, {".hidden", false},
		{"a/b", false}, {`a\b`, false}, {"a b", false}, {"r-1\nPatch-Id: forged", false}, {"é", false},
		{"a" + strings.Repeat("b", 127), true}, {"a" + strings.Repeat("b", 128), false},
	} {
		if got := ValidName(tc.s); got != tc.ok {
			t.Errorf("ValidName(%q) = %v, want %v", tc.s, got, tc.ok)
		}
		if (ValidRunID(tc.s) == nil) != tc.ok || (ValidTaskID(tc.s) == nil) != tc.ok {
			t.Errorf("ValidRunID/ValidTaskID(%q) disagree with ValidName", tc.s)
		}
	}
}
