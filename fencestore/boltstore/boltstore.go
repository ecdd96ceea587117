package boltstore

import (
	"context"
	"errors"
	"fmt"
	"os"
	"sync"
	"sync/atomic"
	"time"

	bolt "go.etcd.io/bbolt"
	berrors "go.etcd.io/bbolt/errors"

	"github.com/fenceproxy/fenceproxy/fencestore"
)

var _ fencestore.Store = (*Store)(nil)

// Defaults for the zero Options fields.
const (
	// DefaultMaxBatchSize caps the admissions one commit carries.
	DefaultMaxBatchSize = 1000
	// DefaultLockTimeout bounds the wait for the file lock: long enough for a
	// previous process that is exiting to let go, short enough that a second
	// proxy on the same file fails at start with a clear error.
	DefaultLockTimeout = time.Second
)

// bucket holds every mark.
var bucket = []byte("marks")

// testHookDurable, when not nil, is called by the committer after a commit
// has returned (bbolt has synced it) and before the store treats it as
// durable. Tests set it, before Open, to stand for a slow fdatasync: the
// commit is visible to readers but not yet known to be on disk. It is nil in
// production.
var testHookDurable func()

var errClosed = fencestore.Unavailable(errors.New("boltstore: closed"))

// Options configures Open. The zero value is usable.
type Options struct {
	// KeyPrefix is put before each resource name to form its key, as in the
	// Redis store.
	KeyPrefix string
	// MaxBatchSize is the most admissions one commit carries. Zero means
	// DefaultMaxBatchSize.
	MaxBatchSize int
	// LockTimeout is how long Open waits for the file lock that another
	// process holds. Zero means DefaultLockTimeout; negative means no wait.
	LockTimeout time.Duration
	// GenerationFile is where the process remembers the greatest store
	// generation it saw, across restarts (generation.go). Empty means the
	// store's path and ".generation"; "-" means nowhere (memory only).
	GenerationFile string
}

// Store is a fencestore.Store in a bbolt file.
type Store struct {
	db       *bolt.DB
	prefix   string
	queue    chan *pending
	maxBatch int

	// durable is the txid of the newest commit known to be on disk. bbolt
	// shows a commit to readers as soon as it has written the meta page,
	// before the fdatasync that makes it durable returns, so a read-only
	// transaction may see marks a crash would lose; one whose ID is no
	// greater than durable sees none. Open sets it, then only the committer.
	durable atomic.Int64

	// mu guards closed; Close takes it to stop new admissions from queueing
	// before it closes the queue.
	mu      sync.RWMutex
	closed  bool
	stopped chan struct{} // closed when the committer has answered everything

	flights fencestore.LocalFlights
	// expect is the identity every admission must find (Expect); nil: no
	// check.
	expect atomic.Pointer[string]
	// gens is the greatest generation seen (generation.go); genFile
	// remembers it across restarts (nil: not), genWritten what it holds.
	gens       *fencestore.Generations
	genFile    *os.File
	genMu      sync.Mutex
	genWritten uint64
}

// pending is one admission waiting for the committer.
type pending struct {
	key  []byte
	a    fencestore.Admission
	d    fencestore.Decision
	err  error
	done chan struct{} // buffered 1: the committer never blocks on a gone caller
}

// Open opens or creates the store file at path and takes its lock.
func Open(path string, opts Options) (*Store, error) {
	timeout := opts.LockTimeout
	switch {
	case timeout == 0:
		timeout = DefaultLockTimeout
	case timeout < 0:
		// bbolt treats 0 as "wait forever"; a tiny timeout fails after the
		// first try.
		timeout = time.Nanosecond
	}
	db, err := bolt.Open(path, 0o600, &bolt.Options{Timeout: timeout})
	if errors.Is(err, berrors.ErrTimeout) {
		return nil, fmt.Errorf("boltstore: open %s: locked by another process (waited %v): %w", path, timeout, err)
	}
	if err != nil {
		return nil, fmt.Errorf("boltstore: open %s: %w", path, err)
	}
	maxBatch := opts.MaxBatchSize
	if maxBatch <= 0 {
		maxBatch = DefaultMaxBatchSize
	}
	// This commit also makes durable whatever the file holds that is not yet:
	// pages a previous process wrote but did not sync before it died are
	// still in the page cache, and fdatasync writes them too.
	var txid int
	st := &Store{prefix: opts.KeyPrefix}
	if err := db.Update(func(tx *bolt.Tx) error {
		txid = tx.ID()
		if _, err := tx.CreateBucketIfNotExists(bucket); err != nil {
			return err
		}
		return st.migrateIdentity(tx)
	}); err != nil {
		_ = db.Close()
		return nil, fmt.Errorf("boltstore: open %s: create bucket: %w", path, err)
	}
	st.db, st.maxBatch = db, maxBatch
	st.queue, st.stopped = make(chan *pending, maxBatch), make(chan struct{})
	st.gens = fencestore.NewGenerations(1)
	switch genPath := opts.GenerationFile; genPath {
	case "-":
	default:
		if genPath == "" {
			genPath = path + ".generation"
		}
		if st.genFile, err = openGenerationFile(genPath); err != nil {
			_ = db.Close()
			return nil, fmt.Errorf("boltstore: open %s: %w", genPath, err)
		}
	}
	st.durable.Store(int64(txid))
	go st.commit()
	return st, nil
}

