package storetest

import (
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"sort"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fenceproxy/fenceproxy/fencestore"
)

// opTimeout bounds every store call of the suite. It is generous because the
// suite runs under -race on small shared machines; a store that needs it is
// still far too slow, but that is a benchmark's business, not this suite's.
const opTimeout = 10 * time.Second

// Run runs the conformance suite. open is called once per subtest and must
// return a store in which no resource has a mark yet (a fresh file, a fresh
// key prefix). Run closes every store it opens, so open need not.
func Run(t *testing.T, open func(t *testing.T) fencestore.Store) {
	t.Helper()
	tests := []struct {
		name string
		fn   func(t *testing.T, s fencestore.Store)
	}{
		{"Compare", testCompare},
		{"MarkNeverMovesBackwards", testSequence},
		{"Sequences", testSequences},
		{"IndependentResources", testIndependence},
		{"MarkRead", testMarkRead},
		{"Ping", testPing},
		{"Context", testContext},
		{"Concurrent", testConcurrent},
		{"Barrier", testBarrier},
		{"WatchContinues", testWatchContinues},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s := open(t)
			t.Cleanup(func() {
				if err := s.Close(); err != nil {
					t.Errorf("Close: %v", err)
				}
			})
			tc.fn(t, s)
		})
	}
	// Closing is tested apart: the store is closed before the cleanup runs.
	t.Run("AfterClose", func(t *testing.T) { testAfterClose(t, open(t)) })
}

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(t.Context(), opTimeout)
	t.Cleanup(cancel)
	return ctx
}

// admit calls s.Admit and fails the test on an error: none of the suite's
// admissions is expected to fail.
func admit(t *testing.T, s fencestore.Store, resource string, token uint64, cmp fencestore.Compare) fencestore.Decision {
	t.Helper()
	d, err := s.Admit(ctxT(t), fencestore.Admission{Resource: resource, Token: token, Compare: cmp})
	if err != nil {
		t.Fatalf("Admit(%q, %d, %v): %v", resource, token, cmp, err)
	}
	return d
}

func wantMark(t *testing.T, s fencestore.Store, resource string, want uint64, wantOK bool) {
	t.Helper()
	got, ok, err := s.Mark(ctxT(t), resource)
	if err != nil {
		t.Fatalf("Mark(%q): %v", resource, err)
	}
	if ok != wantOK || got != want {
		t.Fatalf("Mark(%q) = %d, %t; want %d, %t", resource, got, ok, want, wantOK)
	}
}

const (
	p53    = uint64(1) << 53
	p63    = uint64(1) << 63
	maxU64 = uint64(math.MaxUint64)
)

