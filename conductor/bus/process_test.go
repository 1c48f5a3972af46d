package bus

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/conductor-dev/conductor/conductor/refusal"
	"github.com/conductor-dev/conductor/conductor/testenv"
)

// The test binary re-executes itself as a child process for the
// multi-process and crash tests; BUS_TEST_CHILD selects what the child does.
func TestMain(m *testing.M) {
	switch os.Getenv("BUS_TEST_CHILD") {
	case "":
		os.Exit(m.Run())
	case "claim":
		os.Exit(childClaim())
	case "crash-in-tx":
		os.Exit(childCrash(true))
	case "crash-loop":
		os.Exit(childCrash(false))
	default:
		fmt.Fprintln(os.Stderr, "unknown BUS_TEST_CHILD")
		os.Exit(2)
	}
}

func childOptions() Options {
	return Options{DataRoot: os.Getenv("BUS_TEST_ROOT"), DatabaseURL: os.Getenv("BUS_TEST_URL")}
}

// childClaim claims every item from 8 goroutines and prints what it won as
// one JSON array.
func childClaim() int {
	ctx := context.Background()
	// Wait for the start signal so the processes open the new store at once.
	bufio.NewReader(os.Stdin).ReadString('\n')
	s, err := Open(ctx, childOptions())
	if err != nil {
		fmt.Fprintln(os.Stderr, "open:", err)
		return 1
	}
	defer s.Close()
	var (
		mu   sync.Mutex
		won  []string
		fail []string
		wg   sync.WaitGroup
	)
	for g := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for _, i := range rand.Perm(claimItems) {
				item := fmt.Sprint("item-", i)
				ok, err := s.ClaimTask(ctx, item, fmt.Sprintf("p%d-g%d", os.Getpid(), g))
				if err == nil {
					// More writers, more lock contention between processes.
					err = s.PutRun(ctx, Run{ID: fmt.Sprintf("p%d-g%d-%s", os.Getpid(), g, item), Status: "running"})
				}
				mu.Lock()
				if err != nil {
					fail = append(fail, err.Error())
				} else if ok {
					won = append(won, item)
				}
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	if len(fail) > 0 {
		fmt.Fprintln(os.Stderr, strings.Join(fail, "\n"))
		return 1
	}
	json.NewEncoder(os.Stdout).Encode(won)
	return 0
}

// childCrash commits whole transactions (a run and its checkpoint
// together). With inTx it commits 5, then stops inside a sixth after its
// first insert and says "ready"; without, it commits in a loop until killed.
func childCrash(inTx bool) int {
	ctx := context.Background()
	st, err := Open(ctx, childOptions())
	if err != nil {
		fmt.Fprintln(os.Stderr, "open:", err)
		return 1
	}
	s := st.(*sqlStore)
	pair := func(id string, stop bool) error {
		return s.write(ctx, func(q querier) error {
			if _, err := q.exec(ctx, `INSERT INTO runs (id, status) VALUES (?, 'running')`, id); err != nil {
				return err
			}
			// A large row so the transaction spans many pages.
			if _, err := q.exec(ctx, `INSERT INTO checkpoints (run_id, step, history, created_at) VALUES (?, 1, ?, 1)`,
				id, []byte(`"`+strings.Repeat("x", 64<<10)+`"`)); err != nil {
				return err
			}
			if stop {
				fmt.Println("ready")
				select {} // killed here, mid-transaction
			}
			return nil
		})
	}
	for i := 0; ; i++ {
		if inTx && i == 5 {
			return fail(pair("r-partial", true))
		}
		if err := pair(fmt.Sprint("r-", i), false); err != nil {
			return fail(err)
		}
		if !inTx && i == 3 {
			fmt.Println("ready")
		}
	}
}

func fail(err error) int {
	fmt.Fprintln(os.Stderr, err)
	return 1
}

func child(t *testing.T, mode string, env ...string) *exec.Cmd {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(exe, "-test.run=^$")
	cmd.Env = append(os.Environ(), append([]string{"BUS_TEST_CHILD=" + mode}, env...)...)
	return cmd
}

// Four processes (8 goroutines each) open a store that does not exist yet
// and claim 20 items: every item is claimed exactly once and no "database
// is locked" escapes.
func TestProcessesClaimEmbedded(t *testing.T) {
	root := t.TempDir()
	const procs = 4
	type proc struct {
		cmd         *exec.Cmd
		out, stderr strings.Builder
	}
	var ps []*proc
	var starts []*os.File
	for range procs {
		p := &proc{cmd: child(t, "claim", "BUS_TEST_ROOT="+root)}
		r, w, err := os.Pipe()
		if err != nil {
			t.Fatal(err)
		}
		p.cmd.Stdin, p.cmd.Stdout, p.cmd.Stderr = r, &p.out, &p.stderr
		if err := p.cmd.Start(); err != nil {
			t.Fatal(err)
		}
		r.Close()
		starts = append(starts, w)
		ps = append(ps, p)
	}
	for _, w := range starts {
		fmt.Fprintln(w, "go")
		w.Close()
	}
	var won [][]string
	for i, p := range ps {
		if err := p.cmd.Wait(); err != nil {
			t.Fatalf("process %d: %v\n%s", i, err, p.stderr.String())
		}
		if strings.Contains(p.stderr.String(), "locked") {
			t.Fatalf("process %d: %s", i, p.stderr.String())
		}
		var items []string
		if err := json.Unmarshal([]byte(p.out.String()), &items); err != nil {
			t.Fatalf("process %d output %q: %v", i, p.out.String(), err)
		}
		won = append(won, items)
	}
	checkExactlyOnce(t, won, claimItems)
	s, err := Open(context.Background(), Options{DataRoot: root})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	var versions int64
	if err := one(context.Background(), s.(*sqlStore).b.db(), `SELECT COUNT(*) FROM conductor_schema`, nil, &versions); err != nil {
		t.Fatal(err)
	}
	if versions != int64(len(migrations)) {
		t.Fatalf("%d schema rows after concurrent first use, want %d", versions, len(migrations))
	}
}

// A process killed (SIGKILL) in the middle of a write leaves the store
// readable and consistent: no half transaction, integrity intact, writable.
func TestCrashSafety(t *testing.T) {
	backends := []struct {
		name string
		env  func(t *testing.T) ([]string, Options)
	}{
		{"embedded", func(t *testing.T) ([]string, Options) {
			root := t.TempDir()
			return []string{"BUS_TEST_ROOT=" + root}, Options{DataRoot: root}
		}},
		{"postgres", func(t *testing.T) ([]string, Options) {
			url := testenv.Postgres(t)
			return []string{"BUS_TEST_URL=" + url}, Options{DatabaseURL: url}
		}},
	}
	for _, b := range backends {
		for _, mode := range []string{"crash-in-tx", "crash-loop"} {
			t.Run(b.name+"/"+mode, func(t *testing.T) {
				env, opts := b.env(t)
				cmd := child(t, mode, env...)
				out, err := cmd.StdoutPipe()
				if err != nil {
					t.Fatal(err)
				}
				var stderr strings.Builder
				cmd.Stderr = &stderr
				if err := cmd.Start(); err != nil {
					t.Fatal(err)
				}
				line, err := bufio.NewReader(out).ReadString('\n')
				if err != nil || line != "ready\n" {
					cmd.Process.Kill()
					cmd.Wait()
					t.Fatalf("child said %q (%v)\n%s", line, err, stderr.String())
				}
				if mode == "crash-loop" {
					time.Sleep(time.Duration(50+rand.IntN(150)) * time.Millisecond)
				}
				if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
					t.Fatal(err)
				}
				cmd.Wait()
				checkConsistent(t, opts, mode == "crash-in-tx")
			})
		}
	}
}

