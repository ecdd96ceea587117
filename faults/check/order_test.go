package check

import (
	"math"
	"math/rand/v2"
	"strings"
	"testing"
)

// fw is one request as the upstream saw it: begun at begin, ended at end.
func fw(id, res string, tok uint64, begin, end int64) Forward {
	return Forward{ID: id, Resource: res, Token: tok, At: begin, End: end}
}

func TestOrder(t *testing.T) {
	cases := []struct {
		name                 string
		fwd                  []Forward
		inversions, overlaps int
	}{
		{"in order, one after the other", []Forward{
			fw("a", "r", 1, 10, 20), fw("b", "r", 2, 30, 40), fw("c", "r", 3, 50, 60),
		}, 0, 0},
		{"lower begun after the higher ended", []Forward{
			fw("b", "r", 42, 10, 20), fw("a", "r", 41, 30, 40),
		}, 1, 0},
		{"lower begun while the higher was being processed", []Forward{
			fw("b", "r", 42, 10, 50), fw("a", "r", 41, 20, 30),
		}, 1, 0},
		{"lower begun while the higher, never ended, was being processed", []Forward{
			fw("b", "r", 42, 10, 0), fw("a", "r", 41, 20, 30),
		}, 1, 0},
		{"higher begun while the lower was being processed", []Forward{
			fw("a", "r", 41, 10, 50), fw("b", "r", 42, 20, 30),
		}, 0, 1},
		{"higher begun just as the lower ended", []Forward{
			fw("a", "r", 41, 10, 20), fw("b", "r", 42, 20, 30),
		}, 0, 0},
		{"begun at the same instant", []Forward{
			fw("a", "r", 41, 10, 20), fw("b", "r", 42, 10, 20),
		}, 1, 0},
		{"equal tokens are never an inversion", []Forward{
			fw("a", "r", 42, 10, 50), fw("b", "r", 42, 20, 30), fw("c", "r", 42, 20, 25), fw("d", "r", 42, 60, 70),
		}, 0, 0},
		{"equal tokens at the same instant", []Forward{
			fw("a", "r", 42, 10, 20), fw("b", "r", 42, 10, 20),
		}, 0, 0},
		{"other resources do not pair", []Forward{
			fw("b", "r", 42, 10, 20), fw("a", "s", 41, 30, 40), fw("c", "s", 40, 5, 6),
		}, 0, 0},
		{"pairs, not requests", []Forward{
			// 43 and 42 begun before 41: two inversions for 41; 40 after
			// all three: three more.
			fw("c", "r", 43, 10, 11), fw("b", "r", 42, 20, 21), fw("a", "r", 41, 30, 31), fw("z", "r", 40, 40, 41),
		}, 6, 0},
		{"one slow lower write overlapped by two higher ones", []Forward{
			fw("a", "r", 41, 10, 100), fw("b", "r", 42, 20, 30), fw("c", "r", 43, 40, 50), fw("d", "r", 44, 110, 120),
		}, 0, 2},
		{"both at once", []Forward{
			// 41 streams its body from 10 to 100; 42 comes and goes; 40
			// (admitted earlier, slow on the way) begins during 41.
			fw("a", "r", 41, 10, 100), fw("b", "r", 42, 20, 30), fw("c", "r", 40, 50, 60),
		}, 2, 1},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			o := CountOrder(c.fwd)
			if o.Inversions != c.inversions || o.Overlaps != c.overlaps {
				t.Fatalf("inversions=%d overlaps=%d, want %d and %d; examples %q",
					o.Inversions, o.Overlaps, c.inversions, c.overlaps, o.Examples)
			}
			if n := len(o.Examples); (c.inversions+c.overlaps == 0) != (n == 0) {
				t.Fatalf("examples %q", o.Examples)
			}
			// The order of the records does not matter.
			rev := make([]Forward, len(c.fwd))
			for i, f := range c.fwd {
				rev[len(rev)-1-i] = f
			}
			if r := CountOrder(rev); r.Inversions != o.Inversions || r.Overlaps != o.Overlaps {
				t.Fatalf("reversed input: %d/%d, want %d/%d", r.Inversions, r.Overlaps, o.Inversions, o.Overlaps)
			}
		})
	}
}

