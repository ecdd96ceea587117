package fencestore

import "sync/atomic"

// The store generation: a number a store keeps beside its marks (one per
// slot on a Redis Cluster) and advances in the same atomic step as every
// mark write, admissions and an operator's Raise and Reset alike. A store
// answers every admission with its generation (Decision.Generation), and
// every replica remembers the greatest it has seen (Generations). A store
// that answers with a lower one than a replica has seen went back in time:
// restored from a backup, a replica that missed writes promoted, an etcd
// snapshot restored, a bolt file copied back. Its marks may be older than
// tokens the replica has seen superseded, so the admission fails with a
// *LostError whose Rollback is set, having written nothing, exactly as
// for a lost identity; the replica then marks the store itself as lost
// (Keeper.MarkLost), so that replicas that never saw the newer generation
// (one restarted cold) refuse it too from their next admission.
//
// The replica passes the generation it remembers into the store's own
// atomic step, which compares and advances it there: the check costs no
// round trip of its own.
//
// The generation also orders an operator's changes of marks against the
// replicas' remembered marks (Admission.Floor): the store keeps the
// generation of the last Raise or Reset, and a floor seen before it is set
// aside (Decision.FloorVoid), so that an operator's reset is not raised back
// by a replica that remembers the mark it replaced.

// Generations is the greatest store generation a process has seen, per
// part of the store (a Redis Cluster slot; one part for other stores). Safe
// for concurrent use, and lock-free: one atomic load per admission.
type Generations struct {
	parts []atomic.Uint64
}

// NewGenerations returns memory for a store of n parts, every one at 0.
func NewGenerations(n int) *Generations {
	return &Generations{parts: make([]atomic.Uint64, max(n, 1))}
}

// Seen is the greatest generation seen in part.
func (g *Generations) Seen(part int) uint64 { return g.parts[part].Load() }

// See remembers gen for part when it is above what part remembers.
func (g *Generations) See(part int, gen uint64) {
	p := &g.parts[part]
	for {
		old := p.Load()
		if gen <= old || p.CompareAndSwap(old, gen) {
			return
		}
	}
}

// Forget sets every part back to 0: a store that took up a new identity
// record (an operator's recovery) starts a new history.
func (g *Generations) Forget() {
	for i := range g.parts {
		g.parts[i].Store(0)
	}
}

// Rollback returns the *LostError of a store whose part answered with
// generation got after seen was seen there, or nil when got is not below
// seen. want is the identity record the process expects.
func Rollback(want string, seen, got uint64) error {
	if got >= seen {
		return nil
	}
	return &LostError{Want: want, Found: want, Rollback: true, Seen: seen, Got: got}
}
