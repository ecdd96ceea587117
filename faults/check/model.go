package check

import (
	"fmt"
	"math"
	"time"

	"github.com/anishathalye/porcupine"
)

// The porcupine model: per resource, a sequential register of the mark with
// the proxy's compare-and-advance (admitsPair). State is the mark as a Pair
// (the zero Pair: no mark yet; tokens are >= 1, so "no mark" admits every
// request, as it does in the store). On a route without sequences the
// pairs have none and this is a max-register of tokens.
//
//	admitted(p):  allowed iff admitsPair(p, m); next state the mark after it
//	stale(p) -> M: allowed iff !admitsPair(p, m) and M == m
//	read -> M:     allowed iff M == m
//	unknown(p):    next states {m} (never applied) and the mark after
//	               admitsPair(p, m) when it admits
//
// "unknown" covers 503s, timeouts and connection errors. Such an operation
// gets an infinite return time: the store may apply it after the client gave
// up (Redis resumed from SIGSTOP runs the commands queued in its socket), so
// it may take effect at any point after its call.

type input struct {
	Resource string
	Read     bool
	Req      Pair
	Greater  bool
}

type output struct {
	Outcome Outcome
	Mark    Pair
}

// sameMark reports whether a reported mark is the state. A 409 carries the
// mark's sequence whenever the mark has one (client.ProblemError), so the
// pairs must be equal.
func sameMark(reported, state Pair) bool { return reported == state }

func step(state, in, out any) []any {
	m := state.(Pair)
	i, o := in.(input), out.(output)
	if i.Read {
		if o.Mark == m {
			return []any{m}
		}
		return nil
	}
	ok, next := admitsPair(i.Req, i.Greater, m)
	switch o.Outcome {
	case Admitted:
		if ok {
			return []any{next}
		}
		return nil
	case Stale:
		if !ok && sameMark(o.Mark, m) {
			return []any{m}
		}
		return nil
	default: // unknown
		if ok && next != m {
			return []any{m, next}
		}
		return []any{m}
	}
}

// Model is the nondeterministic max-register, partitioned by resource.
var Model = porcupine.NondeterministicModel{
	Partition: func(history []porcupine.Operation) [][]porcupine.Operation {
		idx := map[string]int{}
		var parts [][]porcupine.Operation
		for _, op := range history {
			r := op.Input.(input).Resource
			i, ok := idx[r]
			if !ok {
				i = len(parts)
				idx[r] = i
				parts = append(parts, nil)
			}
			parts[i] = append(parts[i], op)
		}
		return parts
	},
	Init: func() []any { return []any{Pair{}} },
	Step: step,
	Hash: func(state any) uint64 {
		// splitmix64 finaliser: the set hash XORs these, so equal marks
		// must not cancel to a constant pattern.
		p := state.(Pair)
		z := p.Token*0x100000001b3 ^ p.Seq + 0x9e3779b97f4a7c15
		if p.HasSeq {
			z ^= 0x5bd1e995
		}
		z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9
		z = (z ^ (z >> 27)) * 0x94d049bb133111eb
		return z ^ (z >> 31)
	},
	DescribeOperation: func(in, out any) string {
		i, o := in.(input), out.(output)
		if i.Read {
			return fmt.Sprintf("read %s -> %v", i.Resource, o.Mark)
		}
		cmp := ">="
		if i.Greater {
			cmp = ">"
		}
		return fmt.Sprintf("%s %s %v -> %s %v", i.Resource, cmp, i.Req, o.Outcome, o.Mark)
	},
	DescribeState: func(state any) string { return state.(Pair).String() },
}

// Linearizable checks ops against Model within timeout.
//
// Indeterminate writes that cannot matter are left out, since each one left
// in (concurrent with everything after its call) widens the search:
//   - a token not above a mark established before the call: applying it
//     changes nothing in any linearization (the mark never decreases);
//   - a token that no 409 and no read ever reports as the mark: if a
//     linearization applies it, the same order without applying it is one
//     too. Admitted writes only need the mark not above their token, and
//     it is lower or equal without it; a 409 or a read reporting a mark M
//     other than the token fixes the state at M, which (being the greatest
//     token applied, and not this one) some other write set.
//
// So the verdict is the same as with every indeterminate write in.
func Linearizable(ops []Op, timeout time.Duration) (porcupine.CheckResult, int) {
	return linearizable(ops, timeout, true)
}

func linearizable(ops []Op, timeout time.Duration, prune bool) (porcupine.CheckResult, int) {
	est := newEstablished(ops)
	type resMark struct {
		res  string
		mark Pair
	}
	reported := map[resMark]bool{}
	reportedTok := map[resMark]bool{} // token only: answers without a sequence
	for i := range ops {
		if ops[i].Outcome == Stale || ops[i].Outcome == Read {
			m := ops[i].MarkPair()
			reported[resMark{ops[i].Resource, m}] = true
			reportedTok[resMark{ops[i].Resource, Pair{Token: m.Token}}] = true
		}
	}
	hist := make([]porcupine.Operation, 0, len(ops))
	for i := range ops {
		op := &ops[i]
		in := input{Resource: op.Resource, Read: op.Outcome == Read, Req: op.Req(), Greater: op.Greater}
		out := output{Outcome: op.Outcome, Mark: op.MarkPair()}
		ret := op.Return
		switch op.Outcome {
		case Admitted, Stale, Read:
		default:
			if m, ok := est.before(op.Resource, op.Call); prune && ok && op.Req().Compare(m) <= 0 {
				continue
			}
			if prune && !reported[resMark{op.Resource, op.Req()}] && !reportedTok[resMark{op.Resource, Pair{Token: op.Token}}] {
				continue
			}
			ret = math.MaxInt64
		}
		hist = append(hist, porcupine.Operation{
			ClientId: max(op.Client, 0),
			Input:    in,
			Call:     op.Call,
			Output:   out,
			Return:   ret,
		})
	}
	m := Model.ToModel()
	res := porcupine.CheckOperationsTimeout(m, hist, timeout)
	return res, len(hist)
}