// compareCases are written out rather than derived from Compare.Admits, so that
// a mistake in the reference cannot hide the same mistake in a store.
var compareCases = []struct {
	name        string
	hasMark     bool
	mark, token uint64
	ge, gt      bool // admitted under ">=" and under ">"
}{
	{name: "empty/0", token: 0, ge: true, gt: true},
	{name: "empty/1", token: 1, ge: true, gt: true},
	{name: "empty/max", token: maxU64, ge: true, gt: true},
	{hasMark: true, mark: 0, token: 0, ge: true, gt: false},
	{hasMark: true, mark: 0, token: 1, ge: true, gt: true},
	{hasMark: true, mark: 5, token: 4, ge: false, gt: false},
	{hasMark: true, mark: 5, token: 5, ge: true, gt: false},
	{hasMark: true, mark: 5, token: 6, ge: true, gt: true},
	{hasMark: true, mark: 9, token: 10, ge: true, gt: true},
	{hasMark: true, mark: 10, token: 9, ge: false, gt: false},
	{hasMark: true, mark: 99, token: 100, ge: true, gt: true},
	{hasMark: true, mark: 100, token: 99, ge: false, gt: false},
	{hasMark: true, mark: 100, token: 100, ge: true, gt: false},
	{hasMark: true, mark: p53 - 1, token: p53, ge: true, gt: true},
	{hasMark: true, mark: p53, token: p53 - 1, ge: false, gt: false},
	{hasMark: true, mark: p53, token: p53 + 1, ge: true, gt: true},
	// 2^53+1 is the first integer a float64 cannot hold: as floats these
	// two are equal.
	{hasMark: true, mark: p53 + 1, token: p53, ge: false, gt: false},
	{hasMark: true, mark: p53 + 1, token: p53 + 1, ge: true, gt: false},
	{hasMark: true, mark: p53 - 1, token: p53 + 1, ge: true, gt: true},
	{hasMark: true, mark: p63 - 1, token: p63, ge: true, gt: true},
	{hasMark: true, mark: p63, token: p63 - 1, ge: false, gt: false},
	{hasMark: true, mark: maxU64 - 1, token: maxU64, ge: true, gt: true},
	{hasMark: true, mark: maxU64, token: maxU64 - 1, ge: false, gt: false},
	{hasMark: true, mark: maxU64, token: maxU64, ge: true, gt: false},
	{hasMark: true, mark: maxU64, token: 0, ge: false, gt: false},
	{hasMark: true, mark: 1, token: maxU64, ge: true, gt: true},
	// 19 against 20 digits: a byte-wise compare without the length first
	// gets these backwards.
	{hasMark: true, mark: 9999999999999999999, token: 10000000000000000000, ge: true, gt: true},
	{hasMark: true, mark: 10000000000000000000, token: 9999999999999999999, ge: false, gt: false},
	// Same length, differing only in the last or only in the first digit.
	{hasMark: true, mark: 12345678901234567890, token: 12345678901234567891, ge: true, gt: true},
	{hasMark: true, mark: 12345678901234567891, token: 12345678901234567890, ge: false, gt: false},
	{hasMark: true, mark: 18345678901234567890, token: 12345678901234567891, ge: false, gt: false},
}

func testCompare(t *testing.T, s fencestore.Store) {
	for i, tc := range compareCases {
		for _, cmp := range []fencestore.Compare{fencestore.AtLeast, fencestore.Greater} {
			want := tc.ge
			if cmp == fencestore.Greater {
				want = tc.gt
			}
			name := fmt.Sprintf("mark=%d/token=%d/%v", tc.mark, tc.token, cmp)
			if !tc.hasMark {
				name = fmt.Sprintf("%s/%v", tc.name, cmp)
			}
			t.Run(name, func(t *testing.T) {
				// One resource per case, so the cases cannot see each other.
				res := fmt.Sprintf("compare/%d/%d", i, cmp)
				if tc.hasMark {
					if d := admit(t, s, res, tc.mark, fencestore.AtLeast); !d.Admitted || d.Mark != tc.mark {
						t.Fatalf("setting the mark to %d: got %+v", tc.mark, d)
					}
				}
				d := admit(t, s, res, tc.token, cmp)
				wantD := fencestore.Decision{Admitted: want, Mark: tc.mark}
				if want {
					wantD.Mark = tc.token
				}
				if d != wantD {
					t.Errorf("Admit(mark %d, token %d, %v) = %+v, want %+v", tc.mark, tc.token, cmp, d, wantD)
				}
				wantMark(t, s, res, wantD.Mark, true)
			})
		}
	}
}

// testSequence drives random admissions over a few resources and checks every
// decision and the mark after it against a model, so that the mark never moves
// backwards and a refusal reports the mark that refused.
func testSequence(t *testing.T, s fencestore.Store) {
	rng := rand.New(rand.NewPCG(1, 2))
	// Tokens cluster around the edges where exactness breaks, so that equal and
	// neighbouring tokens are frequent.
	bases := []uint64{0, 95, p53 - 8, maxU64 - 16}
	type model struct {
		mark uint64
		ok   bool
	}
	marks := map[string]*model{}
	for i := range 300 {
		res := fmt.Sprintf("seq/%d", rng.IntN(3))
		m := marks[res]
		if m == nil {
			m = &model{}
			marks[res] = m
		}
		token := bases[rng.IntN(len(bases))] + rng.Uint64N(16)
		cmp := fencestore.Compare(rng.IntN(2))
		admitted := !m.ok || token > m.mark || (cmp == fencestore.AtLeast && token == m.mark)
		if admitted {
			m.mark, m.ok = token, true
		}
		want := fencestore.Decision{Admitted: admitted, Mark: m.mark}
		if d := admit(t, s, res, token, cmp); d != want {
			t.Fatalf("step %d: Admit(%q, %d, %v) = %+v, want %+v", i, res, token, cmp, d, want)
		}
		wantMark(t, s, res, m.mark, true)
	}
}

