package redisstore

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/fenceproxy/fenceproxy/fencestore"
)

// Admit runs the admission script on a's key, which decides as a.Decide
// does over the mark stored there ("token" or "token:sequence", see
// fencestore.ParseMarkValue). With MinReplicas it then
// waits for the replicas on the same connection, and reports a decision that
// too few of them acknowledged as an error: not an admission, and not a
// refusal either, since a refusal reports the mark, and a mark the replicas do
// not have (written by an admission whose own WAIT failed) can be lost in a
// failover after a client was told of it.
//
// A floor (a.HasFloor) heals a regressed mark in the same script run (see
// doc.go). Once Expect named an identity record, the same run checks it
// (on a Cluster, the record in the mark's slot: slots.go), and an
// admission that finds it gone or changed fails with the
// *fencestore.LostError itself, having written nothing.
func (s *Store) Admit(ctx context.Context, a fencestore.Admission) (fencestore.Decision, error) {
	if err := ctx.Err(); err != nil {
		return fencestore.Decision{}, fencestore.Unavailable(err)
	}
	// A release of this admission's entry is sent until Redis takes it, or
	// until the entry can hold nobody back, counted from now (release.go).
	start := time.Now()
	key, err := s.markKey("admit", a.Resource)
	if err != nil {
		return fencestore.Decision{}, fencestore.Unavailable(err)
	}
	// Without a barrier the script does not touch the in-flight key, but
	// a Cluster still refuses keys of two slots (CROSSSLOT): the mark key
	// again stands in for it.
	fkey, fl := key, ""
	var epoch uint64
	if a.Flight > 0 {
		k, sameSlot := flightKey(key)
		if !sameSlot && s.sharded() {
			// The script would touch keys of two slots: Cluster refuses
			// it, and a Ring may send it where one of them is not.
			return fencestore.Decision{}, fencestore.Unavailable(fmt.Errorf("redisstore: admit %q: %w", key, errNoFlightSlot))
		}
		fkey, fl = k, s.barrierArg(a, s.flights.busy(k))
		// Announcements reach a waiter from the subscription that was up
		// when its admission was sent (drain.go).
		s.startListening()
		epoch, _ = s.epochNow()
	}
	moot := releaseUntil(start, time.Duration(flightMillis(a))*time.Millisecond)
	c := call{keys: [2]string{key, fkey}, tok: strconv.FormatUint(a.Token, 10), mode: "ge", fl: fl}
	if a.Compare == fencestore.Greater {
		c.mode = "gt"
	}
	if a.HasSequence {
		c.seq = strconv.FormatUint(a.Sequence, 10) // else "", the script's "no sequence"
	}
	if a.HasFloor {
		c.floor = floorArg(a)
	}
	if want := s.expect.Load(); want != nil && *want != "" {
		idKey, err := s.recordFor(key)
		if err != nil {
			return fencestore.Decision{}, fencestore.Unavailable(fmt.Errorf("redisstore: admit %q: %w", key, err))
		}
		c.id = [2]string{idKey, *want}
		if c.gen, c.part = s.generationFor(key); c.gen != "" {
			c.seen = s.gens.Seen(c.part)
		}
	}
	var (
		reply any
		wait  *redis.IntCmd
	)
	switch {
	case s.batch != nil: // only without MinReplicas (New)
		reply, err = s.batch.admit(ctx, c) // the batch reports its round trip
	default:
		start := time.Now() // of the round trip
		if s.minReplicas > 0 {
			reply, wait, err = s.admitAndWait(ctx, c)
		} else {
			reply, err = s.run(ctx, c)
		}
		if s.onRoundTrip != nil {
			s.onRoundTrip(fencestore.RoundTrip{Admissions: 1, Duration: time.Since(start), Failed: err != nil})
		}
	}
	if err != nil {
		// An admission no pipeline took was never sent: it says nothing of
		// the node (the group-commit queue was behind) and made no entry.
		var notSent errNotSent
		sent := !errors.As(err, &notSent)
		if sent {
			if !errors.Is(err, context.Canceled) {
				// The store did not answer in time, or refused: a break
				// may have begun (a caller that left is none).
				s.pend.failure(time.Now())
			}
			s.refreshSlots()
		}
		if role := roleError(err); role != nil {
			// Redis refused the script before it ran: nothing to abandon.
			return fencestore.Decision{}, role
		}
		// An OOM refusal ran nothing: no entry to abandon either.
		if sent && (ctx.Err() != nil || (mayHaveRun(err) && !refused(err))) {
			s.abandon(a, fkey, fl, moot)
		}
		return fencestore.Decision{}, fencestore.Unavailable(fmt.Errorf("redisstore: admit %q: %w", key, err))
	}
	d, snap, err := parseReply(reply, a, fkey, c.id[1])
	if lost, ok := err.(*fencestore.LostError); ok {
		// The script wrote nothing, and entered nothing in flight.
		if lost.Rollback {
			lost.Seen = max(lost.Seen, c.seen)
		}
		return fencestore.Decision{}, lost
	}
	if err != nil {
		// A reply of another shape may come after an entry was made; the
		// script's own refusal of the key never does.
		var ke *keyError
		if !errors.As(err, &ke) {
			s.abandon(a, fkey, fl, moot)
		}
		return fencestore.Decision{}, fencestore.Unavailable(fmt.Errorf("redisstore: admit %q: %w", key, err))
	}
	if d.Flight.Registered() {
		s.flights.put(d.Flight.Ref, &flight{key: fkey, moot: moot, olders: snap.olders, more: snap.more, admitted: time.Now(), epoch: epoch})
	}
	if wait != nil {
		// A decision WAIT does not stand behind is an error: its entry, if
		// it made one, holds nobody back any longer.
		acked, err := wait.Result()
		if err != nil {
			s.Release(d.Flight)
			return fencestore.Decision{}, fencestore.Unavailable(fmt.Errorf("redisstore: admit %q: WAIT: %w", key, err))
		}
		if acked < int64(s.minReplicas) {
			s.Release(d.Flight)
			return fencestore.Decision{}, fencestore.Unavailable(&ReplicaAckError{
				Key: key, Acked: int(acked), Want: s.minReplicas, Timeout: s.waitTimeout,
			})
		}
	}
	// The generation is seen only once WAIT stands behind it: a write the
	// replicas never acknowledged (its request answered 503) may be lost
	// in a failover, and a promoted replica without it has lost nothing
	// anyone relied on. Seen before, it made that replica look gone back
	// in time: store-lost, every fenced request refused until an operator
	// acted, after a mere replication hiccup and a failover
	// (TestUnacknowledgedGenerationNotSeen; fault scenario
	// failover-slow-cut).
	if c.gen != "" {
		s.gens.See(c.part, d.Generation)
	}
	return d, nil
}

