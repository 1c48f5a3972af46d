package web

import (
	"context"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/conductor-dev/conductor/conductor/runrec"
)

// events streams a live view's changes as server-sent events:
//
//	event: live        data: the view's live part, re-rendered (HTML)
//	event: transcript  data: new transcript entries of a run (HTML)
//
// The server polls the store and the run folder every Options.Poll; a view
// is sent only when what it renders changed (the client passes the hash
// of what it shows as `hash`, and a run's transcript offset as `offset`).
func (s *Server) events(w http.ResponseWriter, r *http.Request) {
	if !s.readAllowed(w, r) {
		return
	}
	q := r.URL.Query()
	view, id := q.Get("view"), q.Get("id")
	switch view {
	case "runs", "decisions", "queue", "landed":
	case "run":
		if err := runrec.ValidRunID(id); err != nil {
			s.fail(w, r, http.StatusBadRequest, err.Error())
			return
		}
	default:
		s.fail(w, r, http.StatusBadRequest, fmt.Sprintf("no live view %q", view))
		return
	}
	offset := int64(-1)
	if view == "run" {
		if n, err := strconv.ParseInt(q.Get("offset"), 10, 64); err == nil && n >= 0 {
			offset = n
		}
	}
	fl, ok := w.(http.Flusher)
	if !ok {
		s.fail(w, r, http.StatusInternalServerError, "streaming is not supported here")
		return
	}
	select {
	case s.streams <- struct{}{}:
		defer func() { <-s.streams }()
	default:
		w.Header().Set("Retry-After", "10")
		s.fail(w, r, http.StatusServiceUnavailable, "too many live pages are open; reload later")
		return
	}
	h := w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-store")
	h.Set("X-Accel-Buffering", "no")
	w.WriteHeader(http.StatusOK)
	fmt.Fprint(w, "retry: 2000\n\n")
	fl.Flush()

	ctx := r.Context()
	hash := q.Get("hash")
	tick := time.NewTicker(s.o.Poll)
	defer tick.Stop()
	idle := 0
	for {
		sent := false
		if view == "run" && offset >= 0 {
			ents, _, end := readTranscript(s.runDir(id).Path("transcript.jsonl"), offset)
			if end < offset {
				offset = 0 // replaced
			}
			if len(ents) > 0 {
				html, err := s.renderEntries(ents)
				if err != nil {
					return
				}
				if !send(w, "transcript", strconv.FormatInt(end, 10), s.redact.apply(html)) {
					return
				}
				sent = true
			}
			offset = end
		}
		p, err := s.livePage(ctx, r, view, id)
		if err == nil && p.Hash != hash {
			hash = p.Hash
			if !send(w, "live", hash, s.redact.apply(string(p.LiveHTML))) {
				return
			}
			sent = true
		}
		if !sent {
			if idle++; idle >= 15 {
				idle = 0
				if _, err := fmt.Fprint(w, ": keep-alive\n\n"); err != nil {
					return
				}
				sent = true
			}
		}
		if sent {
			fl.Flush()
		}
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
	}
}

func (s *Server) livePage(ctx context.Context, r *http.Request, view, id string) (page, error) {
	data, err := s.load(ctx, view, id)
	if err != nil {
		return page{}, err
	}
	p := s.newPage(r, view)
	p.LiveID, p.Data = id, data
	err = s.renderLive(&p)
	return p, err
}

func (s *Server) renderEntries(ents []entry) (string, error) {
	var b strings.Builder
	err := s.pages["run"].ExecuteTemplate(&b, "entries", ents)
	return b.String(), err
}

// send writes one event; data lines are each prefixed (SSE joins them
// with newlines again).
func send(w http.ResponseWriter, event, id, data string) bool {
	var b strings.Builder
	fmt.Fprintf(&b, "event: %s\nid: %s\n", event, id)
	for _, line := range strings.Split(data, "\n") {
		b.WriteString("data: ")
		b.WriteString(strings.TrimSuffix(line, "\r"))
		b.WriteByte('\n')
	}
	b.WriteByte('\n')
	_, err := fmt.Fprint(w, b.String())
	return err == nil
}
