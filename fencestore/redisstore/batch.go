package redisstore

import (
	"context"
	"errors"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
	"go.uber.org/zap"

	"github.com/fenceproxy/fenceproxy/fencestore"
)

// Group commit. While a pipeline of admissions is in flight, new admissions
// queue; the next pipeline takes all of them at once. One round trip, one
// pair of syscalls on each side and (with appendfsync always) one fsync then
// serve many requests. When idle, an admission goes out at once: a worker
// waits on the queue, never on a timer, so batching adds no latency.
//
// Each admission keeps its own decision (one EVALSHA each in the pipeline,
// atomic per key as always) and its own deadline: the caller stops waiting
// at its ctx's deadline even if its pipeline is slower.
//
// Releases of the drain barrier (flight.go) ride the same pipelines, ahead
// of the admissions: they wait in the store's pending set (pendingReleases),
// a worker wakes on an admission or a release, and its pipeline carries
// every release nobody sent yet, and again those on their way in another
// pipeline whose key one of its admissions enters. So a release made before
// an admission was queued runs before it is decided, whichever pipelines
// they ride. Nobody waits for a release; one the store does not acknowledge
// goes back to the pending set, due again after its backoff, until it is
// acknowledged or its entry can hold nobody back (release.go).
//
// On a single server the releases ride the first admission run of the
// pipeline (admit.lua runs them ahead of its admissions): one script run
// per pipeline, not one for the releases and one for the admissions. A
// release that finds no admission queued lingers (Options.ReleaseLinger,
// DefaultReleaseLinger) for one to ride, and goes alone when none comes:
// under load the next admission comes within microseconds, and the
// release costs Redis no script run of its own. The linger only delays
// the wake-up of a waiter on another replica (by about a millisecond when
// the process is idle: Go rounds a timer under a millisecond up to one
// when nothing else runs); a release that a Drain of this process waits
// for, one given up as abandoned, and one sent again after a failure do
// not linger.

// DefaultMaxBatch and DefaultPipelines are the batching defaults;
// DefaultReleaseLinger is how long a release with no admission to ride
// waits for one.
const (
	DefaultMaxBatch      = 128
	DefaultPipelines     = 2
	DefaultReleaseLinger = 500 * time.Microsecond
)

// errClosed is returned by an admission on a closed store.
var errClosed = errors.New("redisstore: store closed")

type admission struct {
	ctx context.Context
	call
	reply any
	err   error
	done  chan struct{} // buffered 1: the worker never blocks on a gone caller
	// taken is set by the worker before it looks at ctx: a caller gone
	// before it was set knows the worker will find ctx done and not send
	// the admission (errNotSent), so no entry can exist to abandon.
	taken atomic.Bool
}

// errNotSent wraps the context error of an admission whose caller gave up
// before a pipeline took it: Redis never saw it.
type errNotSent struct{ err error }

func (e errNotSent) Error() string {
	return "not sent before its deadline (the group-commit queue was behind): " + e.err.Error()
}
func (e errNotSent) Unwrap() error { return e.err }

var admissionPool = sync.Pool{New: func() any { return &admission{done: make(chan struct{}, 1)} }}

type batcher struct {
	client redis.UniversalClient
	// oneCall sends a batch as one run of the script over all its keys
	// (one EVALSHA instead of one per admission: far less work for Redis).
	// A Cluster or Ring client cannot: the keys of a batch live on many
	// nodes; it pipelines one EVALSHA per admission instead.
	oneCall bool
	// cluster is client when it is a Cluster client: see execNodes.
	cluster *redis.ClusterClient
	queue   chan *admission
	pend    *pendingReleases
	kick    chan struct{} // a release was added to pend
	// urgent is set with a kick for a release somebody waits for (or may
	// wait for, late): the worker it wakes sends it without lingering.
	urgent atomic.Bool
	// linger is how long a worker woken by a release alone waits for an
	// admission to carry it (0: not at all).
	linger   time.Duration
	channel  string // release.lua's channel
	log      *zap.Logger
	maxBatch int
	// pipelines is how many pipelines may be in flight at once (on a
	// Cluster, to each master: lanes.go).
	pipelines int
	stop      chan struct{} // closed by close: workers drain and exit
	stopped   chan struct{} // closed once they have
	wg        sync.WaitGroup
	// lanes are the masters' on a Cluster (lanes.go).
	lanes lanes
	// onExec, when set (tests), learns how many admissions and releases
	// each pipeline carries.
	onExec func(admissions, releases int)
	// observe is Options.OnRoundTrip (nil: none).
	observe func(fencestore.RoundTrip)
}