// call is one admission as admit.lua takes it: its mark key and in-flight
// key, its token, mode ("ge", "gt"), sequence, barrier and floor arguments
// ("" for none), and the identity key and the identity the script expects
// there (both "" for no check); with the identity, the generation key of
// the mark's slot (gen, "" for none), its part of Store.gens, and the
// greatest generation seen there.
type call struct {
	keys                      [2]string
	tok, mode, seq, fl, floor string
	id                        [2]string
	gen                       string
	part                      int
	seen                      uint64
}

// script returns the keys and arguments of one run of admit.lua for cs,
// which share their identity check and generation key (cs[0]'s), with "w"
// when w. The generation passed is the greatest any of them has seen.
func script[T interface{ callOf() *call }](cs []T, w bool) ([]string, []any) {
	keys := make([]string, 0, 2*len(cs)+2)
	args := make([]any, 0, 5*len(cs)+3)
	var seen uint64
	for _, x := range cs {
		c := x.callOf()
		keys = append(keys, c.keys[0], c.keys[1])
		args = append(args, c.tok, c.mode, c.seq, c.fl, c.floor)
		seen = max(seen, c.seen)
	}
	if w {
		args = append(args, "w")
	}
	if len(cs) > 0 {
		if c := cs[0].callOf(); c.id[1] != "" {
			keys, args = append(keys, c.id[0]), append(args, c.id[1])
			if c.gen != "" {
				keys, args = append(keys, c.gen), append(args, strconv.FormatUint(seen, 10))
			}
		}
	}
	return keys, args
}

// floorArg is a's floor as admit.lua takes it: the mark as stored, "@",
// and the generation it was seen at.
func floorArg(a fencestore.Admission) string {
	b := a.Floor.AppendValue(make([]byte, 0, 48))
	b = append(b, '@')
	return string(strconv.AppendUint(b, a.FloorGeneration, 10))
}

func (c *call) callOf() *call { return c }

// run admits c with one script run. On a cluster it runs on the node
// client of the key's master, for the reason execNodes gives: the
// ClusterClient's own Process re-sends a command after a network error (up
// to MaxRedirects times, whatever MaxRetries says).
//
// The releases of its in-flight key still pending go ahead of it in one
// pipeline, so that a release made before the admission runs before it.
func (s *Store) run(ctx context.Context, c call) (any, error) {
	var p scriptPipeliner = s.client
	if cluster, ok := s.client.(*redis.ClusterClient); ok {
		node, err := cluster.MasterForKey(ctx, c.keys[0])
		if err != nil {
			return nil, err
		}
		p = node
	}
	if s.rides() {
		// The releases ride the admission's own run.
		all, owned := s.riders(c.keys[1], c.fl != "")
		keys, args := script([]*call{&c}, false)
		if len(all) > 0 {
			keys, args = withReleases(all, s.channel, keys, args)
		}
		reply, err := admitScript.Run(ctx, p, keys, args...).Result()
		s.settleRiders(owned, err)
		return reply, err
	}
	var rels []release
	if c.fl != "" {
		rels = s.pend.forKey(nil, c.keys[1])
	}
	if len(rels) == 0 {
		keys, args := script([]*call{&c}, false)
		return admitScript.Run(ctx, p, keys, args...).Result()
	}
	// Their senders own them and send them again if these fail: the
	// errors are theirs to see.
	a := &admission{call: c}
	pipelineScripts(ctx, p, s.channel, []*admission{a}, rels, nil, make([]error, len(rels)), scriptOpts{})
	return a.reply, a.err
}

