package redisstore

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
	"go.uber.org/zap"

	"github.com/fenceproxy/fenceproxy/fencestore"
)

// Waiting at the barrier. A request waits only for its snapshot: the
// entries ordered before it that were in flight when it was admitted
// (admit.lua lists them), never for one admitted after it. Each entry of
// the snapshot ends for the waiter when
//   - its release is announced on the store's channel (flight.lua
//     publishes the member): the subscriber hands it to the waiters whose
//     snapshot holds it, and to no other, so a waiter costs no store round
//     trip per release, its own or another's;
//   - a look at the store finds it gone (ZMSCORE of the snapshot's
//     remaining members, nothing else): every DrainPoll, and when the
//     subscription comes back after a break, for announcements it may have
//     missed;
//   - or this process has watched it, on its monotonic clock since the
//     reply of the first of its admissions whose snapshot listed it
//     (fencestore.Watched: a later waiter continues that observation, it
//     does not begin another), for the entry's flight bound plus
//     fencestore.AbandonMargin: it is abandoned (its replica died or froze),
//     the waiter removes it from the store (which announces it to the other
//     waiters) and Drain reports expired.
// No clock of Redis's is read: a step of the server's wall clock changes
// nothing here.

// recentAnnouncements bounds the announcements kept for a Drain that
// registers after its entry's release was announced (the announcement can
// beat the admission's own reply).
const recentAnnouncements = 4096

// waiter is one Drain's registration with the subscriber.
type waiter struct {
	gone []string      // members announced, not yet taken by the Drain
	kick chan struct{} // buffered 1: something is in gone
}

// Drain waits until every entry of f's snapshot is gone: released, found
// gone, or watched past its bound and AbandonMargin (then it reports
// expired). A snapshot that listed the first snapshotCap entries of more
// is followed by a look for the rest, once those are gone (more).
func (s *Store) Drain(ctx context.Context, f fencestore.Flight) (bool, error) {
	if !f.Older || !f.Registered() {
		return false, nil
	}
	if err := ctx.Err(); err != nil {
		return false, err
	}
	fl, ok := s.flights.get(f.Ref)
	if !ok || len(fl.olders) == 0 {
		return false, nil // drained before, or released
	}
	s.listen(ctx)
	expired := false
	olders := fl.olders
	for {
		exp, err := s.drainSnapshot(ctx, fl, olders)
		expired = expired || exp
		if err != nil {
			return expired, err
		}
		if !fl.more {
			break
		}
		olders, fl.more, err = s.more(ctx, fl.key, olders[len(olders)-1].member, f.Ref[:orderLen])
		if err != nil {
			if ctx.Err() != nil {
				return expired, ctx.Err()
			}
			return expired, fencestore.Unavailable(fmt.Errorf("redisstore: drain %q: %w", fl.key, err))
		}
		if len(olders) == 0 {
			break
		}
	}
	s.flights.drained(f.Ref)
	return expired, nil
}

// entryID names an in-flight entry in the store: its key and its member.
type entryID struct{ key, member string }

