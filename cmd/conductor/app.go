package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/conductor-dev/conductor/conductor"
	"github.com/conductor-dev/conductor/conductor/bus"
	"github.com/conductor-dev/conductor/conductor/forge"
	"github.com/conductor-dev/conductor/conductor/refusal"
	"github.com/conductor-dev/conductor/conductor/termtext"
	"github.com/conductor-dev/conductor/patch"
	"github.com/conductor-dev/conductor/runtask"
)

// version is set at build time with -ldflags "-X main.version=...".
var version = "dev"

// deps carries what commands need from the outside world. Slow clients are
// dialled on first use; tests build a fresh deps per run.
type deps struct {
	Stdin io.Reader
	// Stdout and Stderr escape what a terminal would act on (termtext):
	// every print for a person goes through them, and JSON through them
	// stays the same JSON. RawStdout is stdout as it is, for data that
	// must keep its bytes (a diff); nil means Stdout.
	Stdout    io.Writer
	Stderr    io.Writer
	RawStdout io.Writer
	// RawStderr is stderr as it is, for conductor's own terminal control
	// (the progress line's carriage return); nil means Stderr.
	RawStderr io.Writer
	Log       *slog.Logger
	Now       func() time.Time
	Getenv    func(string) string

	// helpMiss is a `help TOPIC` whose topic names no command (set by
	// the app's CommandNotFound, which cannot return an error).
	helpMiss error

	storeOnce sync.Once
	store     bus.Store
	storeErr  error

	// cfg is the configuration, resolved once per command (resolveConfig).
	cfg *conductor.Config
}

// knobFlags maps the flags that set a knob to the knob (conductor.Resolve):
// such a flag has no EnvVars of its own, so that a value given on the
// command line is told from one in the environment. land's --sandbox is
// the gate's (gateSandbox).
var knobFlags = map[string]string{
	"data-root": "dataRoot", "config": "configFile", "database-url": "databaseURL", "redis-url": "redisURL",
	"worktree-base": "worktreeBase", "sandbox": "sandbox", "forge-timeout": "forgeTimeout",
}

// resolveConfig resolves every knob once, before the command does
// anything: flags > environment > config file > defaults. A malformed
// value, a config file named but missing, or a config file whose models or
// forge section does not load is a usage error (exit 2) naming it.
func (d *deps) resolveConfig(c *cli.Context) error {
	if d.cfg != nil {
		return nil
	}
	in := conductor.Inputs{Getenv: d.Getenv, Flags: map[string]conductor.Flag{}}
	has := func(fs []cli.Flag, name string) bool {
		return slices.ContainsFunc(fs, func(f cli.Flag) bool { return slices.Contains(f.Names(), name) })
	}
	for flag, knob := range knobFlags {
		// An app flag shadowed by a command's own flag of the same name
		// (doctor --config) is read from the parent context.
		at := c
		if lin := c.Lineage(); c.Command != nil && len(lin) > 1 && has(c.Command.Flags, flag) && has(c.App.Flags, flag) {
			at = lin[1]
		}
		if !at.IsSet(flag) {
			continue
		}
		if flag == "sandbox" && c.Command != nil && c.Command.Name == "land" {
			knob = "gateSandbox"
		}
		in.Flags[knob] = conductor.Flag{Name: "--" + flag, Value: at.String(flag)}
	}
	cfg, err := conductor.Resolve(in)
	if err != nil {
		return usageErr(err)
	}
	// The sections their owners decode are checked now too, so that a bad
	// models or forge field stops every command, not only the one using it.
	if _, err := runtask.LoadRegistry(cfg.ConfigFile, d.Getenv); err != nil {
		return usageErr(err)
	}
	if _, err := forge.LoadSettings(cfg.ConfigFile); err != nil {
		return usageErr(err)
	}
	d.cfg = &cfg
	return nil
}