// refreshSlots asks a cluster client for a fresh slot map after an admission
// failed: the error may be a redirection (MOVED) or a master that no longer
// answers (a failover moves its slots to a replica), and admissions bypass
// the ClusterClient's own paths, which would have noticed. The reload runs in
// the background, at most one at a time. The recent releases go again too
// (resendAfterFailure).
func (s *Store) refreshSlots() {
	if cluster, ok := s.client.(*redis.ClusterClient); ok {
		cluster.ReloadState(context.Background())
		s.resendAfterFailure()
	}
}

// resendAfterFailure sends again the releases acknowledged since recentFor
// before the break, at most once per resendEvery: an admission
// or a look at a Cluster failed, and its node may be failing over to a
// replica that lacks some of them. The subscription's coming back does
// that only for a failover of its own node (drain.go); without this, an
// entry whose release a promoted replica lost would hold the newer
// requests of its resource for their bound. The admin's look at the store
// (Ping, every few seconds) fails too when a master dies (with an identity
// expected, as the program always has, it reads every master's record),
// so a replica that sends that master nothing meanwhile sends them again
// as well.
// Under an outage the releases it sends wait in the pending set, sent again
// until the new master takes them; sent to a node that has them, they find
// nothing.
func (s *Store) resendAfterFailure() {
	now := int64(sinceStart()) + 1 // never 0, which means never
	last := s.resent.Load()
	if last != 0 && now-last < int64(resendEvery) || !s.resent.CompareAndSwap(last, now) {
		return
	}
	s.resendRecent(false) // the break goes on: the next resend reaches as far back
}

// resendEvery is how often at most a Cluster's failures send the recent
// releases again (resendAfterFailure).
const resendEvery = 5 * time.Second

// processStart is a reading of the monotonic clock to measure from.
var processStart = time.Now()

// sinceStart is the monotonic time since processStart: unlike the wall clock, it
// never steps.
func sinceStart() time.Duration { return time.Since(processStart) }

// admitAndWait sends the script and WAIT in one pipeline, so they run on one
// connection: WAIT counts the replicas that have the writes of its own
// connection. The script always writes ("w"), so the count also covers a mark
// that an equal token relied on, or a refusal reported, and another
// connection wrote.
func (s *Store) admitAndWait(ctx context.Context, c call) (any, *redis.IntCmd, error) {
	node, err := s.nodeFor(ctx, c.keys[0])
	if err != nil {
		return nil, nil, err
	}
	// The releases of its in-flight key still pending go first (run says
	// why); on a single server inside the admission's run, with the others
	// nobody sends yet. Their senders own the rest, and send them again if
	// these fail.
	opt := scriptOpts{w: true}
	var rels, owned []release
	if s.rides() {
		opt.riders, owned = s.riders(c.keys[1], c.fl != "")
	} else if c.fl != "" {
		rels = s.pend.forKey(nil, c.keys[1])
	}
	var wait *redis.IntCmd
	opt.after = func(pipe redis.Pipeliner) {
		// Pipeliner lacks Wait; this is the command Client.Wait builds.
		wait = redis.NewIntCmd(ctx, "wait", s.minReplicas, s.waitTimeout.Milliseconds())
		_ = pipe.Process(ctx, wait)
	}
	a := &admission{call: c}
	pipelineScripts(ctx, node, s.channel, []*admission{a}, rels, nil, make([]error, len(rels)), opt)
	s.settleRiders(owned, a.err)
	return a.reply, wait, a.err
}

func isNoScript(err error) bool {
	return err != nil && (errors.Is(err, redis.ErrNoScript) || redis.HasErrorPrefix(err, "NOSCRIPT"))
}

// nodeFor returns a client whose pipelines run on one connection to the node
// that owns key. A cluster or ring client would route the keyless WAIT to some
// other node (and a cluster client re-sends the script after a lost reply: see
// execNodes).
func (s *Store) nodeFor(ctx context.Context, key string) (scriptPipeliner, error) {
	switch c := s.client.(type) {
	case masterForKeyer:
		return c.MasterForKey(ctx, key)
	case shardForKeyer:
		return c.GetShardClientForKey(key)
	}
	return s.client, nil
}

// The narrow interfaces nodeFor needs; the assertions keep them in step with
// go-redis, since a type switch would silently stop matching.
type (
	pipeliner      interface{ Pipeline() redis.Pipeliner }
	masterForKeyer interface {
		MasterForKey(context.Context, string) (*redis.Client, error)
	}
	shardForKeyer interface {
		GetShardClientForKey(string) (*redis.Client, error)
	}
)

var (
	_ masterForKeyer = (*redis.ClusterClient)(nil)
	_ shardForKeyer  = (*redis.Ring)(nil)
	_ pipeliner      = (*redis.Client)(nil)
)
