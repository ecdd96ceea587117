package etcdstore

import (
	"context"
	"errors"
	"fmt"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/fenceproxy/fenceproxy/fencestore"
)

// The operator's side (fencestore.Keeper). Raise and Reset read the mark
// and then write it in a transaction that compares the key's ModRevision
// with the one read (optimistic compare-and-swap, retried on conflict), so
// that they never write over a value they did not see: a corrupt value is
// reported, not overwritten, by Raise.
//
// The same transaction puts the operator's key (layout.operator), so that
// its ModRevision is the revision of the operator's last change of marks:
// the "op" generation of fencestore/generation.go. An admission carrying a
// floor seen at a revision below it sets the floor aside (txn.go), so that
// a reset to 100 is not raised back by a replica that remembers 615.

// DefaultListLimit is the page size of List when its limit is not above
// zero: a listing is never unbounded.
const DefaultListLimit = 1000

// casAttempts bounds the compare-and-swap retries of Raise and Reset under
// contention (admissions advancing the same mark).
const casAttempts = 32

// errContended reports a Raise or Reset that lost every compare-and-swap.
var errContended = errors.New("the mark kept changing under the operation; try again")

// Identity returns the identity record, "" when there is none.
func (s *Store) Identity(ctx context.Context) (string, error) {
	if err := s.check(ctx); err != nil {
		return "", err
	}
	resp, err := s.client.Get(ctx, s.keys.identity)
	if err != nil {
		return "", s.fail(ctx, "identity", err)
	}
	if len(resp.Kvs) == 0 {
		return "", nil
	}
	return string(resp.Kvs[0].Value), nil
}

// Init writes a new identity record; without force only where there is
// none (one transaction: create if absent).
func (s *Store) Init(ctx context.Context, force bool) (string, error) {
	if err := s.check(ctx); err != nil {
		return "", err
	}
	if force {
		return s.force(ctx)
	}
	id := fencestore.NewIdentity()
	put := clientv3.OpPut(s.keys.identity, id)
	resp, err := s.client.Txn(ctx).
		If(clientv3.Compare(clientv3.Version(s.keys.identity), "=", 0)).
		Then(put).Commit()
	if err != nil {
		return "", s.fail(ctx, "init", err)
	}
	if !resp.Succeeded {
		return "", fencestore.ErrIdentityExists
	}
	return id, nil
}

// force writes an operator's forced record (fencestore.ForceOver) over
// the one held, only if it is still the one read, so that the stamp is
// later than the record it replaces even when a replica marks the store
// lost between the read and the write.
func (s *Store) force(ctx context.Context) (string, error) {
	return s.swapIdentity(ctx, "init", func(held string) (string, bool, error) {
		id, err := fencestore.ForceOver(held)
		return id, false, err
	})
}

// swapIdentity replaces the identity record with what next makes of the
// one held ("" for none), or leaves it when next says keep: a compare of
// the record's revision with the one read, retried on conflict. It returns
// the record the store holds after it.
func (s *Store) swapIdentity(ctx context.Context, op string, next func(held string) (id string, keep bool, err error)) (string, error) {
	for range casAttempts {
		resp, err := s.client.Get(ctx, s.keys.identity)
		if err != nil {
			return "", s.fail(ctx, op, err)
		}
		var held string
		var rev int64
		if len(resp.Kvs) > 0 {
			held, rev = string(resp.Kvs[0].Value), resp.Kvs[0].ModRevision
		}
		id, keep, err := next(held)
		if err != nil || keep {
			return id, err
		}
		t, err := s.client.Txn(ctx).
			If(clientv3.Compare(clientv3.ModRevision(s.keys.identity), "=", rev)).
			Then(clientv3.OpPut(s.keys.identity, id)).Commit()
		if err != nil {
			return "", s.fail(ctx, op, err)
		}
		if t.Succeeded {
			return id, nil
		}
	}
	return "", fencestore.Unavailable(fmt.Errorf("etcdstore: %s: %w", op, errContended))
}

