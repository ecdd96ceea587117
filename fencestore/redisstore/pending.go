package redisstore

import (
	"sync"
	"time"

	"github.com/fenceproxy/fenceproxy/fencestore"
)

// pending is one release in the pending set.
type pending struct {
	sent      bool      // its owner (a pipeline, an admission, a sender of its own) sends it
	spare     bool      // it may hold nobody back (add): dropped before the others
	resent    bool      // a copy of one acknowledged already, sent again (resend)
	until     time.Time // given up from then on (zero: one attempt)
	notBefore time.Time // backoff: not taken before then
	wait      time.Duration
}

// ackedRelease is a release acknowledged recently.
type ackedRelease struct {
	release
	until, at time.Time
}

// pendingReleases are the releases not acknowledged yet. Admissions read
// them so that a release made before an admission runs before it, though
// the two travel apart: the pipeline that carries an admission also
// carries the pending releases of the key it enters, ahead of it, on the
// same connection. A release twice is harmless (the second finds nothing,
// and announces nothing). Bounded: when the set is full, a release is
// dropped to make room (add), the spare one that joined it first, else the
// one that joined it first, and its entry is then left to its waiters'
// clocks.
type pendingReleases struct {
	mu  sync.Mutex
	m   map[release]*pending
	max int
	// owed and spare are the order in which the releases of m joined it,
	// those that hold an entry back for sure and the spare ones apart:
	// finding the oldest costs O(1) amortised, not a scan of m under mu
	// for each release while a long outage keeps the set full.
	owed, spare fencestore.JoinOrder[release]
	// retry, when set, is called (once per backoff) when a release sent
	// again becomes due.
	retry    func()
	timer    *time.Timer
	timerDue time.Time
	// recent are the releases acknowledged lately, oldest first.
	recent []ackedRelease
	// brokeAt is when the break began: the earliest failure (an
	// admission, a release or a ping the store did not answer) that no
	// resend has used yet, unless the failures stopped for breakFresh
	// since (failedAt: the latest). The store answering again, on a
	// replica just promoted, does not end it: the subscription comes back
	// after that, and its resend must still reach back to before the
	// crash. A failover takes as long as the cluster needs to judge the
	// master failed (Sentinel's down-after-milliseconds,
	// cluster-node-timeout: 5 to 30 s in production), and the releases a
	// promoted replica may lack are those of the moments before the crash.
	brokeAt time.Time
	// failedAt is the latest failure: a break whose last failure is older
	// than breakFresh ended long ago without a resend (a blip the
	// subscription rode out), and a resend then looks back from now.
	failedAt time.Time
}

// lookBack bounds how far back a break's start is taken (resend).
const lookBack = 2 * time.Minute

// later is the later of a and b.
func later(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

// breakFresh is how recent a break's last failure must be for a resend to
// look back from the break's start: the subscription comes back within
// moments of the store, and an idle replica's looks at the store fail
// every few seconds until then.
const breakFresh = 30 * time.Second

// add puts r in the set, to be sent until until; a release already there
// keeps its place (and its kind). When the set is full, one release
// leaves it to make room: add returns it, and dropped true. Its sender, if
// it has one, stops at its next attempt (sending), and its entry holds
// the requests that wait for it until each has watched it for its bound.
//
// A spare release goes first: one that may hold nobody back, an abandon
// (r.abandons: its admission may never have run) or a release
// acknowledged already and sent again only in case a failover lost it
// (resend). In a partition every admission that times out brings an
// abandon, and they would otherwise push out releases whose entries
// certainly hold requests back. Among the spare ones, and then among the
// others, the oldest goes, not the newest: it is the likeliest to have
// been abandoned by its waiters already.
func (p *pendingReleases) add(r release, until time.Time) (oldest release, dropped bool) {
	oldest, dropped, _ = p.addTelling(r, until)
	return oldest, dropped
}

// addTelling is add, and says whether the release dropped was one sent
// again (resend): acknowledged once already, so that dropping it drops
// nothing the store still owes, and is no loss to count.
func (p *pendingReleases) addTelling(r release, until time.Time) (oldest release, dropped, resent bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if _, ok := p.m[r]; ok {
		return release{}, false, false
	}
	if p.m == nil {
		p.m = make(map[release]*pending)
	}
	if len(p.m) >= max(p.max, 1) {
		oldest, dropped, resent = p.dropOne()
	}
	p.join(r, until, r.abandons())
	return oldest, dropped, resent
}

// dropOne removes the oldest spare release, else the oldest, and returns
// it, and whether it was a copy sent again (resend). p.mu is held.
func (p *pendingReleases) dropOne() (r release, ok, resent bool) {
	r, ok = p.spare.Oldest()
	if !ok {
		r, ok = p.owed.Oldest()
	}
	if ok {
		resent = p.m[r].resent
		delete(p.m, r)
	}
	return r, ok, resent
}

// join puts r, not in the set, in it last. p.mu is held.
func (p *pendingReleases) join(r release, until time.Time, spare bool) {
	p.m[r] = &pending{until: until, spare: spare}
	if spare {
		p.spare.Push(r)
	} else {
		p.owed.Push(r)
	}
}

// forget removes r from the set and from its order. p.mu is held.
func (p *pendingReleases) forget(r release) {
	if e := p.m[r]; e != nil {
		delete(p.m, r)
		if e.spare {
			p.spare.Remove(r)
		} else {
			p.owed.Remove(r)
		}
	}
}

// sending reports whether r is still in the set: its sender goes on
// trying only while it is (add may have dropped it).
func (p *pendingReleases) sending(r release) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.m[r] != nil
}

