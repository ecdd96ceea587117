package etcdstore

import (
	"context"
	"errors"
	"sync"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/proto"

	"github.com/fenceproxy/fenceproxy/fencestore"
)

// Group commit, as the Redis store does it (redisstore/batch.go). While a
// batch is on its way to etcd, new admissions queue; the next batch takes
// them at once, each admission's transaction (txn.go) nested in one
// transaction that checks the identity record. One gRPC call, one raft
// entry, one apply and one fsync then serve many requests, on the client
// and on every member. An idle admission goes out at once (run waits on
// the queue, not on a timer); one batch is in flight at a time, unless the
// queue is long or the batch in flight slow (next).
//
// What etcd requires of a batch:
//   - A transaction may not put one key twice, and etcd evaluates all its
//     comparisons on the state before any of its writes: two admissions of
//     one resource (one mark key, one range of in-flight keys) never share
//     a batch. The later one stays queued, in its place, for a later batch.
//   - etcd refuses a transaction wider than its --max-txn-ops (128 by
//     default), counted along each path of nested transactions (opsDepth),
//     or larger than its --max-request-bytes (1.5MiB by default): a batch
//     stays within defaultMaxTxnOps and maxBatchBytes.
//   - One identity check per transaction: admissions that expect another
//     identity (an Expect between them) go in another batch.
//
// Releases of the drain barrier (flight.go) ride the same transactions,
// ahead of the admissions: a batch takes every queued release it has room
// for, so a release made before an admission was queued goes in the same
// transaction, ahead of it, or in an earlier one. Nobody waits for a
// release; releases alone go out when no admission is queued. A release
// whose transaction failed (etcd down, a timeout, a failover) is queued
// again, and the releases wait a backoff (50ms doubling to 2s, reset by a
// success) before they go again, until etcd acknowledges them or their
// records can hold nobody back (releaseUntil, flight.go). A deletion of a key that
// is gone already succeeds, so sending one twice is harmless.
//
// Failures. A transaction is atomic. An error that says etcd applied none
// of it, and that one of its parts can cause (a lease etcd does not have;
// a key that etcd's RBAC denies; a batch wider or larger than the server's
// own limits, which also lowers the bounds for later batches), splits the
// batch in halves that are sent again, down to the admission that causes
// it alone: it fails (and Admit tries once more with a fresh lease), the
// others are decided. Any other error (a timeout, a lost connection: the
// batch may have been applied) is every admission's, closed, and none is
// sent again. Nor does the etcd client re-send a transaction that may have
// reached a member: only one that no connection took, or one refused for
// an expired auth token, which etcd checks before applying anything.
//
// Each admission keeps its own deadline: its caller stops waiting at it,
// and the batch runs until the latest deadline among its admissions. An
// admission whose caller gave up before its batch left is not sent.

const (
	// secondBatchAt is how many queued admissions send another batch
	// while one is in flight. Below it they wait for the batch in flight:
	// etcd spends about as much CPU on a transaction as on the admissions
	// of a batch of eight, so batches are best large (measured: two in
	// flight at once halved them and cost more CPU per admission, on the
	// client and in etcd).
	secondBatchAt = 32
	// stuckAfter is how long a batch in flight holds the queue back. The
	// client spreads its calls over the members, and notices one that
	// stopped answering (frozen, cut off) only at its keepalive, seconds
	// later: a batch sent to it waits for its deadline, and must not keep
	// the others from the members that answer.
	stuckAfter = 50 * time.Millisecond
	// defaultMaxTxnOps is etcd's default --max-txn-ops.
	defaultMaxTxnOps = 128
	// maxBatchBytes bounds a batch's request, well under etcd's default
	// --max-request-bytes (1.5MiB) and the client's 2MiB.
	maxBatchBytes = 512 * 1024
	// deleteBytes is what a release's delete adds to a request beside its
	// key, at most (tags and lengths).
	deleteBytes = 16
	// maxQueuedReleases bounds the releases waiting to be sent (an etcd
	// that does not answer); past it the oldest is dropped, and its record
	// holds each waiter until that waiter abandons it.
	maxQueuedReleases = 64 * 1024
	// minReleaseBackoff and maxReleaseBackoff bound the wait before
	// releases whose transaction failed go again.
	minReleaseBackoff = 50 * time.Millisecond
	maxReleaseBackoff = 2 * time.Second
)

// queued is one admission waiting for its batch.
type queued struct {
	ctx    context.Context
	p      *plan
	op     *pb.RequestOp // the admission's transaction
	expect string        // the identity its batch must check, "" none
	seen   uint64        // the greatest revision seen when it was queued (keeper.go)
	size   int           // op's encoded size
	depth  int           // opsDepth of op

	// Set by its batch before it closes done.
	reply reply
	done  chan struct{}
}

