package redisstore

import (
	"testing"
	"time"
)

// A full pending set makes room for a new release by dropping the one that
// joined first, whether its sender holds it or not: the new one is the
// likelier to be waited for, and nothing owed is sent outside the set.
func TestPendingDropsOldest(t *testing.T) {
	var p pendingReleases
	p.max = 2
	a, b, c, d := release{"k1", "a"}, release{"k2", "b"}, release{"k3", "c"}, release{"k4", "d"}
	for _, r := range []release{a, b} {
		if old, dropped := p.add(r, time.Time{}); dropped {
			t.Fatalf("add(%v) dropped %v below the bound", r, old)
		}
	}
	if !p.claim(a) { // a sender holds a
		t.Fatal("claim(a) refused")
	}
	for _, tc := range []struct {
		add, dropped release
		left         release
	}{
		{add: c, dropped: a, left: b},
		{add: d, dropped: b, left: c},
	} {
		old, dropped := p.add(tc.add, time.Time{})
		if !dropped || old != tc.dropped {
			t.Fatalf("add(%v) past the bound dropped (%v, %v); want %v", tc.add, old, dropped, tc.dropped)
		}
		if p.sending(tc.dropped) || !p.sending(tc.left) || !p.sending(tc.add) {
			t.Fatalf("after add(%v): %v still sent, or %v or %v not", tc.add, tc.dropped, tc.left, tc.add)
		}
	}
	// The sender of a dropped release finds it gone, and a failure report
	// of it changes nothing.
	if gaveUp := p.failed([]release{a}); len(gaveUp) != 0 || len(p.m) != 2 {
		t.Fatalf("failed(a) after its drop = %v, set %v", gaveUp, p.m)
	}
	// A release already there keeps its place and drops nothing.
	if old, dropped := p.add(c, time.Time{}); dropped {
		t.Fatalf("add(c) again dropped %v", old)
	}
}

// After a break, the releases acknowledged lately are sent again, but never
// at the cost of one still owed: only as many as the set has room for, the
// newest first (a promoted replica misses the newest), and none that is
// owed already.
func TestRecentReleasesFitBesideOwed(t *testing.T) {
	var p pendingReleases
	p.max = 4
	until := time.Now().Add(time.Hour)
	var acked []release
	for i := range 10 {
		r := release{"k", string(rune('a' + i))}
		p.add(r, until)
		acked = append(acked, r)
	}
	// Everything that fit (the last four added, g to j) was acknowledged,
	// one after the other; then two are owed again.
	for _, r := range acked[6:] {
		p.ackedEach([]release{r})
	}
	owed := []release{{"k", "x"}, acked[len(acked)-1]}
	for _, r := range owed {
		p.add(r, until)
	}
	got := p.resend(true)
	if len(got) != 2 {
		t.Fatalf("%d releases sent again beside 2 owed in a set of 4: %v", len(got), got)
	}
	// j is owed again: i, then h.
	if got[0].release != acked[8] || got[1].release != acked[7] {
		t.Fatalf("sent again %v, %v; want the newest not owed, %v then %v", got[0].release, got[1].release, acked[8], acked[7])
	}
	for _, r := range append(owed, acked[8], acked[7]) {
		if !p.sending(r) {
			t.Fatalf("%v not in the set after the resend", r)
		}
	}
	// The set is full: another resend adds nothing.
	if again := p.resend(true); len(again) != 0 {
		t.Fatalf("a full set took %v more", again)
	}
}
