package boltstore

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"time"

	bolt "go.etcd.io/bbolt"
	berrors "go.etcd.io/bbolt/errors"

	"github.com/fenceproxy/fenceproxy/fencestore"
)

var _ fencestore.Store = (*Store)(nil)

// Defaults for the zero Options fields.
const (
	// DefaultMaxBatchDelay is how long an admission waits for others to join
	// its commit. bbolt's own default, 10ms, is paid in full by an admission on
	// an idle proxy. Measured here (ext4 on virtio, 2 shared cores, one commit
	// about 0.14ms): an idle admission takes about 1.35ms with any delay up to
	// 1ms (an idle Go runtime wakes for timers with millisecond resolution),
	// 10.7ms at 10ms, 0.14ms with no delay; with 64 concurrent admitters it
	// takes about 30µs per admission with 0.5-1ms, but 150µs with no delay,
	// since each then commits and fsyncs alone and the queue grows. Half a
	// millisecond keeps the batching for about 1ms of idle latency.
	DefaultMaxBatchDelay = 500 * time.Microsecond
	// DefaultMaxBatchSize caps the admissions in one transaction, as bbolt's
	// default does.
	DefaultMaxBatchSize = 1000
	// DefaultLockTimeout bounds the wait for the file lock: long enough for a
	// previous process that is exiting to let go, short enough that a second
	// proxy on the same file fails at start with a clear error.
	DefaultLockTimeout = time.Second
)

// bucket holds every mark.
var bucket = []byte("marks")

var errClosed = fencestore.Unavailable(errors.New("boltstore: closed"))

// Options configures Open. The zero value is usable.
type Options struct {
	// KeyPrefix is put before each resource name to form its key, as in the
	// Redis store.
	KeyPrefix string
	// MaxBatchDelay is the longest an admission waits for others to share its
	// commit and fsync. Zero means DefaultMaxBatchDelay; negative means no
	// wait (lowest idle latency, but concurrent admissions then commit one by
	// one).
	MaxBatchDelay time.Duration
	// MaxBatchSize is the most admissions one commit carries. Zero means
	// DefaultMaxBatchSize.
	MaxBatchSize int
	// LockTimeout is how long Open waits for the file lock that another
	// process holds. Zero means DefaultLockTimeout; negative means no wait.
	LockTimeout time.Duration
}

// Store is a fencestore.Store in a bbolt file.
type Store struct {
	db     *bolt.DB
	prefix string

	// mu guards closed and orders wg.Add before Close's wg.Wait.
	mu     sync.RWMutex
	closed bool
	// wg counts admissions still running in bbolt, including those whose
	// callers gave up, so that Close waits for them.
	wg sync.WaitGroup
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
	switch {
	case opts.MaxBatchDelay > 0:
		db.MaxBatchDelay = opts.MaxBatchDelay
	case opts.MaxBatchDelay == 0:
		db.MaxBatchDelay = DefaultMaxBatchDelay
	default:
		db.MaxBatchDelay = 0
	}
	db.MaxBatchSize = opts.MaxBatchSize
	if db.MaxBatchSize <= 0 {
		db.MaxBatchSize = DefaultMaxBatchSize
	}
	if err := db.Update(func(tx *bolt.Tx) error {
		_, err := tx.CreateBucketIfNotExists(bucket)
		return err
	}); err != nil {
		_ = db.Close()
		return nil, fmt.Errorf("boltstore: open %s: create bucket: %w", path, err)
	}
	return &Store{db: db, prefix: opts.KeyPrefix}, nil
}

