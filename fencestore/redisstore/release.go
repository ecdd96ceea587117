package redisstore

import (
	"context"
	"errors"
	"net"
	"slices"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
	"go.uber.org/zap"

	"github.com/fenceproxy/fenceproxy/fencestore"
)

// Releases. A release (flight.lua's, run by release.lua or inside an
// admission's run of admit.lua) removes an entry and, when a later one may
// wait for it, announces it. A release rides the next group-commit pipeline
// (on a single server inside its admission run, after a short linger for
// one: batch.go), or, without batching, a goroutine of its own sends it
// (on a single server after the same linger, unless an admission carried
// it in its run meanwhile: riders); one the store does not
// acknowledge (a timeout, a lost connection, a failover, a replica that
// refuses it) is sent again, with a growing backoff, until it is
// acknowledged or its entry can hold nobody back any more: releaseFor
// past its bound, when the in-flight key no longer keeps it. Not merely
// until every waiter that found it in flight gave it up: a request
// admitted later (after an outage longer than the bound, say) finds the
// entry still there and watches it from its own admission, so a release
// dropped then would hold it for the whole bound. The pending set bounds
// what is owed (pending.go): when it is full, the oldest abandon (or
// release sent again) is dropped, else the oldest release, counted
// (DroppedReleases) and logged. A release is
// idempotent (the second finds nothing and announces nothing), so sending
// one twice is harmless; the releases acknowledged in the seconds before a
// break are sent again when the store's subscription comes back after it
// (a failover may have promoted a replica that never received them).

// releaseTimeout bounds one attempt of a release sent on its own (not
// riding an admission's pipeline).
const releaseTimeout = 2 * time.Second

// maxPendingReleases bounds the releases not yet acknowledged
// (pendingReleases), when batching does not ask for more.
const maxPendingReleases = 1024

// Backoff of a release sent again: it starts at retryFirst and doubles up
// to retryMax.
const (
	retryFirst = 20 * time.Millisecond
	retryMax   = time.Second
)

// releaseFor is how long past its flight bound an entry's release is sent
// again, on this process's monotonic clock: flight.lua's GCSET, the
// longest the in-flight key can keep an entry nobody released (its TTL is
// set to the longest flight plus GCSET, and renewed once it falls under
// the flight plus GC). Until then a request admitted at any time may find
// the entry and wait for it.
const releaseFor = 72 * time.Hour

// releaseUntil is when the release of an entry admitted at start with
// bound is given up.
func releaseUntil(start time.Time, bound time.Duration) time.Time {
	return start.Add(bound + releaseFor)
}

// The releases acknowledged lately, sent again after a break: at most
// recentReleases of them are kept, each for recentKeep (a failover may
// take minutes to be noticed over), and a resend takes those acknowledged
// since recentFor before the break began (pendingReleases.resend): a
// break is noticed at once under traffic, and at the admin's next look at
// the store (Ping, every 5 s) when idle.
const (
	recentReleases = 4096
	recentKeep     = 10 * time.Minute
	recentFor      = 10 * time.Second
)

// Release ends f's flight: its release removes its entry and, when a later
// entry may wait for it, announces it. Nobody waits for it; it is retried
// until acknowledged or its entry can hold nobody back (releaseUntil).
func (s *Store) Release(f fencestore.Flight) {
	if !f.Registered() || f.Ref == "" {
		return
	}
	fl := s.flights.take(f.Ref)
	if fl == nil {
		// Released before, or not this store's registration: still sent
		// once, which is harmless.
		s.release(release{key: f.Key, member: f.Ref}, time.Time{}, false)
		return
	}
	// A Drain of this process waiting for it: no linger (batch.go).
	s.release(release{key: fl.key, member: f.Ref}, fl.moot, s.awaited(f.Ref))
}

