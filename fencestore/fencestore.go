// Package fencestore is the domain of fenceproxy's admission: the Store
// interface that the proxy depends on, the Decision it returns, the comparison
// modes and the errors a store may give. Implementations live in the
// sub-packages (redisstore, boltstore, memstore); the shared conformance suite
// that every one of them must pass lives in storetest.
//
// The guarantee every Store makes: Admit is atomic per resource, and decides
// as Admission.Decide does. Without a sequence, with AtLeast a token is
// admitted iff no mark exists or token >= mark, and the mark becomes
// max(mark, token); with Greater a token is admitted iff no mark exists or
// token > mark, and the mark becomes token. With a sequence the mark is the
// pair (token, sequence), compared in that order. Comparison is exact over
// the whole uint64 range. A mark never moves backwards. Stale is a Decision, not an
// error: an error means the store could not answer, and the caller must then
// refuse the request (fail closed).
package fencestore

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// Compare selects how a token is compared with a resource's mark.
type Compare uint8

const (
	// AtLeast (">=") admits a token equal to the mark: many requests may share
	// one lease's token.
	AtLeast Compare = iota
	// Greater (">") admits only a token above the mark: every request needs its
	// own token.
	Greater
)

// String returns the routes-file spelling of c (">=" or ">").
func (c Compare) String() string {
	switch c {
	case AtLeast:
		return ">="
	case Greater:
		return ">"
	}
	return fmt.Sprintf("Compare(%d)", uint8(c))
}

// Admits reports whether token passes the comparison against mark, where
// hasMark is false when the resource has no mark yet. It is the reference
// semantics every store implements (the Redis store in Lua, over decimal
// strings); stores written in Go call it directly.
func (c Compare) Admits(token, mark uint64, hasMark bool) bool {
	if !hasMark {
		return true
	}
	if c == Greater {
		return token > mark
	}
	return token >= mark
}

// Admission is one request to admit against a resource's mark.
type Admission struct {
	Resource string
	Token    uint64
	// Sequence orders the requests of one lease (one token) when HasSequence
	// is set: see Decide.
	Sequence    uint64
	HasSequence bool
	// Compare applies to an admission without a sequence.
	Compare Compare
	// Flight, when above zero, enters the admitted request into the drain
	// barrier (flight.go): it is in flight until Released, and this is its
	// bound (its upstream deadline), kept as a duration: a waiter that has
	// watched it for this long plus AbandonMargin, on its own monotonic
	// clock, stops waiting for it. Decision.Flight says whether a request
	// ordered before it was in flight when it was admitted. Zero: the
	// request takes no part in the barrier.
	Flight time.Duration
	// Floor, when HasFloor, is the greatest mark this replica saw for the
	// resource before (its mark cache). A stored mark below it, or none,
	// was lost (a crash, a flush, a failover): the store decides against
	// the floor and writes it back in the same atomic step (Decide).
	Floor    Mark
	HasFloor bool
	// FloorGeneration is the store generation (Decision.Generation) of
	// the admission that showed this replica Floor. An operator's change
	// of marks (Keeper.Raise, Reset) made after that generation voids the
	// floor: the store decides on its own mark, and Decision.FloorVoid
	// says so, so that an operator's reset is not raised back.
	FloorGeneration uint64
}

// Decision is the outcome of one admission.
type Decision struct {
	// Admitted is true when the request may be forwarded.
	Admitted bool
	// Mark is the resource's high-water mark after the admission: the new mark
	// when admitted, the mark that refused the token when stale.
	Mark uint64
	// Sequence is the mark's sequence, when HasSequence: the greatest
	// sequence admitted with token Mark.
	Sequence    uint64
	HasSequence bool
	// Regressed reports that the stored mark was below Admission.Floor (or
	// gone) and was raised back to it before deciding.
	Regressed bool
	// Flight is the admitted request's place in the drain barrier, when the
	// admission asked for one (Admission.Flight); the zero Flight otherwise.
	Flight Flight
	// Generation is the store's generation (generation.go) after the
	// admission, in the part of the store that holds the resource (a
	// Redis Cluster slot); 0 from a store that keeps none.
	Generation uint64
	// FloorVoid reports that Admission.Floor was set aside because an
	// operator changed marks since the floor was seen: the decision is the
	// store's own, and the caller should remember its mark in place of
	// the floor.
	FloorVoid bool
}

