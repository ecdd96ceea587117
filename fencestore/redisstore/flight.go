package redisstore

import (
	"context"
	"crypto/rand"
	_ "embed"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
	"go.uber.org/zap"

	"github.com/fenceproxy/fenceproxy/fencestore"
)

// The drain barrier in Redis (doc.go has the layout). admit.lua enters an
// admitted request into the in-flight key beside its mark and says whether
// an older one is in flight; Drain runs check.lua until none is, woken by a
// message on the store's channel when release.lua removes an entry that a
// later one may wait for, or by a timer when no message comes (a lost
// message, a Ring shard it does not listen to, an older request whose
// replica died and that only its deadline ends).

// DefaultDrainPoll is how often a waiting Drain looks again when nothing
// woke it, when Options.DrainPoll is zero.
const DefaultDrainPoll = 250 * time.Millisecond

// releaseTimeout bounds a release sent on its own (not riding an
// admission's pipeline): nobody waits for it, and a lost one only keeps its
// entry until its deadline.
const releaseTimeout = 2 * time.Second

// maxPendingReleases bounds the releases not yet known to have run
// (pendingReleases), when batching does not ask for more.
const maxPendingReleases = 1024

// maxFlightMillis is the longest in-flight deadline admit.lua takes (12
// digits of milliseconds, some 31 years); a longer Admission.Flight is cut
// to it.
const maxFlightMillis = 999_999_999_999

// flightSuffix ends every in-flight key.
const flightSuffix = ":inflight"

// flightKey returns the in-flight key beside mark, and whether it is in
// mark's Cluster slot. A script may touch the keys of one slot only, so the
// two must share one: besideKey (generation.go) names it after mark's hash
// tag when it has one (`{42}:inflight:fence:orders/{42}`), else after the
// whole mark when it has no '}' (`{fence:orders/42}:inflight`, which hashes
// as `fence:orders/42` does). A mark with a '}' but no tag ("a{}b", "x}y",
// and "") hashes whole, and a name that hashes as it does while being
// another name cannot be built: the key returned then lands in another
// slot, which only a single server can use. Every form begins with '{',
// which no mark key does under a valid prefix (keys.go): no resource name
// spells an in-flight key.
func flightKey(mark string) (string, bool) {
	_, tagged := hashTag(mark)
	return besideKey(mark, flightSuffix), tagged || (mark != "" && !strings.Contains(mark, "}"))
}

// hasHashTag reports whether key hashes by a tag (a part of it) rather than
// whole, as Redis Cluster (and go-redis's Ring) decide it.
func hasHashTag(key string) bool {
	s := strings.IndexByte(key, '{')
	if s < 0 {
		return false
	}
	e := strings.IndexByte(key[s+1:], '}')
	return e > 0
}

// errNoFlightSlot refuses an admission with a barrier on a Cluster or Ring
// client whose mark key has no in-flight key in its slot (flightKey).
var errNoFlightSlot = errors.New("the key has a '}' but no hash tag, so no in-flight key for the drain barrier shares its slot; " +
	"use a resource name (and prefix) without '}', or with a hash tag")

// sharded reports whether the client spreads keys over several servers by
// their slots (Cluster) or hash tags (Ring).
func (s *Store) sharded() bool {
	switch s.client.(type) {
	case *redis.ClusterClient, *redis.Ring:
		return true
	}
	return false
}

// order41 is the order part of an in-flight member for m, as admit.lua
// builds it: the token in 20 digits, ':', and the sequence in 20 digits or
// 20 '-' for none.
func order41(m fencestore.Mark) string {
	b := make([]byte, 0, 41)
	b = appendPadded(b, m.Token)
	b = append(b, ':')
	if m.HasSequence {
		b = appendPadded(b, m.Sequence)
	} else {
		b = append(b, "--------------------"...)
	}
	return string(b)
}

func appendPadded(b []byte, n uint64) []byte {
	var d [20]byte
	v := strconv.AppendUint(d[:0], n, 10)
	for range 20 - len(v) {
		b = append(b, '0')
	}
	return append(b, v...)
}

// newFlightIDs returns the prefix of the store's entry ids: random, so that
// the entries of replicas sharing the store never collide.
func newFlightIDs() string {
	var b [8]byte
	_, _ = rand.Read(b[:]) // never fails (crypto/rand panics instead)
	return hex.EncodeToString(b[:])
}

