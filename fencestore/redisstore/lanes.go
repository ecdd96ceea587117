package redisstore

import (
	"context"
	"sync"

	"github.com/redis/go-redis/v9"
)

// Lanes: group commit on a Cluster. A batch's admissions and releases go
// to many masters (execNodes says how each is sent), and one master that
// stops answering (a host that crashed: no answer, no reset, until the
// cluster fails it over) must not hold back the others. So a worker does
// not send a Cluster batch itself: it splits it by master and hands each
// part to that master's lane, then takes the next batch at once. A lane
// runs at most Options.Pipelines pipelines to its master at a time (on a
// Cluster the option counts per master); parts that come while they are
// all in flight wait in the lane's backlog, and the next pipeline carries
// as many of them as fit in Options.MaxBatch admissions, releases ahead of
// admissions as in any pipeline (a release only ever runs earlier than it
// must: it was made once its request had ended), each release once. Each
// part's admissions are answered as soon as its own master answers,
// whatever the others do.
//
// While a master is silent its backlog would otherwise hold every
// admission sent to it, long after their callers gave up: at thousands a
// second, for the tens of seconds before a failover, that is a sidecar's
// memory. So each part that joins a backlog first prunes it (prune): the
// admissions whose callers are gone are answered as never sent and
// dropped, and their releases ride on, once each. A backlog then holds no
// more admissions than callers still wait (TestLaneBacklogPrunes).
//
// Without lanes, a batch answered none of its admissions before its
// slowest master did, and the pipelines' workers, each waiting on one,
// took no new batch meanwhile: a stopped master turned every other
// master's admissions into timeouts (TestClusterStalledShardHoldsNoOther).

// part is what a batch sends to one master: its admissions, and its
// releases with, for each, its place in the batch's releases (at) and, in
// a lane, whether the worker owns it (settles it with the pending set) or
// only carries it again ahead of an admission (owned).
type part struct {
	node  *redis.Client
	live  []*admission
	rels  []release
	at    []int
	owned []bool
}

// lane is one master's: its pipelines in flight, and the parts waiting.
type lane struct {
	busy    int
	backlog []*part
}

// lanes are the masters' lanes, by node client. A lane with nothing in
// flight is removed: a master replaced in a failover leaves none behind.
type lanes struct {
	mu sync.Mutex
	m  map[*redis.Client]*lane
}

// dispatchNodes splits a Cluster batch by master and hands each part to its
// lane. rels[:own] are the worker's own releases. An admission or release
// whose master cannot be found (no slot map yet) fails at once.
func (b *batcher) dispatchNodes(batch []*admission, rels []release, own int) {
	ctx, cancel := context.WithTimeout(context.Background(), releaseTimeout)
	defer cancel()
	errs := make([]error, len(rels))
	parts, failed := b.byMaster(ctx, batch, rels, errs)
	for _, a := range failed {
		// Answered without taken: nothing was sent (errNotSent, for a
		// caller that gave up meanwhile).
		a.done <- struct{}{}
	}
	var lost []release
	var lostErrs []error
	for i, err := range errs[:own] {
		if err != nil {
			lost, lostErrs = append(lost, rels[i]), append(lostErrs, err)
		}
	}
	b.settle(lost, lostErrs)
	for _, p := range parts {
		p.owned = make([]bool, len(p.rels))
		for j, i := range p.at {
			p.owned[j] = i < own
		}
		b.lanes.submit(b, p)
	}
}

// submit starts p on its lane, or leaves it in the lane's backlog when the
// lane's pipelines are all in flight.
func (l *lanes) submit(b *batcher, p *part) {
	l.mu.Lock()
	if l.m == nil {
		l.m = make(map[*redis.Client]*lane)
	}
	ln := l.m[p.node]
	if ln == nil {
		ln = &lane{}
		l.m[p.node] = ln
	}
	if ln.busy >= b.pipelines {
		ln.prune()
		ln.backlog = append(ln.backlog, p)
		l.mu.Unlock()
		return
	}
	ln.busy++
	l.mu.Unlock()
	// The worker that submits is counted in b.wg, so close's Wait cannot
	// have returned: the lane's pipelines finish before the client closes.
	b.wg.Add(1)
	go b.runLane(p)
}

