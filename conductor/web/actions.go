package web

import (
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"unicode/utf8"

	"github.com/conductor-dev/conductor/conductor/bus"
	"github.com/conductor-dev/conductor/conductor/refusal"
	"github.com/conductor-dev/conductor/conductor/runrec"
)

const (
	maxForm     = 64 << 10
	maxNoteText = 8 << 10
)

func urlQueryEscape(s string) string { return url.QueryEscape(s) }

// localPath keeps a redirect on this server.
func localPath(next string) string {
	if !strings.HasPrefix(next, "/") || strings.HasPrefix(next, "//") || strings.HasPrefix(next, `/\`) || strings.ContainsAny(next, "\r\n") {
		return "/runs"
	}
	return next
}

func (s *Server) loginPage(w http.ResponseWriter, r *http.Request) {
	p := s.newPage(r, "login")
	p.Next = localPath(r.URL.Query().Get("next"))
	s.write(w, http.StatusOK, p)
}

func (s *Server) login(w http.ResponseWriter, r *http.Request) {
	r.Body = http.MaxBytesReader(w, r.Body, maxForm)
	if !sameOrigin(r) {
		s.fail(w, r, http.StatusForbidden, "refused: the request does not come from this server's pages (cross-origin)")
		return
	}
	if len(s.o.Operators) == 0 {
		s.fail(w, r, http.StatusForbidden, "refused: no operator token is configured on this server")
		return
	}
	name := s.auth.operatorFor(strings.TrimSpace(r.PostFormValue("token")))
	if name == "" {
		s.o.Log.Warn("serve: login with a wrong token", "remote", r.RemoteAddr)
		p := s.newPage(r, "login")
		p.Message = "That token is not an operator's token."
		p.Next = localPath(r.PostFormValue("next"))
		s.write(w, http.StatusForbidden, p)
		return
	}
	cookie, _ := s.auth.open(name)
	http.SetCookie(w, &http.Cookie{Name: sessionCookie, Value: cookie, Path: "/", HttpOnly: true,
		SameSite: http.SameSiteStrictMode, Secure: r.TLS != nil, MaxAge: int(sessionTTL.Seconds())})
	s.o.Log.Info("serve: operator logged in", "operator", name, "remote", r.RemoteAddr)
	http.Redirect(w, r, localPath(r.PostFormValue("next")), http.StatusSeeOther)
}

// mutation opens every state-changing request: the form is bounded
// (maxForm) and the request must carry an operator's token and this
// server's CSRF token (auth.authorize); otherwise it is refused with 403 and
// ok is false.
func (s *Server) mutation(w http.ResponseWriter, r *http.Request) (who, bool) {
	r.Body = http.MaxBytesReader(w, r.Body, maxForm)
	op, err := s.auth.authorize(r)
	if err != nil {
		s.fail(w, r, http.StatusForbidden, err.Error())
		return who{}, false
	}
	return op, true
}

func (s *Server) logout(w http.ResponseWriter, r *http.Request) {
	if _, ok := s.mutation(w, r); !ok {
		return
	}
	if c, err := r.Cookie(sessionCookie); err == nil {
		s.auth.close(c.Value)
	}
	http.SetCookie(w, &http.Cookie{Name: sessionCookie, Value: "", Path: "/", MaxAge: -1, HttpOnly: true, SameSite: http.SameSiteStrictMode})
	http.Redirect(w, r, "/runs", http.StatusSeeOther)
}

// addNote leaves an operator note for a running session.
func (s *Server) addNote(w http.ResponseWriter, r *http.Request) {
	who, ok := s.mutation(w, r)
	if !ok {
		return
	}
	id := r.PathValue("id")
	if err := runrec.ValidRunID(id); err != nil {
		s.fail(w, r, http.StatusBadRequest, err.Error())
		return
	}
	text := strings.TrimSpace(r.PostFormValue("text"))
	switch {
	case text == "":
		s.fail(w, r, http.StatusBadRequest, "refused: the note is empty")
		return
	case len(text) > maxNoteText || !utf8.ValidString(text):
		s.fail(w, r, http.StatusBadRequest, fmt.Sprintf("refused: a note is at most %d bytes of UTF-8 text", maxNoteText))
		return
	}
	run, err := s.o.Store.GetRun(r.Context(), id)
	if errors.Is(err, bus.ErrNotFound) {
		s.fail(w, r, http.StatusNotFound, fmt.Sprintf("refused: run %s is not in the store, so no session would read a note", id))
		return
	}
	if err != nil {
		s.storeError(w, r, err)
		return
	}
	if run.Status != runrec.StatusRunning {
		s.fail(w, r, http.StatusConflict, fmt.Sprintf("refused: run %s is %s: a note would never be delivered (nothing was stored)", id, run.Status))
		return
	}
	n, err := s.o.Store.AddNote(r.Context(), bus.Note{RunID: id, Text: text, CreatedAt: s.o.Now()})
	if err != nil {
		s.storeError(w, r, err)
		return
	}
	s.o.Log.Info("serve: note added", "run", id, "note", n.ID, "operator", who.operator)
	http.Redirect(w, r, "/runs/"+id+"#notes", http.StatusSeeOther)
}

// resolve answers a decision with one of its options, as the operator.
func (s *Server) resolve(w http.ResponseWriter, r *http.Request) {
	who, ok := s.mutation(w, r)
	if !ok {
		return
	}
	id := r.PathValue("id")
	option := r.PostFormValue("option")
	if id == "" || len(id) > 128 || option == "" || len(option) > 64 {
		s.fail(w, r, http.StatusBadRequest, "refused: a decision id and an option are required")
		return
	}
	d, err := s.o.Store.ResolveDecision(r.Context(), id, option, who.operator)
	if err != nil {
		var rf *refusal.Refusal
		switch {
		case errors.Is(err, bus.ErrNotFound):
			s.fail(w, r, http.StatusNotFound, fmt.Sprintf("refused: there is no decision %s", id))
		case errors.As(err, &rf):
			msg := rf.Error() + " — nothing was changed"
			if rf.Fix != "" {
				msg += " (" + rf.Fix + ")"
			}
			s.fail(w, r, http.StatusConflict, msg)
		default:
			s.storeError(w, r, err)
		}
		return
	}
	s.o.Log.Info("serve: decision resolved", "decision", d.ID, "option", d.Option, "operator", who.operator)
	http.Redirect(w, r, "/decisions#"+d.ID, http.StatusSeeOther)
}