// StaleSequence reports whether d refused a of a for its sequence alone: its
// token equals the mark, and its sequence is not above the mark's.
func (d Decision) StaleSequence(a Admission) bool {
	return !d.Admitted && a.HasSequence && d.Mark == a.Token
}

// Store keeps one high-water mark per resource and admits tokens against it.
// Implementations are safe for concurrent use and honour ctx's deadline: past
// it they return an error wrapping ErrUnavailable. An error is indeterminate:
// the admission may still be applied after the caller gave up.
type Store interface {
	// Admit atomically decides a against its resource's mark (Decide) and
	// advances the mark.
	Admit(ctx context.Context, a Admission) (Decision, error)
	// Drain blocks until every request for f's resource ordered before f
	// that was in flight when f was admitted (at this process or any other
	// sharing the store) was released, or was abandoned: watched by this
	// process, on its monotonic clock since the first of its admissions
	// that found it in flight (Watched), for its Admission.Flight plus
	// AbandonMargin. Requests admitted after f never hold it back. It
	// returns expired true when an older request was abandoned. Past ctx it returns ctx's
	// error (unwrapped, so the caller can tell which bound it was); a store
	// that cannot answer is an error wrapping ErrUnavailable. Only a Flight
	// whose Older is set needs it; others return at once.
	Drain(ctx context.Context, f Flight) (expired bool, err error)
	// Release ends f's flight: the requests f held back may go. It never
	// waits for the store (the release is sent in the background, and sent
	// again until the store acknowledges it or the store no longer keeps
	// f's entry, however long after f's bound: a request admitted after a
	// long outage may still find it); a release that is lost all the same
	// (dropped because too many were owed, or the replica died) holds the
	// requests that find the entry for f's bound and AbandonMargin from
	// the first sighting in their process, no longer.
	// Releasing the zero Flight, or one twice, is harmless.
	Release(f Flight)
	// Mark returns the resource's mark, and false when it has none. It is an
	// operator's read; the request path never needs it.
	Mark(ctx context.Context, resource string) (mark uint64, ok bool, err error)
	// Ping reports whether the store answers (readiness).
	Ping(ctx context.Context) error
	// Close releases the store's resources.
	Close() error
}

// ErrUnavailable is wrapped by every error that means "the store could not
// answer": a timeout, a lost connection, a closed store, a corrupt mark.
// The proxy answers 503 for it and forwards nothing.
var ErrUnavailable = errors.New("fence store unavailable")

// Unavailable wraps err so that errors.Is(err, ErrUnavailable) holds, keeping
// err's own text and chain.
func Unavailable(err error) error {
	if err == nil || errors.Is(err, ErrUnavailable) {
		return err
	}
	return &unavailableError{err: err}
}

type unavailableError struct{ err error }

func (e *unavailableError) Error() string { return ErrUnavailable.Error() + ": " + e.err.Error() }
func (e *unavailableError) Unwrap() []error {
	return []error{ErrUnavailable, e.err}
}

// UnsafeError reports a store that answers but that fenceproxy was told not
// to admit against, because a setting of it can lose marks (Redis's
// maxmemory-policy or persistence, with FENCE_REDIS_EVICTION or
// FENCE_REDIS_PERSISTENCE at refuse). It wraps ErrUnavailable: the request is
// refused with 503 and nothing is forwarded. Reason names the setting and is
// safe to show to a client: it holds no address and no credential.
type UnsafeError struct{ Reason string }

func (e *UnsafeError) Error() string { return "fence store refused as unsafe: " + e.Reason }

// Unwrap makes errors.Is(err, ErrUnavailable) hold.
func (e *UnsafeError) Unwrap() error { return ErrUnavailable }
