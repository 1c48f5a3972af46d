package web

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"regexp"
	"sort"
	"time"

	"github.com/conductor-dev/conductor/conductor/bus"
	"github.com/conductor-dev/conductor/conductor/queue"
)

// The fleet on the Queue page: dead letters (retry, drop), the workers'
// heartbeats and the model slots in use per alias.

// deadLetter is a dead letter as the Queue page shows it.
type deadLetter struct {
	queue.DeadLetter
	RunID string
}

// workerRow is a worker's heartbeat, with whether it is gone.
type workerRow struct {
	bus.Heartbeat
	Gone bool
}

// workersShown is how long a gone worker stays on the page.
const workersShown = time.Hour

// fleet fills the Queue page's dead letters, workers and model slots. A
// source that fails is reported on the page, never the page's failure.
func (s *Server) fleet(ctx context.Context, p *queuePage) {
	p.QueueName = s.o.QueueName
	if s.o.DeadLetters != nil {
		dls, err := s.o.DeadLetters.DeadLetters(ctx)
		if err != nil {
			p.DeadError = err.Error()
		}
		for _, dl := range dls {
			row := deadLetter{DeadLetter: dl}
			if j, err := queue.ParseJob(dl.Raw()); err == nil {
				row.RunID = j.RunID
			}
			p.Dead = append(p.Dead, row)
		}
		p.DeadShown = true
	}
	if ws, ok := s.o.Store.(bus.Workers); ok {
		now := s.o.Now()
		hs, err := ws.ListHeartbeats(ctx, now.Add(-workersShown))
		if err != nil {
			p.WorkersError = err.Error()
		}
		for _, h := range hs {
			p.Workers = append(p.Workers, workerRow{Heartbeat: h, Gone: h.Gone(now)})
		}
		// Live ones first, each group newest first.
		sort.SliceStable(p.Workers, func(i, j int) bool { return !p.Workers[i].Gone && p.Workers[j].Gone })
		p.WorkersShown = true
	}
	if s.o.ModelSlots != nil {
		use, err := s.o.ModelSlots(ctx)
		if err != nil {
			p.SlotsError = err.Error()
		}
		p.Slots, p.SlotsShown = use, true
	}
}

// deadID is what a dead letter is named by: its payload id or run id (or
// the embedded queue's row id).
var deadID = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$`)

// deadAction retries or drops a dead letter, as `conductor queue dead
// retry|drop ID` does, for an operator.
func (s *Server) deadAction(op string) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		who, ok := s.mutation(w, r)
		if !ok {
			return
		}
		id := r.PathValue("id")
		if !deadID.MatchString(id) {
			s.fail(w, r, http.StatusBadRequest, "refused: a dead letter is named by its payload id or run id (letters, digits, '.', '_', '-')")
			return
		}
		if s.o.DeadLetters == nil {
			s.fail(w, r, http.StatusNotFound, "refused: this server was started without a queue, so it keeps no dead letters")
			return
		}
		f := s.o.DeadLetters.RetryDead
		if op == "drop" {
			f = s.o.DeadLetters.DropDead
		}
		if err := f(r.Context(), id); err != nil {
			if errors.Is(err, queue.ErrNoDeadLetter) {
				s.fail(w, r, http.StatusNotFound, fmt.Sprintf("refused: there is no dead letter %s on %s (retried or dropped already?) — nothing was changed", id, s.o.QueueName))
				return
			}
			s.o.Log.Error("serve: dead letter "+op, "id", id, "err", err)
			s.fail(w, r, http.StatusServiceUnavailable, fmt.Sprintf("the queue could not %s dead letter %s: %v", op, id, err))
			return
		}
		s.o.Log.Info("serve: dead letter "+map[string]string{"retry": "requeued", "drop": "dropped"}[op], "id", id, "queue", s.o.QueueName, "operator", who.operator)
		http.Redirect(w, r, "/queue#dead", http.StatusSeeOther)
	}
}
