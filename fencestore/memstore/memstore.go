package memstore

import (
	"context"
	"errors"
	"sync"

	"github.com/fenceproxy/fenceproxy/fencestore"
)

var (
	_ fencestore.Store  = (*Store)(nil)
	_ fencestore.Keeper = (*Store)(nil)
)

var errClosed = fencestore.Unavailable(errors.New("memstore: closed"))

// Store is an in-memory fencestore.Store. The zero value is not usable; call
// New.
type Store struct {
	mu     sync.Mutex
	marks  map[string]fencestore.Mark
	closed bool
	// identity is the store's identity record ("" none), expect the one
	// every admission must find ("" no check).
	identity, expect string
	// gen is the store's generation, op the generation of the last
	// operator change of marks (fencestore/generation.go); seen is the
	// greatest generation admissions have seen, as a replica remembers it.
	gen, op, seen uint64
	// flights is the drain barrier: the store lives in one process, so
	// does the barrier.
	flights fencestore.LocalFlights
}

// New returns an empty store.
func New() *Store {
	return &Store{marks: make(map[string]fencestore.Mark)}
}

// Admit decides a against its resource's mark and advances it, under one
// lock; with a.Flight it enters the admitted request into the barrier.
func (s *Store) Admit(ctx context.Context, a fencestore.Admission) (fencestore.Decision, error) {
	f := s.flights.Begin(a)
	d, err := s.admit(ctx, a)
	return s.flights.Settle(f, d, err)
}

func (s *Store) admit(ctx context.Context, a fencestore.Admission) (fencestore.Decision, error) {
	// The store answers at once, but a caller that has already given up must
	// get the same answer from every store: unavailable, nothing applied.
	if err := ctx.Err(); err != nil {
		return fencestore.Decision{}, fencestore.Unavailable(err)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return fencestore.Decision{}, errClosed
	}
	if s.expect != "" && s.identity != s.expect {
		return fencestore.Decision{}, &fencestore.LostError{Want: s.expect, Found: s.identity}
	}
	if s.expect != "" {
		if err := fencestore.Rollback(s.expect, s.seen, s.gen); err != nil {
			return fencestore.Decision{}, err
		}
	}
	mark, ok := s.marks[a.Resource]
	op := s.op
	if s.expect == "" {
		op = 0 // as the Redis store: the generation goes with the identity
	}
	d, next, write := a.DecideAfter(mark, ok, op)
	if write {
		s.marks[a.Resource] = next
		s.gen++
	}
	if s.expect != "" {
		s.seen = max(s.seen, s.gen)
		d.Generation = s.gen
	}
	return d, nil
}

// Drain waits, in the process, until no request ordered before f is in
// flight.
func (s *Store) Drain(ctx context.Context, f fencestore.Flight) (bool, error) {
	return s.flights.Drain(ctx, f)
}

// Release ends f's flight.
func (s *Store) Release(f fencestore.Flight) { s.flights.Release(f) }

// Mark returns resource's mark, and false when it has none.
func (s *Store) Mark(ctx context.Context, resource string) (uint64, bool, error) {
	m, ok, err := s.Get(ctx, resource)
	return m.Token, ok, err
}

// Ping fails when ctx is done or the store is closed, and with a
// *fencestore.LostError once the identity expected is gone or the
// generation went back.
func (s *Store) Ping(ctx context.Context) error {
	return s.locked(ctx, func() error {
		if s.expect == "" {
			return nil
		}
		if s.identity != s.expect {
			return &fencestore.LostError{Want: s.expect, Found: s.identity}
		}
		return fencestore.Rollback(s.expect, s.seen, s.gen)
	})
}

// Close drops the marks; later calls return an error wrapping
// fencestore.ErrUnavailable. Closing twice is harmless.
func (s *Store) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.closed = true
	s.marks = nil
	return nil
}
