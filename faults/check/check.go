package check

import (
	"cmp"
	"fmt"
	"slices"
	"sort"
	"time"

	"github.com/anishathalye/porcupine"
)

// Report holds the figures of one history.
type Report struct {
	// Ops counts the writes issued through the proxies (reads excluded).
	Ops int
	// StaleAdmissions: admitted writes whose token is below a mark that an
	// operation completed before this write's call had established (an
	// admitted token, a reported mark, a mark read from Redis), or equal to
	// it under ">".
	StaleAdmissions int
	// UnfencedForwards: requests the upstream received that the proxy
	// refused, that carry a token below the mark established before their
	// call (equal under ">"), whose token or resource differ from what the
	// client sent, or that no client sent at all.
	UnfencedForwards int
	// Regressions: a 409's reported mark or a mark read from Redis that is
	// lower than a mark established by an operation completed before it was
	// called (the final read at the end of a run included).
	Regressions int
	// Unavailable counts 503s.
	Unavailable int
	// StaleBelowAdmitted is the part of StaleAdmissions that the README's
	// claim speaks of: the token is below (or, under ">", equal to) a token
	// admitted (answered 2xx) before this write's call. The rest are below a
	// mark that was only reported (409, a read), which an indeterminate
	// write (503) can have set and a failover can roll back.
	StaleBelowAdmitted int

	Admitted, Stale, Failed, Reads int
	// MissingForwards: admitted (2xx) writes the upstream never received.
	MissingForwards int
	// DuplicateForwards: request ids the upstream received more than once.
	DuplicateForwards int
	// LateForwards: admitted requests that reached the upstream after a
	// higher mark had been established by a completed operation. Not a
	// violation: the README's "requests already past it" (admitted before the
	// newer token, slow on the way). Reported, never failed.
	LateForwards int
	// Inversions and Overlaps are the order figures of what the upstream
	// received (see Order): pairs of requests for one resource that the
	// upstream began in an order other than their tokens', or overlapping.
	// Never counted by Safe: the harness decides whether they fail a
	// scenario (they do when the proxies run with the drain barrier).
	Inversions, Overlaps int
	// Linearizable is porcupine's verdict; CheckedOps how many operations it
	// was given (indeterminate ones that cannot matter are left out).
	Linearizable porcupine.CheckResult
	CheckedOps   int
	// Examples describes the first few violations of each kind.
	Examples []string
	// OrderExamples describes the first few inversions and overlaps (kept
	// apart from Examples: Safe does not judge them).
	OrderExamples []string
}

// Safe reports whether none of the three safety figures is non-zero.
func (r *Report) Safe() bool {
	return r.StaleAdmissions == 0 && r.UnfencedForwards == 0 && r.Regressions == 0
}

const maxExamples = 4

