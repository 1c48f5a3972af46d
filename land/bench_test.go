package land

import (
	"bytes"
	"fmt"
	"os/exec"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"
)

// cpuTime is the process's user and system time, its waited-for children's
// (the git processes) included.
func cpuTime() time.Duration {
	var self, children syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &self)
	syscall.Getrusage(syscall.RUSAGE_CHILDREN, &children)
	tv := func(t syscall.Timeval) time.Duration {
		return time.Duration(t.Sec)*time.Second + time.Duration(t.Usec)*time.Microsecond
	}
	return tv(self.Utime) + tv(self.Stime) + tv(children.Utime) + tv(children.Stime)
}

func medianOf(d []time.Duration) time.Duration {
	d = slices.Clone(d)
	slices.Sort(d)
	return d[len(d)/2]
}

// BenchmarkLandVsByHand lands a change (gate excluded, no checkout) on a
// packed repository of 10,000 files, on a quiet target and on one that
// moved, and right after each landing makes the by-hand floor on the same
// pair (merge-tree + commit-tree + update-ref). Besides wall time it
// reports CPU time (user + system, git children included), which a loaded
// machine disturbs far less: cpu-ratio and wall-ratio are medians of
// landing / floor. scripts/bench's land rows are the wall-time numbers of
// record; docs/adr-git-objects.md quotes both.
//
//	go test -run '^$' -bench LandVsByHand -benchtime 25x ./land
func BenchmarkLandVsByHand(b *testing.B) {
	f := newFixture(b)
	var s bytes.Buffer
	fmt.Fprintf(&s, "commit refs/heads/main\ncommitter T <t@example.test> 1700000000 +0000\ndata 3\nbig\nfrom %s\n", f.rev("refs/heads/main"))
	for i := range 10000 {
		body := fmt.Sprintf("package p%d\n// %d\n", i/200, i)
		fmt.Fprintf(&s, "M 100644 inline pkg%02d/d%04d/f%d.go\ndata %d\n%s\n", i/200, i/5, i%5, len(body), body)
	}
	f.runIn("", &s, "git", "--git-dir="+f.gitdir, "fast-import", "--quiet")
	f.git("repack", "-adq")
	f.git("prune-packed")
	n := 0 // every landing's change is new (b.Run runs its function more than once)
	for _, moved := range []bool{false, true} {
		b.Run(map[bool]string{false: "quiet", true: "moved"}[moved], func(b *testing.B) {
			var landCPU, handCPU, landWall, handWall []time.Duration
			for range b.N {
				b.StopTimer()
				n++
				name := fmt.Sprintf("b%d", n)
				id, work := f.approved(name, map[string]string{
					"pkg01/d0040/f0.go": "package p1\n// changed by " + name + "\n", "pkg02/new" + name + ".go": "package p2\n"})
				if moved {
					f.commit("refs/heads/main", "", map[string]string{fmt.Sprintf("pkg03/other%s.go", name): "package p3\n"}, "moved")
				}
				tip := f.rev("refs/heads/main")
				b.StartTimer()
				c0, w0 := cpuTime(), time.Now()
				out, err := f.land(id, nil)
				landWall, landCPU = append(landWall, time.Since(w0)), append(landCPU, cpuTime()-c0)
				b.StopTimer()
				if err != nil || out.Status != StatusLanded {
					b.Fatal(err, out)
				}
				c0, w0 = cpuTime(), time.Now()
				tree := strings.Fields(f.git("merge-tree", "--write-tree", tip, work))[0]
				cmd := exec.Command("git", "--git-dir="+f.gitdir, "commit-tree", tree, "-p", tip, "-m", "by hand")
				cmd.Env = gitEnv(f.home)
				commit, err := cmd.Output()
				if err != nil {
					b.Fatal(err)
				}
				f.git("update-ref", "refs/heads/by-hand", strings.TrimSpace(string(commit)))
				handWall, handCPU = append(handWall, time.Since(w0)), append(handCPU, cpuTime()-c0)
				b.StartTimer()
			}
			ms := func(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
			b.ReportMetric(ms(medianOf(landCPU)), "land-cpu-ms")
			b.ReportMetric(ms(medianOf(handCPU)), "hand-cpu-ms")
			b.ReportMetric(float64(medianOf(landCPU))/float64(medianOf(handCPU)), "cpu-ratio")
			b.ReportMetric(float64(medianOf(landWall))/float64(medianOf(handWall)), "wall-ratio")
		})
	}
}