// config is the resolved configuration (resolveConfig ran before the
// command's action; a command reached another way resolves it here, and a
// malformed knob then keeps its default, the error having no way out).
func (d *deps) config(c *cli.Context) conductor.Config {
	if d.cfg == nil {
		if err := d.resolveConfig(c); err != nil {
			d.Log.Warn("configuration", "err", err)
			cfg := conductor.Config{DataRoot: conductor.DefaultDataRoot(d.Getenv)}.WithDefaults()
			return cfg
		}
	}
	return *d.cfg
}

// openStore opens the bus store (embedded, or PostgreSQL when a database URL
// is set) once per process.
func (d *deps) openStore(c *cli.Context) (bus.Store, error) {
	d.storeOnce.Do(func() {
		cfg := d.config(c)
		d.store, d.storeErr = bus.Open(c.Context, bus.Options{
			DataRoot:    cfg.DataRoot,
			DatabaseURL: cfg.DatabaseURL,
			Now:         d.Now,
		})
	})
	return d.store, d.storeErr
}

// raw is stdout for data that must keep its bytes (a diff): the exact
// bytes for a pipe or a file, but escaped like everything else when stdout
// is a terminal, where a person reads it.
func (d *deps) raw() io.Writer {
	if d.RawStdout == nil || isTerminal(d.RawStdout) {
		return d.Stdout
	}
	return d.RawStdout
}

// emit records a lifecycle event of the flow in the store (bus.Emit): a
// failure to record it is logged, never the command's failure.
func (d *deps) emit(c *cli.Context, kind, runID, taskID, actor string, md map[string]any) {
	s, err := d.openStore(c)
	if err == nil {
		err = bus.Emit(c.Context, s, kind, runID, taskID, actor, md)
	}
	if err != nil {
		d.Log.Warn("lifecycle event not recorded", "kind", kind, "run", runID, "err", err)
	}
}

func (d *deps) close() {
	if d.store != nil {
		d.store.Close()
	}
}

// run is the whole program: it builds the app, runs it and maps the error to
// an exit status.
func run(args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	d := &deps{
		Stdin: stdin,
		// Worker-chosen text (file names, tool names, gate output, a
		// model's messages) reaches these writers from many places: no
		// escape sequence of it may reach the operator's terminal.
		Stdout:    termtext.Writer(stdout),
		Stderr:    termtext.Writer(stderr),
		RawStdout: stdout,
		RawStderr: stderr,
		Now:       time.Now,
		Getenv:    os.Getenv,
	}
	level := slog.LevelInfo
	if os.Getenv("CONDUCTOR_DEBUG") != "" {
		level = slog.LevelDebug
	}
	d.Log = slog.New(slog.NewTextHandler(d.Stderr, &slog.HandlerOptions{Level: level}))
	defer d.close()

	app := newApp(d)
	err := app.RunContext(ctx, hoistFlags(app, args)) // flags may follow arguments (interspersed.go)
	if err == nil {
		err = d.helpMiss
	}
	if err == nil {
		return exitOK
	}
	code := exitCode(ctx, err)
	printError(d.Stderr, err)
	return code
}