// reply is what a batch gave one admission.
type reply struct {
	err    error            // the batch failed (an etcd or context error)
	unsent bool             // and the admission was never sent (its caller gave up first)
	lost   bool             // the identity record was not the expected one
	found  string           // the identity record found, when lost
	rev    int64            // the batch's revision
	rs     []*pb.ResponseOp // the replies to the admission's own transaction
}

// batch is what one transaction carries: releases (in-flight keys to
// delete) and admissions.
type batch struct {
	rels []rel
	adms []*queued
}

// rel is one release: an in-flight key to delete, and when trying is moot.
type rel struct {
	key  string
	moot time.Time
}

type batcher struct {
	kv       pb.KVClient
	identity []byte // the identity record's key
	log      *zap.Logger
	// spawn runs a batch's send on a goroutine that Close waits for;
	// false when the store is closed.
	spawn func(func()) bool
	// ctx bounds every batch that carries admissions: the store's Close
	// cancels it.
	ctx  context.Context
	wake chan struct{} // buffered 1: there is something to send

	mu      sync.Mutex
	queue   []*queued
	rels    map[string]time.Time         // by key, its moot time: a key released twice is deleted once
	relq    fencestore.JoinOrder[string] // the order rels were queued in, to drop the oldest (release.go)
	relMax  int                          // a bound below maxQueuedReleases (tests)
	dropped int                          // releases dropped since a batch last took some
	// droppedTotal counts every release dropped (DroppedReleases).
	droppedTotal uint64
	// relsAfter is when the releases may go again after a failure, and
	// backoff the wait that set it (0: the last one succeeded).
	relsAfter time.Time
	backoff   time.Duration
	// final holds the releases queued when the store closed (flush).
	final    []rel
	sending  int       // batches in flight
	lastSent time.Time // when the latest of them left
	closed   bool
	maxOps   int // lowered when etcd refuses a batch as too wide
	maxBytes int // and as too large

	// onCommit, when set (tests), learns what each transaction carries.
	onCommit func(admissions, releases int)
	// observe is Options.OnRoundTrip (nil: none).
	observe func(fencestore.RoundTrip)
}

func newBatcher(client *clientv3.Client, identity string, log *zap.Logger, ctx context.Context, spawn func(func()) bool) *batcher {
	return &batcher{
		spawn: spawn,
		// The gRPC client behind the client's KV API: the same
		// connection, interceptors and retry policy. The KV API adds
		// the building of requests from Ops (see txn.go) and call
		// options: WaitForReady, which commit passes, and message size
		// limits that a batch stays far below (a reply holds each mark
		// key once, its request several times).
		kv:       clientv3.RetryKVClient(client),
		identity: []byte(identity),
		log:      log,
		ctx:      ctx,
		wake:     make(chan struct{}, 1),
		rels:     make(map[string]time.Time),
		maxOps:   defaultMaxTxnOps,
		maxBytes: maxBatchBytes,
	}
}

// prepare makes p's queued admission.
func prepare(ctx context.Context, p *plan, expect string) *queued {
	op := p.request()
	return &queued{ctx: ctx, p: p, op: op, expect: expect, size: proto.Size(op),
		depth: opsDepth(op.GetRequestTxn()), done: make(chan struct{})}
}

// opsDepth is what etcd's --max-txn-ops check counts along the widest path
// of t: each level counts its longest list (comparisons, then-ops or
// else-ops), and a nested transaction may use what its parents left.
func opsDepth(t *pb.TxnRequest) int {
	nested := 0
	for _, ops := range [][]*pb.RequestOp{t.Success, t.Failure} {
		for _, op := range ops {
			if n := op.GetRequestTxn(); n != nil {
				nested = max(nested, opsDepth(n))
			}
		}
	}
	return max(len(t.Compare), len(t.Success), len(t.Failure)) + nested
}

// add queues q; false when the store is closed.
func (b *batcher) add(q *queued) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed {
		return false
	}
	b.queue = append(b.queue, q)
	b.signal()
	return true
}

// signal wakes run. b.mu is held.
func (b *batcher) signal() {
	select {
	case b.wake <- struct{}{}:
	default:
	}
}

// close answers every queued admission as closed, keeps the queued
// releases for flush, and refuses new ones.
func (b *batcher) close() {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.closed = true
	for _, q := range b.queue {
		q.answer(reply{err: errClosed})
	}
	b.queue = nil
	now := time.Now()
	for key, moot := range b.rels {
		if now.Before(moot) {
			b.final = append(b.final, rel{key: key, moot: moot})
		}
	}
	clear(b.rels)
	b.relq.Reset()
}

