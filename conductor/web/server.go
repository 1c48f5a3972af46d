package web

import (
	"bytes"
	"context"
	"crypto/sha256"
	"embed"
	"encoding/hex"
	"errors"
	"fmt"
	"html/template"
	"io"
	"io/fs"
	"log/slog"
	"net"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/conductor-dev/conductor/conductor/bus"
	"github.com/conductor-dev/conductor/conductor/queue"
	"github.com/conductor-dev/conductor/conductor/runrec"
)

//go:embed assets
var assets embed.FS

// Options configures the server.
type Options struct {
	Store   bus.Store
	RunsDir string // the run folders (data root's runs/)
	// Listen is host:port; the host must be a loopback address unless
	// Operators is non-empty (ErrTokenRequired).
	Listen string
	// Operators may change things (notes, decisions); with none, the view
	// is read-only. Off loopback, every page needs one of their tokens.
	Operators []Operator
	// Poll is how often live pages look for changes (default 1s).
	Poll time.Duration
	// Pools lists the worker pools (nil: not shown).
	Pools func(ctx context.Context) ([]Pool, error)
	// DeadLetters is the queue's dead-letter list (Redis or the embedded
	// store's), retried and dropped from the Queue page (nil: not shown).
	DeadLetters queue.DeadLetters
	QueueName   string // the queue, as its banner names it
	// ModelSlots lists the model slots in use per alias (nil: not shown).
	ModelSlots func(ctx context.Context) ([]bus.SlotUse, error)
	// Audit checks a landed commit against its receipt (the CLI passes
	// land.Audit; nil: the Landed page shows the receipt unchecked).
	Audit func(ctx context.Context, repo, commit string) (Audit, error)
	// Preview runs a landing preview of an open decision as the operator
	// (the CLI passes land.Preview: the dry run as if merged now; it runs
	// the gate in the sandbox and changes nothing). nil: no preview button.
	// A refusal is returned as an error wrapping *refusal.Refusal.
	Preview func(ctx context.Context, decisionID, operator string) (Preview, error)
	Log     *slog.Logger
	Now     func() time.Time
	// Ready, if set, is called with the bound address once listening.
	Ready func(addr string)
	// MaxStreams bounds the live connections served at once (default 64).
	MaxStreams int
	// Secrets are values no page or event may show (the CLI passes the
	// credentials of its own environment); the operator tokens are added.
	// Values shorter than MinSecretLen are ignored.
	Secrets []string
}

// Server is the mission-control web view; it is an http.Handler.
type Server struct {
	o       Options
	views   bus.Views // nil: the store offers no listings
	auth    *auth
	pages   map[string]*template.Template
	mux     *http.ServeMux
	streams chan struct{}
	git     gitCache
	redact  redactor
	prev    previews
	// bg is the server's lifetime: background work (previews) ends with it.
	bg   context.Context
	stop context.CancelFunc
	// readsNeedToken: off loopback, pages need a session or bearer too.
	readsNeedToken bool
}

