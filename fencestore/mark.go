package fencestore

import "strconv"

// ParseMark parses a mark as stores keep it: a canonical decimal uint64, 1 to
// 20 ASCII digits, no sign, no leading zero unless the value is 0, at most
// 18446744073709551615. Stores keep marks in this one spelling so that a
// human (`redis-cli GET fence:orders/42`) reads the number and the Redis
// script can compare marks exactly as strings; anything else in a mark's
// place is corruption, and callers refuse it rather than treat it as absent.
// It is ParseDecimal, reporting only whether v is one.
func ParseMark[T string | []byte](v T) (uint64, bool) {
	n, f := ParseDecimal(v)
	return n, f == DecimalOK
}

// Mark is a resource's high-water mark as a store keeps it: a token and,
// once a request with a sequence was admitted with that token, the greatest
// such sequence.
type Mark struct {
	Token       uint64
	Sequence    uint64
	HasSequence bool
}

// ParseMarkValue parses a stored mark: the token in canonical decimal
// (ParseMark), then, when the mark has a sequence, ':' and the sequence in
// canonical decimal. So a stored value always begins with the token, and
// `redis-cli GET fence:orders/42` shows "42" or "42:7".
func ParseMarkValue[T string | []byte](v T) (Mark, bool) {
	for i := 0; i < len(v); i++ {
		if v[i] == ':' {
			tok, ok1 := ParseMark(v[:i])
			seq, ok2 := ParseMark(v[i+1:])
			return Mark{Token: tok, Sequence: seq, HasSequence: true}, ok1 && ok2
		}
	}
	tok, ok := ParseMark(v)
	return Mark{Token: tok}, ok
}

// AppendValue appends m as ParseMarkValue reads it.
func (m Mark) AppendValue(dst []byte) []byte {
	dst = strconv.AppendUint(dst, m.Token, 10)
	if m.HasSequence {
		dst = append(dst, ':')
		dst = strconv.AppendUint(dst, m.Sequence, 10)
	}
	return dst
}

// Decide is the reference semantics of one admission of a against the mark
// m (hasMark false: the resource has none). It returns the decision and the
// mark after it, and write reports whether that mark differs from m (a store
// writes only then). Every store decides exactly so; the Redis store in Lua.
//
//   - No mark: admitted; the mark becomes (token, sequence) or (token) alone.
//   - With a sequence: admitted iff token > mark token, or token = mark token
//     and the mark has no sequence or sequence > mark sequence; the mark
//     becomes (token, sequence). A refusal with token = mark token is a
//     stale sequence (Decision.StaleSequence).
//   - Without a sequence: admitted as Compare says against the mark's token.
//     A greater token makes the mark (token) alone; an equal token under
//     AtLeast leaves the mark as it is, sequence included.
//
// With a floor (Admission.HasFloor: a mark this replica saw earlier), a
// stored mark below the floor, or none, has regressed: the decision is taken
// against the floor instead, Decision.Regressed is set, and the mark after
// it is written (at least the floor) so the store heals in the same step.
func (a Admission) Decide(m Mark, hasMark bool) (d Decision, next Mark, write bool) {
	regressed := a.HasFloor && (!hasMark || m.Before(a.Floor))
	if regressed {
		m, hasMark = a.Floor, true
	}
	d, next, write = a.decide(m, hasMark)
	if regressed {
		d.Regressed, write = true, true
	}
	return d, next, write
}

func (a Admission) decide(m Mark, hasMark bool) (d Decision, next Mark, write bool) {
	next = Mark{Token: a.Token, Sequence: a.Sequence, HasSequence: a.HasSequence}
	switch {
	case !hasMark:
		return decision(true, next), next, true
	case a.Token < m.Token:
		return decision(false, m), m, false
	case a.Token > m.Token: // both comparisons admit a greater token
		return decision(true, next), next, true
	case a.HasSequence: // equal tokens
		if !m.HasSequence || a.Sequence > m.Sequence {
			return decision(true, next), next, true
		}
		return decision(false, m), m, false
	case a.Compare == AtLeast: // equal tokens, no sequence
		return decision(true, m), m, false
	}
	return decision(false, m), m, false
}

func decision(admitted bool, m Mark) Decision {
	return Decision{Admitted: admitted, Mark: m.Token, Sequence: m.Sequence, HasSequence: m.HasSequence}
}

// DecideAfter is Decide in a store whose last operator change of marks
// (Keeper.Raise, Reset) was made at generation op (generation.go): a floor
// seen before it (FloorGeneration below op) is set aside, and the decision
// says so (Decision.FloorVoid), so that an operator's reset stands.
func (a Admission) DecideAfter(m Mark, hasMark bool, op uint64) (d Decision, next Mark, write bool) {
	void := a.HasFloor && a.FloorGeneration < op
	if void {
		a.HasFloor = false
	}
	d, next, write = a.Decide(m, hasMark)
	d.FloorVoid = void
	return d, next, write
}
