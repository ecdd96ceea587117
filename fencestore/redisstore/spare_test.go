package redisstore

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/fenceproxy/fenceproxy/fencestore"
	"github.com/fenceproxy/fenceproxy/fencestore/redisstore/redistest"
)

// abandonOf is the release abandon sends for an admission of token with
// id on key: its member names the order and id, not the bound.
func abandonOf(key string, token uint64, id string) release {
	return release{key: key, member: order41(fencestore.Mark{Token: token}) + abandonMark + id}
}

// releaseOf is the release of an entry admitted with token, bound and id
// on key, its member as flight.lua makes it.
func releaseOf(key string, token uint64, id string) release {
	return release{key: key, member: order41(fencestore.Mark{Token: token}) + ":000000060000:" + id}
}

// An abandon is told from its member as flight.lua tells it: ":*:" where
// a member holds its bound.
func TestReleaseAbandons(t *testing.T) {
	seq := order41(fencestore.Mark{Token: 3, Sequence: 9, HasSequence: true})
	for _, tc := range []struct {
		name   string
		r      release
		abandn bool
	}{
		{"entry", releaseOf("k", 7, "id1"), false},
		{"abandon", abandonOf("k", 7, "id1"), true},
		{"abandon with a sequence", release{key: "k", member: seq + abandonMark + "id1"}, true},
		{"entry with a sequence", release{key: "k", member: seq + ":000000000500:id1"}, false},
		{"star in the id", release{key: "k", member: order41(fencestore.Mark{Token: 7}) + ":000000000500:a:*:b"}, false},
		{"short", release{key: "k", member: ":*:"}, false},
	} {
		if got := tc.r.abandons(); got != tc.abandn {
			t.Errorf("%s: %q abandons = %v, want %v", tc.name, tc.r.member, got, tc.abandn)
		}
	}
}

// A full pending set drops the oldest abandon before any release whose
// entry certainly exists, and the oldest release only when it holds no
// abandon: in a partition, the abandons of timed-out admissions must not
// push out the releases the store owes for sure.
func TestPendingDropsAbandonFirst(t *testing.T) {
	r1, r2, r3, r4 := releaseOf("k1", 1, "a"), releaseOf("k2", 2, "b"), releaseOf("k3", 3, "c"), releaseOf("k4", 4, "d")
	a1, a2, a3 := abandonOf("k5", 5, "e"), abandonOf("k6", 6, "f"), abandonOf("k7", 7, "g")
	type step struct {
		add     release
		done    bool    // done(add) instead of add(add)
		dropped release // zero: none
	}
	for _, tc := range []struct {
		name  string
		fill  []release // added first, below the bound of 3
		steps []step
		left  []release
	}{
		{name: "an abandon goes before an older release", fill: []release{r1, a1, r2},
			steps: []step{{add: r3, dropped: a1}}, left: []release{r1, r2, r3}},
		{name: "the oldest abandon goes first", fill: []release{a1, r1, a2},
			steps: []step{{add: r2, dropped: a1}, {add: r3, dropped: a2}}, left: []release{r1, r2, r3}},
		{name: "no abandon: the oldest release", fill: []release{r1, r2, r3},
			steps: []step{{add: r4, dropped: r1}}, left: []release{r2, r3, r4}},
		{name: "an abandon joins a full set of releases, then goes first", fill: []release{r1, r2, r3},
			steps: []step{{add: a1, dropped: r1}, {add: r4, dropped: a1}}, left: []release{r2, r3, r4}},
		{name: "an abandon dropped makes room for another", fill: []release{r1, r2, a1},
			steps: []step{{add: a2, dropped: a1}, {add: a3, dropped: a2}}, left: []release{r1, r2, a3}},
		{name: "an abandon acknowledged leaves no place behind", fill: []release{a1, r1, r2},
			steps: []step{{add: a1, done: true}, {add: a2}, {add: r3, dropped: a2}}, left: []release{r1, r2, r3}},
		{name: "an abandon added again keeps its place", fill: []release{a1, a2, r1},
			steps: []step{{add: a1}, {add: r2, dropped: a1}}, left: []release{a2, r1, r2}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var p pendingReleases
			p.max = 3
			until := time.Now().Add(time.Hour)
			for _, r := range tc.fill {
				if old, dropped := p.add(r, until); dropped {
					t.Fatalf("add(%v) below the bound dropped %v", r, old)
				}
			}
			for i, s := range tc.steps {
				if s.done {
					p.done([]release{s.add})
					continue
				}
				old, dropped := p.add(s.add, until)
				if want := s.dropped != (release{}); dropped != want || old != s.dropped {
					t.Fatalf("step %d: add(%v) dropped (%v, %v), want %v", i, s.add, old, dropped, s.dropped)
				}
			}
			if len(p.m) != len(tc.left) {
				t.Fatalf("%d in the set, want %v", len(p.m), tc.left)
			}
			for _, r := range tc.left {
				if !p.sending(r) {
					t.Errorf("%v not in the set", r)
				}
			}
		})
	}
}