func newApp(d *deps) *cli.App {
	app := &cli.App{
		Name:      "conductor",
		Usage:     "run headless LLM coding workers and land what they write as reviewed, gated commits",
		Version:   version,
		Reader:    d.Stdin,
		Writer:    d.Stdout,
		ErrWriter: d.Stderr,
		Flags: []cli.Flag{
			// Knob flags (knobFlags): their variables are read by
			// conductor.Resolve, not by the flag, so the source is known.
			&cli.StringFlag{Name: "data-root", Usage: "folder for runs, worktrees and the embedded store (env CONDUCTOR_HOME)"},
			&cli.StringFlag{Name: "database-url", Usage: "PostgreSQL URL for the bus store (env DATABASE_URL; default: embedded store)"},
			&cli.StringFlag{Name: "config", Usage: "configuration file (env CONDUCTOR_CONFIG; default <data root>/config.json when it exists; see conductor doctor --config)"},
		},
		Commands: []*cli.Command{
			newPatchIDCmd(d),
			newExtractCmd(d),
			newRunTaskCmd(d),
			newRunsCmd(d),
			newReviewCmd(d),
			newDecisionCmd(d),
			newLandCmd(d),
			newRecordCmd(d),
			newAuditCmd(d),
			newPolicyCmd(d),
			newPRCmd(d),
			newPushCmd(d),
			newEnqueueCmd(d),
			newWorkerCmd(d),
			newQueueCmd(d),
			newNoteCmd(d),
			newMCPCmd(d),
			newDoctorCmd(d),
			newPoolCmd(d),
			newServeCmd(d),
			newVersionCmd(d),
			newEventsCmd(d),
			newSandboxCmd(d),
			newCacheCmd(d),
			newCompletionCmd(d),
			newManCmd(d),
		},
		ExitErrHandler:        func(*cli.Context, error) {},
		EnableBashCompletion:  true,
		CustomAppHelpTemplate: cli.AppHelpTemplate + examplesHelp("") + exitStatusHelp,
		OnUsageError:          func(c *cli.Context, err error, _ bool) error { return flagUsage(c, err) },
		// `help TOPIC` (or `CMD TOPIC --help`) where TOPIC names no
		// command. For a command without subcommands, TOPIC is one of its
		// arguments (`land d-1 --help`): its help is shown. Otherwise
		// TOPIC is an unknown command: a usage error.
		CommandNotFound: func(c *cli.Context, name string) {
			if cmd := c.Command; cmd != nil && cmd.Name != "" && !hasSubcommands(cmd) && len(c.Lineage()) > 1 {
				if err := cli.ShowCommandHelp(c.Lineage()[1], cmd.Name); err == nil {
					return
				}
			}
			path := "conductor"
			if c.Command != nil && c.Command.Name != "" && c.Command.Name != "conductor" {
				path = "conductor " + c.Command.FullName()
			}
			var subs []*cli.Command
			if c.Command != nil {
				subs = c.Command.Subcommands
			}
			if path == "conductor" {
				subs = c.App.Commands
			}
			d.helpMiss = unknownCommand(path, name, subs)
		},
	}
	// An argument that names no command is a usage error (exit 2), never
	// the help page with exit 0.
	app.Action = func(c *cli.Context) error {
		if c.NArg() > 0 {
			return unknownCommand("conductor", c.Args().First(), app.Commands)
		}
		return cli.ShowAppHelp(c)
	}
	for _, cmd := range app.Commands {
		decorate(d, cmd)
	}
	return app
}

// decorate gives every command the shared conventions: --version, the EXIT
// STATUS help section, usage errors mapped to exit status 2 and, for a
// command with subcommands, an unknown subcommand named as one.
func decorate(d *deps, cmd *cli.Command) {
	decorateAs(d, cmd, "conductor")
}

func decorateAs(d *deps, cmd *cli.Command, parent string) {
	path := parent + " " + cmd.Name
	if len(cmd.Subcommands) > 0 {
		cmd.CustomHelpTemplate = cli.SubcommandHelpTemplate + examplesHelp(commandPath(parent, cmd)) + exitStatusHelp
	} else {
		cmd.CustomHelpTemplate = cli.CommandHelpTemplate + examplesHelp(commandPath(parent, cmd)) + exitStatusHelp
	}
	cmd.Flags = append(cmd.Flags, &cli.BoolFlag{Name: "version", Usage: "print the version and exit"})
	cmd.OnUsageError = func(c *cli.Context, err error, _ bool) error { return flagUsage(c, err) }
	// Required flags are checked here, after --version, so that
	// `conductor CMD --version` works for every command.
	var required []string
	for _, f := range cmd.Flags {
		if rf, ok := f.(interface{ IsRequired() bool }); ok && rf.IsRequired() {
			required = append(required, f.Names()[0])
			switch tf := f.(type) {
			case *cli.StringFlag:
				tf.Required = false
			case *cli.IntFlag:
				tf.Required = false
			case *cli.Int64Flag:
				tf.Required = false
			case *cli.BoolFlag:
				tf.Required = false
			case *cli.StringSliceFlag:
				tf.Required = false
			}
		}
	}
	action := cmd.Action
	cmd.Action = func(c *cli.Context) error {
		if c.Bool("version") {
			fmt.Fprintf(d.Stdout, "conductor version %s\n", version)
			return nil
		}
		var missing []string
		for _, name := range required {
			if !c.IsSet(name) {
				missing = append(missing, name)
			}
		}
		if len(missing) > 0 {
			return usagef("required flag(s) not set: --%s", strings.Join(missing, ", --"))
		}
		if action == nil {
			if c.NArg() > 0 {
				return unknownCommand(path, c.Args().First(), cmd.Subcommands)
			}
			return cli.ShowSubcommandHelp(c)
		}
		// Every knob, once, before anything runs.
		if err := d.resolveConfig(c); err != nil {
			return err
		}
		// Throw-away git dirs a killed conductor left behind go now.
		if n, err := patch.CleanScratch(d.config(c).GitScratchDir()); err != nil {
			d.Log.Debug("cleaning stale scratch git dirs", "err", err)
		} else if n > 0 {
			d.Log.Debug("removed stale scratch git dirs", "count", n)
		}
		return action(c)
	}
	for _, sub := range cmd.Subcommands {
		decorateAs(d, sub, path)
	}
}