// Check computes the report of a history: ops (writes and reads) and what
// the upstream received. timeout bounds the linearizability check.
func Check(ops []Op, fwd []Forward, timeout time.Duration) Report {
	var r Report
	est := newEstablished(ops)
	adm := newEstablishedBy(ops, func(o *Op) bool { return o.Outcome == Admitted })
	examples := map[string]int{}
	example := func(kind, format string, args ...any) {
		if examples[kind] < maxExamples {
			examples[kind]++
			r.Examples = append(r.Examples, kind+": "+fmt.Sprintf(format, args...))
		}
	}

	byID := make(map[string]*Op, len(ops))
	for i := range ops {
		op := &ops[i]
		if op.Outcome == Read {
			r.Reads++
		} else {
			r.Ops++
			if op.ID != "" {
				byID[op.ID] = op
			}
		}
		switch op.Outcome {
		case Admitted:
			r.Admitted++
			m, ok := est.before(op.Resource, op.Call)
			if ok && refuses(op, m) {
				r.StaleAdmissions++
				example("stale_admission", "%s %s %v (%s) admitted by replica %d at [%v,%v], after mark %v was established",
					op.Resource, tokenWord(op.HasSeq), op.Req(), cmpName(op.Greater), op.Replica, ns(op.Call), ns(op.Return), m)
			}
			if m, ok := adm.before(op.Resource, op.Call); ok && refuses(op, m) {
				r.StaleBelowAdmitted++
			}
		case Stale, Read:
			if op.Outcome == Stale {
				r.Stale++
			}
			m, ok := est.before(op.Resource, op.Call)
			if ok && op.MarkPair().Compare(m) < 0 {
				r.Regressions++
				example("regression", "%s %s reported mark %v at [%v,%v], after mark %v was established",
					op.Resource, op.Outcome, op.MarkPair(), ns(op.Call), ns(op.Return), m)
			}
		case Unavailable:
			r.Unavailable++
		case Failed:
			r.Failed++
		}
	}

	seen := make(map[string]int, len(fwd))
	for _, f := range fwd {
		seen[f.ID]++
		if seen[f.ID] == 2 {
			r.DuplicateForwards++
		}
		op, ok := byID[f.ID]
		switch {
		case !ok:
			r.UnfencedForwards++
			example("unfenced_forward", "upstream received %s token %d (id %q) at %v that no client sent through a proxy",
				f.Resource, f.Token, f.ID, ns(f.At))
			continue
		case f.Pair() != op.Req() || f.Resource != op.Resource:
			r.UnfencedForwards++
			example("unfenced_forward", "upstream received %s %v for id %q, sent as %s %v",
				f.Resource, f.Pair(), f.ID, op.Resource, op.Req())
			continue
		case op.Refused():
			r.UnfencedForwards++
			example("unfenced_forward", "upstream received %s token %d (id %q) at %v, which the proxy refused with %d",
				f.Resource, f.Token, f.ID, ns(f.At), op.Status)
			continue
		}
		if m, ok := est.before(op.Resource, op.Call); ok && refuses(op, m) {
			r.UnfencedForwards++
			example("unfenced_forward", "upstream received %s %v (id %q, %s) at %v; mark %v was established before its call at %v",
				f.Resource, f.Pair(), f.ID, cmpName(op.Greater), ns(f.At), m, ns(op.Call))
			continue
		}
		if m, ok := est.before(op.Resource, f.At); ok && f.Pair().Compare(m) < 0 {
			r.LateForwards++
		}
	}
	for i := range ops {
		op := &ops[i]
		if op.Outcome == Admitted && op.Status/100 == 2 && seen[op.ID] == 0 {
			r.MissingForwards++
			example("missing_forward", "%s token %d (id %q) answered %d but never reached the upstream",
				op.Resource, op.Token, op.ID, op.Status)
		}
	}

	ord := CountOrder(fwd)
	r.Inversions, r.Overlaps = ord.Inversions, ord.Overlaps
	r.OrderExamples = ord.Examples

	r.Linearizable, r.CheckedOps = Linearizable(ops, timeout)
	return r
}

func cmpName(greater bool) string {
	if greater {
		return ">"
	}
	return ">="
}

func ns(t int64) time.Duration { return time.Duration(t).Round(time.Microsecond) }

// refuses reports whether the store must refuse op's request against mark
// m: admitting it would be a stale admission.
func refuses(op *Op, m Pair) bool {
	ok, _ := admitsPair(op.Req(), op.Greater, m)
	return !ok
}

func tokenWord(seq bool) string {
	if seq {
		return "pair"
	}
	return "token"
}

// established answers, per resource, the greatest mark established by an
// operation that returned strictly before a given time.
type established struct {
	byRes map[string]*marks
}

type marks struct {
	ret []int64 // return times, ascending
	max []Pair  // max[i]: greatest mark among the first i+1
}

func newEstablished(ops []Op) *established {
	return newEstablishedBy(ops, func(*Op) bool { return true })
}

// newEstablishedBy counts only the operations keep accepts.
func newEstablishedBy(ops []Op, keep func(*Op) bool) *established {
	type ev struct {
		ret  int64
		mark Pair
	}
	evs := map[string][]ev{}
	for i := range ops {
		if m, ok := ops[i].EstablishesPair(); ok && keep(&ops[i]) {
			evs[ops[i].Resource] = append(evs[ops[i].Resource], ev{ops[i].Return, m})
		}
	}
	e := &established{byRes: make(map[string]*marks, len(evs))}
	for res, list := range evs {
		slices.SortFunc(list, func(a, b ev) int { return cmp.Compare(a.ret, b.ret) })
		m := &marks{ret: make([]int64, len(list)), max: make([]Pair, len(list))}
		var hi Pair
		for i, x := range list {
			if x.mark.Compare(hi) > 0 {
				hi = x.mark
			}
			m.ret[i], m.max[i] = x.ret, hi
		}
		e.byRes[res] = m
	}
	return e
}

// before returns the greatest mark of resource established by an operation
// that returned strictly before t.
func (e *established) before(resource string, t int64) (Pair, bool) {
	m := e.byRes[resource]
	if m == nil {
		return Pair{}, false
	}
	n := sort.Search(len(m.ret), func(i int) bool { return m.ret[i] >= t })
	if n == 0 {
		return Pair{}, false
	}
	return m.max[n-1], true
}
