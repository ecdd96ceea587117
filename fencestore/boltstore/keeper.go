package boltstore

import (
	"bytes"
	"context"
	"errors"
	"fmt"

	bolt "go.etcd.io/bbolt"

	"github.com/fenceproxy/fenceproxy/fencestore"
)

var _ fencestore.Keeper = (*Store)(nil)

// The identity record lives in a bucket of its own, apart from the marks,
// so no resource name can ever spell it, under a name bound to the key
// prefix (generation.go).
var metaBucket = []byte("meta")

// lost reads the generation and the operator's generation in tx, and
// reports the *LostError an admission must fail with, or nil: none when no
// identity is expected; one when the identity record is gone or another,
// or the generation is below seen (the greatest this process saw, taken
// before tx began: a read-only tx may see a state older than an admission
// committed, and seen, since it began).
func (s *Store) lost(tx *bolt.Tx, seen uint64) (gen, op uint64, err error) {
	want := s.expect.Load()
	if want == nil {
		return 0, 0, nil
	}
	var found []byte
	if b := tx.Bucket(metaBucket); b != nil {
		found = b.Get(s.metaKey(identityName))
	}
	if string(found) != *want {
		return 0, 0, &fencestore.LostError{Want: *want, Found: string(found)}
	}
	if gen, op, err = s.generation(tx); err != nil {
		return 0, 0, err
	}
	return gen, op, fencestore.Rollback(*want, seen, gen)
}

// Identity returns the identity record, "" when there is none.
func (s *Store) Identity(ctx context.Context) (string, error) {
	var id string
	err := s.keeperView(ctx, "identity", func(tx *bolt.Tx) error {
		if b := tx.Bucket(metaBucket); b != nil {
			id = string(b.Get(s.metaKey(identityName)))
		}
		return nil
	})
	return id, err
}

// Init writes a new identity record, in its own durable commit; with
// force only over a lost store (no record, a lost record) or a record an
// operator forced before.
func (s *Store) Init(ctx context.Context, force bool) (string, error) {
	var id string
	err := s.keeperUpdate(ctx, "init", func(tx *bolt.Tx) error {
		b, err := tx.CreateBucketIfNotExists(metaBucket)
		if err != nil {
			return err
		}
		held := b.Get(s.metaKey(identityName))
		switch {
		case held != nil && !force:
			return fencestore.ErrIdentityExists
		case !force:
			id = fencestore.NewIdentity()
		default:
			if id, err = fencestore.ForceOver(string(held)); err != nil {
				return err
			}
		}
		return b.Put(s.metaKey(identityName), []byte(id))
	})
	if err != nil {
		return "", err
	}
	return id, nil
}

// Expect makes every later admission check the identity record. A record
// other than the one expected before starts a new history: the generation
// seen is forgotten, and taken from the generation file when it remembers
// this record.
func (s *Store) Expect(id string) {
	if old := s.expect.Swap(&id); old == nil || *old != id {
		s.gens.Forget()
		s.genMu.Lock()
		s.genWritten = 0
		s.genMu.Unlock()
		s.gens.See(0, s.recall(id))
	}
}

// HasMarks reports whether the store holds any mark under its prefix.
func (s *Store) HasMarks(ctx context.Context) (bool, error) {
	var has bool
	err := s.keeperView(ctx, "has marks", func(tx *bolt.Tx) error {
		b, err := marksBucket(tx)
		if err != nil {
			return err
		}
		k, _ := b.Cursor().Seek([]byte(s.prefix))
		has = k != nil && bytes.HasPrefix(k, []byte(s.prefix))
		return nil
	})
	return has, err
}

// Get returns resource's mark, sequence included.
func (s *Store) Get(ctx context.Context, resource string) (fencestore.Mark, bool, error) {
	key := []byte(s.prefix + resource)
	var (
		m  fencestore.Mark
		ok bool
	)
	err := s.keeperView(ctx, "get", func(tx *bolt.Tx) error {
		b, err := marksBucket(tx)
		if err != nil {
			return err
		}
		m, ok, err = parseMark(key, b.Get(key))
		return err
	})
	return m, ok, err
}

