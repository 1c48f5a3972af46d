package main

import (
	"bytes"
	"slices"
	"strings"
	"testing"
)

func TestHoistFlags(t *testing.T) {
	var out, errb bytes.Buffer
	app := newApp(&deps{Stdout: &out, Stderr: &errb, Getenv: func(string) string { return "" }})
	for _, tc := range []struct {
		name, in, want string
	}{
		{"flags after the id", "decision resolve d-1 --option merge --by bob", "decision resolve --option merge --by bob d-1"},
		{"already first", "decision resolve --option merge d-1", "decision resolve --option merge d-1"},
		{"value with =", "decision resolve d-1 --option=merge", "decision resolve --option=merge d-1"},
		{"bool flag takes no value", "decision show d-1 --json", "decision show --json d-1"},
		{"global flags stay in front", "--data-root /x decision show d-1 --json", "--data-root /x decision show --json d-1"},
		{"after -- nothing moves", "decision show d-1 -- --json", "decision show d-1 -- --json"},
		{"unknown flags move in front, to be named as unknown", "decision show d-1 --frobnicate", "decision show --frobnicate d-1"},
		{"help", "decision show d-1 -h", "decision show -h d-1"},
		{"unknown command", "nosuch a --json", "nosuch a --json"},
		{"value that looks like a flag", "decision raise --by --json --work-ref w", "decision raise --by --json --work-ref w"},
		{"no arguments", "", ""},
		{"global flag after the command", "runs list --database-url u --json", "--database-url u runs list --json"},
		{"global flag after the id", "--data-root r decision show d-1 --database-url=u", "--data-root r --database-url=u decision show d-1"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			in := append([]string{"conductor"}, strings.Fields(tc.in)...)
			want := append([]string{"conductor"}, strings.Fields(tc.want)...)
			got := hoistFlags(app, in)
			if !slices.Equal(got, want) {
				t.Fatalf("hoistFlags(%q)\n got %q\nwant %q", tc.in, got, want)
			}
		})
	}
}

func FuzzHoistFlags(f *testing.F) {
	f.Add("decision resolve d-1 --option merge --by bob")
	f.Add("--data-root x runs list --limit 3 --json")
	f.Add("decision raise --offer a --offer=b -- --x")
	app := newApp(&deps{Stdout: &bytes.Buffer{}, Stderr: &bytes.Buffer{}, Getenv: func(string) string { return "" }})
	f.Fuzz(func(t *testing.T, s string) {
		in := append([]string{"conductor"}, strings.Fields(s)...)
		got := hoistFlags(app, in)
		// A reordering only: the same arguments, the same count.
		a, b := slices.Clone(in), slices.Clone(got)
		slices.Sort(a)
		slices.Sort(b)
		if !slices.Equal(a, b) {
			t.Fatalf("hoistFlags(%q) = %q: not a permutation", in, got)
		}
	})
}