// Releases sent again after a break never cost one still owed, even when
// releases are made while they are put back: the resend fills only the
// room there is, and the releases it puts back are the first to go when
// the set is full. Run with -race: the resend and the adds interleave
// anyhow, many times over.
func TestResendDropsNothingOwed(t *testing.T) {
	const (
		size   = 8
		owed   = 2        // in the set when the resend starts
		later  = size - 2 // made during the resend: with the owed, they fill the set
		recent = 6
		rounds = 300
	)
	for round := range rounds {
		var p pendingReleases
		p.max = size
		until := time.Now().Add(time.Hour)
		for i := range recent {
			r := releaseOf("acked", uint64(i), fmt.Sprint(round))
			p.add(r, until)
			p.ackedEach([]release{r})
		}
		var owes []release
		for i := range owed + later {
			owes = append(owes, releaseOf(fmt.Sprint("k", i), uint64(i), fmt.Sprint(round)))
		}
		for _, r := range owes[:owed] {
			p.add(r, until)
		}
		var wg sync.WaitGroup
		var mu sync.Mutex
		var drops []release
		start := make(chan struct{})
		wg.Add(2)
		go func() {
			defer wg.Done()
			<-start
			p.resend(true)
		}()
		go func() {
			defer wg.Done()
			<-start
			for _, r := range owes[owed:] {
				if old, dropped := p.add(r, until); dropped {
					mu.Lock()
					drops = append(drops, old)
					mu.Unlock()
				}
			}
		}()
		close(start)
		wg.Wait()
		for _, r := range owes {
			if !p.sending(r) {
				t.Fatalf("round %d: %v, owed, left the set (dropped: %v)", round, r, drops)
			}
		}
		if len(p.m) > size {
			t.Fatalf("round %d: %d in a set of %d", round, len(p.m), size)
		}
	}
}

// A timed-out admission's abandon, made by a real store against a frozen
// Redis, is the one a full pending set drops: the releases of flights that
// certainly ran stay owed, and reach the store once it answers again.
func TestPartitionDropsAbandonFirst(t *testing.T) {
	srv := redistest.Start(t)
	c := srv.Client(t)
	s := New(redis.NewClient(srv.Options()), Options{KeyPrefix: "spare:", MaxBatch: -1})
	t.Cleanup(func() { srv.Cont(); _ = s.Close() })
	s.pend.mu.Lock()
	s.pend.max = 3
	s.pend.mu.Unlock()
	ctx := t.Context()
	// Three flights that certainly ran, on connections ready before the
	// freeze.
	var fs []fencestore.Flight
	for _, res := range []string{"r1", "r2", "r4"} {
		d, err := s.Admit(ctx, fencestore.Admission{Resource: res, Token: 1, Flight: time.Minute})
		if err != nil || !d.Flight.Registered() {
			t.Fatalf("Admit(%s) = %+v, %v", res, d, err)
		}
		fs = append(fs, d.Flight)
	}
	srv.Stop()
	s.Release(fs[0])
	s.Release(fs[1])
	actx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
	_, err := s.Admit(actx, fencestore.Admission{Resource: "r3", Token: 1, Flight: time.Minute})
	cancel()
	if !errors.Is(err, fencestore.ErrUnavailable) {
		t.Fatalf("Admit against a frozen Redis = %v, want unavailable", err)
	}
	fkey3, _ := flightKey("spare:r3")
	spare := func() (n int) {
		s.pend.mu.Lock()
		defer s.pend.mu.Unlock()
		for r, e := range s.pend.m {
			if r.key == fkey3 && e.spare {
				n++
			}
		}
		return n
	}
	if n := spare(); n != 1 {
		t.Fatalf("%d spare releases of the timed-out admission owed, want its abandon", n)
	}
	s.Release(fs[2]) // the set is full: the abandon goes
	if n := s.DroppedReleases(); n != 1 {
		t.Fatalf("DroppedReleases = %d, want 1", n)
	}
	if n := spare(); n != 0 {
		t.Fatalf("the abandon still owed after a release made room")
	}
	for _, f := range fs {
		if !s.pend.sending(release{key: f.Key, member: f.Ref}) {
			t.Fatalf("the release of %s left the set", f.Key)
		}
	}
	srv.Cont()
	redistest.Poll(t, 20*time.Second, "the owed releases acknowledged", func() error {
		for _, f := range fs {
			if err := c.ZScore(ctx, f.Key, f.Ref).Err(); !errors.Is(err, redis.Nil) {
				return fmt.Errorf("entry %s of %s: ZSCORE = %v", f.Ref, f.Key, err)
			}
		}
		return nil
	})
}