// New builds the server (it does not listen; Run does).
func New(o Options) (*Server, error) {
	if o.Store == nil {
		return nil, errors.New("serve: no store")
	}
	if o.Poll <= 0 {
		o.Poll = time.Second
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.Log == nil {
		o.Log = slog.New(slog.DiscardHandler)
	}
	if o.MaxStreams <= 0 {
		o.MaxStreams = 64
	}
	if err := CheckOperators(o.Operators); err != nil {
		return nil, fmt.Errorf("serve: %w", err)
	}
	if o.Listen != "" && !Loopback(o.Listen) && len(o.Operators) == 0 {
		return nil, ErrTokenRequired
	}
	s := &Server{
		o:              o,
		auth:           &auth{ops: o.Operators, now: o.Now, sessions: map[string]session{}},
		streams:        make(chan struct{}, o.MaxStreams),
		git:            newGitCache(),
		readsNeedToken: o.Listen != "" && !Loopback(o.Listen),
	}
	secrets := slices.Clone(o.Secrets)
	for _, op := range o.Operators {
		secrets = append(secrets, op.Token)
	}
	s.redact = newRedactor(secrets)
	s.bg, s.stop = context.WithCancel(context.Background())
	if v, err := bus.ViewsOf(o.Store); err == nil {
		s.views = v
	}
	if err := s.parseTemplates(); err != nil {
		return nil, err
	}
	s.routes()
	return s, nil
}

// Run listens on o.Listen and serves until ctx ends.
func Run(ctx context.Context, o Options) error {
	if o.Listen == "" {
		o.Listen = "127.0.0.1:8377"
	}
	s, err := New(o)
	if err != nil {
		return err
	}
	defer s.Close()
	ln, err := net.Listen("tcp", o.Listen)
	if err != nil {
		return fmt.Errorf("serve: %w", err)
	}
	srv := &http.Server{
		Handler:           s,
		ReadHeaderTimeout: 10 * time.Second,
		ReadTimeout:       30 * time.Second,
		IdleTimeout:       2 * time.Minute,
		MaxHeaderBytes:    64 << 10,
		BaseContext:       func(net.Listener) context.Context { return ctx }, // ends live streams on shutdown
		ErrorLog:          slog.NewLogLogger(s.o.Log.Handler(), slog.LevelDebug),
	}
	addr := ln.Addr().String()
	s.o.Log.Info("mission control listening", "url", "http://"+addr+"/", "operators", len(o.Operators))
	if o.Ready != nil {
		o.Ready(addr)
	}
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	select {
	case err := <-errc:
		return fmt.Errorf("serve: %w", err)
	case <-ctx.Done():
	}
	shut, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := srv.Shutdown(shut); err != nil {
		srv.Close()
	}
	return ctx.Err()
}

// Close ends the server's background work (a running preview is
// cancelled: its gate is killed) and waits for it.
func (s *Server) Close() {
	s.stop()
	s.prev.wg.Wait()
}

func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	h := w.Header()
	h.Set("Content-Security-Policy", "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'")
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("Referrer-Policy", "same-origin")
	h.Set("X-Frame-Options", "DENY")
	if !s.readsNeedToken && !loopbackHost(r.Host) {
		// Listening on loopback, pages are open to this machine only. A
		// page of another site whose name resolves here (DNS rebinding)
		// sends its own Host: refused.
		http.Error(w, "refused: this server answers only to localhost, 127.0.0.1 or [::1] (Host "+strconvQuote(r.Host)+")", http.StatusMisdirectedRequest)
		return
	}
	defer func() {
		if v := recover(); v != nil {
			if v == http.ErrAbortHandler {
				panic(v)
			}
			s.o.Log.Error("serve: handler panicked", "path", r.URL.Path, "panic", v)
			http.Error(w, "internal error", http.StatusInternalServerError)
		}
	}()
	s.mux.ServeHTTP(w, r)
}

func (s *Server) routes() {
	m := http.NewServeMux()
	static, _ := fs.Sub(assets, "assets/static")
	m.Handle("GET /static/", http.StripPrefix("/static/", cacheStatic(http.FileServerFS(static))))
	m.HandleFunc("GET /{$}", func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, "/runs", http.StatusSeeOther)
	})
	m.HandleFunc("GET /login", s.loginPage)
	m.HandleFunc("POST /login", s.login)
	m.HandleFunc("POST /logout", s.logout)
	m.HandleFunc("GET /runs", s.page("runs"))
	m.HandleFunc("GET /runs/{id}", s.page("run"))
	m.HandleFunc("POST /runs/{id}/notes", s.addNote)
	m.HandleFunc("GET /decisions", s.page("decisions"))
	m.HandleFunc("POST /decisions/{id}/resolve", s.resolve)
	m.HandleFunc("POST /decisions/{id}/preview", s.preview)
	m.HandleFunc("GET /queue", s.page("queue"))
	m.HandleFunc("POST /queue/dead/{id}/retry", s.deadAction("retry"))
	m.HandleFunc("POST /queue/dead/{id}/drop", s.deadAction("drop"))
	m.HandleFunc("GET /landed", s.page("landed"))
	m.HandleFunc("GET /events", s.events)
	m.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		s.fail(w, r, http.StatusNotFound, "no page here: "+r.URL.Path)
	})
	s.mux = m
}

func cacheStatic(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Cache-Control", "public, max-age=300")
		h.ServeHTTP(w, r)
	})
}

// ---- templates ----

var funcs = template.FuncMap{
	"when": func(t time.Time) string {
		if t.IsZero() {
			return "–"
		}
		return t.UTC().Format("2006-01-02 15:04:05Z")
	},
	"dur": func(d time.Duration) string {
		if d <= 0 {
			return "–"
		}
		return d.Round(time.Second).String()
	},
	"tokens": func(n *int64) string {
		if n == nil {
			return "–"
		}
		return fmt.Sprint(*n)
	},
	"short": func(s string) string {
		if len(s) > 12 {
			return s[:12]
		}
		if s == "" {
			return "–"
		}
		return s
	},
	"dash": func(s string) string {
		if s == "" {
			return "–"
		}
		return s
	},
	"join":  strings.Join,
	"lower": strings.ToLower,
}

var pageTitles = map[string]string{
	"runs": "Runs", "run": "Run", "decisions": "Decisions", "queue": "Queue and workers",
	"landed": "Landed", "login": "Log in", "error": "Refused",
}

func (s *Server) parseTemplates() error {
	s.pages = map[string]*template.Template{}
	for name := range pageTitles {
		t, err := template.New("layout.html").Funcs(funcs).ParseFS(assets, "assets/templates/layout.html",
			"assets/templates/parts.html", "assets/templates/"+name+".html")
		if err != nil {
			return fmt.Errorf("serve: templates: %w", err)
		}
		s.pages[name] = t
	}
	return nil
}

