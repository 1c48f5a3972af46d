package main

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/conductor-dev/conductor/conductor/bus"
	"github.com/conductor-dev/conductor/conductor/dispatch"
	"github.com/conductor-dev/conductor/conductor/forge"
	"github.com/conductor-dev/conductor/conductor/queue"
	"github.com/conductor-dev/conductor/conductor/sandbox"
	"github.com/conductor-dev/conductor/policy"
	"github.com/conductor-dev/conductor/runtask"
)

func newWorkerCmd(d *deps) *cli.Command {
	return &cli.Command{
		Name:  "worker",
		Usage: "consume jobs from the queue (Redis with REDIS_URL, else the embedded store) and run them",
		Description: "Each job is run as `conductor run-task run` would, with its run id as the\n" +
			"idempotency key: a redelivered job whose run finished is acknowledged without\n" +
			"running; an interrupted one resumes from its checkpoint. Backlog claims are\n" +
			"atomic and completed with outcome, model alias and token totals.\n" +
			"Store, queue and disk failures are waited out with backoff, the job kept\n" +
			"leased and never charged an attempt; a job that can never run (not JSON, an\n" +
			"unknown role or model, a missing repository) is dead-lettered at once\n" +
			"(conductor queue dead list). A worker killed holding jobs loses them to the\n" +
			"others when its lease (--heartbeat-ttl) runs out, on Redis and embedded.\n" +
			"SIGTERM: stop taking jobs, let running ones checkpoint at their next step and\n" +
			"hand them back to the queue, exit within --grace. See docs/queue.md.",
		Flags: append(append(queueFlags(), runTaskFlags()...),
			&cli.IntFlag{Name: "concurrency", Value: 1, Usage: "jobs in their model conversation at once in this process", EnvVars: []string{"WORKER_CONCURRENCY"}},
			&cli.IntFlag{Name: "finishing", Value: -1, Usage: "jobs past their conversation (extracting the patch, writing records, the unattended review) that may run beside those; 0 keeps each job on its lane to the end (default: --concurrency)", EnvVars: []string{"WORKER_FINISHING"}, DefaultText: "--concurrency"},
			&cli.IntFlag{Name: "prefetch", Value: 1, Usage: "jobs taken ahead of a free lane, so that a lane that frees starts its next job at once; other consumers cannot take them meanwhile (0: take only for a free lane; --once takes none ahead)", EnvVars: []string{"WORKER_PREFETCH"}},
			&cli.BoolFlag{Name: "once", Usage: "take one round of jobs (up to --concurrency), run them and exit: for cron"},
			&cli.BoolFlag{Name: "dry-run", Usage: "print the banner and configuration and exit without connecting", EnvVars: []string{"WORKER_DRY_RUN"}},
			&cli.IntFlag{Name: "wait", Value: 5, Usage: "seconds one take waits for a job", EnvVars: []string{"WORKER_BLPOP_TIMEOUT_S"}},
			&cli.DurationFlag{Name: "grace", Value: 30 * time.Second, Usage: "how long running jobs get to checkpoint after SIGTERM"},
		),
		Action: func(c *cli.Context) error {
			if c.NArg() != 0 {
				return usagef("worker takes no arguments, got %q", c.Args().Slice())
			}
			if c.Int("concurrency") < 1 {
				return usagef("worker: --concurrency must be at least 1")
			}
			finishing := c.Int("finishing")
			switch {
			case !c.IsSet("finishing"):
				finishing = c.Int("concurrency")
			case finishing < 0:
				return usagef("worker: --finishing (WORKER_FINISHING) %d: want 0 or more jobs", finishing)
			}
			prefetch := c.Int("prefetch")
			switch {
			case prefetch < 0:
				return usagef("worker: --prefetch (WORKER_PREFETCH) %d: want 0 or more jobs", prefetch)
			case c.Bool("once"):
				prefetch = 0
			}
			if c.Int("wait") < 0 {
				return usagef("worker: --wait (WORKER_BLPOP_TIMEOUT_S) %d: want 0 or more seconds", c.Int("wait"))
			}
			cfg := d.config(c)
			backend := "embedded store queue (no REDIS_URL)"
			if u := cfg.RedisURL; u != "" {
				backend = "redis " + bus.RedactURL(u)
			}
			store := "embedded " + cfg.DataRoot + "/bus.db"
			if cfg.DatabaseURL != "" {
				store = "postgres " + bus.RedactURL(cfg.DatabaseURL)
			}
			fmt.Fprintf(d.Stderr, "conductor worker %s\n  queue:       %s key %s (max attempts %d)\n  store:       %s\n  concurrency: %d, finishing %d, prefetch %d%s\n  data root:   %s\n",
				version, backend, c.String("queue"), c.Int("max-attempts"), store, c.Int("concurrency"), finishing, prefetch,
				map[bool]string{true: " (once)", false: ""}[c.Bool("once")], cfg.DataRoot)
			if pool, jobs := cfg.Pool(), c.Int("concurrency")+finishing; pool < jobs {
				fmt.Fprintf(d.Stderr, "  pool:        %d free worktrees kept (WORKER_POOL_SIZE), fewer than the %d jobs that may run at once: the others check out new ones\n", pool, jobs)
			}
			if c.Bool("dry-run") {
				fmt.Fprintln(d.Stderr, "  dry run:     not connecting; exiting")
				return nil
			}
			base, err := runTaskOptions(c, d)
			if err != nil {
				return err
			}
			// Containers a killed worker left behind (the docker backend).
			// With another backend the reap runs beside the jobs (reporting
			// through the log, which serialises its lines): an engine that
			// does not answer must not hold this worker's start.
			lim := sandbox.OptionsFrom(cfg.SandboxLimits)
			if cfg.Sandbox == sandbox.BackendDocker {
				if names, err := sandbox.ReapOrphanContainers(c.Context, lim); err != nil {
					fmt.Fprintf(d.Stderr, "conductor: reap orphan sandbox containers: %v\n", err)
				} else if len(names) > 0 {
					fmt.Fprintf(d.Stderr, "  reaped:      %d orphan sandbox containers (%s)\n", len(names), strings.Join(names, ", "))
				}
			} else {
				go func() {
					if names, _ := sandbox.ReapOrphanContainers(c.Context, lim); len(names) > 0 {
						d.Log.Info("reaped orphan sandbox containers", "names", strings.Join(names, ", "))
					}
				}()
			}
			if base.ModelAlias != "" && base.Registry != nil {
				if _, err := base.Registry.Lookup(base.ModelAlias); err != nil {
					return usageErr(fmt.Errorf("worker: --model: %w", err))
				}
			}
			consumer := consumerName()
			stats, err := dispatch.Serve(c.Context, dispatch.WorkerOptions{
				Run: base, RolesDir: c.String("roles"), Sandbox: d.config(c).Sandbox, Sandboxes: d.sandboxes(c),
				OpenStore: func() (bus.Store, error) {
					d.storeOnce = sync.Once{} // a store that did not answer is dialled again
					return d.openStore(c)
				},
				OpenQueue:   func() (queue.Queue, error) { return d.openQueue(c, consumer) },
				LockTTL:     c.Duration("heartbeat-ttl"),
				Concurrency: c.Int("concurrency"), Finishing: finishing, Prefetch: prefetch, Wait: time.Duration(c.Int("wait")) * time.Second,
				Once: c.Bool("once"), Grace: c.Duration("grace"),
				Unattended: unattended(c, d), RoleIDs: cfg.RoleIDs, Consumer: consumer, Now: d.Now, Out: d.Stdout, Log: d.Log,
			})
			if stats.Consumed {
				fmt.Fprintf(d.Stderr, "worker %s: %d done, %d failed (requeued), %d dead-lettered, %d handed back, %d lost to an expired lease\n",
					consumer, stats.Done, stats.Failed, stats.Dead, stats.Released, stats.Lost)
			}
			if c.Context.Err() != nil {
				return &silentError{code: exitInterrupted}
			}
			if err != nil {
				return fmt.Errorf("worker: %w", err)
			}
			return nil
		},
	}
}

