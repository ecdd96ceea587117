package redisstore

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
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
// acknowledged or moot (release.go).
//
// On a single server the releases ride the first admission run of the
// pipeline (admit.lua runs them ahead of its admissions): one script run
// per pipeline, not one for the releases and one for the admissions. A
// release that finds no admission queued lingers (Options.ReleaseLinger,
// DefaultReleaseLinger) for one to ride, and goes alone when none comes:
// under load the next admission comes within microseconds, and the
// release costs Redis no script run of its own. The linger only delays
// the wake-up of a waiter on another replica; a release that a Drain of
// this process waits for, one given up as abandoned, and one sent again
// after a failure do not linger.

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
}

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
	stop     chan struct{} // closed by close: workers drain and exit
	stopped  chan struct{} // closed once they have
	wg       sync.WaitGroup
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
		client:   client,
		oneCall:  cluster == nil && !ring,
		cluster:  cluster,
		queue:    make(chan *admission, maxBatch*pipelines),
		pend:     pend,
		kick:     make(chan struct{}, 1),
		channel:  channel,
		log:      log,
		maxBatch: maxBatch,
		stop:     make(chan struct{}),
		stopped:  make(chan struct{}),
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
		return nil, ctx.Err()
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

// releaseFailed logs a release given up: moot (its waiters gave it up
// already). Debug level: the admissions of a store that fails fail too,
// and say so louder.
func (b *batcher) releaseFailed(key string, err error) {
	b.log.Debug("drain release not acknowledged before it was moot", zap.String("key", key), zap.Error(err))
}