// oddNames are resource names that a store keying on concatenation, on a
// prefix scan, or on a text encoding could confuse with one another.
var oddNames = []string{
	"orders/1", "orders/10", "orders/1/", "orders", "orders/", "order",
	"orders 1", "orders/1 ", " orders/1", "a/b/c", "a/b", "*", "{tag}", "%2F",
	"fence:orders/1", "ünïcødé/日本", "emoji/🦀", "tab\tx", "nul\x00x", "nul\x00y",
	"not-utf8-\xff\xfe", "long/" + string(make([]byte, 512)),
}

func testIndependence(t *testing.T, s fencestore.Store) {
	// Distinct marks, set in an order that is not the names' order, so that a
	// store that mixes up two names ends with a mark that gives it away.
	order := rand.New(rand.NewPCG(3, 4)).Perm(len(oddNames))
	markOf := func(i int) uint64 { return uint64(1000 + 10*i) }
	for _, i := range order {
		if d := admit(t, s, oddNames[i], markOf(i), fencestore.Greater); !d.Admitted || d.Mark != markOf(i) {
			t.Fatalf("first admission of %q: %+v", oddNames[i], d)
		}
	}
	for i, name := range oddNames {
		wantMark(t, s, name, markOf(i), true)
		// A token below this name's mark but above others' is refused here
		// with this name's mark.
		if d := admit(t, s, name, markOf(i)-1, fencestore.AtLeast); d.Admitted || d.Mark != markOf(i) {
			t.Errorf("Admit(%q, %d, >=) = %+v, want refused with mark %d", name, markOf(i)-1, d, markOf(i))
		}
	}
	for i, name := range oddNames {
		if d := admit(t, s, name, markOf(i)+5, fencestore.Greater); !d.Admitted || d.Mark != markOf(i)+5 {
			t.Errorf("Admit(%q, %d, >) = %+v, want admitted", name, markOf(i)+5, d)
		}
	}
	for i, name := range oddNames {
		wantMark(t, s, name, markOf(i)+5, true)
	}
	for _, name := range []string{"orders/1x", "orders//1", "Orders/1", "nul", "nul\x00", "a", "ünïcødé"} {
		wantMark(t, s, name, 0, false)
	}
}

func testMarkRead(t *testing.T, s fencestore.Store) {
	wantMark(t, s, "absent", 0, false)
	admit(t, s, "zero", 0, fencestore.AtLeast)
	// A mark of 0 is present, not absent.
	wantMark(t, s, "zero", 0, true)
	admit(t, s, "max", maxU64, fencestore.Greater)
	wantMark(t, s, "max", maxU64, true)
	admit(t, s, "p53+1", p53+1, fencestore.Greater)
	wantMark(t, s, "p53+1", p53+1, true)
	// Reading does not create a mark.
	wantMark(t, s, "absent", 0, false)
}

func testPing(t *testing.T, s fencestore.Store) {
	if err := s.Ping(ctxT(t)); err != nil {
		t.Fatalf("Ping: %v", err)
	}
}

func testContext(t *testing.T, s fencestore.Store) {
	cancelled, cancel := context.WithCancel(t.Context())
	cancel()
	expired, cancel2 := context.WithDeadline(t.Context(), time.Now().Add(-time.Second))
	defer cancel2()
	for _, c := range []struct {
		name string
		ctx  context.Context
	}{{"cancelled", cancelled}, {"expired", expired}} {
		t.Run(c.name, func(t *testing.T) {
			wantUnavailable(t, "Admit", func() error {
				_, err := s.Admit(c.ctx, fencestore.Admission{Resource: "ctx", Token: 1, Compare: fencestore.AtLeast})
				return err
			})
			wantUnavailable(t, "Mark", func() error {
				_, _, err := s.Mark(c.ctx, "ctx")
				return err
			})
			wantUnavailable(t, "Ping", func() error { return s.Ping(c.ctx) })
		})
	}
	// The store still works with a live context.
	if d := admit(t, s, "ctx", 7, fencestore.Greater); !d.Admitted || d.Mark != 7 {
		t.Fatalf("Admit after cancelled calls: %+v", d)
	}
}