func newBatcher(client redis.UniversalClient, maxBatch, pipelines int, pend *pendingReleases, channel string, log *zap.Logger) *batcher {
	cluster, _ := client.(*redis.ClusterClient)
	_, ring := client.(*redis.Ring)
	b := &batcher{
		client:    client,
		oneCall:   cluster == nil && !ring,
		cluster:   cluster,
		queue:     make(chan *admission, maxBatch*pipelines),
		pend:      pend,
		kick:      make(chan struct{}, 1),
		channel:   channel,
		log:       log,
		maxBatch:  maxBatch,
		pipelines: pipelines,
		stop:      make(chan struct{}),
		stopped:   make(chan struct{}),
	}
	b.wg.Add(pipelines)
	for range pipelines {
		go b.run()
	}
	return b
}

// admit queues one admission and waits for its reply or ctx. The queue is
// bounded: when it is full the caller waits for room until its deadline.
func (b *batcher) admit(ctx context.Context, c call) (any, error) {
	select {
	case <-b.stop:
		return nil, errClosed
	default:
	}
	a := admissionPool.Get().(*admission)
	a.ctx, a.call = ctx, c
	select {
	case b.queue <- a:
	case <-ctx.Done():
		a.ctx = nil
		admissionPool.Put(a)
		return nil, errNotSent{ctx.Err()}
	case <-b.stop:
		a.ctx = nil
		admissionPool.Put(a)
		return nil, errClosed
	}
	select {
	case <-a.done:
		reply, err := a.reply, a.err
		*a = admission{done: a.done}
		admissionPool.Put(a)
		return reply, err
	case <-ctx.Done():
		// The worker still owns a and will signal done into the buffer;
		// a is not returned to the pool, the garbage collector takes it.
		if !a.taken.Load() {
			return nil, errNotSent{ctx.Err()}
		}
		return nil, ctx.Err()
	case <-b.stopped:
		// Queued after the workers drained: nobody will run it.
		return nil, errClosed
	}
}

// released wakes a worker for a release just added to the pending set,
// which it sends with the next admission or after its linger. One added
// while the store closes may be left there; its entry then stays until its
// deadline.
func (b *batcher) released() {
	select {
	case b.kick <- struct{}{}:
	default:
	}
}

// releasedNow wakes a worker for a release that must not linger.
func (b *batcher) releasedNow() {
	b.urgent.Store(true)
	select {
	case b.kick <- struct{}{}:
	default:
	}
}

func (b *batcher) close() {
	close(b.stop)
	b.wg.Wait()
	close(b.stopped)
}

func (b *batcher) run() {
	defer b.wg.Done()
	batch := make([]*admission, 0, b.maxBatch)
	var rels []release
	var fkeys map[string]bool
	cmds := make([]*redis.Cmd, 0, b.maxBatch)
	linger := time.NewTimer(time.Hour)
	linger.Stop()
	for {
		batch = batch[:0]
		select {
		case a := <-b.queue:
			batch = append(batch, a)
		case <-b.kick:
			if a, stop := b.lingerFor(linger); stop {
				b.drain()
				return
			} else if a != nil {
				batch = append(batch, a)
			}
		case <-b.stop:
			b.drain()
			return
		}
	fill:
		for len(batch) < b.maxBatch {
			select {
			case a := <-b.queue:
				batch = append(batch, a)
			default:
				break fill
			}
		}
		// Taken only now, after the admissions: a release made before one
		// of them was queued is in the set, or done.
		clear(fkeys)
		for _, a := range batch {
			if a.fl != "" {
				if fkeys == nil {
					fkeys = make(map[string]bool)
				}
				fkeys[a.keys[1]] = true
			}
		}
		var own int
		rels, own = b.pend.take(rels[:0], fkeys)
		if b.cluster != nil {
			b.dispatchNodes(batch, rels, own)
			continue
		}
		var errs []error
		cmds, errs = b.exec(batch, rels, cmds[:0])
		b.settle(rels[:own], errs)
	}
}

