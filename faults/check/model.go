package check

import (
	"fmt"
	"math"
	"time"

	"github.com/anishathalye/porcupine"
)

// The porcupine model: per resource, a sequential max-register with the
// proxy's compare-and-advance. State is the mark (0: no mark yet; tokens are
// >= 1, so "no mark" admits every token under both compares, as it does in
// the store).
//
//	admitted(t): allowed iff admits(t, m); next state t (t >= m, so max(m, t) = t)
//	stale(t) -> M: allowed iff !admits(t, m) and M == m; state unchanged
//	read -> M:     allowed iff M == m
//	unknown(t):    next states {m} (never applied) and, if admits(t, m), {t}
//
// "unknown" covers 503s, timeouts and connection errors. Such an operation
// gets an infinite return time: the store may apply it after the client gave
// up (Redis resumed from SIGSTOP runs the commands queued in its socket), so
// it may take effect at any point after its call.

type input struct {
	Resource string
	Read     bool
	Token    uint64
	Greater  bool
}

type output struct {
	Outcome Outcome
	Mark    uint64
}

func admits(tok, mark uint64, greater bool) bool {
	if greater {
		return tok > mark
	}
	return tok >= mark
}

func step(state, in, out any) []any {
	m := state.(uint64)
	i, o := in.(input), out.(output)
	if i.Read {
		if o.Mark == m {
			return []any{m}
		}
		return nil
	}
	switch o.Outcome {
	case Admitted:
		if admits(i.Token, m, i.Greater) && o.Mark == i.Token {
			return []any{i.Token}
		}
		return nil
	case Stale:
		if !admits(i.Token, m, i.Greater) && o.Mark == m {
			return []any{m}
		}
		return nil
	default: // unknown
		if admits(i.Token, m, i.Greater) && i.Token != m {
			return []any{m, i.Token}
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
	Init: func() []any { return []any{uint64(0)} },
	Step: step,
	Hash: func(state any) uint64 {
		// splitmix64 finaliser: the set hash XORs these, so equal marks
		// must not cancel to a constant pattern.
		z := state.(uint64) + 0x9e3779b97f4a7c15
		z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9
		z = (z ^ (z >> 27)) * 0x94d049bb133111eb
		return z ^ (z >> 31)
	},
	DescribeOperation: func(in, out any) string {
		i, o := in.(input), out.(output)
		if i.Read {
			return fmt.Sprintf("read %s -> %d", i.Resource, o.Mark)
		}
		cmp := ">="
		if i.Greater {
			cmp = ">"
		}
		return fmt.Sprintf("%s %s %d -> %s %d", i.Resource, cmp, i.Token, o.Outcome, o.Mark)
	},
	DescribeState: func(state any) string { return fmt.Sprint(state.(uint64)) },
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
		mark uint64
	}
	reported := map[resMark]bool{}
	for i := range ops {
		if ops[i].Outcome == Stale || ops[i].Outcome == Read {
			reported[resMark{ops[i].Resource, ops[i].Mark}] = true
		}
	}
	hist := make([]porcupine.Operation, 0, len(ops))
	for i := range ops {
		op := &ops[i]
		in := input{Resource: op.Resource, Read: op.Outcome == Read, Token: op.Token, Greater: op.Greater}
		out := output{Outcome: op.Outcome, Mark: op.Mark}
		ret := op.Return
		switch op.Outcome {
		case Admitted, Stale, Read:
		default:
			if m, ok := est.before(op.Resource, op.Call); prune && ok && op.Token <= m {
				continue
			}
			if prune && !reported[resMark{op.Resource, op.Token}] {
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