func checkConsistent(t *testing.T, o Options, wantFive bool) {
	t.Helper()
	ctx := context.Background()
	st, err := Open(ctx, o)
	if err != nil {
		t.Fatalf("reopen after crash: %v", err)
	}
	defer st.Close()
	s := st.(*sqlStore)
	if s.d == sqliteDialect {
		var res string
		if err := one(ctx, s.b.db(), `PRAGMA integrity_check`, nil, &res); err != nil || res != "ok" {
			t.Fatalf("integrity_check = %q, %v", res, err)
		}
	}
	var runs, cps, orphans int64
	db := s.b.db()
	if err := one(ctx, db, `SELECT COUNT(*) FROM runs`, nil, &runs); err != nil {
		t.Fatal(err)
	}
	if err := one(ctx, db, `SELECT COUNT(*) FROM checkpoints`, nil, &cps); err != nil {
		t.Fatal(err)
	}
	if err := one(ctx, db, `SELECT COUNT(*) FROM runs WHERE id NOT IN (SELECT run_id FROM checkpoints)`, nil, &orphans); err != nil {
		t.Fatal(err)
	}
	if runs != cps || orphans != 0 || runs == 0 {
		t.Fatalf("after crash: %d runs, %d checkpoints, %d runs without their checkpoint", runs, cps, orphans)
	}
	if wantFive && runs != 5 {
		t.Fatalf("after a crash inside the sixth transaction: %d runs, want 5", runs)
	}
	if _, err := st.GetRun(ctx, "r-partial"); err == nil {
		t.Fatal("the killed transaction's run is visible")
	}
	// Writable again: no lock left behind.
	wctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	if err := st.PutRun(wctx, Run{ID: "after-crash"}); err != nil {
		t.Fatalf("write after crash: %v", err)
	}
}

