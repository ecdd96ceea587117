package redisstore_test

import (
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/fenceproxy/fenceproxy/fencestore"
	"github.com/fenceproxy/fenceproxy/fencestore/redisstore"
	"github.com/fenceproxy/fenceproxy/fencestore/redisstore/redistest"
)

// collatingServer starts redis-server under en_US.UTF-8 (LC_ALL; Redis sets
// LC_COLLATE from the environment at start, and Lua's '<' on strings then
// follows it), the locale compiled into a directory of the test's own
// (LOCPATH) with localedef, so the machine needs only the locale sources
// (Debian's locales package), not a generated locale. It checks that the
// collation is in effect: under it "-1" sorts after "01", as punctuation
// is ignored at first.
func collatingServer(t *testing.T) *redistest.Server {
	t.Helper()
	localedef, err := exec.LookPath("localedef")
	if err != nil {
		t.Skip("localedef not found, so en_US.UTF-8 cannot be generated: apt-get install -y locales")
	}
	dir := t.TempDir()
	if out, err := exec.Command(localedef, "-i", "en_US", "-f", "UTF-8", filepath.Join(dir, "en_US.UTF-8")).CombinedOutput(); err != nil {
		t.Skipf("en_US.UTF-8 cannot be generated (apt-get install -y locales provides its sources): localedef: %v\n%s", err, out)
	}
	srv := redistest.StartEnv(t, []string{"LOCPATH=" + dir, "LC_ALL=en_US.UTF-8", "LANG=en_US.UTF-8"})
	c := srv.Client(t)
	before, err := c.Eval(t.Context(), "return tostring('-1' < '01')", nil).Text()
	if err != nil {
		t.Fatal(err)
	}
	if before != "false" {
		t.Fatalf("redis-server under LC_ALL=en_US.UTF-8 still collates as C ('-1' < '01' is %s): the test proves nothing", before)
	}
	return srv
}

// Every comparison of the scripts is of bytes or integers: under a
// collation that ignores punctuation, (42, seq 1) still comes after the
// unsequenced 42 in flight (its member's 20 '-' sort before any sequence's
// digits as bytes, not under en_US.UTF-8), waits for it, and goes once it
// is released; marks and sequences compare as numbers.
func TestScriptsLocaleFree(t *testing.T) {
	srv := collatingServer(t)
	for _, tc := range []struct {
		name string
		opts redisstore.Options
	}{{"batched", redisstore.Options{}}, {"unbatched", redisstore.Options{MaxBatch: -1}}} {
		t.Run(tc.name, func(t *testing.T) {
			tc.opts.DrainPoll = 20 * time.Millisecond
			a, b := replicas(t, srv, tc.opts)
			none := flyThrough(t, a, fencestore.Admission{Resource: "r", Token: 42, Flight: time.Minute})
			s1 := flyThrough(t, b, fencestore.Admission{Resource: "r", Token: 42, Sequence: 1, HasSequence: true, Flight: time.Minute})
			if !s1.Older {
				t.Fatal("(42, 1) does not wait for the unsequenced 42 in flight under en_US.UTF-8")
			}
			done := make(chan error, 1)
			go func() {
				_, err := b.Drain(t.Context(), s1)
				done <- err
			}()
			select {
			case err := <-done:
				t.Fatalf("(42, 1) passed the unsequenced 42 in flight (Drain: %v)", err)
			case <-time.After(300 * time.Millisecond):
			}
			a.Release(none)
			if err := <-done; err != nil {
				t.Fatal(err)
			}
			b.Release(s1)
			// Sequences and tokens as numbers: 10 after 9, 100 after 99.
			for _, adm := range []fencestore.Admission{
				{Resource: "r", Token: 42, Sequence: 9, HasSequence: true},
				{Resource: "r", Token: 42, Sequence: 10, HasSequence: true},
				{Resource: "r", Token: 99},
				{Resource: "r", Token: 100},
			} {
				if d, err := b.Admit(t.Context(), adm); err != nil || !d.Admitted {
					t.Errorf("Admit(%+v) = %+v, %v; want admitted", adm, d, err)
				}
			}
			if d, err := b.Admit(t.Context(), fencestore.Admission{Resource: "r", Token: 99}); err != nil || d.Admitted {
				t.Errorf("99 after 100: %+v, %v; want refused", d, err)
			}
		})
	}
}