// exec sends one pipeline for batch and rels, answers each admission, and
// returns each release's error (aligned with rels).
func (b *batcher) exec(batch []*admission, rels []release, cmds []*redis.Cmd) ([]*redis.Cmd, []error) {
	// An admission whose caller already gave up is not sent: it was
	// answered 503, and not running it keeps the mark from advancing for it.
	live := batch[:0]
	var deadline time.Time
	unbounded := false
	for _, a := range batch {
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
	if len(live) == 0 && len(rels) == 0 {
		return cmds, nil
	}
	if b.onExec != nil {
		b.onExec(len(live), len(rels))
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
	errs := make([]error, len(rels))
	switch {
	case b.oneCall:
		b.execOne(ctx, live, rels, errs)
	case b.cluster != nil:
		b.execNodes(ctx, live, rels, errs)
	default:
		cmds = pipelineScripts(ctx, b.client, b.channel, live, rels, cmds, errs)
	}
	if b.observe != nil {
		// Failed as the etcd store reports it: the exchange gave no answer
		// (its deadline passed, or none of its admissions got a reply).
		failed := ctx.Err() != nil || len(live) > 0 && !slices.ContainsFunc(live, func(a *admission) bool { return a.err == nil })
		b.observe(fencestore.RoundTrip{Admissions: len(live), Releases: len(rels), Duration: time.Since(start), Failed: failed})
	}
	for _, a := range live {
		a.done <- struct{}{}
	}
	return cmds, errs
}

// pipelineScripts pipelines one EVALSHA of release.lua per release of rels
// (announcing on channel), then one of admit.lua per admission of live, on
// p, sets each admission's reply, and each release's error in errs (aligned
// with rels).
func pipelineScripts(ctx context.Context, p scriptPipeliner, channel string, live []*admission, rels []release,
	cmds []*redis.Cmd, errs []error,
) []*redis.Cmd {
	pipe := p.Pipeline()
	var relCmds []*redis.Cmd
	for _, r := range rels {
		relCmds = append(relCmds, releaseScript.EvalSha(ctx, pipe, []string{r.key}, r.member, channel))
	}
	for _, a := range live {
		keys, args := script([]*admission{a}, false)
		cmds = append(cmds, admitScript.EvalSha(ctx, pipe, keys, args...))
	}
	_, _ = pipe.Exec(ctx) // each command keeps its own error

	// NOSCRIPT (a restarted or flushed server): the script did not run for
	// those, so running them again with EVAL is safe, and caches it.
	var retry redis.Pipeliner
	var late map[string]bool
	for i, c := range relCmds {
		if isNoScript(c.Err()) {
			if retry == nil {
				retry = p.Pipeline()
			}
			relCmds[i] = releaseScript.Eval(ctx, retry, []string{rels[i].key}, rels[i].member, channel)
			if late == nil {
				late = make(map[string]bool)
			}
			late[rels[i].key] = true
		}
	}
	for i, c := range cmds {
		if isNoScript(c.Err()) {
			if retry == nil {
				retry = p.Pipeline()
			}
			keys, args := script(live[i:i+1], false)
			cmds[i] = admitScript.Eval(ctx, retry, keys, args...)
		}
	}
	if retry != nil {
		_, _ = retry.Exec(ctx)
	}
	for i, c := range relCmds {
		errs[i] = c.Err()
	}
	for i, a := range live {
		a.reply, a.err = cmds[i].Result()
		cmds[i] = nil
	}
	recheck(ctx, p, live, late)
	return cmds
}

// recheck narrows the snapshot of each admission of live that entered a
// key of late to the entries still there: a release of that key meant to
// run ahead of it ran after it (its EVALSHA met NOSCRIPT, and EVAL ran it
// later). Its Drain would learn so from the release's announcement anyway;
// this keeps Older exact. A look that fails leaves the snapshot as it was:
// a Drain that looks when it need not, never an admission that should have
// waited.
func recheck(ctx context.Context, p pipeliner, live []*admission, late map[string]bool) {
	if len(late) == 0 {
		return
	}
	for _, a := range live {
		r, ok := a.reply.([]any)
		if a.err != nil || !ok || len(r) != replyLen || !late[a.keys[1]] || r[3] != int64(1) {
			continue
		}
		text, ok := r[4].(string)
		if !ok || text == "" {
			continue
		}
		list := strings.Split(text, " ")
		pipe := p.Pipeline()
		args := []any{"zmscore", a.keys[1]}
		for _, m := range list {
			args = append(args, m)
		}
		cmd := pipe.Do(ctx, args...)
		if _, err := pipe.Exec(ctx); err != nil {
			continue
		}
		scores, err := cmd.Slice()
		if err != nil || len(scores) != len(list) {
			continue
		}
		kept := make([]string, 0, len(list))
		for i, v := range scores {
			if v != nil {
				kept = append(kept, list[i])
			}
		}
		r[4] = strings.Join(kept, " ")
		if len(kept) == 0 {
			r[3] = int64(0)
		}
	}
}

// scriptPipeliner runs scripts, alone or in pipelines.
type scriptPipeliner interface {
	pipeliner
	redis.Scripter
}

// execNodes admits live and releases rels on a cluster: it pipelines each
// admission to the master that owns its key on that node's own client,
// never on the ClusterClient's pipeline, which re-sends a batch after a lost
// connection (up to MaxRedirects times, whatever MaxRetries says): an
// admission that had run would run again, and a ">" one then be refused by
// its own mark. A node client retries as MaxRetries allows, which New wants
// at -1 (none). An admission's two keys share a slot (flightKey), so one
// node has both; the releases go one per key, since one script run may
// touch one slot only.
//
// A redirection (MOVED, ASK: the slot is elsewhere, or moving) is answered
// as the error it is; the script did not run. Following it would take a
// client for an address the ClusterClient does not lend out.
func (b *batcher) execNodes(ctx context.Context, live []*admission, rels []release, errs []error) {
	type group struct {
		live []*admission
		rels []release
		at   []int // each release's place in rels
	}
	groups := make(map[*redis.Client]*group)
	groupFor := func(key string) (*group, error) {
		node, err := b.cluster.MasterForKey(ctx, key)
		if err != nil {
			return nil, err
		}
		g := groups[node]
		if g == nil {
			g = &group{}
			groups[node] = g
		}
		return g, nil
	}
	for i, r := range rels {
		g, err := groupFor(r.key)
		if err != nil {
			errs[i] = err
			continue
		}
		g.rels, g.at = append(g.rels, r), append(g.at, i)
	}
	for _, a := range live {
		g, err := groupFor(a.keys[0])
		if err != nil {
			a.err = err
			continue
		}
		g.live = append(g.live, a)
	}
	var wg sync.WaitGroup
	for node, g := range groups {
		wg.Go(func() {
			gerrs := make([]error, len(g.rels))
			pipelineScripts(ctx, node, b.channel, g.live, g.rels, make([]*redis.Cmd, 0, len(g.live)), gerrs)
			for j, err := range gerrs {
				errs[g.at[j]] = err
			}
		})
	}
	wg.Wait()
}

// execOne admits live with one run of admit.lua over all their keys, in
// queue order, and releases rels in the same run, ahead of them (one script
// run, not two: the releases ride it); admit.lua's reply holds a {flag,
// mark, member, older, olders, regressed, generation} group per admission.
// Admissions that expect another identity than the one before them (an
// Expect between the two) start a run of their own, in the same pipeline:
// one run checks one identity. Releases with no admission to ride go in one
// run of release.lua.
func (b *batcher) execOne(ctx context.Context, live []*admission, rels []release, errs []error) {
	pipe := b.client.Pipeline()
	type run struct {
		live []*admission
		keys []string
		args []any
		cmd  *redis.Cmd
	}
	var runs []*run
	for i := 0; i < len(live); {
		j := i + 1
		for j < len(live) && live[j].id == live[i].id {
			j++
		}
		r := &run{live: live[i:j]}
		r.keys, r.args = script(r.live, false)
		if i == 0 && len(rels) > 0 {
			r.keys, r.args = withReleases(rels, b.channel, r.keys, r.args)
		}
		runs = append(runs, r)
		i = j
	}
	var relKeys []string
	var relArgs []any
	var release *redis.Cmd
	if len(runs) == 0 && len(rels) > 0 {
		relKeys = make([]string, len(rels))
		relArgs = make([]any, 0, len(rels)+1)
		for i, r := range rels {
			relKeys[i] = r.key
			relArgs = append(relArgs, r.member)
		}
		relArgs = append(relArgs, b.channel)
		release = releaseScript.EvalSha(ctx, pipe, relKeys, relArgs...)
	}
	for _, r := range runs {
		r.cmd = admitScript.EvalSha(ctx, pipe, r.keys, r.args...)
	}
	_, _ = pipe.Exec(ctx) // each command keeps its own error

	// NOSCRIPT: the script did not run, so running it again with EVAL is
	// safe, and caches it. The runs keep their order, the releases riding
	// the first one included.
	var retry redis.Pipeliner
	if release != nil && isNoScript(release.Err()) {
		retry = b.client.Pipeline()
		release = releaseScript.Eval(ctx, retry, relKeys, relArgs...)
	}
	for _, r := range runs {
		if isNoScript(r.cmd.Err()) {
			if retry == nil {
				retry = b.client.Pipeline()
			}
			r.cmd = admitScript.Eval(ctx, retry, r.keys, r.args...)
		}
	}
	if retry != nil {
		_, _ = retry.Exec(ctx)
	}
	if len(runs) > 0 && len(rels) > 0 {
		release = runs[0].cmd
		if refused(release.Err()) {
			// Redis refused the admissions' run before it ran (above
			// maxmemory, which admissions are not allowed past, say): the
			// releases, which free memory, go on their own at once rather
			// than wait for an admission that fares no better.
			relKeys = make([]string, len(rels))
			relArgs = make([]any, 0, len(rels)+1)
			for i, r := range rels {
				relKeys[i] = r.key
				relArgs = append(relArgs, r.member)
			}
			relArgs = append(relArgs, b.channel)
			release = releaseScript.Run(ctx, b.client, relKeys, relArgs...)
		}
	}
	if release != nil {
		// One run for them all: they fare alike.
		if err := release.Err(); err != nil {
			for i := range errs {
				errs[i] = err
			}
		}
	}
	for _, r := range runs {
		reply, err := r.cmd.Slice()
		if err == nil && len(reply) != replyLen*len(r.live) {
			err = fmt.Errorf("redisstore: batch of %d got %d replies", len(r.live), len(reply))
		}
		for i, a := range r.live {
			if err != nil {
				a.err = err
			} else {
				a.reply = reply[replyLen*i : replyLen*i+replyLen]
			}
		}
	}
}

// withReleases returns the keys and arguments of a run of admit.lua that
// releases rels (announcing on channel) ahead of the admissions of keys and
// args.
func withReleases(rels []release, channel string, keys []string, args []any) ([]string, []any) {
	k := make([]string, 0, len(rels)+len(keys))
	a := make([]any, 0, 3+len(rels)+len(args))
	a = append(a, "r", strconv.Itoa(len(rels)), channel)
	for _, r := range rels {
		k = append(k, r.key)
		a = append(a, r.member)
	}
	return append(k, keys...), append(a, args...)
}

// refused reports whether err is Redis's refusal of a script before it ran
// (an error reply: out of memory, a replica's READONLY, an ACL), not a
// failure of the connection, after which it may have run.
func refused(err error) bool {
	var rerr redis.Error
	return err != nil && errors.As(err, &rerr) && !isNoScript(err) && !errors.Is(err, redis.Nil)
}