func testAfterClose(t *testing.T, s fencestore.Store) {
	admit(t, s, "closed", 1, fencestore.AtLeast)
	if err := s.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	wantUnavailable(t, "Admit", func() error {
		_, err := s.Admit(ctxT(t), fencestore.Admission{Resource: "closed", Token: 2, Compare: fencestore.AtLeast})
		return err
	})
	wantUnavailable(t, "Mark", func() error {
		_, _, err := s.Mark(ctxT(t), "closed")
		return err
	})
	wantUnavailable(t, "Ping", func() error { return s.Ping(ctxT(t)) })
}

func wantUnavailable(t *testing.T, op string, call func() error) {
	t.Helper()
	start := time.Now()
	err := call()
	if !errors.Is(err, fencestore.ErrUnavailable) {
		t.Errorf("%s: err = %v, want one wrapping fencestore.ErrUnavailable", op, err)
	}
	// A done context must not wait for the store.
	if d := time.Since(start); d > time.Second {
		t.Errorf("%s took %v", op, d)
	}
}

// op is one admission of the concurrent test, with its invocation and response
// times on the suite's logical clock.
type op struct {
	res       int
	token     uint64
	cmp       fencestore.Compare
	inv, resp int64
	d         fencestore.Decision
}

// Concurrency parameters: enough overlap on few resources to catch a store that
// reads and writes a mark in two steps, small enough for -race on two cores.
const (
	workers   = 16
	perWorker = 200
	resources = 4
)

// testConcurrent runs admissions from many goroutines, then checks the history
// against the atomic semantics: (a) each final mark is the greatest admitted
// token; (b) no admission contradicts a mark that an admission completed before
// it started had reported (a simple real-time linearizability check); (c) under
// ">" no token is admitted twice for a resource.
func testConcurrent(t *testing.T, s fencestore.Store) {
	names := make([]string, resources)
	for i := range names {
		names[i] = fmt.Sprintf("conc/%d", i)
	}
	// Per resource, where its tokens start: around 0, 2^53 and 2^64, so
	// exactness is checked under contention too.
	offsets := []uint64{0, p53 - 500, maxU64 - 5000, 0}
	var clock atomic.Int64
	var wg sync.WaitGroup
	history := make([][]op, workers)
	errs := make(chan error, workers)
	for w := range workers {
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(uint64(w), 99))
			ops := make([]op, 0, perWorker)
			for i := range perWorker {
				r := rng.IntN(resources)
				var token uint64
				if r == 3 {
					// A narrow range: equal tokens collide all the time.
					token = rng.Uint64N(48)
				} else {
					// Tokens climb with i, so workers race on close values.
					token = offsets[r] + uint64(i)*8 + rng.Uint64N(24)
				}
				o := op{res: r, token: token, cmp: fencestore.Compare(rng.IntN(2))}
				ctx, cancel := context.WithTimeout(t.Context(), opTimeout)
				o.inv = clock.Add(1)
				d, err := s.Admit(ctx, fencestore.Admission{Resource: names[r], Token: token, Compare: o.cmp})
				o.resp = clock.Add(1)
				cancel()
				if err != nil {
					errs <- fmt.Errorf("Admit(%q, %d, %v): %w", names[r], token, o.cmp, err)
					return
				}
				o.d = d
				ops = append(ops, o)
			}
			history[w] = ops
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	byRes := make([][]op, resources)
	for _, ops := range history {
		for _, o := range ops {
			byRes[o.res] = append(byRes[o.res], o)
		}
	}
	for r, ops := range byRes {
		checkHistory(t, s, names[r], ops)
	}
}