func TestOrderExamples(t *testing.T) {
	const us = 1000
	o := CountOrder([]Forward{fw("b", "r", 42, 10*us, 50*us), fw("a", "r", 41, 20*us, 30*us), fw("c", "r", 43, 60*us, 70*us)})
	if o.Inversions != 1 || o.Overlaps != 0 {
		t.Fatalf("%+v", o)
	}
	if len(o.Examples) != 1 || !strings.HasPrefix(o.Examples[0], `inversion: r token 41 (id "a") began at 20µs, after token 42 (id "b")`) ||
		!strings.Contains(o.Examples[0], "still being processed") {
		t.Fatalf("examples %q", o.Examples)
	}
}

// The counts equal a pair-by-pair count on random histories, with ties in
// begin times, equal tokens and requests that never ended.
func TestOrderMatchesPairwise(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for range 500 {
		n := r.IntN(40)
		fwd := make([]Forward, n)
		for i := range fwd {
			begin := r.Int64N(50)
			var end int64
			if r.IntN(10) > 0 {
				end = begin + r.Int64N(20)
			}
			fwd[i] = fw(string(rune('a'+i)), []string{"r", "s"}[r.IntN(2)], 1+r.Uint64N(6), begin, end)
		}
		var inv, ovl int
		endOf := func(f Forward) int64 {
			if f.End == 0 || f.End < f.At {
				return math.MaxInt64
			}
			return f.End
		}
		for i := range fwd {
			for j := range fwd {
				lo, hi := fwd[i], fwd[j]
				if lo.Resource != hi.Resource || lo.Token >= hi.Token {
					continue
				}
				if lo.At >= hi.At {
					inv++
				} else if hi.At < endOf(lo) {
					ovl++
				}
			}
		}
		o := CountOrder(fwd)
		if o.Inversions != inv || o.Overlaps != ovl {
			t.Fatalf("inversions=%d overlaps=%d, pairwise %d and %d: %+v", o.Inversions, o.Overlaps, inv, ovl, fwd)
		}
	}
}

// Check reports the order figures and they do not make a history unsafe.
func TestCheckReportsOrderNotFailed(t *testing.T) {
	ops := []Op{
		write("a", "r", 41, false, Admitted, 0, 0, 100),
		write("b", "r", 42, false, Admitted, 0, 1, 10),
		write("c", "r", 43, false, Admitted, 0, 2, 90),
	}
	fwd := []Forward{
		{ID: "b", Resource: "r", Token: 42, At: 5, End: 8},
		{ID: "c", Resource: "r", Token: 43, At: 12, End: 80}, // overlapped by nothing higher
		{ID: "a", Resource: "r", Token: 41, At: 50, End: 60}, // begun after 42 and during 43
	}
	r := Check(ops, fwd, timeout)
	if !r.Safe() || r.Inversions != 2 || r.Overlaps != 0 || r.LateForwards != 1 {
		t.Fatalf("%+v", r)
	}
	if len(r.OrderExamples) != 1 || len(r.Examples) != 0 {
		t.Fatalf("examples %q, order examples %q", r.Examples, r.OrderExamples)
	}
}

// fs is a forward with a sequence.
func fs(id, res string, tok, seq uint64, begin, end int64) Forward {
	f := fw(id, res, tok, begin, end)
	f.Seq, f.HasSeq = seq, true
	return f
}

