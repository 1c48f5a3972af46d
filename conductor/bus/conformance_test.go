package bus_test

import (
	"context"
	"testing"
	"time"

	"github.com/conductor-dev/conductor/conductor/bus"
	"github.com/conductor-dev/conductor/conductor/bus/bustest"
	"github.com/conductor-dev/conductor/conductor/testenv"
)

func TestConformanceEmbedded(t *testing.T) {
	bustest.Run(t, func(t *testing.T, now func() time.Time) bus.Store {
		s, err := bus.Open(context.Background(), bus.Options{DataRoot: t.TempDir(), Now: now})
		if err != nil {
			t.Fatal(err)
		}
		if s.Backend() != "embedded" {
			t.Fatalf("backend %q", s.Backend())
		}
		return s
	})
}

func TestConformancePostgres(t *testing.T) {
	testenv.Postgres(t) // skip early when absent
	bustest.Run(t, func(t *testing.T, now func() time.Time) bus.Store {
		s, err := bus.Open(context.Background(), bus.Options{DatabaseURL: testenv.Postgres(t), Now: now})
		if err != nil {
			t.Fatal(err)
		}
		if s.Backend() != "postgres" {
			t.Fatalf("backend %q", s.Backend())
		}
		return s
	})
}
