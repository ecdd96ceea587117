package etcdstore

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/fenceproxy/fenceproxy/fencestore"
)

var (
	_ fencestore.Store  = (*Store)(nil)
	_ fencestore.Keeper = (*Store)(nil)
)

// DefaultDrainPoll is how often the watch shared by the waiting Drains of
// a resource reads the records they still wait for, when Options.DrainPoll
// is zero. The watch is what wakes a Drain; this is only a net under it.
const DefaultDrainPoll = time.Second

// Options configures New. The zero value is usable, but a real deployment
// sets KeyPrefix (fenceproxy's default is "fence:").
type Options struct {
	// KeyPrefix is put before each resource name to form its key; the
	// identity record's key is KeyPrefix itself.
	KeyPrefix string
	// Logger receives warnings (a release that failed, a corrupt mark an
	// operator reset). If nil, nothing is logged.
	Logger *zap.Logger
	// DrainPoll is how often the waiters' watch of a resource reads the
	// records they still wait for (one read for them all), a net under
	// lost watch events. Zero means DefaultDrainPoll.
	DrainPoll time.Duration
	// OnRoundTrip, if set, learns of every transaction that carries
	// admissions or releases (for metrics); it must not block.
	OnRoundTrip func(fencestore.RoundTrip)
}

// Store is a fencestore.Store and fencestore.Keeper in etcd.
type Store struct {
	client    *clientv3.Client
	keys      layout
	log       *zap.Logger
	drainPoll time.Duration
	// expect is the identity every admission must find ("" none).
	expect atomic.Pointer[string]
	// gens is the greatest revision seen (the etcd store's generation:
	// keeper.go).
	gens *fencestore.Generations

	// The drain barrier (flight.go): records are named by replica and a
	// count, and attached to the leases in leases; flights keeps this
	// store's own flights and its waiters' watches.
	replica string
	ids     atomic.Uint64
	leases  leases
	flights barrier
	// watched is when this process first saw each record its Drains wait
	// for (fencestore.Watched).
	watched fencestore.Watched[string]

	// batch groups concurrent admissions, and the releases, into shared
	// transactions (batch.go).
	batch *batcher

	// mu guards closed and bg.Add: Close waits for bg (the batches,
	// lease grants) once nothing can add to it.
	mu     sync.Mutex
	closed bool
	bg     sync.WaitGroup
	done   chan struct{} // closed by Close
	// bgCtx bounds the background work that Close cuts short (grants,
	// batches of admissions); releases alone run to their own timeout.
	bgCtx    context.Context
	bgCancel context.CancelFunc

	closeOnce sync.Once
	closeErr  error
}

var errClosed = fencestore.Unavailable(errors.New("etcdstore: closed"))

// New returns a store that keeps its marks in etcd through client, and
// takes ownership of client: Close closes it. NewClient makes a client as
// fenceproxy needs it.
func New(client *clientv3.Client, opts Options) *Store {
	log := opts.Logger
	if log == nil {
		log = zap.NewNop()
	}
	poll := opts.DrainPoll
	if poll <= 0 {
		poll = DefaultDrainPoll
	}
	var r [8]byte
	_, _ = rand.Read(r[:]) // never fails (crypto/rand panics instead)
	s := &Store{
		client:    client,
		keys:      newLayout(opts.KeyPrefix),
		log:       log.Named("etcdstore"),
		drainPoll: poll,
		replica:   hex.EncodeToString(r[:]),
		done:      make(chan struct{}),
		gens:      fencestore.NewGenerations(1),
	}
	s.bgCtx, s.bgCancel = context.WithCancel(context.Background())
	s.leases.s = s
	s.batch = newBatcher(client, s.keys.identity, s.log, s.bgCtx, s.goBackground)
	s.batch.observe = opts.OnRoundTrip
	s.goBackground(func() { s.batch.run(s.done) })
	return s
}

// check refuses a call on a closed store or with a done context.
func (s *Store) check(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return fencestore.Unavailable(err)
	}
	s.mu.Lock()
	closed := s.closed
	s.mu.Unlock()
	if closed {
		return errClosed
	}
	return nil
}

// fail wraps err, from an etcd call made for op, as unavailable; past ctx
// the chain holds ctx's error too, whatever the client made of it.
func (s *Store) fail(ctx context.Context, op string, err error) error {
	if s.isClosed() {
		return errClosed
	}
	if cerr := ctx.Err(); cerr != nil && !errors.Is(err, cerr) {
		err = fmt.Errorf("%w (%w)", cerr, err)
	}
	return fencestore.Unavailable(fmt.Errorf("etcdstore: %s: %w", op, err))
}

func (s *Store) isClosed() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.closed
}

// goBackground runs fn on a goroutine that Close waits for; on a closed
// store it does not run fn and returns false.
func (s *Store) goBackground(fn func()) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return false
	}
	s.bg.Add(1)
	go func() {
		defer s.bg.Done()
		fn()
	}()
	return true
}

