package redisstore

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
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

// DefaultMaxBatch and DefaultPipelines are the batching defaults.
const (
	DefaultMaxBatch  = 128
	DefaultPipelines = 2
)

// errClosed is returned by an admission on a closed store.
var errClosed = errors.New("redisstore: store closed")

type admission struct {
	ctx   context.Context
	keys  [1]string
	tok   string
	mode  string
	seq   string // "" for none
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
	cluster  *redis.ClusterClient
	queue    chan *admission
	maxBatch int
	stop     chan struct{} // closed by close: workers drain and exit
	stopped  chan struct{} // closed once they have
	wg       sync.WaitGroup
}

func newBatcher(client redis.UniversalClient, maxBatch, pipelines int) *batcher {
	cluster, _ := client.(*redis.ClusterClient)
	_, ring := client.(*redis.Ring)
	b := &batcher{
		client:   client,
		oneCall:  cluster == nil && !ring,
		cluster:  cluster,
		queue:    make(chan *admission, maxBatch*pipelines),
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
func (b *batcher) admit(ctx context.Context, key, tok, mode, seq string) (any, error) {
	select {
	case <-b.stop:
		return nil, errClosed
	default:
	}
	a := admissionPool.Get().(*admission)
	a.ctx, a.keys[0], a.tok, a.mode, a.seq = ctx, key, tok, mode, seq
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

func (b *batcher) close() {
	close(b.stop)
	b.wg.Wait()
	close(b.stopped)
}

func (b *batcher) run() {
	defer b.wg.Done()
	batch := make([]*admission, 0, b.maxBatch)
	cmds := make([]*redis.Cmd, 0, b.maxBatch)
	for {
		select {
		case a := <-b.queue:
			batch = append(batch[:0], a)
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
		cmds = b.exec(batch, cmds[:0])
	}
}

// drain answers whatever is still queued at close.
func (b *batcher) drain() {
	for {
		select {
		case a := <-b.queue:
			a.err = errClosed
			a.done <- struct{}{}
		default:
			return
		}
	}
}

// exec sends one pipeline for batch and answers each admission.
func (b *batcher) exec(batch []*admission, cmds []*redis.Cmd) []*redis.Cmd {
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
	if len(live) == 0 {
		return cmds
	}
	ctx := context.Background()
	if !unbounded {
		var cancel context.CancelFunc
		ctx, cancel = context.WithDeadline(ctx, deadline)
		defer cancel()
	}
	switch {
	case b.oneCall:
		execOne(ctx, b.client, live)
	case b.cluster != nil:
		execNodes(ctx, b.cluster, live)
	default:
		cmds = execPipeline(ctx, b.client, live, cmds)
	}
	for _, a := range live {
		a.done <- struct{}{}
	}
	return cmds
}

// execPipeline pipelines one EVALSHA per admission of live on p and sets
// each admission's reply.
func execPipeline(ctx context.Context, p pipeliner, live []*admission, cmds []*redis.Cmd) []*redis.Cmd {
	pipe := p.Pipeline()
	for _, a := range live {
		cmds = append(cmds, admitScript.EvalSha(ctx, pipe, a.keys[:], a.tok, a.mode, a.seq))
	}
	_, _ = pipe.Exec(ctx) // each command keeps its own error

	// NOSCRIPT (a restarted or flushed server): the script did not run for
	// those, so running them again with EVAL is safe, and caches it.
	var retry redis.Pipeliner
	for i, c := range cmds {
		if isNoScript(c.Err()) {
			if retry == nil {
				retry = p.Pipeline()
			}
			cmds[i] = admitScript.Eval(ctx, retry, live[i].keys[:], live[i].tok, live[i].mode, live[i].seq)
		}
	}
	if retry != nil {
		_, _ = retry.Exec(ctx)
	}
	for i, a := range live {
		a.reply, a.err = cmds[i].Result()
		cmds[i] = nil
	}
	return cmds
}

// execNodes admits live on a cluster: it pipelines each admission to the
// master that owns its key on that node's own client, never on the
// ClusterClient's pipeline, which re-sends a batch after a lost connection
// (up to MaxRedirects times, whatever MaxRetries says): an admission that
// had run would run again, and a ">" one then be refused by its own mark. A
// node client retries as MaxRetries allows, which New wants at -1 (none).
//
// A redirection (MOVED, ASK: the slot is elsewhere, or moving) is answered
// as the error it is; the script did not run. Following it would take a
// client for an address the ClusterClient does not lend out.
func execNodes(ctx context.Context, cluster *redis.ClusterClient, live []*admission) {
	groups := make(map[*redis.Client][]*admission)
	for _, a := range live {
		node, err := cluster.MasterForKey(ctx, a.keys[0])
		if err != nil {
			a.err = err
			continue
		}
		groups[node] = append(groups[node], a)
	}
	var wg sync.WaitGroup
	for node, group := range groups {
		wg.Go(func() { execPipeline(ctx, node, group, make([]*redis.Cmd, 0, len(group))) })
	}
	wg.Wait()
}

// execOne admits live with one run of the script over all their keys, in
// queue order; the reply holds a {flag, mark} pair per admission.
func execOne(ctx context.Context, c redis.Scripter, live []*admission) {
	keys := make([]string, len(live))
	args := make([]any, 0, 3*len(live))
	for i, a := range live {
		keys[i] = a.keys[0]
		args = append(args, a.tok, a.mode, a.seq)
	}
	// Run is EVALSHA, and EVAL when the server answers NOSCRIPT (the script
	// did not run then, so running it again is safe).
	reply, err := admitScript.Run(ctx, c, keys, args...).Slice()
	if err == nil && len(reply) != 2*len(live) {
		err = fmt.Errorf("redisstore: batch of %d got %d replies", len(live), len(reply))
	}
	for i, a := range live {
		if err != nil {
			a.err = err
		} else {
			a.reply = reply[2*i : 2*i+2]
		}
	}
}