// barrierArg is admit.lua's barrier argument for a: "" without one, else
// the timeout in whole milliseconds (rounded up) and a new entry id.
func (s *Store) barrierArg(a fencestore.Admission) string {
	if a.Flight <= 0 {
		return ""
	}
	ms := min((a.Flight+time.Millisecond-1)/time.Millisecond, maxFlightMillis)
	return strconv.FormatInt(int64(ms), 10) + " " + s.idPrefix + strconv.FormatUint(s.ids.Add(1), 16)
}

// Drain waits until no request ordered before f is in flight for its
// resource, at any replica: it runs check.lua, and waits for a message
// about f's in-flight key or the earlier of DrainPoll and the earliest
// older deadline, then looks again.
func (s *Store) Drain(ctx context.Context, f fencestore.Flight) (bool, error) {
	if !f.Older || !f.Registered() {
		return false, nil
	}
	if err := ctx.Err(); err != nil {
		return false, err
	}
	s.listen(ctx)
	expired := false
	for {
		// Watch before looking: a message that comes between the look and
		// the wait is not lost.
		w := s.watch(f.Key)
		older, n, remaining, err := s.check(ctx, f)
		expired = expired || n > 0
		if err != nil || !older {
			s.unwatch(f.Key, w)
			if err != nil && ctx.Err() != nil {
				return expired, ctx.Err()
			}
			if err != nil {
				return expired, fencestore.Unavailable(fmt.Errorf("redisstore: drain %q: %w", f.Key, err))
			}
			return expired, nil
		}
		wait := s.drainPoll
		if remaining > 0 && remaining < wait {
			wait = remaining
		}
		t := time.NewTimer(wait)
		select {
		case <-w.ch:
		case <-t.C:
		case <-s.done:
		case <-ctx.Done():
		}
		t.Stop()
		s.unwatch(f.Key, w)
		if err := ctx.Err(); err != nil {
			return expired, err
		}
	}
}

// check runs check.lua for f: whether an older entry is in flight, how
// many older ones expired, and the time to the earliest older deadline.
func (s *Store) check(ctx context.Context, f fencestore.Flight) (bool, int, time.Duration, error) {
	r, err := checkScript.Run(ctx, s.client, []string{f.Key}, f.Ref).Int64Slice()
	if err != nil {
		return false, 0, 0, err
	}
	if len(r) != 3 || (r[0] != 0 && r[0] != 1) || r[1] < 0 || r[2] < 0 {
		return false, 0, 0, fmt.Errorf("unexpected reply %v", r)
	}
	return r[0] == 1, int(r[1]), time.Duration(r[2]) * time.Millisecond, nil
}

// A wakeup is closed when a message names its key: every Drain that
// watched the key then looks again. Drains share it; the last to leave
// forgets it.
type wakeup struct {
	ch chan struct{}
	n  int
}

func (s *Store) watch(key string) *wakeup {
	s.wmu.Lock()
	defer s.wmu.Unlock()
	if s.waiters == nil {
		s.waiters = make(map[string]*wakeup)
	}
	w := s.waiters[key]
	if w == nil {
		w = &wakeup{ch: make(chan struct{})}
		s.waiters[key] = w
	}
	w.n++
	return w
}

func (s *Store) unwatch(key string, w *wakeup) {
	s.wmu.Lock()
	defer s.wmu.Unlock()
	w.n--
	if w.n == 0 && s.waiters[key] == w {
		delete(s.waiters, key)
	}
}

// wake wakes the Drains that watch key.
func (s *Store) wake(key string) {
	s.wmu.Lock()
	defer s.wmu.Unlock()
	if w := s.waiters[key]; w != nil {
		close(w.ch)
		delete(s.waiters, key)
	}
}

// wakeAll wakes every Drain: messages may have been lost.
func (s *Store) wakeAll() {
	s.wmu.Lock()
	defer s.wmu.Unlock()
	for key, w := range s.waiters {
		close(w.ch)
		delete(s.waiters, key)
	}
}