// abandon releases the entry an admission with barrier argument fl may have
// made though its caller got no reply (its deadline cut the call short, the
// connection was lost with the reply on its way, or the reply made no
// sense): left alone, it would hold the later requests of its resource
// back until their waiters give it up. The member is not known, so the
// release names it by order and id (flight.lua). It is sent until
// acknowledged or until (releaseUntil), like any release; on another
// connection than the admission, it may even run before it, and then finds
// nothing.
func (s *Store) abandon(a fencestore.Admission, fkey, fl string, until time.Time) {
	_, id, ok := strings.Cut(fl, " ")
	if !ok {
		return
	}
	s.release(release{key: fkey, member: order41(a.Order()) + abandonMark + id}, until, false)
}

// abandonMark stands in an abandon's member where a member holds its
// bound (bytes 42 to 44, after the order's 41): flight.lua tells an
// abandon by it.
const abandonMark = ":*:"

// abandons reports whether r is an abandon's (abandon), as flight.lua
// tells one: the pending set drops those first when it is full.
func (r release) abandons() bool {
	return len(r.member) >= 41+len(abandonMark) && r.member[41:41+len(abandonMark)] == abandonMark
}

// release sends r, again until it is acknowledged or until is past (the
// zero time: one attempt). It joins the pending set, which the batcher's
// next pipeline takes (at once when urgent, else after a linger for an
// admission to ride: batch.go), or, without batching, a goroutine of its
// own sends; while it is there, an admission that enters its key carries
// it too, ahead of itself. A full set drops its oldest abandon, else its
// oldest release, to make room (pendingReleases.add): the store's outage
// then holds later requests no more than the set's size of releases can,
// and no goroutine piles up per release.
func (s *Store) release(r release, until time.Time, urgent bool) {
	if breakNoRetry {
		// The fault suite's control (break.go): one attempt, and, since
		// only releases with a bound are remembered once acknowledged
		// (pendingReleases.acked), none sent again after a break.
		until = time.Time{}
	}
	// A release sent again that leaves was acknowledged once: no loss to
	// count or warn of (after a Cluster's failed admission the resends
	// fill the set, and would make every later drop look like one).
	if old, dropped, resent := s.pend.addTelling(r, until); dropped && !resent {
		s.releaseDropped(old)
	}
	s.wakeSender(r, until, urgent)
}

// wakeSender has r, in the pending set, sent: the batcher's next pipeline
// takes it, or, without batching, a goroutine of its own (sendAlone).
func (s *Store) wakeSender(r release, until time.Time, urgent bool) {
	if s.batch != nil {
		if urgent {
			s.batch.releasedNow()
		} else {
			s.batch.released()
		}
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		s.pend.done([]release{r})
		return
	}
	s.bg.Add(1)
	go func() {
		defer s.bg.Done()
		s.sendAlone(r, until, urgent)
	}()
}

// sendAlone sends r on its own until it is acknowledged, until has passed,
// it left the pending set (dropped to make room), or the store closes. It
// takes r's place in the pending set first, unless an admission took it
// to carry (rides): on a single server it gives one the store's linger to
// come, unless urgent.
func (s *Store) sendAlone(r release, until time.Time, urgent bool) {
	if s.linger > 0 && !urgent && s.rides() {
		t := time.NewTimer(s.linger)
		select {
		case <-t.C:
		case <-s.done: // sent once now, before the client closes
			t.Stop()
		}
	}
	if !s.pend.claim(r) {
		return // an admission carries it
	}
	wait := retryFirst
	for {
		ctx, cancel := context.WithTimeout(context.Background(), releaseTimeout)
		err := releaseScript.Run(ctx, s.client, []string{r.key}, r.member, s.channel).Err()
		cancel()
		if err == nil {
			s.pend.ackedEach([]release{r})
			return
		}
		s.pend.failure(time.Now())
		if !time.Now().Add(wait).Before(until) {
			s.pend.done([]release{r})
			s.releaseFailed(r.key, err)
			return
		}
		t := time.NewTimer(wait)
		select {
		case <-t.C:
		case <-s.done:
			t.Stop()
			s.pend.done([]release{r})
			return
		}
		if !s.pend.sending(r) {
			return // dropped to make room (releaseDropped said so)
		}
		wait = min(2*wait, retryMax)
	}
}