// next returns the parts of the lane's backlog that fit in one pipeline
// (maxBatch admissions, and always the first part) as one part, or nil
// (the pipeline ends) when there is none. A release carried by several
// of them goes once, owned when any of them owns it.
func (l *lanes) next(node *redis.Client, maxBatch int) *part {
	l.mu.Lock()
	defer l.mu.Unlock()
	ln := l.m[node]
	if len(ln.backlog) == 0 {
		if ln.busy--; ln.busy == 0 {
			delete(l.m, node)
		}
		return nil
	}
	p := &part{node: node}
	at := make(map[release]int)
	n := 0 // parts taken
	for _, q := range ln.backlog {
		if n > 0 && len(p.live)+len(q.live) > maxBatch {
			break
		}
		n++
		p.carry(at, q)
		p.live = append(p.live, q.live...)
	}
	clear(ln.backlog[:n])
	ln.backlog = append(ln.backlog[:0], ln.backlog[n:]...)
	return p
}

// carry adds q's releases to p's, each once: at maps a release to its
// place in p.rels, and one carried again is owned when either owns it.
func (p *part) carry(at map[release]int, q *part) {
	for j, r := range q.rels {
		if i, ok := at[r]; ok {
			p.owned[i] = p.owned[i] || q.owned[j]
			continue
		}
		at[r] = len(p.rels)
		p.rels, p.owned = append(p.rels, r), append(p.owned, q.owned[j])
	}
}

// prune drops from the backlog the admissions whose callers gave up, each
// answered as never sent (its caller returns errNotSent: no entry exists
// to abandon), and the parts left with none. Their releases still go with
// the lane's next pipeline: they join the first part that remains, or one
// part of releases alone, each release once.
func (ln *lane) prune() {
	var gone part // the releases of the parts dropped
	var at map[release]int
	kept := ln.backlog[:0]
	for _, q := range ln.backlog {
		live := q.live[:0]
		for _, a := range q.live {
			if err := a.ctx.Err(); err != nil {
				a.err = errNotSent{err}
				a.done <- struct{}{}
				continue
			}
			live = append(live, a)
		}
		clear(q.live[len(live):])
		q.live = live
		if len(live) > 0 {
			kept = append(kept, q)
			continue
		}
		if at == nil {
			at = make(map[release]int)
		}
		gone.node = q.node
		gone.carry(at, q)
	}
	clear(ln.backlog[len(kept):])
	ln.backlog = kept
	switch {
	case len(gone.rels) == 0:
	case len(kept) > 0:
		// The first part's own releases after the dropped parts' (all
		// ride ahead of its admissions), once each.
		first := kept[0]
		gone.carry(at, first)
		first.rels, first.owned = gone.rels, gone.owned
	default:
		ln.backlog = append(ln.backlog, &gone)
	}
}

// runLane sends p, then whatever waited in the lane meanwhile, until the
// lane's backlog is empty.
func (b *batcher) runLane(p *part) {
	defer b.wg.Done()
	for ; p != nil; p = b.lanes.next(p.node, b.maxBatch) {
		errs := make([]error, len(p.rels))
		b.exchange(p.live, len(p.rels), func(ctx context.Context, live []*admission) {
			pipelineScripts(ctx, p.node, b.channel, live, p.rels, make([]*redis.Cmd, 0, len(live)), errs, scriptOpts{})
		})
		var mine []release
		var mineErrs []error
		for i, r := range p.rels {
			if p.owned[i] {
				mine, mineErrs = append(mine, r), append(mineErrs, errs[i])
			}
		}
		b.settle(mine, mineErrs)
	}
}