func TestOpenEmbeddedBadInput(t *testing.T) {
	ctx := context.Background()
	t.Run("corrupt file", func(t *testing.T) {
		for _, tc := range []struct {
			name    string
			content func(t *testing.T, path string) []byte
		}{
			{"garbage", func(t *testing.T, path string) []byte {
				return []byte(strings.Repeat("this is not a database\n", 400))
			}},
			{"damaged header", func(t *testing.T, path string) []byte {
				s, err := Open(ctx, Options{DataRoot: filepath.Dir(path)})
				if err != nil {
					t.Fatal(err)
				}
				if err := s.PutRun(ctx, Run{ID: "r-1"}); err != nil {
					t.Fatal(err)
				}
				s.Close()
				b, err := os.ReadFile(path)
				if err != nil {
					t.Fatal(err)
				}
				copy(b, "SQLite format 9\x00garbage-garbage-garbage")
				return b
			}},
			{"damaged pages", func(t *testing.T, path string) []byte {
				s, err := Open(ctx, Options{DataRoot: filepath.Dir(path)})
				if err != nil {
					t.Fatal(err)
				}
				for i := range 30 {
					if _, err := s.RaiseDecision(ctx, Decision{Kind: "x", RaisedBy: strings.Repeat("y", i*50)}); err != nil {
						t.Fatal(err)
					}
				}
				s.Close()
				b, err := os.ReadFile(path)
				if err != nil {
					t.Fatal(err)
				}
				if len(b) < 4096*4 {
					t.Fatalf("store is only %d bytes", len(b))
				}
				for i := 4096 * 2; i < len(b); i++ {
					b[i] = 0xff
				}
				return b
			}},
		} {
			t.Run(tc.name, func(t *testing.T) {
				root := t.TempDir()
				path := filepath.Join(root, FileName)
				content := tc.content(t, path)
				if err := os.WriteFile(path, content, 0o644); err != nil {
					t.Fatal(err)
				}
				start := time.Now()
				_, err := Open(ctx, Options{DataRoot: root})
				if err == nil {
					t.Fatal("opened a corrupt store")
				}
				if time.Since(start) > 10*time.Second {
					t.Fatalf("took %s to report a corrupt file", time.Since(start))
				}
				msg := err.Error()
				if !strings.Contains(msg, path) || !strings.Contains(msg, "corrupt") {
					t.Fatalf("error does not name the file and the problem: %v", err)
				}
				after, err := os.ReadFile(path)
				if err != nil || string(after) != string(content) {
					t.Fatalf("a failed open changed the file (%v)", err)
				}
			})
		}
	})
	t.Run("data root is a file", func(t *testing.T) {
		f := filepath.Join(t.TempDir(), "file")
		os.WriteFile(f, []byte("x"), 0o644)
		_, err := Open(ctx, Options{DataRoot: f})
		if err == nil || !strings.Contains(err.Error(), "data root") {
			t.Fatalf("err = %v", err)
		}
	})
	t.Run("store path is a directory", func(t *testing.T) {
		root := t.TempDir()
		os.Mkdir(filepath.Join(root, FileName), 0o755)
		_, err := Open(ctx, Options{DataRoot: root})
		if err == nil || !strings.Contains(err.Error(), filepath.Join(root, FileName)) {
			t.Fatalf("err = %v", err)
		}
	})
	t.Run("no data root", func(t *testing.T) {
		if _, err := Open(ctx, Options{}); err == nil {
			t.Fatal("opened a store with no data root")
		}
	})
}

