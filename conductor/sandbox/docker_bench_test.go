package sandbox

import (
	"context"
	"os"
	"testing"
	"time"
)

// dockerBench is a docker backend on the test engine, released when the
// benchmark ends.
func dockerBench(b *testing.B) *dockerBackend {
	b.Helper()
	sb, err := NewWithOptions(BackendDocker, Options{Docker: DockerOptions{Host: dockerHost(b)}})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = Close(sb) })
	return sb.(*dockerBackend)
}

// benchDir is a worktree the sandbox uid can reach.
func benchDir(b *testing.B) string {
	b.Helper()
	d, err := os.MkdirTemp(reachableTempBase(), "conductor-sandbox-bench-")
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { os.RemoveAll(d) })
	if err := os.Chmod(d, 0o755); err != nil {
		b.Fatal(err)
	}
	return d
}

// BenchmarkDockerCommand is the docker backend's cost per command in a
// job's running container: `true` through docker exec, then the sweep of
// the container's processes. Compare BenchmarkBwrapCommand.
func BenchmarkDockerCommand(b *testing.B) {
	sb := dockerBench(b)
	dir := benchDir(b)
	spec := Spec{Dir: dir, Argv: []string{"true"}, Env: []string{"PATH=/usr/bin:/bin"}, Timeout: 30 * time.Second}
	if res, err := sb.Run(context.Background(), spec); err != nil || res.ExitCode != 0 { // the job's container
		b.Fatalf("%v %+v", err, res)
	}
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if res, err := sb.Run(context.Background(), spec); err != nil || res.ExitCode != 0 {
			b.Fatalf("%v %+v", err, res)
		}
	}
}

// BenchmarkDockerJobStart is the per-job cost: the container made on the
// first command (`true`), then removed by Close.
func BenchmarkDockerJobStart(b *testing.B) {
	sb := dockerBench(b)
	dir := benchDir(b)
	spec := Spec{Dir: dir, Argv: []string{"true"}, Env: []string{"PATH=/usr/bin:/bin"}, Timeout: 30 * time.Second}
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if res, err := sb.Run(context.Background(), spec); err != nil || res.ExitCode != 0 {
			b.Fatalf("%v %+v", err, res)
		}
		if err := sb.Close(); err != nil {
			b.Fatal(err)
		}
	}
}