// take appends to dst the releases due that nobody sends yet, which the
// caller then owns (it calls done or failed for them once sent), and after
// them those others send already, or that wait for their backoff, whose key
// is in keys; it returns dst and how many of it the caller owns.
func (p *pendingReleases) take(dst []release, keys map[string]bool) ([]release, int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	now := time.Now()
	var others []release
	for r, e := range p.m {
		switch {
		case !e.sent && !now.Before(e.notBefore):
			e.sent = true
			dst = append(dst, r)
		case keys[r.key]:
			others = append(others, r)
			if !e.sent { // waits for its backoff
				p.schedule(e.notBefore)
			}
		case !e.sent:
			p.schedule(e.notBefore)
		}
	}
	return append(dst, others...), len(dst)
}

// claim takes r for its sender, unless it is gone (acknowledged) or
// another sends it already (an admission that carries it).
func (p *pendingReleases) claim(r release) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	e := p.m[r]
	if e == nil || e.sent {
		return false
	}
	e.sent = true
	return true
}

// takeUnsent appends to dst up to max releases nobody sends yet, which the
// caller then owns.
func (p *pendingReleases) takeUnsent(dst []release, max int) []release {
	p.mu.Lock()
	defer p.mu.Unlock()
	n := 0
	for r, e := range p.m {
		if n == max {
			break
		}
		if !e.sent {
			e.sent = true
			dst = append(dst, r)
			n++
		}
	}
	return dst
}

// unsend gives back rs, which their owner failed to send, with their
// bounds, for a sender of their own.
func (p *pendingReleases) unsend(rs []release) []ackedRelease {
	p.mu.Lock()
	defer p.mu.Unlock()
	var out []ackedRelease
	for _, r := range rs {
		if e := p.m[r]; e != nil {
			e.sent = false
			out = append(out, ackedRelease{release: r, until: e.until})
		}
	}
	return out
}

// forKey appends to dst every pending release of key, sent or not: an
// admission without batching carries them (their senders still own them).
func (p *pendingReleases) forKey(dst []release, key string) []release {
	p.mu.Lock()
	defer p.mu.Unlock()
	for r := range p.m {
		if r.key == key {
			dst = append(dst, r)
		}
	}
	return dst
}

// done forgets rs, which the store acknowledged (or which are given up).
func (p *pendingReleases) done(rs []release) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, r := range rs {
		p.forget(r)
	}
}

// failure notes that the store did not answer at now: unless a break no
// resend has used is still fresh, it begins one (brokeAt).
func (p *pendingReleases) failure(now time.Time) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.failureLocked(now)
}

func (p *pendingReleases) failureLocked(now time.Time) {
	if !p.breakFresh(now) {
		p.brokeAt = now
	}
	p.failedAt = now
}

// breakFresh reports whether a break no resend has used yet saw a failure
// in the last breakFresh. p.mu is held.
func (p *pendingReleases) breakFresh(now time.Time) bool {
	return !p.brokeAt.IsZero() && now.Sub(p.failedAt) <= breakFresh
}

// ackedEach remembers rs, acknowledged now, for resendRecent, each with
// its bound as the set holds it, and forgets them (done).
func (p *pendingReleases) ackedEach(rs []release) {
	if len(rs) == 0 {
		return
	}
	p.mu.Lock()
	now := time.Now()
	for _, r := range rs {
		// A copy sent again (resend) is remembered already, from its first
		// acknowledgement: remembered anew, it would be sent again after
		// every break until its bound, ahead of releases acknowledged since.
		if e := p.m[r]; e != nil && !e.until.IsZero() && !e.resent {
			p.recent = append(p.recent, ackedRelease{release: r, until: e.until, at: now})
		}
	}
	p.trimRecent(now)
	p.mu.Unlock()
	p.done(rs)
}

