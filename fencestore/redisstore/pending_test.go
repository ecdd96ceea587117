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
