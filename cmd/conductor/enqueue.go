package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"

	"github.com/urfave/cli/v2"

	"github.com/conductor-dev/conductor/conductor/dispatch"
	"github.com/conductor-dev/conductor/conductor/queue"
	"github.com/conductor-dev/conductor/runtask"
)

func newEnqueueCmd(d *deps) *cli.Command {
	return &cli.Command{
		Name:      "enqueue",
		Usage:     "push a task onto the job queue (Redis with REDIS_URL, else the embedded store)",
		ArgsUsage: "TASK.json",
		Description: "The task file is validated first, and an unknown model alias or role is\n" +
			"refused (exit 2). By default the job is an envelope\n" +
			"{\"runId\", \"task\"} with a fresh run id; --raw pushes the task body as it is,\n" +
			"for consumers that BLPOP task files.",
		Flags: append(queueFlags(),
			&cli.StringFlag{Name: "run-id", Usage: "run id for the job (default: a new one)"},
			&cli.BoolFlag{Name: "raw", Usage: "push the task file body itself, not an envelope"},
			&cli.BoolFlag{Name: "json", Usage: "print {runId, queue} as JSON"},
		),
		Action: func(c *cli.Context) error {
			if c.NArg() != 1 {
				return usagef("enqueue: want exactly one TASK.json, got %d arguments", c.NArg())
			}
			path := c.Args().First()
			body, err := os.ReadFile(path)
			if err != nil {
				return fmt.Errorf("enqueue: %w", err)
			}
			// A task file, or a job in a shape the worker takes (the
			// seed's role_dispatch job): the job is pushed as it is, as
			// its orchestrator would.
			job, isJob, err := enqueueJob(body, d.config(c).RoleIDs)
			if err != nil {
				return usageErr(fmt.Errorf("enqueue %s: %w", path, err))
			}
			taskBody := body
			if isJob {
				taskBody = job.Task
			}
			task, err := runtask.ParseTask(path, taskBody)
			if err != nil {
				return usageErr(fmt.Errorf("enqueue: %w", err))
			}
			if err := enqueueCheck(c, d, task); err != nil {
				return usageErr(fmt.Errorf("enqueue %s: %w", path, err))
			}
			runID := c.String("run-id")
			payload := body
			if isJob {
				if runID != "" {
					return usagef("enqueue %s: --run-id: a job names its own run id (runId)", path)
				}
				runID = job.RunID
			} else if !c.Bool("raw") {
				if runID == "" {
					runID = runtask.NewRunID(d.Now())
				}
				payload, err = json.Marshal(queue.Envelope{RunID: runID, Task: json.RawMessage(compactJSON(body))})
				if err != nil {
					return err
				}
			} else if j, err := queue.ParseJob(body); err == nil {
				runID = j.RunID
			}
			q, err := d.openQueue(c, "")
			if err != nil {
				return fmt.Errorf("enqueue: %w", err)
			}
			defer q.Close()
			if err := q.Push(c.Context, payload); err != nil {
				return fmt.Errorf("enqueue: %w", err)
			}
			if c.Bool("json") {
				return writeJSON(d.Stdout, map[string]string{"runId": runID, "queue": q.Name()})
			}
			fmt.Fprintln(d.Stdout, runID)
			fmt.Fprintf(d.Stderr, "queued %s on %s\n", path, q.Name())
			return nil
		},
	}
}

// enqueueCheck refuses what can be known never to run before it is queued:
// a model alias the registry does not know, a role no contract defines.
func enqueueCheck(c *cli.Context, d *deps, task runtask.Task) error {
	cfg := d.config(c)
	if task.Model != "" {
		reg, err := runtask.LoadRegistry(cfg.ConfigFile, d.Getenv)
		if err == nil {
			reg.SetDefault(cfg.Model)
		}
		if err != nil {
			return err
		}
		if _, err := reg.Lookup(task.Model); err != nil {
			return err
		}
	}
	opts := runtask.Options{Config: cfg, Getenv: d.Getenv, Task: task}
	if _, err := runtask.ResolveRepo("", task.Workspace, cfg); err == nil {
		// The workspace is here: its role file and brief at the base are
		// checked as the worker will (a job's brief is a repository path).
		if role, err := dispatch.LoadRole(c.String("roles"), opts, task); err == nil {
			opts.Role = role
			if _, err := runtask.CheckPrompt(c.Context, opts); err != nil {
				return err
			}
		}
	}
	if task.Role != "" {
		if _, err := dispatch.LoadRole(c.String("roles"), runtask.Options{Config: cfg, Getenv: d.Getenv}, task); err != nil {
			// A repository may define its own roles (roles/): unless it is
			// here to look at, an unknown role cannot be told from one the
			// worker's host will find.
			if _, rerr := runtask.ResolveRepo("", task.Workspace, cfg); rerr != nil {
				fmt.Fprintf(d.Stderr, "conductor: enqueue: role %q is not a default role and workspace %q is not here to check its roles/; queued anyway\n", task.Role, task.Workspace)
				return nil
			}
			return err
		}
	}
	return nil
}

// enqueueJob reads a payload that is not a task file (no taskVersion) as
// a queue job (queue.ParseJob); a task file is not a job.
func enqueueJob(body []byte, roleIDs map[string]string) (queue.Job, bool, error) {
	var probe map[string]json.RawMessage
	if json.Unmarshal(body, &probe) != nil {
		return queue.Job{}, false, nil // ParseTask names the syntax error
	}
	if _, ok := probe["taskVersion"]; ok {
		return queue.Job{}, false, nil
	}
	if _, ok := probe["task"]; !ok && probe["roleId"] == nil && probe["role_id"] == nil && probe["type"] == nil {
		return queue.Job{}, false, nil
	}
	j, err := queue.ParseJobWith(body, roleIDs)
	return j, err == nil, err
}

func compactJSON(b []byte) []byte {
	var out bytes.Buffer
	if err := json.Compact(&out, b); err != nil {
		return b
	}
	return out.Bytes()
}