// trimRecent forgets the oldest releases past recentReleases, and those
// acknowledged more than recentKeep ago: a break may last that long before
// the resend that looks back from its start.
func (p *pendingReleases) trimRecent(now time.Time) {
	drop := 0
	for drop < len(p.recent) && (len(p.recent)-drop > recentReleases || now.Sub(p.recent[drop].at) > recentKeep) {
		drop++
	}
	if drop > 0 {
		// Sliced off, not copied down: a copy moved the whole window (up to
		// recentReleases entries) per acknowledged batch. append moves the
		// live entries to a new array when the old one's end is reached.
		clear(p.recent[:drop])
		p.recent = p.recent[drop:]
	}
}

// resend puts back in the set the releases acknowledged since recentFor
// before the break began (brokeAt, unless it is no longer fresh; else
// since recentFor before now) that are not given up and not owed already,
// to be sent again, and returns them: first those acknowledged before the
// break began, newest first (a crashed master's replica misses the
// newest, which replication had least time to carry), then those
// acknowledged after it, newest first (a master cut off from its replicas
// that kept answering acknowledged them; others went to a Cluster's
// healthy masters or to the promoted replica, and find nothing). However
// long ago the break began, up to lookBack: a failover takes as long as
// the cluster needs to judge the master failed. No more than the set has room for
// now: one sent again must never push out one still owed. It joins the
// set as spare (add), so that a release made later pushes it out before
// any owed one. All under one hold of p.mu: a release added between
// counting the room and filling it would have made one of them drop a
// release still owed.
//
// ends says the break is over (the subscription is back): a resend while
// it goes on (a Cluster's failed admission or look) leaves its start for
// the next one, which reaches back as far, however long the failover.
func (p *pendingReleases) resend(ends bool) []ackedRelease {
	p.mu.Lock()
	defer p.mu.Unlock()
	now := time.Now()
	p.trimRecent(now)
	split := now // the break's start: the first pass takes what came before
	if p.breakFresh(now) {
		// At most lookBack ago: failures that never stop for breakFresh
		// (a trickle of timeouts) would keep a start of hours ago.
		split = later(p.brokeAt, now.Add(-lookBack))
	}
	if ends {
		p.brokeAt = time.Time{}
	}
	from := split.Add(-recentFor)
	if p.m == nil {
		p.m = make(map[release]*pending)
	}
	var out []ackedRelease
	for _, before := range []bool{true, false} {
		for i := len(p.recent) - 1; i >= 0 && len(p.m) < max(p.max, 1); i-- {
			r := p.recent[i]
			if r.at.Before(from) {
				break // the older ones too
			}
			if r.at.After(split) == before {
				continue // the other pass's
			}
			if _, owed := p.m[r.release]; owed || !now.Before(r.until) {
				continue
			}
			p.join(r.release, r.until, true)
			p.m[r.release].resent = true
			out = append(out, r)
		}
	}
	return out
}

// failed takes rs back, which the store did not acknowledge (err): each
// is due again after its backoff, or forgotten when its until has passed
// by then. It returns those given up.
func (p *pendingReleases) failed(rs []release) (gaveUp []release) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if len(rs) == 0 {
		return nil
	}
	now := time.Now()
	p.failureLocked(now)
	for _, r := range rs {
		e := p.m[r]
		if e == nil {
			continue
		}
		if e.wait == 0 {
			e.wait = retryFirst
		} else {
			e.wait = min(2*e.wait, retryMax)
		}
		next := now.Add(e.wait)
		if !next.Before(e.until) {
			p.forget(r)
			gaveUp = append(gaveUp, r)
			continue
		}
		e.sent, e.notBefore = false, next
		p.schedule(next)
	}
	return gaveUp
}

// schedule has retry called at due, unless it is called sooner already:
// one timer for the earliest release due, and the pipeline it wakes sets it
// again for the rest (take). p.mu is held.
func (p *pendingReleases) schedule(due time.Time) {
	if p.retry == nil || due.IsZero() || (!p.timerDue.IsZero() && !due.Before(p.timerDue)) {
		return
	}
	if p.timer != nil {
		p.timer.Stop()
	}
	p.timerDue = due
	retry := p.retry
	p.timer = time.AfterFunc(time.Until(due), func() {
		p.mu.Lock()
		p.timerDue = time.Time{}
		p.mu.Unlock()
		retry()
	})
}

// stop ends the retry timer.
func (p *pendingReleases) stop() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.timer != nil {
		p.timer.Stop()
	}
	p.retry = nil
}