func checkHistory(t *testing.T, s fencestore.Store, name string, ops []op) {
	t.Helper()
	var failures int
	fail := func(format string, args ...any) {
		t.Helper()
		// The first few are enough to diagnose; thousands are noise.
		if failures++; failures <= 10 {
			t.Errorf("%s: "+format, append([]any{name}, args...)...)
		}
	}
	admitted := map[uint64]bool{}
	gtAdmitted := map[uint64]int{}
	var greatest uint64
	var haveAdmitted bool
	for _, o := range ops {
		// Each decision must be consistent in itself.
		if o.d.Admitted {
			if o.d.Mark != o.token {
				fail("token %d %v admitted with mark %d, want the token", o.token, o.cmp, o.d.Mark)
			}
			admitted[o.token] = true
			if o.cmp == fencestore.Greater {
				gtAdmitted[o.token]++
			}
			if !haveAdmitted || o.token > greatest {
				greatest, haveAdmitted = o.token, true
			}
		} else if o.cmp.Admits(o.token, o.d.Mark, true) {
			fail("token %d %v refused by mark %d, which admits it", o.token, o.cmp, o.d.Mark)
		}
	}
	// (a) The final mark is the greatest admitted token.
	got, ok, err := s.Mark(ctxT(t), name)
	if err != nil {
		t.Fatalf("Mark(%q): %v", name, err)
	}
	if !haveAdmitted || !ok || got != greatest {
		fail("final mark %d (present %t), want the greatest admitted token %d", got, ok, greatest)
	}
	// Every reported mark is a token that was admitted: marks are not invented.
	for _, o := range ops {
		if !admitted[o.d.Mark] {
			fail("token %d %v reported mark %d, which no admission set", o.token, o.cmp, o.d.Mark)
		}
	}
	// (c) Under ">", a token is admitted at most once.
	for token, n := range gtAdmitted {
		if n > 1 {
			fail("token %d admitted %d times under >", token, n)
		}
	}
	// (b) Real-time order: an admission B that started after A completed saw a
	// mark at least A's reported mark. byResp[k] is the greatest mark reported
	// by the first k+1 admissions to complete.
	byResp := append([]op(nil), ops...)
	sort.Slice(byResp, func(i, j int) bool { return byResp[i].resp < byResp[j].resp })
	prefixMax := make([]uint64, len(byResp))
	for i, o := range byResp {
		prefixMax[i] = o.d.Mark
		if i > 0 && prefixMax[i-1] > prefixMax[i] {
			prefixMax[i] = prefixMax[i-1]
		}
	}
	for _, b := range ops {
		k := sort.Search(len(byResp), func(i int) bool { return byResp[i].resp > b.inv })
		if k == 0 {
			continue // nothing had completed when b started
		}
		seen := prefixMax[k-1]
		if b.d.Mark < seen {
			fail("token %d %v reported mark %d, below mark %d reported by an admission completed before it started", b.token, b.cmp, b.d.Mark, seen)
		}
		if b.d.Admitted && !b.cmp.Admits(b.token, seen, true) {
			fail("token %d %v admitted although an admission completed before it started had reported mark %d", b.token, b.cmp, seen)
		}
	}
	if failures > 10 {
		t.Errorf("%s: %d failures in all", name, failures)
	}
}

// seqStep is one admission of testSequences and what it must decide.
type seqStep struct {
	token    uint64
	seq      uint64
	hasSeq   bool
	cmp      fencestore.Compare
	admitted bool
	// the mark the decision reports
	mark, markSeq uint64
	markHasSeq    bool
}

