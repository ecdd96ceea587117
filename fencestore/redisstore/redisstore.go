package redisstore

import (
	"context"
	_ "embed"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
	"go.uber.org/zap"

	"github.com/fenceproxy/fenceproxy/fencestore"
)

var _ fencestore.Store = (*Store)(nil)

// DefaultWaitTimeout is the WAIT bound when Options.WaitTimeout is zero, as
// FENCE_REDIS_WAIT_TIMEOUT's default.
const DefaultWaitTimeout = 100 * time.Millisecond

// Options configures New. The zero value is usable.
type Options struct {
	// KeyPrefix is put before each resource name to form its key.
	KeyPrefix string
	// MinReplicas, when above zero, makes every admission wait (WAIT) until
	// that many replicas have acknowledged the mark; fewer within WaitTimeout
	// is an error wrapping fencestore.ErrUnavailable and a *ReplicaAckError.
	MinReplicas int
	// WaitTimeout bounds that wait, rounded up to whole milliseconds. Zero
	// means DefaultWaitTimeout. Redis notices the timeout on its event loop,
	// so a wait can run over by up to 1/hz (100ms at the default hz 10); the
	// caller's ctx bounds it regardless.
	WaitTimeout time.Duration
	// Logger receives warnings about the client's options. If nil, nothing is
	// logged.
	Logger *zap.Logger
	// MaxBatch bounds how many admissions one pipeline carries (group
	// commit, see batch.go). Zero means DefaultMaxBatch; a negative value
	// turns batching off (one round trip per admission). Admissions with
	// MinReplicas are not batched.
	MaxBatch int
	// Pipelines is how many batches may be in flight at once; on a Cluster,
	// per master (lanes.go), so connections and pipelines in flight grow
	// with the masters. Zero means DefaultPipelines.
	Pipelines int
	// ReleaseLinger is how long a release of the drain barrier waits for
	// an admission to ride when none is queued (batch.go). Zero means
	// DefaultReleaseLinger; a negative value sends it at once.
	ReleaseLinger time.Duration
	// DrainPoll is how often a Drain that no announcement woke looks at
	// the entries it waits for (drain.go). Zero means DefaultDrainPoll.
	DrainPoll time.Duration
	// OnRoundTrip, if set, learns of every round trip that carries
	// admissions or releases (for metrics); it must not block.
	OnRoundTrip func(fencestore.RoundTrip)
}

// Store is a fencestore.Store in Redis.
type Store struct {
	client      redis.UniversalClient
	prefix      string
	minReplicas int
	waitTimeout time.Duration
	log         *zap.Logger
	batch       *batcher // nil: one round trip per admission
	// onRoundTrip is Options.OnRoundTrip (nil: none).
	onRoundTrip func(fencestore.RoundTrip)

	// The identity (keeper.go): expect is the record Expect named (nil
	// before). On a Cluster whose prefix has no hash tag, records names
	// the record of every slot (slots.go), or recordsErr says why it
	// cannot; spellable says a mark key could be a record's name.
	expect atomic.Pointer[string]
	// gens is the greatest generation seen per slot (one part off a
	// Cluster): generation.go.
	gens       *fencestore.Generations
	records    *slotRecords
	recordsErr error
	spellable  bool

	// The drain barrier (flight.go, drain.go, release.go). channel carries
	// the releases Drains wait for; entry ids are idPrefix and a count;
	// flights are this store's registrations until their Release.
	channel string
	pend    *pendingReleases
	dropped atomic.Uint64 // releases dropped from a full pend (releaseDropped)
	// resent is when a failed admission on a Cluster last had the recent
	// releases sent again (resendAfterFailure), on a monotonic clock
	// (sinceStart); 0: never.
	resent    atomic.Int64
	idPrefix  string
	ids       atomic.Uint64
	drainPoll time.Duration
	flights   flights
	watched   fencestore.Watched[entryID] // when this process first saw each entry its Drains wait for
	// linger is Options.ReleaseLinger, for releases sent without batching.
	linger time.Duration
	// wmu guards the subscriber's side: watchers (the Drains waiting for
	// each member), the members announced lately (announced, in
	// announceLog's order), and the subscription's epoch (0 before it
	// holds, one more each time it holds again) with epochCh, closed and
	// replaced at each new epoch.
	wmu         sync.Mutex
	watchers    map[string][]*waiter
	announced   map[string]bool
	announceLog []string
	epoch       uint64
	epochCh     chan struct{}
	// The subscription to channel, made on the first admission with a
	// barrier; listening is closed once it holds (or once listen stopped
	// waiting for it).
	listenOnce    sync.Once
	listeningOnce sync.Once
	listening     chan struct{}
	listenTimer   *time.Timer
	// mu guards closed, pubsub and bg.Add: Close waits for bg (the
	// subscription, releases on goroutines of their own) once nothing can
	// add to it.
	mu     sync.Mutex
	closed bool
	pubsub *redis.PubSub
	bg     sync.WaitGroup
	done   chan struct{} // closed by Close: Drains stop waiting

	closeOnce sync.Once
	closeErr  error
}