func TestSchemaVersions(t *testing.T) {
	ctx := context.Background()
	backends := []struct {
		name string
		opts func(t *testing.T) Options
	}{
		{"embedded", func(t *testing.T) Options { return Options{DataRoot: t.TempDir()} }},
		{"postgres", func(t *testing.T) Options { return Options{DatabaseURL: testenv.Postgres(t)} }},
	}
	for _, b := range backends {
		t.Run(b.name, func(t *testing.T) {
			o := b.opts(t)
			// Concurrent first use by several openers.
			var wg sync.WaitGroup
			errs := make(chan error, 8)
			for range 8 {
				wg.Add(1)
				go func() {
					defer wg.Done()
					s, err := Open(ctx, o)
					if err != nil {
						errs <- err
						return
					}
					s.Close()
				}()
			}
			wg.Wait()
			close(errs)
			for err := range errs {
				t.Fatalf("concurrent first open: %v", err)
			}
			st, err := Open(ctx, o)
			if err != nil {
				t.Fatal(err)
			}
			s := st.(*sqlStore)
			var rows, v int64
			if err := one(ctx, s.b.db(), `SELECT COUNT(*), MAX(version) FROM conductor_schema`, nil, &rows, &v); err != nil {
				t.Fatal(err)
			}
			if rows != int64(len(migrations)) || v != SchemaVersion {
				t.Fatalf("schema rows %d version %d, want %d and %d", rows, v, len(migrations), SchemaVersion)
			}
			if err := st.PutRun(ctx, Run{ID: "r-keep"}); err != nil {
				t.Fatal(err)
			}
			// A newer binary migrated this store: we must refuse it untouched.
			if _, err := s.b.db().exec(ctx, `INSERT INTO conductor_schema (version, name, applied_at) VALUES (?, 'from the future', 1)`,
				int64(SchemaVersion+1)); err != nil {
				t.Fatal(err)
			}
			st.Close()
			_, err = Open(ctx, o)
			if err == nil {
				t.Fatal("opened a store with a newer schema")
			}
			wantCode(t, err, CodeSchemaTooNew)
			if !strings.Contains(err.Error(), fmt.Sprint("schema version ", SchemaVersion+1)) {
				t.Fatalf("error does not give the version: %v", err)
			}
		})
	}
}

