package memstore

import (
	"context"
	"sort"
	"strings"

	"github.com/fenceproxy/fenceproxy/fencestore"
)

// The operator's side (fencestore.Keeper), under the store's one lock.

func (s *Store) locked(ctx context.Context, fn func() error) error {
	if err := ctx.Err(); err != nil {
		return fencestore.Unavailable(err)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return errClosed
	}
	return fn()
}

// Identity returns the identity record, "" when there is none.
func (s *Store) Identity(ctx context.Context) (id string, err error) {
	err = s.locked(ctx, func() error { id = s.identity; return nil })
	return id, err
}

// Init writes a new identity record; with force only over a lost one
// (none, or a lost record), or one an operator forced before.
func (s *Store) Init(ctx context.Context, force bool) (id string, err error) {
	err = s.locked(ctx, func() error {
		switch {
		case s.identity != "" && !force:
			return fencestore.ErrIdentityExists
		case !force:
			s.identity = fencestore.NewIdentity()
		default:
			forced, err := fencestore.ForceOver(s.identity)
			if err != nil {
				return err
			}
			s.identity = forced
		}
		id = s.identity
		return nil
	})
	return id, err
}

// Expect makes every later admission check the identity record. A new
// record starts a new history: the generation seen is forgotten.
func (s *Store) Expect(id string) {
	s.mu.Lock()
	if id != s.expect {
		s.seen = 0
	}
	s.expect = id
	s.mu.Unlock()
}

// MarkLost replaces the identity record with a lost record, unless it holds
// one that supersedes want.
func (s *Store) MarkLost(ctx context.Context, want string) (id string, err error) {
	err = s.locked(ctx, func() error {
		if lost, keep := fencestore.LostOver(s.identity, want); !keep {
			s.identity = lost
		}
		id = s.identity
		return nil
	})
	return id, err
}

// Restore sets the store's generation back to gen, as a store restored
// from a backup taken then would be (tests).
func (s *Store) Restore(gen uint64) {
	s.mu.Lock()
	s.gen = gen
	s.mu.Unlock()
}

// Clear forgets every mark and the identity record, as a restart of a store
// without persistence does (tests).
func (s *Store) Clear() {
	s.mu.Lock()
	s.marks, s.identity = make(map[string]fencestore.Mark), ""
	s.mu.Unlock()
}

// HasMarks reports whether any mark exists.
func (s *Store) HasMarks(ctx context.Context) (has bool, err error) {
	err = s.locked(ctx, func() error { has = len(s.marks) > 0; return nil })
	return has, err
}

// Get returns resource's mark.
func (s *Store) Get(ctx context.Context, resource string) (m fencestore.Mark, ok bool, err error) {
	err = s.locked(ctx, func() error { m, ok = s.marks[resource]; return nil })
	return m, ok, err
}

// List pages through the marks in name order; the cursor is the last name
// of the previous page.
func (s *Store) List(ctx context.Context, prefix, cursor string, limit int) (out []fencestore.Entry, next string, err error) {
	err = s.locked(ctx, func() error {
		names := make([]string, 0, len(s.marks))
		for name := range s.marks {
			if strings.HasPrefix(name, prefix) && name > cursor {
				names = append(names, name)
			}
		}
		sort.Strings(names)
		if limit > 0 && len(names) > limit {
			names, next = names[:limit], names[limit-1]
		}
		for _, name := range names {
			out = append(out, fencestore.Entry{Resource: name, Mark: s.marks[name]})
		}
		return nil
	})
	return out, next, err
}

// Raise moves resource's mark forward to m.
func (s *Store) Raise(ctx context.Context, resource string, m fencestore.Mark) (old fencestore.Mark, had, changed bool, err error) {
	err = s.locked(ctx, func() error {
		old, had = s.marks[resource]
		if !had || old.Before(m) {
			s.marks[resource], changed = m, true
			s.gen++
			s.op = s.gen
		}
		return nil
	})
	return old, had, changed, err
}

// Reset sets or deletes resource's mark.
func (s *Store) Reset(ctx context.Context, resource string, m *fencestore.Mark) (old fencestore.Mark, had bool, err error) {
	err = s.locked(ctx, func() error {
		old, had = s.marks[resource]
		if m == nil {
			delete(s.marks, resource)
		} else {
			s.marks[resource] = *m
		}
		s.gen++
		s.op = s.gen
		return nil
	})
	return old, had, err
}