// listen subscribes the store to its channel on the first Drain, and waits
// (within ctx and one DrainPoll) until the subscription holds, so that a
// release right after this Drain's first look wakes it. The subscription
// lives until Close; go-redis reconnects it after a failure and subscribes
// again, and each new subscription wakes every Drain, since messages may
// have been missed in between.
//
// A subscription that does not hold within one DrainPoll (a server down, an
// ACL without SUBSCRIBE) stops being waited for: the Drains then rely on
// their timers alone until it does.
func (s *Store) listen(ctx context.Context) {
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
	select {
	case <-s.listening:
	case <-s.done:
	case <-ctx.Done():
	}
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
			s.wake(m.Payload)
		case *redis.Subscription:
			if m.Kind != "subscribe" {
				continue
			}
			if first {
				first = false
				s.markListening()
				continue
			}
			s.log.Debug("drain channel subscribed again", zap.String("channel", s.channel))
			s.wakeAll()
		}
	}
}

// Release ends f's flight: release.lua removes its entry and, when a later
// entry may wait for it, publishes its key. It rides the next group-commit
// pipeline, or runs on a goroutine of its own when batching is off or the
// release queue is full; nobody waits for it.
func (s *Store) Release(f fencestore.Flight) {
	if !f.Registered() || f.Ref == "" {
		return
	}
	s.release(release{key: f.Key, member: f.Ref}, true)
}

// abandon releases the entry an admission with barrier argument fl may have
// made though its caller got no reply (its deadline cut the call short, or
// the reply made no sense): left alone, it would hold the later requests of
// its resource back until its deadline. The member is not known, so the
// release names it by order and id (release.lua). It is best effort: on
// another connection than the admission, it may even run before it.
func (s *Store) abandon(a fencestore.Admission, fkey, fl string) {
	_, id, ok := strings.Cut(fl, " ")
	if !ok {
		return
	}
	s.release(release{key: fkey, member: order41(a.Order()) + ":*:" + id}, false)
}

// release sends r. It joins the pending set, which the batcher's next
// pipeline takes, or, without batching, a goroutine of its own sends; while
// it is there, an admission that enters its key carries it too, ahead of
// itself. When the set is full, r goes on a goroutine of its own, outside
// it, if spill, else not at all (abandon does not spill: its admissions
// fail when the store does, and a goroutine each would pile up in an
// outage).
func (s *Store) release(r release, spill bool) {
	tracked := s.pend.add(r)
	if tracked && s.batch != nil {
		s.batch.released()
		return
	}
	if !tracked && !spill {
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
		ctx, cancel := context.WithTimeout(context.Background(), releaseTimeout)
		defer cancel()
		err := releaseScript.Run(ctx, s.client, []string{r.key}, r.member, s.channel).Err()
		if tracked {
			s.pend.done([]release{r})
		}
		if err != nil {
			s.log.Debug("drain release failed; its entry stays until its deadline",
				zap.String("key", r.key), zap.Error(err))
		}
	}()
}

// release is one entry of the barrier to remove: its in-flight key and
// member (release.lua).
type release struct{ key, member string }

// pendingReleases are the releases not known to have run yet. Admissions
// read them so that a release made before an admission runs before it,
// though the two travel apart: the pipeline that carries an admission also
// carries the pending releases of the key it enters, ahead of it, on the
// same connection. A release twice is harmless (the second finds nothing,
// and publishes nothing). Bounded: a release past the bound goes outside
// it, without that promise.
type pendingReleases struct {
	mu  sync.Mutex
	m   map[release]bool // true once a pipeline that owns it is on its way
	max int
}

// add puts r in the set, unless it is full.
func (p *pendingReleases) add(r release) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if len(p.m) >= p.max {
		return false
	}
	if p.m == nil {
		p.m = make(map[release]bool)
	}
	p.m[r] = false
	return true
}

// take appends to dst the releases nobody sends yet, which the caller then
// owns (it calls done for them once sent), and after them those others
// send already whose key is in keys; it returns dst and how many of it the
// caller owns.
func (p *pendingReleases) take(dst []release, keys map[string]bool) ([]release, int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	var others []release
	for r, sent := range p.m {
		switch {
		case !sent:
			p.m[r] = true
			dst = append(dst, r)
		case keys[r.key]:
			others = append(others, r)
		}
	}
	return append(dst, others...), len(dst)
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

// done forgets rs: they ran, or failed.
func (p *pendingReleases) done(rs []release) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, r := range rs {
		delete(p.m, r)
	}
}

// isTimeout reports whether err is a timeout, after which a command may
// have run though its reply never came.
func isTimeout(err error) bool {
	var ne net.Error
	return errors.Is(err, context.DeadlineExceeded) || (errors.As(err, &ne) && ne.Timeout())
}