func TestOpenPostgresBadInput(t *testing.T) {
	ctx := context.Background()
	for _, tc := range []struct {
		name, url, want string
	}{
		{"nothing listening", "postgres://bob:s3cretpw@127.0.0.1:1/bus?sslmode=disable", "cannot connect to PostgreSQL"},
		{"no such socket", "postgres://bob:s3cretpw@/bus?host=/nonexistent/dir", "cannot connect to PostgreSQL"},
		{"bad port", "postgres://bob:s3cretpw@localhost:notaport/bus", "database URL"},
		{"key value", "host=127.0.0.1 port=1 user=bob password=s3cretpw dbname=bus sslmode=disable", "cannot connect to PostgreSQL"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			start := time.Now()
			_, err := Open(ctx, Options{DatabaseURL: tc.url})
			if err == nil {
				t.Fatal("opened an unreachable database")
			}
			if d := time.Since(start); d > 15*time.Second {
				t.Fatalf("took %s", d)
			}
			if strings.Contains(err.Error(), "s3cretpw") {
				t.Fatalf("the password leaked: %v", err)
			}
			if !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %q does not say %q", err, tc.want)
			}
		})
	}
	t.Run("search_path without a schema", func(t *testing.T) {
		url := strings.Replace(testenv.Postgres(t), "search_path=", "search_path=nosuchschema", 1)
		_, err := Open(ctx, Options{DatabaseURL: url})
		if err == nil || !strings.Contains(err.Error(), "the search_path names no schema that exists") {
			t.Fatalf("err = %v", err)
		}
	})
	t.Run("wrong database", func(t *testing.T) {
		url := testenv.Postgres(t)
		bad := strings.Replace(url, "postgres:///", "postgres:///nosuchdb_", 1)
		_, err := Open(ctx, Options{DatabaseURL: bad})
		if err == nil || !strings.Contains(err.Error(), "nosuchdb_") {
			t.Fatalf("err = %v", err)
		}
	})
}

func TestRedactURL(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"postgres://bob:pw@db:5432/bus", "postgres://bob:xxxxx@db:5432/bus"},
		{"postgres://bob@db/bus", "postgres://bob@db/bus"},
		{"postgres:///bus?host=/tmp&password=pw", "postgres:///bus?host=%2Ftmp&password=xxxxx"},
		{"postgres://bob:p@ss@db:notaport/bus?password=pw2", "postgres://bob:xxxxx@db:notaport/bus?password=xxxxx"},
		{"host=db user=bob password=pw dbname=bus", "host=db user=bob password=xxxxx dbname=bus"},
	} {
		if got := RedactURL(tc.in); got != tc.want {
			t.Errorf("RedactURL(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
}

func wantCode(t *testing.T, err error, code string) {
	t.Helper()
	var r *refusal.Refusal
	if !errors.As(err, &r) || string(r.Code) != code || r.Fix == "" {
		t.Fatalf("error %v is not refusal %s with a fix", err, code)
	}
}

// claimItems is how many backlog items the processes compete for.
const claimItems = 20

func checkExactlyOnce(t *testing.T, won [][]string, n int) {
	t.Helper()
	count := map[string]int{}
	for _, items := range won {
		for _, it := range items {
			count[it]++
		}
	}
	for i := range n {
		if c := count[fmt.Sprint("item-", i)]; c != 1 {
			t.Errorf("item-%d won %d times, want exactly once", i, c)
		}
	}
	if len(count) != n {
		t.Errorf("%d distinct items won, want %d", len(count), n)
	}
}

func FuzzRedactURL(f *testing.F) {
	f.Add("bob", "s3cret", "db:5432", "bus")
	f.Add("a", "p@ss/w:rd", "localhost:notaport", "x")
	f.Add("", "pw", "", "")
	f.Fuzz(func(t *testing.T, user, pw, host, db string) {
		for _, raw := range []string{
			"postgres://" + user + ":" + pw + "@" + host + "/" + db,
			"postgres://" + user + "@" + host + "/" + db + "?password=" + pw,
			"host=" + host + " user=" + user + " password=" + pw,
		} {
			// The password as the driver reads it, or, when the driver
			// cannot parse the URL, the one given if it is unambiguous.
			secret := pw
			if cfg, err := pgconn.ParseConfig(raw); err == nil {
				secret = cfg.Password
			} else if strings.ContainsAny(pw, "@/#?:&= '\\\t\n%") {
				continue
			}
			if len(secret) < 4 || strings.Count(raw, secret) != 1 || strings.Contains("postgres://xxxxx", secret) {
				continue // too short or ambiguous to tell from the rest
			}
			// The rest of the URL may spell the password once escaped
			// (a space in the path becomes %20…): a control with the
			// password swapped out tells.
			if strings.Contains(RedactURL(strings.Replace(raw, secret, "Q9Z", 1)), secret) {
				continue
			}
			if got := RedactURL(raw); strings.Contains(got, secret) {
				t.Fatalf("RedactURL(%q) = %q keeps the password %q", raw, got, secret)
			}
		}
	})
}