// sequenceSteps run in order on one resource. They are written out, not
// derived from Admission.Decide, so that a mistake in the reference cannot
// hide the same mistake in a store.
var sequenceSteps = []seqStep{
	{token: 5, seq: 1, hasSeq: true, admitted: true, mark: 5, markSeq: 1, markHasSeq: true},
	{token: 5, seq: 1, hasSeq: true, admitted: false, mark: 5, markSeq: 1, markHasSeq: true}, // equal pair: stale sequence
	{token: 5, seq: 0, hasSeq: true, admitted: false, mark: 5, markSeq: 1, markHasSeq: true}, // lower sequence
	{token: 5, seq: 2, hasSeq: true, admitted: true, mark: 5, markSeq: 2, markHasSeq: true},
	// Without a sequence, by token alone under the route's compare; an equal
	// token under >= leaves the pair as it was.
	{token: 5, cmp: fencestore.AtLeast, admitted: true, mark: 5, markSeq: 2, markHasSeq: true},
	{token: 5, cmp: fencestore.Greater, admitted: false, mark: 5, markSeq: 2, markHasSeq: true},
	{token: 5, seq: 2, hasSeq: true, admitted: false, mark: 5, markSeq: 2, markHasSeq: true},  // the pair is unchanged
	{token: 4, seq: 99, hasSeq: true, admitted: false, mark: 5, markSeq: 2, markHasSeq: true}, // lower token: stale token
	{token: 4, cmp: fencestore.AtLeast, admitted: false, mark: 5, markSeq: 2, markHasSeq: true},
	// A greater token without a sequence starts a mark without one; any
	// sequence is above none.
	{token: 6, cmp: fencestore.Greater, admitted: true, mark: 6},
	{token: 6, seq: 0, hasSeq: true, admitted: true, mark: 6, markSeq: 0, markHasSeq: true},
	{token: 6, seq: 0, hasSeq: true, admitted: false, mark: 6, markSeq: 0, markHasSeq: true},
	// A greater token with any sequence, even a lower one, is admitted.
	{token: 7, seq: 0, hasSeq: true, admitted: true, mark: 7, markSeq: 0, markHasSeq: true},
	// Exact past 2^53: as floats these two sequences are equal.
	{token: 7, seq: p53, hasSeq: true, admitted: true, mark: 7, markSeq: p53, markHasSeq: true},
	{token: 7, seq: p53 + 1, hasSeq: true, admitted: true, mark: 7, markSeq: p53 + 1, markHasSeq: true},
	{token: 7, seq: p53, hasSeq: true, admitted: false, mark: 7, markSeq: p53 + 1, markHasSeq: true},
	{token: 7, seq: maxU64, hasSeq: true, admitted: true, mark: 7, markSeq: maxU64, markHasSeq: true},
	{token: 7, seq: maxU64, hasSeq: true, admitted: false, mark: 7, markSeq: maxU64, markHasSeq: true},
	{token: maxU64, seq: maxU64, hasSeq: true, admitted: true, mark: maxU64, markSeq: maxU64, markHasSeq: true},
	{token: maxU64, cmp: fencestore.AtLeast, admitted: true, mark: maxU64, markSeq: maxU64, markHasSeq: true},
}

// testSequences checks the (token, sequence) mark step by step, and that a
// resource without sequences is untouched by another's.
func testSequences(t *testing.T, s fencestore.Store) {
	for i, st := range sequenceSteps {
		a := fencestore.Admission{Resource: "seq", Token: st.token, Sequence: st.seq, HasSequence: st.hasSeq, Compare: st.cmp}
		d, err := s.Admit(ctxT(t), a)
		if err != nil {
			t.Fatalf("step %d %+v: %v", i, a, err)
		}
		want := fencestore.Decision{Admitted: st.admitted, Mark: st.mark, Sequence: st.markSeq, HasSequence: st.markHasSeq}
		if d != want {
			t.Fatalf("step %d: Admit(%+v) = %+v, want %+v", i, a, d, want)
		}
		if stale := !st.admitted && st.hasSeq && st.token == st.mark; d.StaleSequence(a) != stale {
			t.Fatalf("step %d: StaleSequence = %v, want %v", i, d.StaleSequence(a), stale)
		}
		wantMark(t, s, "seq", st.mark, true)
	}
	// The first admission of a resource with a sequence.
	d, err := s.Admit(ctxT(t), fencestore.Admission{Resource: "seq-first", Token: 3, Sequence: 9, HasSequence: true})
	if err != nil || d != (fencestore.Decision{Admitted: true, Mark: 3, Sequence: 9, HasSequence: true}) {
		t.Fatalf("first admission with a sequence = %+v, %v", d, err)
	}
	wantMark(t, s, "seq-other", 0, false)
}