func (q *queued) answer(r reply) {
	q.reply = r
	close(q.done)
}

// run sends the batches that next lets go, each from a goroutine of its
// own, until done is closed.
func (b *batcher) run(done <-chan struct{}) {
	var retry <-chan time.Time
	for {
		select {
		case <-b.wake:
		case <-retry:
		case <-done:
			return
		}
		retry = nil
		for {
			t, wait := b.next()
			if t.empty() {
				if wait > 0 {
					retry = time.After(wait)
				}
				break
			}
			if !b.spawn(func() { b.send(t); b.sent() }) {
				b.sent()
				for _, q := range t.adms {
					q.answer(reply{err: errClosed})
				}
			}
		}
	}
}

// next takes the next batch, and counts it in flight until sent. While a
// batch is in flight, next takes nothing unless secondBatchAt admissions
// wait or the latest batch has been in flight for stuckAfter; it then
// returns how long until that batch is, when admissions wait.
func (b *batcher) next() (batch, time.Duration) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.sending > 0 && len(b.queue) < secondBatchAt {
		if age := time.Since(b.lastSent); age < stuckAfter {
			if len(b.queue) == 0 {
				return batch{}, 0
			}
			return batch{}, stuckAfter - age
		}
	}
	t := b.take()
	if !t.empty() {
		b.sending++
		b.lastSent = time.Now()
	} else if len(b.rels) > 0 {
		// In backoff: run comes back for them (at least a moment later).
		return t, max(time.Until(b.relsAfter), time.Millisecond)
	}
	return t, 0
}

// sent ends a batch's flight, and wakes run for the queue it held back.
func (b *batcher) sent() {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.sending--
	b.signal()
}

func (t batch) empty() bool { return len(t.adms)+len(t.rels) == 0 }

// take removes the next batch from the queue: the first admission, every
// later one that may share its transaction, in queue order, and as many
// releases as the bounds leave room for. Releases keep up to half of the
// room, so that a long queue of admissions, each of which brings a release
// later, never starves them. b.mu is held.
func (b *batcher) take() batch {
	var t batch
	marks := make(map[string]bool)
	size, depth := 0, 0
	reserved := min(len(b.rels), b.maxOps/2)
	rest := b.queue[:0]
	for _, q := range b.queue {
		fits := len(t.adms) == 0 || (q.expect == t.adms[0].expect && !marks[q.p.key] &&
			reserved+len(t.adms)+1+max(depth, q.depth) <= b.maxOps && size+q.size <= b.maxBytes)
		if !fits {
			rest = append(rest, q)
			continue
		}
		t.adms = append(t.adms, q)
		marks[q.p.key] = true
		size += q.size
		depth = max(depth, q.depth)
	}
	clear(b.queue[len(rest):])
	b.queue = rest
	now := time.Now()
	if now.Before(b.relsAfter) {
		return t // the releases wait out their backoff
	}
	for key, moot := range b.rels {
		if !now.Before(moot) {
			b.unqueueRel(key) // its record can hold nobody back any more
			continue
		}
		if len(t.adms)+len(t.rels)+1+depth > b.maxOps || size+len(key)+deleteBytes > b.maxBytes {
			break
		}
		t.rels = append(t.rels, rel{key: key, moot: moot})
		size += len(key) + deleteBytes
		b.unqueueRel(key)
	}
	if len(t.rels) > 0 {
		b.dropped = 0
	}
	return t
}

// send commits t: until the latest deadline among its admissions, or, with
// releases alone, for releaseTimeout.
func (b *batcher) send(t batch) {
	t.adms = live(t.adms)
	ctx, cancel := b.context(t.adms)
	defer cancel()
	b.commit(ctx, t)
}

// context bounds a batch by the latest deadline among adms (none when one
// of them has none) and by the store's Close; without admissions, by
// releaseTimeout alone: Close waits for the releases already sent.
func (b *batcher) context(adms []*queued) (context.Context, context.CancelFunc) {
	if len(adms) == 0 {
		return context.WithTimeout(context.Background(), releaseTimeout)
	}
	var latest time.Time
	for _, q := range adms {
		d, ok := q.ctx.Deadline()
		if !ok {
			return context.WithCancel(b.ctx)
		}
		if d.After(latest) {
			latest = d
		}
	}
	return context.WithDeadline(b.ctx, latest)
}

// live answers the admissions whose callers gave up, and returns the
// others: an admission nobody waits for is not sent, so its mark does not
// move for it.
func live(adms []*queued) []*queued {
	out := adms[:0]
	for _, q := range adms {
		if err := q.ctx.Err(); err != nil {
			q.answer(reply{err: err, unsent: true})
			continue
		}
		out = append(out, q)
	}
	return out
}

