package check

import (
	"math/rand/v2"
	"testing"

	"github.com/anishathalye/porcupine"
)

// Leaving indeterminate writes out (Linearizable's pruning) must not change
// the verdict: random small histories, checked with and without it.
func TestPruningKeepsTheVerdict(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	outcomes := []Outcome{Admitted, Stale, Unavailable, Failed, Read}
	legal, illegal := 0, 0
	for n := 0; n < 3000; n++ {
		var ops []Op
		for i := range 2 + r.IntN(6) {
			call := r.Int64N(40)
			op := Op{ID: string(rune('a' + i)), Client: i, Resource: "r", Token: 1 + r.Uint64N(5),
				Greater: r.IntN(3) == 0, Outcome: outcomes[r.IntN(len(outcomes))],
				Call: call, Return: call + 1 + r.Int64N(15)}
			switch op.Outcome {
			case Admitted:
				op.Mark = op.Token
			case Stale, Read:
				op.Mark = r.Uint64N(6)
			}
			if op.Outcome == Read {
				op.Token, op.Greater = 0, false
			}
			// Half the histories have sequences: on their own, never with ">"
			// (a configuration error on a route with sequences).
			if n%2 == 1 {
				op.Greater = false
				if op.Outcome != Read && r.IntN(3) > 0 {
					op.Seq, op.HasSeq = r.Uint64N(3), true
				}
				if (op.Outcome == Stale || op.Outcome == Read) && op.Mark != 0 && r.IntN(2) == 0 {
					op.MarkSeq, op.MarkHasSeq = r.Uint64N(3), true
				}
			}
			ops = append(ops, op)
		}
		full, _ := linearizable(ops, 0, false)
		pruned, _ := linearizable(ops, 0, true)
		if full != pruned {
			t.Fatalf("history %d: without pruning %s, with %s:\n%+v", n, full, pruned, ops)
		}
		if full == porcupine.Ok {
			legal++
		} else {
			illegal++
		}
	}
	if legal < 100 || illegal < 100 {
		t.Fatalf("the random histories do not exercise both verdicts: %d legal, %d illegal", legal, illegal)
	}
}