// add on a full set, as in a long outage: every release makes room.
func BenchmarkPendingAddFull(b *testing.B) {
	var p pendingReleases
	p.max = maxPendingReleases
	until := time.Now().Add(time.Hour)
	for i := range p.max {
		p.add(releaseOf("k", uint64(i), "x"), until)
	}
	rs := make([]release, 4096)
	for i := range rs {
		rs[i] = releaseOf("k", uint64(p.max+i), "y")
	}
	b.ResetTimer()
	for i := range b.N {
		p.add(rs[i%len(rs)], until)
	}
}

// A release sent again (acknowledged once, put back by resend) that a full
// set drops is told apart from one still owed or an abandon: the store
// neither counts nor warns of it as a release dropped unacknowledged.
func TestPendingTellsResendDropped(t *testing.T) {
	r1, r2, r3, r4 := releaseOf("k1", 1, "a"), releaseOf("k2", 2, "b"), releaseOf("k3", 3, "c"), releaseOf("k4", 4, "d")
	a1 := abandonOf("k5", 5, "e")
	until := time.Now().Add(time.Hour)
	p := pendingReleases{max: 2}
	p.add(r1, until)
	p.ackedEach([]release{r1})
	if got := p.resend(true); len(got) != 1 || got[0].release != r1 {
		t.Fatalf("resend = %v; want r1 back", got)
	}
	p.add(a1, until) // full: r1 (spare, sent again) and a1 (spare, an abandon)
	for _, tc := range []struct {
		add, dropped release
		resent       bool
	}{{r2, r1, true}, {r3, a1, false}, {r4, r2, false}} {
		old, dropped, resent := p.addTelling(tc.add, until)
		if !dropped || old != tc.dropped || resent != tc.resent {
			t.Fatalf("addTelling(%v) = %v, %v, resent %v; want %v dropped, resent %v", tc.add, old, dropped, resent, tc.dropped, tc.resent)
		}
	}
}

// A copy sent again and acknowledged is not remembered anew: only its
// first acknowledgement counts for the next resend, which leaves it out
// once recentFor has passed since then.
func TestResendAckedNotRememberedAgain(t *testing.T) {
	// A release and an abandon alike: a resent abandon is told by how it
	// joined the set, not by its member.
	for _, r1 := range []release{releaseOf("k1", 1, "a"), abandonOf("k1", 1, "a")} {
		p := pendingReleases{max: 4}
		p.add(r1, time.Now().Add(time.Hour))
		p.ackedEach([]release{r1})
		first := p.recent[0].at
		if got := p.resend(true); len(got) != 1 {
			t.Fatalf("resend = %v; want %v", got, r1)
		}
		p.ackedEach([]release{r1})
		if len(p.recent) != 1 || p.recent[0].at != first {
			t.Fatalf("recent = %v; want %v once, from its first acknowledgement", p.recent, r1)
		}
		// Sent again, then dropped from a full set: no loss to count.
		p.resend(true)
		for i := range 4 {
			if old, dropped, resent := p.addTelling(releaseOf("k2", 1, strconv.Itoa(i)), time.Now().Add(time.Hour)); dropped && (old != r1 || !resent) {
				t.Fatalf("dropped %v, resent %v; want %v, resent", old, resent, r1)
			}
		}
	}
}