// Admit decides a against its resource's mark and advances it in one bbolt
// transaction, shared with concurrent admissions. When ctx ends first, Admit
// returns an error wrapping fencestore.ErrUnavailable at once, but the
// admission is indeterminate: it stays queued and may still commit. With
// a.Flight it enters the admitted request into the drain barrier, which lives
// in the process as the store does.
func (s *Store) Admit(ctx context.Context, a fencestore.Admission) (fencestore.Decision, error) {
	f := s.flights.Begin(a)
	d, err := s.admit(ctx, a)
	return s.flights.Settle(f, d, err)
}

// Drain waits, in the process, until no request ordered before f is in
// flight.
func (s *Store) Drain(ctx context.Context, f fencestore.Flight) (bool, error) {
	return s.flights.Drain(ctx, f)
}

// Release ends f's flight.
func (s *Store) Release(f fencestore.Flight) { s.flights.Release(f) }

func (s *Store) admit(ctx context.Context, a fencestore.Admission) (fencestore.Decision, error) {
	if err := ctx.Err(); err != nil {
		return fencestore.Decision{}, fencestore.Unavailable(err)
	}
	key := []byte(s.prefix + a.Resource)

	// A decision that writes nothing, a refusal or an equal token under ">=",
	// is just as atomic taken from a read-only transaction: the mark only
	// grows, so the read is its linearization point. It needs no commit and no
	// fsync, which makes the common case (many requests on one lease's token)
	// cheap. But it is answered only from a snapshot known to be on disk: one
	// that holds a commit whose sync may still be running goes to the
	// committer, whose next commit begins only once that sync has returned.
	var d fencestore.Decision
	var settled bool
	seen := s.gens.Seen(0) // before the read-only tx: see lost
	err := s.view(func(tx *bolt.Tx) error {
		if int64(tx.ID()) > s.durable.Load() {
			return nil
		}
		b := tx.Bucket(bucket)
		if b == nil {
			return errors.New("bucket missing")
		}
		gen, op, err := s.lost(tx, seen)
		if err != nil {
			return err
		}
		mark, ok, err := parseMark(key, b.Get(key))
		if err != nil {
			return err
		}
		var write bool
		d, _, write = a.DecideAfter(mark, ok, op)
		d.Generation = gen
		settled = !write
		return nil
	})
	var lost *fencestore.LostError
	if errors.As(err, &lost) {
		return fencestore.Decision{}, lost
	}
	if err != nil {
		return fencestore.Decision{}, fencestore.Unavailable(fmt.Errorf("boltstore: admit %q: %w", key, err))
	}
	if settled {
		s.gens.See(0, d.Generation)
		return d, nil
	}

	p := &pending{key: key, a: a, done: make(chan struct{}, 1)}
	s.mu.RLock()
	if s.closed {
		s.mu.RUnlock()
		return fencestore.Decision{}, errClosed
	}
	select {
	case s.queue <- p:
		s.mu.RUnlock()
	case <-ctx.Done():
		s.mu.RUnlock()
		return fencestore.Decision{}, fencestore.Unavailable(fmt.Errorf("boltstore: admit %q: queue full: %w", key, ctx.Err()))
	}
	select {
	case <-p.done:
		var lost *fencestore.LostError
		if errors.As(p.err, &lost) {
			return fencestore.Decision{}, lost
		}
		if p.err != nil {
			return fencestore.Decision{}, fencestore.Unavailable(fmt.Errorf("boltstore: admit %q: %w", key, p.err))
		}
		s.gens.See(0, p.d.Generation)
		return p.d, nil
	case <-ctx.Done():
		return fencestore.Decision{}, fencestore.Unavailable(fmt.Errorf("boltstore: admit %q: indeterminate, may still commit: %w", key, ctx.Err()))
	}
}