// Expect makes every later admission compare the identity record with id
// in its own transaction ("" stops the check). A record other than the one
// expected before starts a new history: the revision seen is forgotten.
func (s *Store) Expect(id string) {
	if old := s.expect.Swap(&id); old == nil || *old != id {
		s.gens.Forget()
	}
}

// The generation of an etcd store is its revision, which etcd advances in
// the transaction of every write and reports in every response's header:
// it costs no key and no round trip of its own. A response whose revision
// is below the greatest this process saw comes from a store that went back
// in time (a snapshot restore without --bump-revision). The admission
// whose transaction meets it may have written its mark on the restored
// store; it is refused all the same (503, nothing forwarded).

// revision checks rev, the revision of a response to a request sent after
// seen was the greatest revision seen, and remembers it. A linearizable
// store answers such a request at seen or later; responses to requests
// sent before it may arrive after it with lower revisions, which is why
// the comparison is with seen and not with what is remembered now.
func (s *Store) revision(want string, seen uint64, rev int64) error {
	if rev <= 0 {
		return nil
	}
	if err := fencestore.Rollback(want, seen, uint64(rev)); err != nil {
		return err
	}
	s.gens.See(0, uint64(rev))
	return nil
}

// MarkLost writes a lost record in place of the identity record, unless it
// holds a lost record already or one that supersedes want: a compare of
// the record's revision with the one read, retried on conflict.
func (s *Store) MarkLost(ctx context.Context, want string) (string, error) {
	if err := s.check(ctx); err != nil {
		return "", err
	}
	return s.swapIdentity(ctx, "mark lost", func(held string) (string, bool, error) {
		lost, keep := fencestore.LostOver(held, want)
		return lost, keep, nil
	})
}

func (s *Store) expectation() string {
	if p := s.expect.Load(); p != nil {
		return *p
	}
	return ""
}

// HasMarks reports whether any mark exists (the identity record and the
// in-flight records are not marks).
func (s *Store) HasMarks(ctx context.Context) (bool, error) {
	if err := s.check(ctx); err != nil {
		return false, err
	}
	resp, err := s.client.Get(ctx, s.keys.marksFrom, clientv3.WithRange(s.keys.marksEnd),
		clientv3.WithLimit(1), clientv3.WithKeysOnly())
	if err != nil {
		return false, s.fail(ctx, "has marks", err)
	}
	return len(resp.Kvs) > 0, nil
}

// Get returns resource's mark.
func (s *Store) Get(ctx context.Context, resource string) (fencestore.Mark, bool, error) {
	m, ok, _, err := s.read(ctx, resource)
	return m, ok, err
}

// read returns resource's mark and the key's ModRevision (0: absent).
func (s *Store) read(ctx context.Context, resource string) (fencestore.Mark, bool, int64, error) {
	if err := s.check(ctx); err != nil {
		return fencestore.Mark{}, false, 0, err
	}
	key := s.keys.markKey(resource)
	if reserved(resource) {
		return fencestore.Mark{}, false, 0, fencestore.Unavailable(fmt.Errorf("etcdstore: read %q: %w", resource, errReservedName))
	}
	resp, err := s.client.Get(ctx, key)
	if err != nil {
		return fencestore.Mark{}, false, 0, s.fail(ctx, fmt.Sprintf("read %q", key), err)
	}
	if len(resp.Kvs) == 0 {
		return fencestore.Mark{}, false, 0, nil
	}
	kv := resp.Kvs[0]
	m, ok := parseValue(kv.Value)
	if !ok {
		return fencestore.Mark{}, true, kv.ModRevision, fencestore.Unavailable(&CorruptError{Key: key, Value: string(kv.Value)})
	}
	return m, true, kv.ModRevision, nil
}

// CorruptError reports a value under a mark's key that is not a mark.
type CorruptError struct{ Key, Value string }

func (e *CorruptError) Error() string {
	return fmt.Sprintf("etcdstore: corrupt mark %q at %q: want 20 digits, or 20 digits ':' 20 digits", e.Value, e.Key)
}

