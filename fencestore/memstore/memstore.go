package memstore

import (
	"context"
	"errors"
	"sync"

	"github.com/fenceproxy/fenceproxy/fencestore"
)

var _ fencestore.Store = (*Store)(nil)

var errClosed = fencestore.Unavailable(errors.New("memstore: closed"))

// Store is an in-memory fencestore.Store. The zero value is not usable; call
// New.
type Store struct {
	mu     sync.Mutex
	marks  map[string]uint64
	closed bool
}

// New returns an empty store.
func New() *Store {
	return &Store{marks: make(map[string]uint64)}
}

// Admit compares token with resource's mark and advances it, under one lock.
func (s *Store) Admit(ctx context.Context, resource string, token uint64, cmp fencestore.Compare) (fencestore.Decision, error) {
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
	mark, ok := s.marks[resource]
	if !cmp.Admits(token, mark, ok) {
		return fencestore.Decision{Mark: mark}, nil
	}
	s.marks[resource] = token
	return fencestore.Decision{Admitted: true, Mark: token}, nil
}

// Mark returns resource's mark, and false when it has none.
func (s *Store) Mark(ctx context.Context, resource string) (uint64, bool, error) {
	if err := ctx.Err(); err != nil {
		return 0, false, fencestore.Unavailable(err)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return 0, false, errClosed
	}
	mark, ok := s.marks[resource]
	return mark, ok, nil
}

// Ping fails only when ctx is done or the store is closed.
func (s *Store) Ping(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return fencestore.Unavailable(err)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return errClosed
	}
	return nil
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