// drainSnapshot waits until every entry of olders, part of fl's snapshot,
// is gone.
func (s *Store) drainSnapshot(ctx context.Context, fl flight, olders []older) (bool, error) {
	remaining := make(map[string]time.Duration, len(olders))
	abandonAt := make(map[string]time.Time, len(olders))
	for _, o := range olders {
		remaining[o.member] = o.bound
		abandonAt[o.member] = s.watched.AbandonAt(entryID{fl.key, o.member}, fl.admitted, o.bound)
	}
	// forget ends this process's watch of the members found gone.
	forget := func(gone []string) {
		for _, m := range gone {
			s.watched.Forget(entryID{fl.key, m})
		}
	}
	w := &waiter{kick: make(chan struct{}, 1)}
	epoch, epochCh := s.watchAll(w, remaining)
	defer s.unwatchAll(w, olders)
	// Announcements reach a waiter only from the subscription that was up
	// when its admission was sent; with none, or another one since, look.
	look := epoch == 0 || epoch != fl.epoch
	expired := false
	for len(remaining) > 0 {
		if look {
			look = false
			if err := s.lookAt(ctx, fl.key, remaining, forget); err != nil {
				if ctx.Err() != nil {
					return expired, ctx.Err()
				}
				return expired, fencestore.Unavailable(fmt.Errorf("redisstore: drain %q: %w", fl.key, err))
			}
			continue
		}
		// The earliest instant an entry of the snapshot is abandoned.
		var next time.Time
		now := time.Now()
		for m := range remaining {
			at := abandonAt[m]
			if !now.Before(at) {
				delete(remaining, m)
				s.giveUp(fl.key, m)
				expired = true
				continue
			}
			if next.IsZero() || at.Before(next) {
				next = at
			}
		}
		if len(remaining) == 0 {
			break
		}
		wait := min(next.Sub(now), s.drainPoll)
		t := time.NewTimer(wait)
		select {
		case <-w.kick:
			gone := s.takeGone(w)
			for _, m := range gone {
				delete(remaining, m)
			}
			forget(gone)
			if breakBroadcast {
				// The fault suite's control (break.go): woken by any
				// release, a waiter has to ask the store what is left.
				look = true
			}
		case <-t.C:
			look = time.Now().Before(next)
		case <-epochCh:
			_, epochCh = s.epochNow()
			look = true
		case <-s.done:
			t.Stop()
			return expired, fencestore.Unavailable(fmt.Errorf("redisstore: drain %q: %w", fl.key, errClosed))
		case <-ctx.Done():
			t.Stop()
			return expired, ctx.Err()
		}
		t.Stop()
	}
	return expired, nil
}

// more reads the next part of a snapshot that listed only its first
// snapshotCap entries: the entries of key after last (the greatest member
// waited for so far) and ordered before own, at most snapshotCap of them,
// and whether there are more still. Every entry of the snapshot not waited
// for yet is among them, in flight since before the admission (the waiter
// watches it from its admission's reply, as the others). An entry admitted
// after the waiter can be among them only when it is ordered before it
// though admitted later, which an unsequenced request of the waiter's own
// token is (it leaves the mark's sequence as it is): then the waiter also
// waits for that one, which it never does below the cap.
func (s *Store) more(ctx context.Context, key, last, own string) ([]older, bool, error) {
	r, err := s.client.Do(ctx, "zrangebylex", key, "("+last, "("+own, "limit", 0, snapshotCap+1).StringSlice()
	if err != nil {
		return nil, false, err
	}
	more := len(r) > snapshotCap
	if more {
		r = r[:snapshotCap]
	}
	out, err := parseOlders(strings.Join(r, " "), own)
	if err != nil {
		return nil, false, err
	}
	return out, more, nil
}

// lookAt removes from remaining the members no longer in key, and hands
// them to forget: one ZMSCORE, for the snapshot's remaining members only.
func (s *Store) lookAt(ctx context.Context, key string, remaining map[string]time.Duration, forget func([]string)) error {
	members := make([]string, 0, len(remaining))
	for m := range remaining {
		members = append(members, m)
	}
	gone, err := s.missing(ctx, key, members)
	if err != nil {
		return err
	}
	for _, m := range gone {
		delete(remaining, m)
	}
	forget(gone)
	return nil
}

// missing returns the members of members not in the sorted set key
// (missingIn).
func (s *Store) missing(ctx context.Context, key string, members []string) ([]string, error) {
	return missingIn(ctx, s.client, key, members)
}

// giveUp removes an entry the waiter watched past its bound and
// AbandonMargin: one attempt, which also announces it to the waiters that
// still hold it (each would give it up by its own clock otherwise).
func (s *Store) giveUp(key, member string) {
	s.log.Debug("drain gave up an older request past its bound", zap.String("key", key), zap.String("member", member))
	s.release(release{key: key, member: member}, time.Time{}, true)
}

// watchAll registers w for the members of remaining, and removes from it
// those announced already; it returns the subscription's epoch and its
// channel (closed when the subscription comes back after a break).
func (s *Store) watchAll(w *waiter, remaining map[string]time.Duration) (uint64, chan struct{}) {
	s.wmu.Lock()
	defer s.wmu.Unlock()
	if s.watchers == nil {
		s.watchers = make(map[string][]*waiter)
	}
	for m := range remaining {
		if s.announced[m] {
			delete(remaining, m)
			continue
		}
		s.watchers[m] = append(s.watchers[m], w)
	}
	return s.epoch, s.epochCh
}