// releaseFailed logs a release given up: its entry can hold nobody back
// any more, or it was worth one attempt only. Debug level: the admissions
// of a store that fails fail too, and say so louder.
func (s *Store) releaseFailed(key string, err error) {
	s.log.Debug("drain release not acknowledged", zap.String("key", key), zap.Error(err))
}

// releaseDropped counts and logs a release that left the full pending set
// unacknowledged: its entry holds the requests that find it until each has
// watched it for its bound. Logged at the first drop and each time the
// count doubles, so that a long outage does not flood the log.
func (s *Store) releaseDropped(r release) {
	n := s.dropped.Add(1)
	if n&(n-1) == 0 {
		s.log.Warn("drain release dropped unacknowledged: too many owed to the store; "+
			"its entry holds later requests until their waiters give it up",
			zap.String("key", r.key), zap.Uint64("dropped", n), zap.Int("owed", s.pend.max))
	}
}

// DroppedReleases is how many releases this store dropped unacknowledged
// because too many were owed at once (a long outage under load).
func (s *Store) DroppedReleases() uint64 { return s.dropped.Load() }

// rides reports whether releases ride admissions' script runs without
// batching too: on a single server (plain or Sentinel), where one run may
// touch any keys.
func (s *Store) rides() bool {
	_, single := s.client.(*redis.Client)
	return single
}

// maxRiders bounds the releases one admission carries without batching.
const maxRiders = 128

// riders returns the releases an admission without batching carries in its
// own script run, ahead of itself: on a single server those nobody sends
// yet (owned: the admission sends them now, and settleRiders says how they
// fared), and, with a barrier, those of its own in-flight key fkey on their
// way already (their senders own them).
func (s *Store) riders(fkey string, barrier bool) (all, owned []release) {
	if s.rides() {
		owned = s.pend.takeUnsent(nil, maxRiders)
	}
	all = owned
	if barrier {
		for _, r := range s.pend.forKey(nil, fkey) {
			if !slices.Contains(owned, r) {
				all = append(all, r)
			}
		}
	}
	return all, owned
}

// settleRiders tells the pending set how the releases an admission owned
// fared (err, its script run's): acknowledged, or sent again on their own,
// at once.
func (s *Store) settleRiders(owned []release, err error) {
	if len(owned) == 0 {
		return
	}
	if err == nil {
		s.pend.ackedEach(owned)
		return
	}
	if breakNoRetry {
		// The fault suite's control (break.go): the admission's run was
		// their one attempt.
		s.pend.done(owned)
		return
	}
	for _, u := range s.pend.unsend(owned) {
		s.mu.Lock()
		if s.closed {
			s.mu.Unlock()
			s.pend.done([]release{u.release})
			continue
		}
		s.bg.Add(1)
		s.mu.Unlock()
		go func() {
			defer s.bg.Done()
			s.sendAlone(u.release, u.until, true)
		}()
	}
}

// resendRecent sends again the releases acknowledged since recentFor
// before the latest break began that are not given up (the newest, as
// many as the pending set has room for, never at the cost of one owed:
// pendingReleases.resend): the store came back after a break, maybe on a
// replica promoted without them.
func (s *Store) resendRecent(ends bool) {
	for _, r := range s.pend.resend(ends) {
		s.wakeSender(r.release, r.until, true)
	}
}

// release is one entry of the barrier to remove: its in-flight key and
// member (flight.lua).
type release struct{ key, member string }

// mayHaveRun reports whether a command that failed with err may have run
// though its reply never came: after anything but a dial that failed
// (nothing was sent then). A timeout, and as much a connection lost with the
// reply on its way (EOF, a reset: a master killed while it answered), leaves
// an admission's entry behind, which a replica may have received and keep
// once promoted.
func mayHaveRun(err error) bool {
	var op *net.OpError
	return !errors.As(err, &op) || op.Op != "dial"
}