// New returns a store that keeps its marks through client, and takes
// ownership of client: Close closes it. See the package doc for the client
// options the store needs.
func New(client redis.UniversalClient, opts Options) *Store {
	log := opts.Logger
	if log == nil {
		log = zap.NewNop()
	}
	wait := opts.WaitTimeout
	if wait <= 0 {
		wait = DefaultWaitTimeout
	}
	// WAIT takes milliseconds, and "WAIT n 0" blocks for ever: never let a
	// sub-millisecond timeout round down to 0.
	wait = (wait + time.Millisecond - 1).Truncate(time.Millisecond)
	poll := opts.DrainPoll
	if poll <= 0 {
		poll = DefaultDrainPoll
	}
	s := &Store{
		client:      client,
		prefix:      opts.KeyPrefix,
		minReplicas: opts.MinReplicas,
		waitTimeout: wait,
		log:         log.Named("redisstore"),
		channel:     opts.KeyPrefix + "inflight",
		pend:        &pendingReleases{max: maxPendingReleases},
		idPrefix:    newFlightIDs(),
		drainPoll:   poll,
		listening:   make(chan struct{}),
		epochCh:     make(chan struct{}),
		done:        make(chan struct{}),
	}
	if _, cluster := client.(*redis.ClusterClient); cluster && !hasHashTag(s.prefix) {
		s.records, s.recordsErr = newSlotRecords(s.prefix)
		s.spellable = recordSpellable(s.prefix)
	}
	s.gens = fencestore.NewGenerations(1)
	if s.records != nil {
		s.gens = fencestore.NewGenerations(clusterSlots)
	}
	s.checkClient()
	s.linger = opts.ReleaseLinger
	if s.linger == 0 {
		s.linger = DefaultReleaseLinger
	}
	if opts.MaxBatch >= 0 && opts.MinReplicas <= 0 {
		maxBatch, pipelines := opts.MaxBatch, opts.Pipelines
		if maxBatch == 0 {
			maxBatch = DefaultMaxBatch
		}
		if pipelines <= 0 {
			pipelines = DefaultPipelines
		}
		s.pend.max = max(maxPendingReleases, 4*maxBatch*pipelines)
		s.batch = newBatcher(client, maxBatch, pipelines, s.pend, s.channel, s.log)
		s.batch.observe = opts.OnRoundTrip
		s.batch.linger = s.linger
		// A release sent again is late already: it does not linger.
		s.pend.retry = s.batch.releasedNow
	}
	s.onRoundTrip = opts.OnRoundTrip
	return s
}

// Layout reports a key prefix the store cannot lay its keys out with, nil
// when it can: on a Cluster, a prefix with a '}' outside a hash tag cannot
// name the per-slot identity records (slots.go).
func (s *Store) Layout() error { return s.recordsErr }

// checkClient warns about client options that break the package's promises;
// it cannot refuse them, since New has no error to return.
func (s *Store) checkClient() {
	var ctxTimeout bool
	var retries int
	switch c := s.client.(type) {
	case *redis.Client:
		ctxTimeout, retries = c.Options().ContextTimeoutEnabled, c.Options().MaxRetries
	case *redis.ClusterClient:
		ctxTimeout, retries = c.Options().ContextTimeoutEnabled, c.Options().MaxRetries
	case *redis.Ring:
		ctxTimeout, retries = c.Options().ContextTimeoutEnabled, c.Options().MaxRetries
	default:
		return
	}
	if !ctxTimeout {
		s.log.Warn("redis client has ContextTimeoutEnabled=false: an admission can outlive the store timeout by the client's read timeout")
	}
	if retries > 0 {
		s.log.Warn("redis client retries commands: a retried '>' admission whose reply was lost is refused by its own mark; set MaxRetries to -1",
			zap.Int("max_retries", retries))
	}
}

