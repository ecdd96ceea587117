package harness

import (
	"io"
	"strings"
	"testing"
	"time"

	"github.com/fenceproxy/fenceproxy/faults/check"
)

// One stalled round as the upstream may have seen it: the older holder's
// lease (seed), the older write, the newer write.
func stalledRound(size int, oldStatus int, fwd ...check.Forward) (slowRound, []check.Forward) {
	res := "slowx-0"
	r := slowRound{size: size, resource: res, headSeen: true,
		seed: check.Op{ID: "seed", Resource: res, Token: 5, Outcome: check.Admitted, Status: 200},
		old:  check.Op{ID: "old", Resource: res, Token: 5, Status: oldStatus},
		nw:   check.Op{ID: "newer", Resource: res, Token: 6, Outcome: check.Admitted, Status: 200},
	}
	switch {
	case oldStatus == 409:
		r.old.Outcome = check.Stale
	case oldStatus/100 == 2:
		r.old.Outcome = check.Admitted
	default:
		r.old.Outcome = check.Failed
	}
	return r, append([]check.Forward{{ID: "seed", Resource: res, Token: 5, At: 1, End: 2}}, fwd...)
}

// judged runs the slow-body judge on one round; fatal says whether the
// proxies ran with the drain barrier (Result.InversionsFatal).
func judged(r slowRound, fwd []check.Forward, fatal bool) (*env, Result) {
	e := &env{sc: &scenario{name: "slow-body"}, opts: Options{Log: io.Discard},
		up: &Upstream{recs: fwd}, slow: []slowRound{r}}
	res := Result{InversionsFatal: fatal}
	judgeSlowBody(e, nil, &res)
	return e, res
}

func TestSlowBodyJudge(t *testing.T) {
	newer := check.Forward{ID: "newer", Resource: "slowx-0", Token: 6, At: 100, End: 101}
	cases := []struct {
		name       string
		size       int
		oldStatus  int
		oldFwd     []check.Forward
		fatal      bool // the drain barrier on
		violations int
		order      int
		problems   int
		field      string // expected in the scenario's fields
	}{
		{"small: refused, never forwarded", smallBody, 409, nil, true, 0, 0, 0, "small_old_refused=1 small_old_landed_after_newer=0 small_newer_held=1"},
		{"small: admitted, landed after the newer write", smallBody, 200,
			[]check.Forward{{ID: "old", Resource: "slowx-0", Token: 5, At: 300, End: 301}}, true, 1, 0, 0,
			"small_old_refused=0 small_old_landed_after_newer=1 small_newer_held=0"},
		{"small: a violation without the barrier too", smallBody, 200,
			[]check.Forward{{ID: "old", Resource: "slowx-0", Token: 5, At: 300, End: 301}}, false, 1, 0, 0,
			"small_old_landed_after_newer=1"},
		{"small: begun before the newer write, landed while it ran", smallBody, 200,
			[]check.Forward{{ID: "old", Resource: "slowx-0", Token: 5, At: 50, End: 100}}, true, 1, 0, 0,
			"small_old_landed_after_newer=1 small_newer_held=1"},
		{"small: landed before the newer write began", smallBody, 200,
			[]check.Forward{{ID: "old", Resource: "slowx-0", Token: 5, At: 50, End: 60}}, true, 0, 0, 0,
			"small_old_landed_after_newer=0 small_newer_held=1"},
		{"small: no answer", smallBody, 0, nil, true, 0, 0, 1, "small_old_refused=0"},
		{"large: streamed, landed after the newer write, barrier on", largeBody, 200,
			[]check.Forward{{ID: "old", Resource: "slowx-0", Token: 5, At: 50, End: 300}}, true, 1, 0, 0,
			"large_body=98304 large_rounds=1 large_old_admitted=1 large_old_refused=0 large_old_landed_after_newer=1 large_newer_held=0"},
		{"large: streamed, landed after the newer write, barrier off", largeBody, 200,
			[]check.Forward{{ID: "old", Resource: "slowx-0", Token: 5, At: 50, End: 300}}, false, 0, 1, 0,
			"large_old_landed_after_newer=1 large_newer_held=0"},
		{"large: landed while the newer one ran", largeBody, 200,
			[]check.Forward{{ID: "old", Resource: "slowx-0", Token: 5, At: 50, End: 100}}, true, 1, 0, 0,
			"large_old_landed_after_newer=1 large_newer_held=1"},
		{"large: as the drain barrier has it", largeBody, 200,
			[]check.Forward{{ID: "old", Resource: "slowx-0", Token: 5, At: 50, End: 90}}, true, 0, 0, 0,
			"large_old_admitted=1 large_old_refused=0 large_old_landed_after_newer=0 large_newer_held=1"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r, fwd := stalledRound(c.size, c.oldStatus, append([]check.Forward{newer}, c.oldFwd...)...)
			e, res := judged(r, fwd, c.fatal)
			if len(res.Violations) != c.violations || res.Order != c.order || len(res.Problems) != c.problems {
				t.Fatalf("violations %q, order %d, problems %q", res.Violations, res.Order, res.Problems)
			}
			line := strings.Join(slowBodyFields(e, nil, nil), " ")
			if !strings.Contains(line, c.field) {
				t.Fatalf("%q does not contain %q", line, c.field)
			}
		})
	}
}

func TestResultFailed(t *testing.T) {
	measured := Result{Report: check.Report{Linearizable: "Ok", Inversions: 3, Overlaps: 1}, Order: 4, DrainOff: true}
	if measured.Failed() {
		t.Fatal("inversions failed a run without the drain barrier (InversionsFatal off)")
	}
	unsafe := measured
	unsafe.Report.StaleAdmissions = 1
	if !unsafe.Failed() {
		t.Fatal("a stale admission did not fail the drain-off measurement")
	}
	fatal := measured
	fatal.DrainOff, fatal.InversionsFatal = false, true
	if !fatal.Failed() {
		t.Fatal("inversions did not fail a run with InversionsFatal")
	}
	for _, f := range []struct{ inv, ovl int }{{1, 0}, {0, 1}} {
		r := Result{Report: check.Report{Linearizable: "Ok", Inversions: f.inv, Overlaps: f.ovl}, Order: f.inv + f.ovl, InversionsFatal: true}
		if !r.Failed() {
			t.Fatalf("inversions=%d overlaps=%d did not fail a run with the barrier", f.inv, f.ovl)
		}
	}
	m := fatal
	m.Measure = true
	if m.Failed() {
		t.Fatal("a measurement of an unsafe configuration failed on inversions")
	}
	v := Result{Report: check.Report{Linearizable: "Ok"}, Violations: []string{"x"}}
	if !v.Failed() {
		t.Fatal("a scenario's own violation did not fail the run")
	}
}

func TestHoldOneIn(t *testing.T) {
	h := holdOneIn(20, time.Second, 2*time.Second)
	held := 0
	for range 200 {
		if d := h(); d != 0 {
			held++
			if d < time.Second || d >= 2*time.Second {
				t.Fatalf("hold %v", d)
			}
		}
	}
	if held != 10 {
		t.Fatalf("held %d of 200, want 10", held)
	}
}