// page is what every template gets.
type page struct {
	Name     string
	Title    string
	Operator string // "" : not logged in
	CSRF     string
	CanAct   bool // operators are configured
	// CanPreview: the server runs landing previews (Options.Preview).
	CanPreview bool
	LiveID     string
	Hash       string
	LiveHTML   template.HTML
	Data       any
	Message    string
	Next       string
}

func (s *Server) newPage(r *http.Request, name string) page {
	p := page{Name: name, Title: pageTitles[name], CanAct: len(s.o.Operators) > 0, CanPreview: s.o.Preview != nil}
	if w, ok := s.auth.identify(r); ok {
		p.Operator, p.CSRF = w.operator, w.csrf
	}
	return p
}

// load reads the data of a live view.
func (s *Server) load(ctx context.Context, name, id string) (any, error) {
	switch name {
	case "runs":
		return s.runRows(ctx)
	case "run":
		return s.loadRun(ctx, id)
	case "decisions":
		open, resolved, err := s.decisionCards(ctx)
		return map[string]any{"Open": open, "Resolved": resolved}, err
	case "queue":
		return s.queuePage(ctx)
	case "landed":
		return s.landedRows(ctx)
	}
	return nil, fmt.Errorf("no view %q", name)
}

// renderLive renders a page's live part and its hash.
func (s *Server) renderLive(p *page) error {
	var buf bytes.Buffer
	if err := s.pages[p.Name].ExecuteTemplate(&buf, "live", p); err != nil {
		return err
	}
	p.LiveHTML = template.HTML(buf.String())
	sum := sha256.Sum256(buf.Bytes())
	p.Hash = hex.EncodeToString(sum[:8])
	return nil
}

// readAllowed reports whether r may read pages (off loopback a token is
// needed for reading too); when not, it answered already.
func (s *Server) readAllowed(w http.ResponseWriter, r *http.Request) bool {
	if !s.readsNeedToken {
		return true
	}
	if _, ok := s.auth.identify(r); ok {
		return true
	}
	if r.Header.Get("Accept") == "text/event-stream" || r.URL.Path == "/events" {
		s.fail(w, r, http.StatusForbidden, "refused: log in first")
		return false
	}
	http.Redirect(w, r, "/login?next="+urlQueryEscape(r.URL.RequestURI()), http.StatusSeeOther)
	return false
}

func (s *Server) page(name string) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if !s.readAllowed(w, r) {
			return
		}
		id := r.PathValue("id")
		if name == "run" {
			if err := runrec.ValidRunID(id); err != nil {
				s.fail(w, r, http.StatusBadRequest, err.Error())
				return
			}
		}
		data, err := s.load(r.Context(), name, id)
		if err != nil {
			s.storeError(w, r, err)
			return
		}
		p := s.newPage(r, name)
		p.LiveID, p.Data = id, data
		if name == "run" {
			p.Title = "Run " + id
		}
		if err := s.renderLive(&p); err != nil {
			s.storeError(w, r, err)
			return
		}
		s.write(w, http.StatusOK, p)
	}
}

func (s *Server) write(w http.ResponseWriter, status int, p page) {
	var buf bytes.Buffer
	if err := s.pages[p.Name].ExecuteTemplate(&buf, "layout.html", p); err != nil {
		s.o.Log.Error("serve: render", "page", p.Name, "err", err)
		http.Error(w, "internal error: the page could not be rendered", http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	io.WriteString(w, s.redact.apply(buf.String()))
}

// fail answers with a page saying what was refused and why.
func (s *Server) fail(w http.ResponseWriter, r *http.Request, status int, msg string) {
	if r.Method == http.MethodPost {
		s.o.Log.Warn("serve: refused", "path", r.URL.Path, "status", status, "reason", msg, "remote", r.RemoteAddr)
	}
	p := s.newPage(r, "error")
	p.Message = msg
	p.Title = http.StatusText(status)
	p.Next = backTo(r)
	s.write(w, status, p)
}

func (s *Server) storeError(w http.ResponseWriter, r *http.Request, err error) {
	if errors.Is(err, bus.ErrNotFound) {
		s.fail(w, r, http.StatusNotFound, err.Error())
		return
	}
	s.o.Log.Error("serve: reading the store", "path", r.URL.Path, "err", err)
	s.fail(w, r, http.StatusInternalServerError, "reading the store failed: "+err.Error())
}

// backTo is the local page a refused form came from.
func backTo(r *http.Request) string {
	switch {
	case strings.HasPrefix(r.URL.Path, "/decisions"):
		return "/decisions"
	case strings.HasPrefix(r.URL.Path, "/runs/"):
		if id := r.PathValue("id"); id != "" && runrec.ValidRunID(id) == nil {
			return "/runs/" + id
		}
	}
	return "/runs"
}