// lingerFor waits, after a kick for releases alone, up to b.linger for an
// admission for them to ride, using timer: it returns the admission (nil
// when none came, or an urgent release cut the wait short), or stop when
// the batcher stops.
func (b *batcher) lingerFor(timer *time.Timer) (*admission, bool) {
	if b.linger <= 0 || b.urgent.Swap(false) {
		return nil, false
	}
	timer.Reset(b.linger)
	defer timer.Stop()
	for {
		select {
		case a := <-b.queue:
			return a, false
		case <-timer.C:
			return nil, false
		case <-b.kick:
			if b.urgent.Swap(false) {
				return nil, false
			}
		case <-b.stop:
			return nil, true
		}
	}
}

// settle tells the pending set how the releases the worker owned fared
// (errs, aligned with them; nil: all acknowledged, or none sent).
func (b *batcher) settle(rels []release, errs []error) {
	if len(rels) == 0 {
		return
	}
	var ok, failed []release
	var last error
	for i, r := range rels {
		if i < len(errs) && errs[i] != nil {
			failed, last = append(failed, r), errs[i]
		} else {
			ok = append(ok, r)
		}
	}
	b.pend.ackedEach(ok)
	for _, r := range b.pend.failed(failed) {
		b.releaseFailed(r.key, last)
	}
}

// drain answers whatever admission is still queued at close, and sends the
// releases still queued (the client is still open).
func (b *batcher) drain() {
admissions:
	for {
		select {
		case a := <-b.queue:
			a.err = errClosed
			a.done <- struct{}{}
		default:
			break admissions
		}
	}
	if rels, own := b.pend.take(nil, nil); own > 0 {
		b.exec(nil, rels, nil)
		b.pend.done(rels)
	}
}

// releaseFailed logs a release given up: its entry can hold nobody back
// any more (releaseUntil). Debug level: the admissions of a store that
// fails fail too, and say so louder.
func (b *batcher) releaseFailed(key string, err error) {
	b.log.Debug("drain release not acknowledged while its entry could hold anyone back", zap.String("key", key), zap.Error(err))
}

// exec sends one pipeline for batch and rels, answers each admission, and
// returns each release's error (aligned with rels).
func (b *batcher) exec(batch []*admission, rels []release, cmds []*redis.Cmd) ([]*redis.Cmd, []error) {
	errs := make([]error, len(rels))
	b.exchange(batch, len(rels), func(ctx context.Context, live []*admission) {
		switch {
		case b.oneCall:
			b.execOne(ctx, live, rels, errs)
		case b.cluster != nil:
			b.execNodes(ctx, live, rels, errs)
		default:
			cmds = pipelineScripts(ctx, b.client, b.channel, live, rels, cmds, errs, scriptOpts{})
		}
	})
	return cmds, errs
}

// exchange runs send for the admissions of batch whose callers still wait
// (live) and nrels releases, within the latest of their deadlines, reports
// the exchange (observe), and answers each admission. send sets each
// admission's reply or error.
func (b *batcher) exchange(batch []*admission, nrels int, send func(ctx context.Context, live []*admission)) {
	// An admission whose caller already gave up is not sent: it was
	// answered 503, and not running it keeps the mark from advancing for it.
	live := batch[:0]
	var deadline time.Time
	unbounded := false
	for _, a := range batch {
		a.taken.Store(true) // before the look at ctx (errNotSent)
		if err := a.ctx.Err(); err != nil {
			a.err = err
			a.done <- struct{}{}
			continue
		}
		live = append(live, a)
		// The pipeline runs until the latest deadline among its members, so
		// none is cut short; each caller stops waiting at its own.
		if d, ok := a.ctx.Deadline(); !ok {
			unbounded = true
		} else if d.After(deadline) {
			deadline = d
		}
	}
	if len(live) == 0 && nrels == 0 {
		return
	}
	if b.onExec != nil {
		b.onExec(len(live), nrels)
	}
	ctx := context.Background()
	if len(live) == 0 {
		// Releases alone: nobody waits, a bound of their own.
		deadline, unbounded = time.Now().Add(releaseTimeout), false
	}
	if !unbounded {
		var cancel context.CancelFunc
		ctx, cancel = context.WithDeadline(ctx, deadline)
		defer cancel()
	}
	start := time.Now()
	send(ctx, live)
	if b.observe != nil {
		// Failed as the etcd store reports it: the exchange gave no answer
		// (its deadline passed, or none of its admissions got a reply).
		failed := ctx.Err() != nil || len(live) > 0 && !slices.ContainsFunc(live, func(a *admission) bool { return a.err == nil })
		b.observe(fencestore.RoundTrip{Admissions: len(live), Releases: nrels, Duration: time.Since(start), Failed: failed})
	}
	for _, a := range live {
		a.done <- struct{}{}
	}
}