const exitStatusHelp = `
EXIT STATUS:
   0   ok
   1   error (the operation failed; see the message)
   2   usage (bad flags or arguments)
   3   refused (a policy check or the gate said no, or an id names nothing; nothing changed)
   130 interrupted
`

const (
	exitOK          = 0
	exitError       = 1
	exitUsage       = 2
	exitRefused     = 3
	exitInterrupted = 130
)

// usageError marks flag and argument misuse (exit status 2).
type usageError struct{ err error }

func (e *usageError) Error() string { return e.err.Error() }
func (e *usageError) Unwrap() error { return e.err }

func usageErr(err error) error { return &usageError{err: err} }

// usagef reports argument misuse from a command's Action.
func usagef(format string, args ...any) error {
	return &usageError{err: fmt.Errorf(format, args...)}
}

// exitCode is the one map from errors to exit statuses.
func exitCode(ctx context.Context, err error) int {
	var ue *usageError
	var rf *refusal.Refusal
	switch {
	case errors.As(err, &rf):
		return exitRefused
	case errors.Is(err, bus.ErrNotFound):
		// One rule for every command: an id that names nothing (a run, a
		// decision) changed nothing and is refused, as land refuses
		// decision-not-found.
		return exitRefused
	case errors.As(err, &ue):
		return exitUsage
	case errors.Is(err, context.Canceled) || ctx.Err() != nil:
		return exitInterrupted
	}
	// Only conductor's own silentError carries a status, and only one of
	// ours: a child's *exec.ExitError (git's 128, a gate's 2) or a
	// cli.Exit from a library also satisfies cli.ExitCoder and must never
	// leak out as conductor's status.
	var se *silentError
	if errors.As(err, &se) {
		switch se.code {
		case exitError, exitUsage, exitRefused, exitInterrupted:
			return se.code
		}
	}
	return exitError
}

// silentError is an error whose message was already printed.
type silentError struct{ code int }

func (e *silentError) Error() string { return fmt.Sprintf("exit status %d", e.code) }
func (e *silentError) ExitCode() int { return e.code }

func printError(w io.Writer, err error) {
	var se *silentError
	if errors.As(err, &se) {
		return
	}
	fmt.Fprintf(w, "conductor: %v\n", err)
	var r *refusal.Refusal
	if errors.As(err, &r) {
		if r.Detail != "" {
			fmt.Fprintln(w, r.Detail)
		}
		if r.Fix != "" {
			fmt.Fprintf(w, "fix: %s\n", r.Fix)
		}
	}
}

// hasSubcommands reports whether cmd has subcommands of its own (urfave adds
// a "help" one to every command it runs).
func hasSubcommands(cmd *cli.Command) bool {
	for _, s := range cmd.Subcommands {
		if s.Name != "help" {
			return true
		}
	}
	return false
}