// A resend reaches back to recentFor before the break began, not before
// its own moment: a failover takes as long as the cluster needs to judge
// the master failed (5 to 30 s in production), far past recentFor, and
// the releases a promoted replica may lack are those acknowledged just
// before the crash (sent first) or during a cut, when the master kept
// answering (sent next). The break's start stays while failures go on,
// whatever is acknowledged meanwhile (a release owed across the break
// retried and failing, the promoted replica answering), until a resend
// uses it or the failures stopped for breakFresh.
func TestResendLooksBackFromBreak(t *testing.T) {
	now := time.Now()
	until := now.Add(time.Hour)
	at := func(d time.Duration) time.Time { return now.Add(d) }
	owed := releaseOf("owed", 1, "owed")
	type ack struct {
		name string
		at   time.Duration // from now
	}
	for _, tc := range []struct {
		name   string
		room   int
		acks   []ack
		breaks func(p *pendingReleases)
		want   []string
	}{
		{
			name: "a 20 s failover",
			acks: []ack{{"long-before", -32 * time.Second}, {"before", -20*time.Second - time.Millisecond}, {"after", -2 * time.Second}},
			breaks: func(p *pendingReleases) {
				p.failure(at(-20 * time.Second))
				p.failure(at(-15 * time.Second)) // the same break
			},
			want: []string{"before", "after"},
		},
		{
			name: "a release owed across the break",
			acks: []ack{{"before", -21 * time.Second}, {"after", -5 * time.Second}},
			breaks: func(p *pendingReleases) {
				p.failure(at(-20 * time.Second))
				p.add(owed, until)
				p.failed([]release{owed}) // retried now, failing again
				p.ackedEach(nil)          // a pipeline that acknowledged nothing
			},
			want: []string{"before", "after"},
		},
		{
			name: "room for the break's releases first",
			room: 2,
			acks: []ack{{"b1", -22 * time.Second}, {"b2", -21 * time.Second}, {"a1", -2 * time.Second}, {"a2", -time.Second}},
			breaks: func(p *pendingReleases) {
				p.failure(at(-20 * time.Second))
			},
			want: []string{"b2", "b1"},
		},
		{
			name: "a start kept by failures for hours: at most lookBack ago",
			acks: []ack{{"too-old", -lookBack - recentFor - 10*time.Second}, {"oldest-taken", -lookBack - recentFor + 5*time.Second}},
			breaks: func(p *pendingReleases) {
				p.brokeAt, p.failedAt = at(-3*time.Hour), at(-time.Second)
			},
			want: []string{"oldest-taken"},
		},
		{
			name:   "no break seen: the last recentFor",
			acks:   []ack{{"old", -recentFor - time.Second}, {"new", -time.Second}},
			breaks: func(*pendingReleases) {},
			want:   []string{"new"},
		},
		{
			name: "a break that ended long ago: the last recentFor",
			acks: []ack{{"then", -61 * time.Second}, {"now", -time.Second}},
			breaks: func(p *pendingReleases) {
				p.failure(at(-60 * time.Second))
				p.failure(at(-breakFresh - time.Second))
			},
			want: []string{"now"},
		},
		{
			name: "a later break, the first long over",
			acks: []ack{{"first", -71 * time.Second}, {"second", -22 * time.Second}, {"third", -time.Second}},
			breaks: func(p *pendingReleases) {
				p.failure(at(-70 * time.Second))
				p.failure(at(-20 * time.Second))
			},
			want: []string{"second", "third"},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := pendingReleases{max: 16}
			if tc.room > 0 {
				p.max = tc.room
			}
			name := map[release]string{}
			for _, a := range tc.acks {
				r := releaseOf("k", 1, a.name)
				name[r] = a.name
				p.recent = append(p.recent, ackedRelease{release: r, until: until, at: at(a.at)})
			}
			tc.breaks(&p)
			var got []string
			for _, r := range p.resend(true) {
				got = append(got, name[r.release])
			}
			if !slices.Equal(got, tc.want) {
				t.Errorf("resend = %v; want %v", got, tc.want)
			}
		})
	}
}

// A resend while the break goes on (a Cluster's failed admission or look,
// every few seconds) leaves the break's start for the next one: after a
// failover of any length, it still reaches back to before the crash. The
// subscription's return ends the break.
func TestResendWhileBreakGoesOn(t *testing.T) {
	now := time.Now()
	before := releaseOf("k", 1, "before")
	p := pendingReleases{max: 16}
	p.recent = []ackedRelease{{release: before, until: now.Add(time.Hour), at: now.Add(-21 * time.Second)}}
	p.failure(now.Add(-20 * time.Second))
	for i := range 3 {
		got := p.resend(false)
		if len(got) != 1 || got[0].release != before {
			t.Fatalf("resend %d while the break goes on = %v; want the release of before the break", i, got)
		}
		p.ackedEach([]release{before}) // taken by the promoted replica, or found nothing
		p.failure(time.Now())
	}
	if got := p.resend(true); len(got) != 1 {
		t.Fatalf("the subscription's resend = %v; want the release of before the break", got)
	}
	if got := p.resend(true); len(got) != 0 {
		t.Fatalf("a resend after the break ended = %v; want none (it is older than recentFor)", got)
	}
}