func (s *Store) unwatchAll(w *waiter, olders []older) {
	s.wmu.Lock()
	defer s.wmu.Unlock()
	for _, o := range olders {
		ws := s.watchers[o.member]
		for i, x := range ws {
			if x == w {
				ws = append(ws[:i], ws[i+1:]...)
				break
			}
		}
		if len(ws) == 0 {
			delete(s.watchers, o.member)
		} else {
			s.watchers[o.member] = ws
		}
	}
}

// awaited reports whether a Drain of this process waits for member.
func (s *Store) awaited(member string) bool {
	s.wmu.Lock()
	defer s.wmu.Unlock()
	return len(s.watchers[member]) > 0
}

func (s *Store) takeGone(w *waiter) []string {
	s.wmu.Lock()
	defer s.wmu.Unlock()
	g := w.gone
	w.gone = nil
	return g
}

// epochNow returns the subscription's epoch (0: none yet) and its channel.
func (s *Store) epochNow() (uint64, chan struct{}) {
	s.wmu.Lock()
	defer s.wmu.Unlock()
	return s.epoch, s.epochCh
}

// announce hands a released member to the waiters whose snapshot holds
// it, and keeps it a while for a Drain not registered yet.
func (s *Store) announce(member string) {
	s.wmu.Lock()
	defer s.wmu.Unlock()
	for _, w := range s.watchers[member] {
		w.gone = append(w.gone, member)
		select {
		case w.kick <- struct{}{}:
		default:
		}
	}
	if breakBroadcast {
		// The fault suite's control (break.go): every waiter woken, as
		// by a wake-up that does not say whom it unblocks.
		s.kickAll()
	}
	if s.announced == nil {
		s.announced = make(map[string]bool)
	}
	if !s.announced[member] {
		s.announced[member] = true
		s.announceLog = append(s.announceLog, member)
		if len(s.announceLog) > recentAnnouncements {
			delete(s.announced, s.announceLog[0])
			s.announceLog = s.announceLog[1:]
		}
	}
}

// resubscribed starts a new epoch: every Drain looks at the store, since
// announcements may have been missed during the break.
func (s *Store) resubscribed() {
	s.wmu.Lock()
	s.epoch++
	close(s.epochCh)
	s.epochCh = make(chan struct{})
	s.wmu.Unlock()
}

// listen subscribes the store to its channel (startListening) and waits,
// within ctx and one DrainPoll, until the subscription holds, so that an
// announcement after this Drain registered reaches it.
//
// A subscription that does not hold within one DrainPoll (a server down, an
// ACL without SUBSCRIBE) stops being waited for: the Drains then rely on
// their looks until it does.
func (s *Store) listen(ctx context.Context) {
	s.startListening()
	select {
	case <-s.listening:
	case <-s.done:
	case <-ctx.Done():
	}
}

// startListening subscribes the store to its channel, once: on its first
// admission with a barrier, so that the subscription is up before the
// first Drain needs it. It lives until Close; go-redis reconnects it after a
// failure and subscribes again.
func (s *Store) startListening() {
	s.listenOnce.Do(func() {
		s.mu.Lock()
		defer s.mu.Unlock()
		if s.closed {
			return
		}
		s.listenTimer = time.AfterFunc(s.drainPoll, s.markListening)
		s.bg.Add(1)
		go s.subscribe()
	})
}

// markListening ends the wait of listen.
func (s *Store) markListening() { s.listeningOnce.Do(func() { close(s.listening) }) }

func (s *Store) subscribe() {
	defer s.bg.Done()
	// Subscribe sends SUBSCRIBE at once; when that fails the PubSub keeps
	// the channel and subscribes when it reconnects.
	ps := s.client.Subscribe(context.Background(), s.channel)
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		_ = ps.Close()
		return
	}
	s.pubsub = ps
	s.mu.Unlock()
	first := true
	for m := range ps.ChannelWithSubscriptions() {
		switch m := m.(type) {
		case *redis.Message:
			s.announce(m.Payload)
		case *redis.Subscription:
			if m.Kind != "subscribe" {
				continue
			}
			s.resubscribed()
			if first {
				first = false
				s.markListening()
				continue
			}
			// Back after a break: what this process released lately may
			// not have reached the server that answers now (a failover).
			s.log.Debug("drain channel subscribed again", zap.String("channel", s.channel))
			s.resendRecent(true)
		}
	}
}