// List pages through the marks in key order; the cursor is the last
// resource of the previous page.
func (s *Store) List(ctx context.Context, prefix, cursor string, limit int) ([]fencestore.Entry, string, error) {
	var (
		out  []fencestore.Entry
		next string
	)
	from := []byte(s.prefix + prefix)
	if cursor != "" {
		from = []byte(s.prefix + cursor)
	}
	err := s.keeperView(ctx, "list", func(tx *bolt.Tx) error {
		b, err := marksBucket(tx)
		if err != nil {
			return err
		}
		c := b.Cursor()
		for k, v := c.Seek(from); k != nil && bytes.HasPrefix(k, []byte(s.prefix+prefix)); k, v = c.Next() {
			name := string(k[len(s.prefix):])
			if cursor != "" && name <= cursor {
				continue
			}
			if limit > 0 && len(out) == limit {
				next = out[len(out)-1].Resource
				break
			}
			m, _, err := parseMark(k, v)
			if err != nil {
				return err
			}
			out = append(out, fencestore.Entry{Resource: name, Mark: m})
		}
		return nil
	})
	return out, next, err
}

// Raise moves resource's mark forward to m, in its own durable commit.
func (s *Store) Raise(ctx context.Context, resource string, m fencestore.Mark) (old fencestore.Mark, had, changed bool, err error) {
	key := []byte(s.prefix + resource)
	err = s.keeperUpdate(ctx, "raise", func(tx *bolt.Tx) error {
		b, err := marksBucket(tx)
		if err != nil {
			return err
		}
		if old, had, err = parseMark(key, b.Get(key)); err != nil {
			return err
		}
		if had && !old.Before(m) {
			return nil
		}
		changed = true
		if err := b.Put(key, m.AppendValue(nil)); err != nil {
			return err
		}
		return s.operatorChange(tx)
	})
	return old, had, changed, err
}

// Reset sets resource's mark to *m, or deletes it when m is nil, in its own
// durable commit.
func (s *Store) Reset(ctx context.Context, resource string, m *fencestore.Mark) (old fencestore.Mark, had bool, err error) {
	key := []byte(s.prefix + resource)
	err = s.keeperUpdate(ctx, "reset", func(tx *bolt.Tx) error {
		b, err := marksBucket(tx)
		if err != nil {
			return err
		}
		v := b.Get(key)
		if v != nil {
			// A corrupt mark may be reset: that is how an operator repairs it.
			old, _ = fencestore.ParseMarkValue(v)
			had = true
		}
		if m == nil {
			err = b.Delete(key)
		} else {
			err = b.Put(key, m.AppendValue(nil))
		}
		if err != nil {
			return err
		}
		return s.operatorChange(tx)
	})
	return old, had, err
}

// Clear deletes every mark and the identity record, as an emptied store
// would hold (tests).
func (s *Store) Clear() error {
	return s.db.Update(func(tx *bolt.Tx) error {
		for _, name := range [][]byte{bucket, metaBucket} {
			if tx.Bucket(name) != nil {
				if err := tx.DeleteBucket(name); err != nil {
					return err
				}
			}
		}
		_, err := tx.CreateBucket(bucket)
		return err
	})
}

func (s *Store) keeperView(ctx context.Context, op string, fn func(*bolt.Tx) error) error {
	if err := ctx.Err(); err != nil {
		return fencestore.Unavailable(err)
	}
	if err := s.view(fn); err != nil {
		return keeperError(op, err)
	}
	return nil
}

// keeperUpdate runs fn in a read-write transaction of its own. It waits for
// the committer's current commit (bbolt has one writer at a time), and its
// commit is synced before it returns.
func (s *Store) keeperUpdate(ctx context.Context, op string, fn func(*bolt.Tx) error) error {
	if err := ctx.Err(); err != nil {
		return fencestore.Unavailable(err)
	}
	s.mu.RLock()
	closed := s.closed
	s.mu.RUnlock()
	if closed {
		return errClosed
	}
	if err := s.db.Update(fn); err != nil {
		return keeperError(op, err)
	}
	return nil
}

// marksBucket is the bucket of marks, or an error for a file that lost it
// (Open creates it): never a nil bucket to panic on.
func marksBucket(tx *bolt.Tx) (*bolt.Bucket, error) {
	if b := tx.Bucket(bucket); b != nil {
		return b, nil
	}
	return nil, errors.New("bucket missing")
}

func keeperError(op string, err error) error {
	if errors.Is(err, fencestore.ErrIdentityExists) || errors.Is(err, fencestore.ErrUnavailable) {
		return err
	}
	return fencestore.Unavailable(fmt.Errorf("boltstore: %s: %w", op, err))
}
