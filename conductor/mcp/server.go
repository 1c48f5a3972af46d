package mcp

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"time"

	"github.com/google/jsonschema-go/jsonschema"
	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/conductor-dev/conductor/conductor/bus"
	"github.com/conductor-dev/conductor/patch"
)

// Options configures the server. Store, RunsDir and BacklogDir are
// required.
type Options struct {
	Store bus.Store
	// RunsDir holds the run folders (DataRoot/runs): transcripts, patches,
	// and the records of runs opened by claim_task.
	RunsDir string
	// BacklogDir holds the backlog: one task file (taskVersion 1) per
	// *.json file; its id is what claim_task takes.
	BacklogDir string
	// Repo finds the repository of a task's workspace (runtask.ResolveRepo
	// with the resolved configuration). With it a claim records the
	// repository and base commit the work starts from, and a completion's
	// patch must apply there: review and landing take such a run as they
	// take a conductor worker's. nil: claims record neither.
	Repo func(workspace string) (patch.Git, error)
	// DefaultLease is the lease of a claim that names none (default 30m).
	DefaultLease time.Duration
	Version      string
	Now          func() time.Time
	Log          *slog.Logger
}

// Lease bounds.
const (
	defaultLease = 30 * time.Minute
	maxLease     = 24 * time.Hour
)

// Server is conductor's MCP server: one per process, shared by every
// session (stdio has one, HTTP may have many).
type Server struct {
	o      Options
	agents bus.AgentStore
	mcp    *sdk.Server
}

// New builds the server and registers its tools and resources.
func New(o Options) (*Server, error) {
	if o.Store == nil || o.RunsDir == "" || o.BacklogDir == "" {
		return nil, errors.New("mcp: a store, a runs folder and a backlog folder are required")
	}
	agents, err := bus.Agents(o.Store)
	if err != nil {
		return nil, fmt.Errorf("mcp: %w", err)
	}
	if o.DefaultLease <= 0 {
		o.DefaultLease = defaultLease
	}
	if o.DefaultLease > maxLease {
		return nil, fmt.Errorf("mcp: default lease %s is longer than %s", o.DefaultLease, maxLease)
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.Log == nil {
		o.Log = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	if o.Version == "" {
		o.Version = "dev"
	}
	s := &Server{o: o, agents: agents}
	s.mcp = sdk.NewServer(&sdk.Implementation{Name: "conductor", Title: "conductor", Version: o.Version}, &sdk.ServerOptions{
		Instructions: instructions,
		Logger:       o.Log,
	})
	s.addTools()
	s.addResources()
	return s, nil
}

const instructions = `conductor's agent lifecycle. Take a backlog item with claim_task (you get a run id and a lease token; the lease expires, claim_task again with the token to renew), do the work, then complete_task with the outcome, your model alias, token totals and the patch. Leave notes with add_note; raise a decision with raise_decision when work should land. You cannot resolve decisions or land: a decision is a person's act and landing is conductor's.`

// MCP returns the SDK server (for in-process transports).
func (s *Server) MCP() *sdk.Server { return s.mcp }

// ServeStdio serves one session on in/out (the process's stdin and stdout)
// until the client closes it or ctx ends. Nothing else may write to out.
// The requests read before the client closed its end are answered first.
func (s *Server) ServeStdio(ctx context.Context, in io.Reader, out io.Writer) error {
	d := newDrainingIO(ctx, in, out)
	t := &sdk.IOTransport{Reader: io.NopCloser(d), Writer: nopWriteCloser{d}}
	err := s.mcp.Run(ctx, t)
	if err != nil && ctx.Err() != nil {
		return nil
	}
	return err
}

type nopWriteCloser struct{ io.Writer }

func (nopWriteCloser) Close() error { return nil }

// addTool registers a typed tool whose input schema is inferred from In
// and then tightened by tweak (bounds, enums, patterns).
func addTool[In, Out any](s *Server, name, desc string, tweak func(props map[string]*jsonschema.Schema), h sdk.ToolHandlerFor[In, Out]) {
	schema, err := jsonschema.For[In](nil)
	if err != nil {
		panic(fmt.Sprintf("mcp: schema of %s: %v", name, err))
	}
	if tweak != nil {
		tweak(schema.Properties)
	}
	sdk.AddTool(s.mcp, &sdk.Tool{Name: name, Description: desc, InputSchema: schema}, h)
}

func ptr[T any](v T) *T { return &v }

// idPattern is the shape of task and run ids (as runtask accepts them).
const idPattern = `^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$`

func idProp(p *jsonschema.Schema) { p.Pattern, p.MinLength = idPattern, ptr(1) }

func nonEmpty(max int) func(*jsonschema.Schema) {
	return func(p *jsonschema.Schema) { p.MinLength, p.MaxLength, p.Pattern = ptr(1), ptr(max), `\S` }
}

func tokensProp(p *jsonschema.Schema) { p.Minimum = ptr(0.0) }