// The order figures compare (token, sequence): within one token, a lower
// sequence begun after a higher one, or a higher one begun while a lower one
// (or an unsequenced request of the token) was still being processed.
func TestOrderSequences(t *testing.T) {
	cases := []struct {
		name                 string
		fwd                  []Forward
		inversions, overlaps int
	}{
		{"sequences in order", []Forward{
			fs("a", "r", 42, 1, 10, 20), fs("b", "r", 42, 2, 30, 40), fs("c", "r", 43, 1, 50, 60),
		}, 0, 0},
		{"a lower sequence begun after a higher one of the same token", []Forward{
			fs("b", "r", 42, 8, 10, 20), fs("a", "r", 42, 7, 30, 40),
		}, 1, 0},
		{"a higher sequence begun while a lower one was being processed", []Forward{
			fs("a", "r", 42, 7, 10, 50), fs("b", "r", 42, 8, 20, 30),
		}, 0, 1},
		{"sequence 1 begun while the unsequenced request of its token ran", []Forward{
			fw("a", "r", 42, 10, 50), fs("b", "r", 42, 1, 20, 30),
		}, 0, 1},
		{"the unsequenced request begun after sequence 1 of its token", []Forward{
			fs("b", "r", 42, 1, 10, 20), fw("a", "r", 42, 30, 40),
		}, 1, 0},
		{"sequence 0 is a sequence: after none", []Forward{
			fw("a", "r", 42, 10, 50), fs("b", "r", 42, 0, 20, 30),
		}, 0, 1},
		{"equal pairs never count", []Forward{
			fs("a", "r", 42, 7, 10, 50), fs("b", "r", 42, 7, 20, 30), fs("c", "r", 42, 7, 5, 60),
		}, 0, 0},
		{"a higher token beats any sequence", []Forward{
			fs("a", "r", 43, 1, 10, 20), fs("b", "r", 42, 99, 30, 40),
		}, 1, 0},
		{"tokens alone would miss it: same token, sequences reversed", []Forward{
			fs("c", "r", 42, 3, 10, 20), fs("b", "r", 42, 2, 30, 40), fs("a", "r", 42, 1, 50, 60),
		}, 3, 0},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			o := CountOrder(c.fwd)
			if o.Inversions != c.inversions || o.Overlaps != c.overlaps {
				t.Fatalf("inversions=%d overlaps=%d, want %d and %d; examples %q",
					o.Inversions, o.Overlaps, c.inversions, c.overlaps, o.Examples)
			}
		})
	}
	o := CountOrder([]Forward{fs("b", "r", 42, 8, 10, 20), fs("a", "r", 42, 7, 30, 40)})
	if len(o.Examples) != 1 || !strings.Contains(o.Examples[0], "token 42 sequence 7") {
		t.Fatalf("examples %q", o.Examples)
	}
}

// The pair counts equal a pair-by-pair count on random histories with
// sequences (some absent), ties and requests that never ended.
func TestOrderSequencesMatchPairwise(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	for range 500 {
		fwd := make([]Forward, r.IntN(40))
		for i := range fwd {
			begin := r.Int64N(50)
			var end int64
			if r.IntN(10) > 0 {
				end = begin + r.Int64N(20)
			}
			fwd[i] = fw(string(rune('a'+i)), "r", 1+r.Uint64N(3), begin, end)
			if r.IntN(3) > 0 {
				fwd[i].Seq, fwd[i].HasSeq = r.Uint64N(4), true
			}
		}
		var inv, ovl int
		for i := range fwd {
			for j := range fwd {
				lo, hi := fwd[i], fwd[j]
				if lo.Pair().Compare(hi.Pair()) >= 0 {
					continue
				}
				if lo.At >= hi.At {
					inv++
				} else if hi.At < end(&lo) {
					ovl++
				}
			}
		}
		if o := CountOrder(fwd); o.Inversions != inv || o.Overlaps != ovl {
			t.Fatalf("inversions=%d overlaps=%d, pairwise %d and %d: %+v", o.Inversions, o.Overlaps, inv, ovl, fwd)
		}
	}
}

func TestPairCompare(t *testing.T) {
	p := func(tok uint64) Pair { return Pair{Token: tok} }
	s := func(tok, seq uint64) Pair { return Pair{Token: tok, Seq: seq, HasSeq: true} }
	for _, c := range []struct {
		a, b Pair
		want int
	}{
		{p(41), p(42), -1}, {p(42), p(42), 0}, {p(42), s(42, 0), -1}, {s(42, 0), s(42, 1), -1},
		{s(42, 7), s(42, 7), 0}, {s(42, 99), p(43), -1}, {s(43, 1), s(42, 99), 1},
	} {
		if got := c.a.Compare(c.b); got != c.want {
			t.Errorf("%v vs %v = %d, want %d", c.a, c.b, got, c.want)
		}
		if got := c.b.Compare(c.a); got != -c.want {
			t.Errorf("%v vs %v = %d, want %d", c.b, c.a, got, -c.want)
		}
	}
}