// unattended is the worker's review → push → draft PR path, wired to the
// policy committed in the repository (or --roles DIR) and the forge
// settings of the config file.
func unattended(c *cli.Context, d *deps) dispatch.Unattended {
	cfg := d.config(c)
	return dispatch.Unattended{
		Policy: func(ctx context.Context, gitDir, rev string) (*policy.Policy, error) {
			return enforcedPolicy(ctx, c.String("roles"), gitDir, rev)
		},
		Forge: func() (forge.Settings, error) {
			s, err := forge.LoadSettings(cfg.ConfigFile)
			return s.WithDefaults(d.Getenv), err
		},
		RunsDir: cfg.RunDir, ScratchDir: filepath.Join(cfg.DataRoot, "scratch"),
		Sandbox: cfg.Sandbox, Sandboxes: d.sandboxes(c),
		Getenv: d.Getenv, Now: d.Now, Log: d.Log,
	}
}

// sandboxes opens a run's sandbox as the command line does (a backend that
// cannot run here is refused) and releases it with a warning on failure.
func (d *deps) sandboxes(c *cli.Context) dispatch.Sandboxes {
	return dispatch.Sandboxes{
		Open:  func(name, runID string) (sandbox.Sandbox, error) { return d.openSandbox(c, name, runID) },
		Close: func(sb sandbox.Sandbox) { closeSandbox(d, sb) },
	}
}

// prepareRun loads the task's role and its sandbox and attaches the store:
// what run-task's paths need (the worker's and review's are in dispatch).
func prepareRun(c *cli.Context, d *deps, opts *runtask.Options) error {
	if err := dispatch.Prepare(c.String("roles"), d.config(c).Sandbox, d.sandboxes(c), opts); err != nil {
		return err
	}
	if store, err := d.openStore(c); err != nil {
		fmt.Fprintf(d.Stderr, "conductor: bus store unavailable (%v); the run folder is the only record\n", err)
	} else {
		opts.Store = store
	}
	return nil
}