// Admit compares token with resource's mark and advances it in one bbolt
// transaction, shared with concurrent admissions. When ctx ends first, Admit
// returns an error wrapping fencestore.ErrUnavailable at once, but the
// admission is indeterminate: it stays queued and may still commit.
func (s *Store) Admit(ctx context.Context, resource string, token uint64, cmp fencestore.Compare) (fencestore.Decision, error) {
	if err := ctx.Err(); err != nil {
		return fencestore.Decision{}, fencestore.Unavailable(err)
	}
	key := []byte(s.prefix + resource)

	// A decision that writes nothing, a refusal or an equal token under ">=",
	// is just as atomic taken from a read-only transaction: the mark only
	// grows, so the read is its linearization point. It needs no commit and no
	// fsync, which makes the common case (many requests on one lease's token)
	// cheap.
	var d fencestore.Decision
	var settled bool
	err := s.view(func(tx *bolt.Tx) error {
		b := tx.Bucket(bucket)
		if b == nil {
			return errors.New("bucket missing")
		}
		mark, ok, err := parseMark(key, b.Get(key))
		if err != nil {
			return err
		}
		if ok && token <= mark {
			d, settled = fencestore.Decision{Admitted: cmp.Admits(token, mark, true), Mark: mark}, true
		}
		return nil
	})
	if err != nil {
		return fencestore.Decision{}, fencestore.Unavailable(fmt.Errorf("boltstore: admit %q: %w", key, err))
	}
	if settled {
		return d, nil
	}

	fn := func(tx *bolt.Tx) error {
		// Batch runs fn again when another function of its batch fails, and
		// the transaction of an earlier run is rolled back: only the last run's
		// decision holds, so every run sets it afresh.
		d = fencestore.Decision{}
		b := tx.Bucket(bucket)
		if b == nil {
			return errors.New("bucket missing")
		}
		mark, ok, err := parseMark(key, b.Get(key))
		if err != nil {
			return err
		}
		if !cmp.Admits(token, mark, ok) {
			d = fencestore.Decision{Mark: mark}
			return nil
		}
		if !ok || token != mark {
			if err := b.Put(key, strconv.AppendUint(nil, token, 10)); err != nil {
				return err
			}
		}
		d = fencestore.Decision{Admitted: true, Mark: token}
		return nil
	}

	s.mu.RLock()
	if s.closed {
		s.mu.RUnlock()
		return fencestore.Decision{}, errClosed
	}
	s.wg.Add(1)
	s.mu.RUnlock()

	if ctx.Done() == nil {
		// No deadline to race: spare the goroutine.
		defer s.wg.Done()
		if err := s.db.Batch(fn); err != nil {
			return fencestore.Decision{}, fencestore.Unavailable(fmt.Errorf("boltstore: admit %q: %w", key, err))
		}
		return d, nil
	}
	done := make(chan error, 1)
	go func() {
		defer s.wg.Done()
		done <- s.db.Batch(fn)
	}()
	select {
	case err := <-done:
		if err != nil {
			return fencestore.Decision{}, fencestore.Unavailable(fmt.Errorf("boltstore: admit %q: %w", key, err))
		}
		return d, nil
	case <-ctx.Done():
		return fencestore.Decision{}, fencestore.Unavailable(fmt.Errorf("boltstore: admit %q: indeterminate, may still commit: %w", key, ctx.Err()))
	}
}

// Mark returns resource's mark, and false when it has none.
func (s *Store) Mark(ctx context.Context, resource string) (uint64, bool, error) {
	if err := ctx.Err(); err != nil {
		return 0, false, fencestore.Unavailable(err)
	}
	key := []byte(s.prefix + resource)
	var (
		mark uint64
		ok   bool
	)
	err := s.view(func(tx *bolt.Tx) error {
		b := tx.Bucket(bucket)
		if b == nil {
			return errors.New("bucket missing")
		}
		var err error
		mark, ok, err = parseMark(key, b.Get(key))
		return err
	})
	if err != nil {
		return 0, false, fencestore.Unavailable(fmt.Errorf("boltstore: mark %q: %w", key, err))
	}
	return mark, ok, nil
}

// Ping reports whether the file is open and readable.
func (s *Store) Ping(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return fencestore.Unavailable(err)
	}
	err := s.view(func(tx *bolt.Tx) error {
		if tx.Bucket(bucket) == nil {
			return errors.New("bucket missing")
		}
		return nil
	})
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

// Close waits for admissions already queued, including those whose callers
// gave up, then closes the file and releases its lock. Later calls return an
// error wrapping fencestore.ErrUnavailable. Closing twice is harmless.
func (s *Store) Close() error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil
	}
	s.closed = true
	s.mu.Unlock()
	s.wg.Wait()
	if err := s.db.Close(); err != nil {
		return fmt.Errorf("boltstore: close: %w", err)
	}
	return nil
}

// parseMark reads a stored mark. nil means absent; anything else must be a
// canonical decimal uint64, as the Redis store writes it. Reading a damaged
// value as absent would admit any token, so it is an error.
func parseMark(key, v []byte) (uint64, bool, error) {
	if v == nil {
		return 0, false, nil
	}
	mark, ok := fencestore.ParseMark(v)
	if !ok {
		return 0, false, fencestore.Unavailable(fmt.Errorf("corrupt mark %q at key %q", v, key))
	}
	return mark, true, nil
}