// List pages through the marks whose resource names begin with prefix, in
// key order, from after cursor, at most limit at a time (DefaultListLimit
// when limit is not above zero): one etcd range read with a limit.
func (s *Store) List(ctx context.Context, prefix, cursor string, limit int) ([]fencestore.Entry, string, error) {
	if err := s.check(ctx); err != nil {
		return nil, "", err
	}
	if limit <= 0 {
		limit = DefaultListLimit
	}
	if prefix != "" && prefix[0] == 0 {
		return nil, "", nil // no mark has such a name
	}
	from, end := s.keys.markKey(prefix), prefixEnd(s.keys.markKey(prefix))
	if prefix == "" {
		from, end = s.keys.marksFrom, s.keys.marksEnd
	}
	if cursor != "" {
		if after := s.keys.markKey(cursor) + "\x00"; after > from {
			from = after
		}
	}
	resp, err := s.client.Get(ctx, from, clientv3.WithRange(end), clientv3.WithLimit(int64(limit)))
	if err != nil {
		return nil, "", s.fail(ctx, "list", err)
	}
	out := make([]fencestore.Entry, 0, len(resp.Kvs))
	for _, kv := range resp.Kvs {
		m, ok := parseValue(kv.Value)
		if !ok {
			return nil, "", fencestore.Unavailable(&CorruptError{Key: string(kv.Key), Value: string(kv.Value)})
		}
		out = append(out, fencestore.Entry{Resource: string(kv.Key[len(s.keys.prefix):]), Mark: m})
	}
	next := ""
	if resp.More && len(out) > 0 {
		next = out[len(out)-1].Resource
	}
	return out, next, nil
}

// Raise sets resource's mark to m when m is above it, or it has none.
func (s *Store) Raise(ctx context.Context, resource string, m fencestore.Mark) (old fencestore.Mark, had, changed bool, err error) {
	key := s.keys.markKey(resource)
	for range casAttempts {
		var rev int64
		old, had, rev, err = s.read(ctx, resource)
		if err != nil {
			return old, had, false, err
		}
		if had && !old.Before(m) {
			return old, had, false, nil
		}
		ok, err := s.swap(ctx, key, rev, clientv3.OpPut(key, value(m)))
		if err != nil || ok {
			return old, had, ok, err
		}
	}
	return old, had, false, fencestore.Unavailable(fmt.Errorf("etcdstore: raise %q: %w", key, errContended))
}

// Reset sets resource's mark to *m, or deletes it when m is nil, whatever
// it was: a corrupt value too (it is logged, and reported as a mark of 0).
func (s *Store) Reset(ctx context.Context, resource string, m *fencestore.Mark) (old fencestore.Mark, had bool, err error) {
	key := s.keys.markKey(resource)
	op := clientv3.OpDelete(key)
	if m != nil {
		op = clientv3.OpPut(key, value(*m))
	}
	for range casAttempts {
		var rev int64
		old, had, rev, err = s.read(ctx, resource)
		var corrupt *CorruptError
		if errors.As(err, &corrupt) {
			s.log.Warn("reset replaces a corrupt mark", zap.String("key", key), zap.String("value", corrupt.Value))
			err = nil
		}
		if err != nil {
			return old, had, err
		}
		ok, err := s.swap(ctx, key, rev, op)
		if err != nil || ok {
			return old, had, err
		}
	}
	return old, had, fencestore.Unavailable(fmt.Errorf("etcdstore: reset %q: %w", key, errContended))
}

// swap runs op if key's ModRevision is still rev (0: still absent), and
// puts the operator's key in the same transaction (an empty value: only
// its revision counts, and an empty value sorts below every record of
// another deployment that Nesting looks for).
func (s *Store) swap(ctx context.Context, key string, rev int64, op clientv3.Op) (bool, error) {
	resp, err := s.client.Txn(ctx).
		If(clientv3.Compare(clientv3.ModRevision(key), "=", rev)).
		Then(op, clientv3.OpPut(s.keys.operator, "")).Commit()
	if err != nil {
		return false, s.fail(ctx, fmt.Sprintf("write %q", key), err)
	}
	return resp.Succeeded, nil
}