// commit is the group committer. It takes the first queued admission and
// every other one already waiting, decides them all in one read-write
// transaction (in queue order, each seeing the writes of those before it),
// and commits once: one fsync for the whole group. While it commits, new
// admissions queue for the next group. It never waits on a timer, so an
// admission on an idle store costs exactly one commit.
func (s *Store) commit() {
	defer close(s.stopped)
	batch := make([]*pending, 0, s.maxBatch)
	for p := range s.queue {
		batch = append(batch[:0], p)
	fill:
		for len(batch) < s.maxBatch {
			select {
			case p, ok := <-s.queue:
				if !ok {
					break fill
				}
				batch = append(batch, p)
			default:
				break fill
			}
		}
		var txid int
		var gen uint64
		err := s.db.Update(func(tx *bolt.Tx) error {
			txid = tx.ID()
			b := tx.Bucket(bucket)
			if b == nil {
				return errors.New("bucket missing")
			}
			var op uint64
			var lost error
			gen, op, lost = s.lost(tx, s.gens.Seen(0))
			wrote := false
			for _, p := range batch {
				if lost != nil {
					p.d, p.err = fencestore.Decision{}, lost
					continue
				}
				var w bool
				p.d, w, p.err = decide(b, p.key, p.a, op)
				wrote = wrote || w
			}
			// Every mark written advances the generation, in this
			// same transaction.
			if wrote && s.expect.Load() != nil {
				var err error
				if gen, err = s.advance(tx, gen, false); err != nil {
					return err
				}
			}
			for _, p := range batch {
				if p.err == nil && s.expect.Load() != nil {
					p.d.Generation = gen
				}
			}
			return nil
		})
		if err == nil {
			// Update returns after bbolt's fdatasync: this commit, and every
			// one before it, is on disk. Publish that before answering, so
			// that a caller's next equal admission takes the fast path.
			if testHookDurable != nil {
				testHookDurable()
			}
			s.durable.Store(int64(txid))
			s.remember(gen)
		}
		for _, p := range batch {
			// On failure the group's writes may still hold (a failed
			// fdatasync comes after the meta page is written), as an error
			// allows; durable stays behind them until a later commit.
			if err != nil {
				p.d, p.err = fencestore.Decision{}, err
			}
			p.done <- struct{}{}
		}
	}
}

// decide admits a against key's mark in b and advances the mark, setting
// aside a floor seen before the operator's generation op; wrote reports a
// write. A corrupt mark fails this admission only, not its group.
func decide(b *bolt.Bucket, key []byte, a fencestore.Admission, op uint64) (d fencestore.Decision, wrote bool, err error) {
	mark, ok, err := parseMark(key, b.Get(key))
	if err != nil {
		return fencestore.Decision{}, false, err
	}
	d, next, write := a.DecideAfter(mark, ok, op)
	if write {
		if err := b.Put(key, next.AppendValue(nil)); err != nil {
			return fencestore.Decision{}, false, err
		}
	}
	return d, write, nil
}

// Mark returns resource's mark, and false when it has none. It reads the
// newest commit, which may still be syncing: unlike an admission, it may
// report a mark that a crash in the next moment would lose. Nothing is
// forwarded on it, so it does not wait.
func (s *Store) Mark(ctx context.Context, resource string) (uint64, bool, error) {
	m, ok, err := s.Get(ctx, resource)
	return m.Token, ok, err
}

// Ping reports whether the file is open and readable, and, once Expect
// named an identity, whether it is still there and the generation has not
// gone back (a *fencestore.LostError).
func (s *Store) Ping(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return fencestore.Unavailable(err)
	}
	seen := s.gens.Seen(0)
	err := s.view(func(tx *bolt.Tx) error {
		if tx.Bucket(bucket) == nil {
			return errors.New("bucket missing")
		}
		_, _, err := s.lost(tx, seen)
		return err
	})
	var lost *fencestore.LostError
	if errors.As(err, &lost) {
		return lost
	}
	if err != nil {
		return fencestore.Unavailable(fmt.Errorf("boltstore: ping: %w", err))
	}
	return nil
}

// view runs a read-only transaction unless the store is closed. Reads take
// no part in the wait group: bbolt's Close waits for open transactions itself.
func (s *Store) view(fn func(*bolt.Tx) error) error {
	s.mu.RLock()
	closed := s.closed
	s.mu.RUnlock()
	if closed {
		return errClosed
	}
	return s.db.View(fn)
}

// Close lets the committer finish every admission already queued, including
// those whose callers gave up, then closes the file and releases its lock.
// Later calls return an error wrapping fencestore.ErrUnavailable. Closing
// twice is harmless.
func (s *Store) Close() error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil
	}
	s.closed = true
	close(s.queue) // no Admit can be sending: they hold mu.RLock while they do
	s.mu.Unlock()
	<-s.stopped
	if s.genFile != nil {
		_ = s.genFile.Close()
	}
	if err := s.db.Close(); err != nil {
		return fmt.Errorf("boltstore: close: %w", err)
	}
	return nil
}

// parseMark reads a stored mark. nil means absent; anything else must be a
// mark as fencestore.ParseMarkValue reads it (the token in canonical decimal,
// then ":sequence" when it has one), as the Redis store writes it. Reading a
// damaged value as absent would admit any token, so it is an error.
func parseMark(key, v []byte) (fencestore.Mark, bool, error) {
	if v == nil {
		return fencestore.Mark{}, false, nil
	}
	mark, ok := fencestore.ParseMarkValue(v)
	if !ok {
		return fencestore.Mark{}, false, fencestore.Unavailable(fmt.Errorf("corrupt mark %q at key %q", v, key))
	}
	return mark, true, nil
}