// Mark is Get's token: the sequence of a "token:sequence" mark is not part
// of the answer.
func (s *Store) Mark(ctx context.Context, resource string) (uint64, bool, error) {
	m, ok, err := s.Get(ctx, resource)
	return m.Token, ok, err
}

// Ping sends PING and, once Expect named an identity record, reads it (on
// every live shard of a Ring): one gone or changed is a
// *fencestore.LostError. On a Cluster that reading is also what admissions
// go by (keeper.go).
func (s *Store) Ping(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return fencestore.Unavailable(err)
	}
	err := s.client.Ping(ctx).Err()
	if err != nil {
		err = fencestore.Unavailable(fmt.Errorf("redisstore: ping: %w", err))
	} else {
		err = s.pingIdentity(ctx)
	}
	if errors.Is(err, fencestore.ErrUnavailable) {
		// A break, seen even when nothing else is sent (resend); on a
		// Cluster maybe a master's failover (refreshSlots).
		s.pend.failure(time.Now())
		s.refreshSlots()
	}
	return err
}

// Close closes the client. Closing twice is harmless. The releases still
// queued are sent first; Drains waiting stop with an error.
func (s *Store) Close() error {
	s.closeOnce.Do(func() {
		s.pend.stop()
		if s.batch != nil {
			s.batch.close()
		}
		s.mu.Lock()
		s.closed = true
		if s.listenTimer != nil {
			s.listenTimer.Stop()
		}
		if s.pubsub != nil {
			_ = s.pubsub.Close()
		}
		s.mu.Unlock()
		close(s.done)
		s.bg.Wait()
		if err := s.client.Close(); err != nil {
			s.closeErr = fmt.Errorf("redisstore: close: %w", err)
		}
	})
	return s.closeErr
}

// PolicyMayEvict reports whether a maxmemory-policy could evict a mark. The
// allkeys-* policies can. The volatile-* policies evict only keys with a TTL,
// and marks never have one; noeviction refuses writes instead (admissions then
// fail, closed). A policy this code does not know is assumed to evict.
func PolicyMayEvict(policy string) bool {
	return policy != "noeviction" && !strings.HasPrefix(policy, "volatile-")
}

// ReplicaAckError reports an admission that fewer replicas than
// Options.MinReplicas acknowledged within the WAIT timeout. Admit returns it
// wrapped with fencestore.ErrUnavailable. The mark was advanced on the primary
// regardless: like every store error, it is indeterminate.
type ReplicaAckError struct {
	Key     string
	Acked   int
	Want    int
	Timeout time.Duration
}

func (e *ReplicaAckError) Error() string {
	return fmt.Sprintf("redisstore: admit %q: %d of %d replicas acknowledged within %v", e.Key, e.Acked, e.Want, e.Timeout)
}

// ServerInfo identifies the Redis server a store's commands reach.
type ServerInfo struct {
	RunID string // changes when the server restarts or another one takes over
	Role  string // "master", or "slave" for a replica (which refuses writes)
}

// Server reads the run id and role of the server that admissions reach (INFO
// server and replication). Watching it over time shows a failover or a
// restart: both change the run id. With a cluster client the answer comes
// from one node of many, so it says little.
func (s *Store) Server(ctx context.Context) (ServerInfo, error) {
	text, err := s.client.Info(ctx, "server", "replication").Result()
	if err != nil {
		return ServerInfo{}, fencestore.Unavailable(fmt.Errorf("redisstore: INFO: %w", err))
	}
	var si ServerInfo
	for _, line := range strings.Split(text, "\r\n") {
		if v, ok := strings.CutPrefix(line, "run_id:"); ok {
			si.RunID = v
		} else if v, ok := strings.CutPrefix(line, "role:"); ok {
			si.Role = v
		}
	}
	if si.RunID == "" || si.Role == "" {
		return ServerInfo{}, fmt.Errorf("redisstore: INFO lacks run_id or role")
	}
	return si, nil
}