// commit sends t as one transaction and answers its admissions.
func (b *batcher) commit(ctx context.Context, t batch) {
	t.adms = live(t.adms)
	if t.empty() {
		return
	}
	if b.onCommit != nil {
		b.onCommit(len(t.adms), len(t.rels))
	}
	start := time.Now()
	resp, err := b.kv.Txn(ctx, b.request(t), grpc.WaitForReady(true))
	if b.observe != nil {
		b.observe(fencestore.RoundTrip{Admissions: len(t.adms), Releases: len(t.rels), Duration: time.Since(start), Failed: err != nil})
	}
	if err != nil && len(t.adms)+len(t.rels) > 1 && refusedWhole(err) {
		b.lower(err, t)
		first, second := t.halves()
		b.commit(ctx, first)
		b.commit(ctx, second)
		return
	}
	switch {
	case err != nil && len(t.rels) > 0:
		b.log.Debug("releases failed: sent again after a backoff", zap.Int("records", len(t.rels)), zap.Error(err))
		b.retry(t.rels)
	case len(t.rels) > 0:
		b.acked()
	}
	deliver(t, resp, clientv3.ContextError(ctx, err))
}

// request is t's transaction: the releases, then the admissions, under
// the identity check that the admissions expect.
func (b *batcher) request(t batch) *pb.TxnRequest {
	dels := make([]*pb.RequestOp, len(t.rels))
	for i, r := range t.rels {
		dels[i] = &pb.RequestOp{Request: &pb.RequestOp_RequestDeleteRange{
			RequestDeleteRange: &pb.DeleteRangeRequest{Key: []byte(r.key)}}}
	}
	then := make([]*pb.RequestOp, 0, len(dels)+len(t.adms))
	then = append(then, dels...)
	for _, q := range t.adms {
		then = append(then, q.op)
	}
	r := &pb.TxnRequest{Success: then}
	if len(t.adms) > 0 && t.adms[0].expect != "" {
		r.Compare = []*pb.Compare{valueCmp(b.identity, pb.Compare_EQUAL, t.adms[0].expect)}
		r.Failure = append([]*pb.RequestOp{getOp(b.identity)}, dels...)
	}
	return r
}

// deliver gives each admission of t its part of the reply to t's
// transaction, or err.
func deliver(t batch, resp *pb.TxnResponse, err error) {
	r := reply{err: err}
	switch {
	case err != nil:
	case !resp.Succeeded:
		r.lost = true
		if rs := resp.Responses; len(rs) > 0 && len(rs[0].GetResponseRange().GetKvs()) > 0 {
			r.found = string(rs[0].GetResponseRange().Kvs[0].Value)
		}
	case len(resp.Responses) != len(t.rels)+len(t.adms):
		r.err = errShape
	default:
		for i, q := range t.adms {
			// A reply of another shape has no responses: interpret
			// reports it.
			q.answer(reply{rev: resp.GetHeader().GetRevision(),
				rs: resp.Responses[len(t.rels)+i].GetResponseTxn().GetResponses()})
		}
		return
	}
	for _, q := range t.adms {
		q.answer(r)
	}
}

// halves splits t in two smaller batches, neither empty (t holds at least
// two things): the releases go first.
func (t batch) halves() (batch, batch) {
	h := (len(t.rels) + len(t.adms)) / 2
	r := min(h, len(t.rels))
	a := h - r
	return batch{rels: t.rels[:r], adms: t.adms[:a]}, batch{rels: t.rels[r:], adms: t.adms[a:]}
}

// refusedWhole reports an error by which etcd refused a whole transaction
// without applying any of it, and that one of its parts may cause alone.
func refusedWhole(err error) bool {
	return isLeaseNotFound(err) || errors.Is(err, rpctypes.ErrGRPCPermissionDenied) ||
		errors.Is(err, rpctypes.ErrGRPCTooManyOps) || errors.Is(err, rpctypes.ErrGRPCRequestTooLarge)
}

// lower bounds later batches as the halves of t that are sent next when
// etcd found t too wide or too large (the server's limits are below the
// defaults): a few refusals find a batch that passes.
func (b *batcher) lower(err error, t batch) {
	size, depth := 0, 0
	for _, r := range t.rels {
		size += len(r.key) + deleteBytes
	}
	for _, q := range t.adms {
		size += q.size
		depth = max(depth, q.depth)
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	switch {
	case errors.Is(err, rpctypes.ErrGRPCTooManyOps):
		b.maxOps = min(b.maxOps, (len(t.rels)+len(t.adms))/2+depth)
	case errors.Is(err, rpctypes.ErrGRPCRequestTooLarge):
		b.maxBytes = min(b.maxBytes, size/2)
	}
}
