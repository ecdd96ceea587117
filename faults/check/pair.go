package check

import (
	"cmp"
	"fmt"
)

// Pair is a mark or a request's place in a resource's order: the token,
// then, on a route with sequences, the sequence. A pair without a sequence
// comes before every pair of the same token with one (the proxy orders an
// unsequenced request of token 42 before (42, 0)); two pairs are equal only
// when both tokens and both sequences (or both absences) are.
type Pair struct {
	Token  uint64
	Seq    uint64
	HasSeq bool
}

// Compare returns -1, 0 or +1 as p is ordered before, with or after q.
func (p Pair) Compare(q Pair) int {
	if c := cmp.Compare(p.Token, q.Token); c != 0 {
		return c
	}
	switch {
	case p.HasSeq != q.HasSeq:
		if p.HasSeq {
			return 1
		}
		return -1
	case !p.HasSeq:
		return 0
	}
	return cmp.Compare(p.Seq, q.Seq)
}

func (p Pair) String() string {
	if p.HasSeq {
		return fmt.Sprintf("(%d, %d)", p.Token, p.Seq)
	}
	return fmt.Sprint(p.Token)
}

// admitsPair is the store's decision for a request (token, optional
// sequence, compare) against mark m (the zero Pair: no mark yet; tokens are
// >= 1), and the mark after it:
//
//   - no mark: admitted, the mark becomes the request's pair;
//   - a greater token, or an equal one with a sequence above the mark's
//     (any sequence is above none): admitted, the mark becomes the pair;
//   - an equal token without a sequence under ">=": admitted, the mark
//     stays as it is (its sequence included);
//   - anything else is refused.
func admitsPair(req Pair, greater bool, m Pair) (bool, Pair) {
	if m == (Pair{}) {
		return true, req
	}
	switch c := cmp.Compare(req.Token, m.Token); {
	case c > 0:
		return true, req
	case c < 0:
		return false, m
	}
	if req.HasSeq {
		if !m.HasSeq || req.Seq > m.Seq {
			return true, req
		}
		return false, m
	}
	return !greater, m
}
