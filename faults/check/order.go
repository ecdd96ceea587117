package check

import (
	"cmp"
	"fmt"
	"math"
	"slices"
	"sort"
)

// Order is the order in which the upstream processed the requests of each
// resource, judged from the begin and end times it recorded. Fencing orders
// admissions, not arrivals: a request admitted with token 41 just before 42
// was admitted can still reach the upstream (or still be running there)
// after 42. Requests are ordered as the proxy orders them (Pair): by token,
// then, on a route with sequences, by sequence, a request without one
// before every request of its token with one; so (42, 7) begun after
// (42, 8) counts as 41 begun after 42 does. Two figures count that, pairs
// of requests for one resource in different places of that order (equal
// tokens without sequences, or equal pairs, never count):
//
//   - Inversions: the upstream began the lower token after it began the
//     higher one, whether the higher one had ended by then or was still
//     being processed (began at the same instant counts too: neither can be
//     shown first).
//   - Overlaps: the upstream began the higher token while the lower one,
//     begun earlier, was still being processed (a streamed body still
//     arriving, a slow handler). The order of begins is right, but an
//     upstream that applies a write when its body is complete applies the
//     lower one last.
//
// fenceproxy's drain barrier (FENCE_DRAIN=on: a request admitted with token
// t sends nothing upstream while an older-token request for its resource is
// in flight, across replicas) makes both zero: with it they are safety
// figures (the harness fails a scenario on them); without it, measurements.
// The bound the barrier cannot pass: a request the proxy abandoned at its
// upstream deadline while the upstream kept processing it (Forward.Abandoned
// marks those in the examples).
type Order struct {
	Inversions int
	Overlaps   int
	// Examples describes the first few pairs of each kind.
	Examples []string
}

// CountOrder computes the order figures of what the upstream received. A
// forward whose End is 0 (or before its begin) was still being processed
// when the record was taken: it counts as never ending.
func CountOrder(fwd []Forward) Order {
	var o Order
	byRes := map[string][]Forward{}
	for _, f := range fwd {
		byRes[f.Resource] = append(byRes[f.Resource], f)
	}
	names := make([]string, 0, len(byRes))
	for res := range byRes {
		names = append(names, res)
	}
	sort.Strings(names) // deterministic examples
	examples := map[string]int{}
	example := func(kind, format string, args ...any) {
		if examples[kind] < maxExamples {
			examples[kind]++
			o.Examples = append(o.Examples, kind+": "+fmt.Sprintf(format, args...))
		}
	}
	for _, res := range names {
		list := byRes[res]
		// In order of begin; at the same instant the higher pair first, so
		// that the lower one counts as begun after it.
		slices.SortStableFunc(list, func(a, b Forward) int {
			if a.At != b.At {
				return cmp.Compare(a.At, b.At)
			}
			return b.Pair().Compare(a.Pair())
		})
		o.Inversions += inversions(list, example)
		o.Overlaps += overlaps(list, example)
	}
	return o
}

// inversions counts the pairs i < j (in begin order) with list[i]'s pair
// after list[j]'s: a Fenwick tree over the ranks of the pairs begun so far.
func inversions(list []Forward, example func(kind, format string, args ...any)) int {
	pairs := make([]Pair, len(list))
	for i := range list {
		pairs[i] = list[i].Pair()
	}
	slices.SortFunc(pairs, Pair.Compare)
	pairs = slices.CompactFunc(pairs, func(a, b Pair) bool { return a.Compare(b) == 0 })
	tree := make([]int, len(pairs)+1)
	n := 0
	hi := -1 // index of the greatest pair begun so far
	for j := range list {
		f := &list[j]
		rank, _ := slices.BinarySearchFunc(pairs, f.Pair(), Pair.Compare) // 0-based
		// Begun before j with a pair at most f's: prefix sum to rank.
		le := 0
		for k := rank + 1; k > 0; k -= k & -k {
			le += tree[k]
		}
		if above := j - le; above > 0 {
			n += above
			h := &list[hi]
			example("inversion", "%s %s (id %q) began at %v, after %s (id %q) began at %v%s",
				f.Resource, describe(f), f.ID, ns(f.At), describe(h), h.ID, ns(h.At), endedOrNot(h, f.At))
		}
		for k := rank + 1; k < len(tree); k += k & -k {
			tree[k]++
		}
		if hi < 0 || f.Pair().Compare(list[hi].Pair()) > 0 {
			hi = j
		}
	}
	return n
}

// describe names a forward's place in the order: "token 42", or "token 42
// sequence 7" on a route with sequences.
func describe(f *Forward) string {
	if f.HasSeq {
		return fmt.Sprintf("token %d sequence %d", f.Token, f.Seq)
	}
	return fmt.Sprintf("token %d", f.Token)
}

func endedOrNot(h *Forward, at int64) string {
	if end(h) > at {
		return " and was still being processed" + abandoned(h)
	}
	return fmt.Sprintf(" and ended at %v", ns(h.End))
}

// abandoned notes a forward the proxy gave up on before the upstream
// answered it (see Forward.Abandoned).
func abandoned(f *Forward) string {
	if f.Abandoned {
		return " (the proxy closed its connection before the upstream answered: its client left, or its upstream deadline passed)"
	}
	return ""
}

// overlaps counts the pairs i < j (in begin order) with list[i]'s pair
// before list[j]'s and list[i] still being processed when list[j] began. The
// requests being processed at any moment are few (bounded by the clients'
// concurrency), so a sweep with the list of those suffices.
func overlaps(list []Forward, example func(kind, format string, args ...any)) int {
	n := 0
	var active []*Forward
	for j := range list {
		f := &list[j]
		keep := active[:0]
		for _, a := range active {
			if end(a) > f.At {
				keep = append(keep, a)
			}
		}
		active = keep
		for _, a := range active {
			if a.Pair().Compare(f.Pair()) < 0 && a.At < f.At {
				n++
				example("overlap", "%s %s (id %q) began at %v while %s (id %q), begun at %v, was still being processed (until %v)%s",
					f.Resource, describe(f), f.ID, ns(f.At), describe(a), a.ID, ns(a.At), endString(a), abandoned(a))
			}
		}
		active = append(active, f)
	}
	return n
}

// end returns when f ended; a forward not ended (End 0 or before its begin)
// never does.
func end(f *Forward) int64 {
	if f.End < f.At || f.End == 0 {
		return math.MaxInt64
	}
	return f.End
}

func endString(f *Forward) string {
	if end(f) == math.MaxInt64 {
		return "never ended"
	}
	return ns(f.End).String()
}
