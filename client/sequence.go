package client

import (
	"context"
	"math"
	"sync/atomic"
)

// Sequence numbers the requests of one holding, for routes that fenceproxy
// orders by a sequence as well as the token (the route key "sequence"). Put it
// in the context beside the token with WithSequence; Transport then draws one
// fresh number from it for every request it sends, and sends it as the
// sequence header.
//
// The numbers are 1, 2, 3, ...: each Next returns one greater than the last,
// so no number is given twice, even to concurrent callers. A number drawn for
// a send that failed is not given again; the gap is harmless, since the proxy
// only asks that each sequence of a token be above the last one it admitted.
//
// Use one Sequence per token, or one for the life of the process; never two
// for one token, or the second restarts at 1 and every request it numbers is
// refused as a stale sequence. Carrying one Sequence on to a newer token is
// harmless: the newer token is admitted whatever its sequence.
//
// The zero value is ready to use, and its first number is 1. A Sequence is
// safe for concurrent use, and must not be copied after first use.
type Sequence struct {
	last atomic.Uint64 // the greatest number given; 0 before the first
}

// NewSequence returns a Sequence whose first number is after+1: for a holder
// that resumes numbering a token it has already sent sequences with, from the
// greatest of them (ProblemError.HighWaterSequence of a stale-sequence answer
// is the greatest the proxy admitted). NewSequence(0) is the same as a zero
// Sequence; NewSequence(math.MaxUint64) is exhausted from the start.
func NewSequence(after uint64) *Sequence {
	s := &Sequence{}
	s.last.Store(after)
	return s
}

// Next returns the next number, greater than every number s has given before.
// Once it has given math.MaxUint64, the greatest sequence the proxy reads, s is
// exhausted: Next returns ErrSequenceExhausted, and keeps returning it. A
// holder that gets there needs a new token (a new lease), with which numbering
// may start again.
func (s *Sequence) Next() (uint64, error) {
	for {
		last := s.last.Load()
		if last == math.MaxUint64 {
			return 0, ErrSequenceExhausted
		}
		if s.last.CompareAndSwap(last, last+1) {
			return last + 1, nil
		}
	}
}

// sequenceKey is the context key of the sequence, unexported for the same
// reason as tokenKey.
type sequenceKey struct{}

// sequenceValue is what a context carries under sequenceKey: a counter to draw
// from, or one fixed number, or (neither set) no sequence at all.
type sequenceValue struct {
	counter *Sequence
	number  uint64
	fixed   bool
}

// WithSequence returns a copy of ctx whose requests are numbered by seq:
// Transport draws a fresh number from seq for each request it sends with the
// returned context, a retried or redirected request included, and sends it as
// the sequence header beside the token of WithToken.
//
// A nil seq means no sequence: requests made with the returned context carry
// none, whatever an enclosing context said. As with WithToken, the innermost
// WithSequence or WithSequenceNumber wins.
func WithSequence(ctx context.Context, seq *Sequence) context.Context {
	return context.WithValue(ctx, sequenceKey{}, sequenceValue{counter: seq})
}

// WithSequenceNumber returns a copy of ctx whose requests carry the sequence
// n, for a caller that numbers one request itself. Every send made with the
// returned context carries the same n: a retry of a request the proxy has
// already admitted is then refused as a stale sequence rather than applied
// twice, and so is a redirect that leads back through the proxy to the same
// resource. Any uint64 is accepted, 0 included.
func WithSequenceNumber(ctx context.Context, n uint64) context.Context {
	return context.WithValue(ctx, sequenceKey{}, sequenceValue{number: n, fixed: true})
}

// sequenceFromContext returns what WithSequence or WithSequenceNumber put in
// ctx, and whether a sequence is to be sent.
func sequenceFromContext(ctx context.Context) (sequenceValue, bool) {
	v, _ := ctx.Value(sequenceKey{}).(sequenceValue)
	return v, v.fixed || v.counter != nil
}

// draw returns the number to send: the fixed one, or the counter's next.
func (v sequenceValue) draw() (uint64, error) {
	if v.fixed {
		return v.number, nil
	}
	return v.counter.Next()
}