// Admit decides a against its resource's mark in one etcd transaction
// (txn.go), which shares a batch with other admissions (batch.go), and,
// with a.Flight, registers the admitted request in the drain barrier in
// the same transaction.
func (s *Store) Admit(ctx context.Context, a fencestore.Admission) (fencestore.Decision, error) {
	if err := s.check(ctx); err != nil {
		return fencestore.Decision{}, err
	}
	if reserved(a.Resource) {
		return fencestore.Decision{}, fencestore.Unavailable(fmt.Errorf("etcdstore: admit %q: %w", a.Resource, errReservedName))
	}
	var fl *flightReg
	if a.Flight > 0 {
		rng := s.keys.flightRange(a.Resource)
		id := fmt.Sprintf("%s.%016x", s.replica, s.ids.Add(1))
		fl = &flightReg{key: flightKey(rng, a.Order(), id)}
	}
	// A lease that etcd no longer has (it was revoked, or the cluster was
	// restored from a backup) fails the whole transaction: nothing was
	// written, so a second try with a fresh lease is safe.
	for attempt := 0; ; attempt++ {
		if fl != nil {
			l, err := s.leases.get(ctx, a.Flight)
			if err != nil {
				return fencestore.Decision{}, err
			}
			fl.lease = l
		}
		d, err := s.admit(ctx, a, fl)
		if err != nil && fl != nil && attempt == 0 && isLeaseNotFound(err) {
			s.leases.drop(fl.lease)
			continue
		}
		return d, err
	}
}

// admit queues one admission transaction and waits for its batch.
func (s *Store) admit(ctx context.Context, a fencestore.Admission, fl *flightReg) (fencestore.Decision, error) {
	want := s.expectation()
	q := prepare(ctx, newPlan(s.keys, a, fl, want != ""), want)
	// The revision seen before the transaction is sent: etcd commits it
	// at a later one, whatever other batches answer meanwhile.
	q.seen = s.gens.Seen(0)
	if !s.batch.add(q) {
		return fencestore.Decision{}, errClosed
	}
	select {
	case <-q.done:
	case <-ctx.Done():
		s.late(q) // its record may be put after all: release it then
		return fencestore.Decision{}, s.fail(ctx, fmt.Sprintf("admit %q", q.p.key), ctx.Err())
	}
	d, err := s.decide(ctx, q)
	s.settle(q, d, err)
	return d, err
}

// decide makes q's Decision from its batch's reply.
func (s *Store) decide(ctx context.Context, q *queued) (fencestore.Decision, error) {
	r := q.reply
	switch {
	case r.err != nil:
		return fencestore.Decision{}, s.fail(ctx, fmt.Sprintf("admit %q", q.p.key), r.err)
	case r.lost:
		return fencestore.Decision{}, &fencestore.LostError{Want: q.expect, Found: r.found}
	}
	if q.expect != "" {
		if err := s.revision(q.expect, q.seen, r.rev); err != nil {
			return fencestore.Decision{}, err
		}
	}
	return q.p.interpret(r.rev, r.rs)
}

// Mark returns the resource's mark token, and false when it has none.
func (s *Store) Mark(ctx context.Context, resource string) (uint64, bool, error) {
	m, ok, err := s.Get(ctx, resource)
	return m.Token, ok, err
}

// Ping reads the identity record, a linearizable read: it answers only
// when a quorum of the cluster does.
func (s *Store) Ping(ctx context.Context) error {
	if err := s.check(ctx); err != nil {
		return err
	}
	seen := s.gens.Seen(0)
	resp, err := s.client.Get(ctx, s.keys.identity, clientv3.WithCountOnly())
	if err != nil {
		return s.fail(ctx, "ping", err)
	}
	if want := s.expectation(); want != "" {
		return s.revision(want, seen, resp.Header.GetRevision())
	}
	return nil
}

// Close stops the store: later calls fail with an error wrapping
// fencestore.ErrUnavailable, and so do the admissions still queued or in
// a batch. It waits for the releases already sent, sends those still
// queued once (each bounded by releaseTimeout) and closes the client. It
// revokes no lease: the requests still in flight here hold the others
// back until their records are released or abandoned by their waiters, as
// a replica that died would. Closing twice is harmless.
func (s *Store) Close() error {
	s.closeOnce.Do(func() {
		s.mu.Lock()
		s.closed = true
		close(s.done)
		s.mu.Unlock()
		s.batch.close()
		s.bgCancel()
		s.bg.Wait()
		s.batch.flush()
		s.closeErr = s.client.Close()
		if errors.Is(s.closeErr, context.Canceled) {
			s.closeErr = nil // the client reports its own cancellation
		}
	})
	return s.closeErr
}
