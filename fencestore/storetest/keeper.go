package storetest

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/fenceproxy/fenceproxy/fencestore"
)

// KeeperStore is a store with its operator's side.
type KeeperStore interface {
	fencestore.Store
	fencestore.Keeper
}

// RunKeeper runs the conformance suite of the operator's side: identity,
// healing against a floor, and the marks commands. open returns a fresh,
// empty store; lose makes the store forget everything it holds (marks and
// identity), as a flush or a restart without persistence does, while s stays
// open.
func RunKeeper(t *testing.T, open func(t *testing.T) KeeperStore, lose func(t *testing.T, s KeeperStore)) {
	t.Helper()
	for _, tc := range []struct {
		name string
		fn   func(t *testing.T, s KeeperStore, lose func(t *testing.T, s KeeperStore))
	}{
		{"Identity", testIdentity},
		{"Floor", testFloor},
		{"Marks", testMarks},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := open(t)
			t.Cleanup(func() { _ = s.Close() })
			tc.fn(t, s, lose)
		})
	}
}

func testIdentity(t *testing.T, s KeeperStore, lose func(t *testing.T, s KeeperStore)) {
	ctx := ctxT(t)
	if id, err := s.Identity(ctx); err != nil || id != "" {
		t.Fatalf("fresh store: Identity = %q, %v; want none", id, err)
	}
	if has, err := s.HasMarks(ctx); err != nil || has {
		t.Fatalf("fresh store: HasMarks = %v, %v", has, err)
	}
	id, err := s.Init(ctx, false)
	if err != nil || id == "" {
		t.Fatalf("Init = %q, %v", id, err)
	}
	if got, err := s.Identity(ctx); err != nil || got != id {
		t.Fatalf("Identity after Init = %q, %v; want %q", got, err, id)
	}
	if _, err := s.Init(ctx, false); !errors.Is(err, fencestore.ErrIdentityExists) {
		t.Fatalf("Init again without force = %v, want ErrIdentityExists", err)
	}
	s.Expect(id)
	admit(t, s, "id/1", 5, fencestore.AtLeast)
	if has, err := s.HasMarks(ctx); err != nil || !has {
		t.Fatalf("HasMarks after an admission = %v, %v", has, err)
	}

	lose(t, s)
	_, err = s.Admit(ctxT(t), fencestore.Admission{Resource: "id/1", Token: 1})
	var lost *fencestore.LostError
	if !errors.As(err, &lost) || !errors.Is(err, fencestore.ErrStoreLost) || !errors.Is(err, fencestore.ErrUnavailable) {
		t.Fatalf("admission on a store that lost its identity = %v, want a *LostError wrapping ErrStoreLost and ErrUnavailable", err)
	}
	if lost.Want != id || lost.Found != "" {
		t.Fatalf("LostError = %+v, want Want %q and Found none", lost, id)
	}
	// Another replica (or a fresh start) writes a new identity: a process
	// that saw the old one still refuses.
	other, err := s.Init(ctx, false)
	if err != nil || other == id {
		t.Fatalf("Init after the loss = %q, %v", other, err)
	}
	if _, err := s.Admit(ctxT(t), fencestore.Admission{Resource: "id/1", Token: 1}); !errors.As(err, &lost) || lost.Found != other {
		t.Fatalf("admission with a changed identity = %v, want a *LostError naming %q", err, other)
	}
	// The store holds an intact record: an operator's force is refused.
	if got, err := s.Init(ctx, true); !errors.Is(err, fencestore.ErrNotLost) {
		t.Fatalf("Init --force on an intact store = %q, %v; want ErrNotLost", got, err)
	}
	// The replica that found the loss marks the store lost: a replica
	// that starts cold reads the lost record, never a usable identity.
	marked, err := s.MarkLost(ctx, id)
	if err != nil || !fencestore.IsLostRecord(marked) {
		t.Fatalf("MarkLost = %q, %v; want a lost record", marked, err)
	}
	if got, err := s.Identity(ctx); err != nil || got != marked {
		t.Fatalf("Identity after MarkLost = %q, %v; want %q", got, err, marked)
	}
	if again, err := s.MarkLost(ctx, other); err != nil || again != marked {
		t.Fatalf("MarkLost again = %q, %v; want the lost record kept (%q)", again, err, marked)
	}
	// The operator re-initialises, and this process expects the new one.
	renewed, err := s.Init(ctx, true)
	if err != nil || renewed == other || !fencestore.Forced(renewed) {
		t.Fatalf("Init --force = %q, %v", renewed, err)
	}
	// A replica that finds the store lost after the operator forced a
	// record leaves the operator's record alone.
	if held, err := s.MarkLost(ctx, id); err != nil || held != renewed {
		t.Fatalf("MarkLost after the force = %q, %v; want the forced record %q kept", held, err, renewed)
	}
	s.Expect(renewed)
	if d := admit(t, s, "id/1", 1, fencestore.AtLeast); !d.Admitted {
		t.Fatalf("after Init --force: %+v", d)
	}
	// A second force (over an operator's own forced record) is allowed,
	// and a replica still expecting the first takes it for lost until it
	// takes up the newer one (Supersedes).
	second, err := s.Init(ctx, true)
	if err != nil || second == renewed || !fencestore.Supersedes(second, renewed) {
		t.Fatalf("second Init --force = %q, %v", second, err)
	}
	// The record the replicas expect was forced on a host whose clock is
	// an hour ahead of this one, and a replica found the store lost
	// since: the next force, stamped here, still supersedes it, or no
	// replica would ever take it up.
	ahead := fmt.Sprintf("forced-%013d-%032x", time.Now().Add(time.Hour).UnixMilli(), 1)
	ctx = ctxT(t) // a Cluster writes every slot's record in each step: a bound of their own
	marked, err = s.MarkLost(ctx, ahead)
	if err != nil || !fencestore.IsLostRecord(marked) {
		t.Fatalf("MarkLost(%q) over %q = %q, %v; want a lost record", ahead, second, marked, err)
	}
	third, err := s.Init(ctx, true)
	if err != nil || !fencestore.Supersedes(third, ahead) {
		t.Fatalf("Init --force after a record forced by a clock an hour ahead = %q, %v; want a record that supersedes %q", third, err, ahead)
	}
	// And a force over that one, at once, supersedes it too.
	if fourth, err := s.Init(ctx, true); err != nil || !fencestore.Supersedes(fourth, third) {
		t.Fatalf("Init --force over %q = %q, %v; want a record that supersedes it", third, fourth, err)
	}
}

// Generation is the store generation (fencestore/generation.go): every
// admission reports it, every mark write advances it, an operator's
// change of marks sets aside the floors seen before it, and a store that
// went back (restore sets it back, as a restored backup would) fails with
// a *LostError whose Rollback is set, writing nothing. restore is nil for
// a store that cannot be rolled back in a test.
func RunGeneration(t *testing.T, open func(t *testing.T) KeeperStore, restore func(t *testing.T, s KeeperStore, to uint64)) {
	t.Helper()
	s := open(t)
	t.Cleanup(func() { _ = s.Close() })
	ctx := ctxT(t)
	id, err := s.Init(ctx, false)
	if err != nil {
		t.Fatal(err)
	}
	s.Expect(id)
	d1 := admit(t, s, "gen/1", 5, fencestore.AtLeast)
	d2 := admit(t, s, "gen/1", 5, fencestore.AtLeast) // writes nothing
	d3 := admit(t, s, "gen/1", 6, fencestore.AtLeast)
	if d1.Generation == 0 || d2.Generation != d1.Generation || d3.Generation <= d2.Generation {
		t.Fatalf("generations %d, %d, %d: want above 0, the same after an admission that wrote nothing, then more", d1.Generation, d2.Generation, d3.Generation)
	}

	// The operator resets gen/1 to 2: a floor of 6 seen before it is set
	// aside, and token 3 is admitted against the operator's mark.
	if _, _, err := s.Reset(ctx, "gen/1", &fencestore.Mark{Token: 2}); err != nil {
		t.Fatal(err)
	}
	d, err := s.Admit(ctxT(t), fencestore.Admission{Resource: "gen/1", Token: 3, Floor: fencestore.Mark{Token: 6}, HasFloor: true, FloorGeneration: d3.Generation})
	if err != nil || !d.Admitted || !d.FloorVoid || d.Regressed || d.Mark != 3 {
		t.Fatalf("token 3 after a reset to 2, with a floor of 6 seen before it = %+v, %v; want admitted, the floor set aside", d, err)
	}
	// A token that passes a floor seen before an operator's change, over
	// a mark the operator put below that floor: admitted on the store's
	// own mark, and no regression reported (nothing was lost).
	// (The floor's generation is the one of its own resource's part of
	// the store: a Redis Cluster keeps one per slot.)
	seen := admit(t, s, "gen/5", 6, fencestore.AtLeast).Generation
	if _, _, err := s.Reset(ctx, "gen/5", &fencestore.Mark{Token: 2}); err != nil {
		t.Fatal(err)
	}
	d, err = s.Admit(ctxT(t), fencestore.Admission{Resource: "gen/5", Token: 7, Floor: fencestore.Mark{Token: 6}, HasFloor: true, FloorGeneration: seen})
	if err != nil || !d.Admitted || !d.FloorVoid || d.Regressed || d.Mark != 7 {
		t.Fatalf("token 7 after a reset to 2, with a floor of 6 seen before it = %+v, %v; want admitted, the floor set aside, no regression", d, err)
	}
	// A floor seen after the reset still heals.
	if _, _, err := s.Reset(ctx, "gen/2", nil); err != nil {
		t.Fatal(err)
	}
	after := admit(t, s, "gen/x", 1, fencestore.AtLeast).Generation
	d, err = s.Admit(ctxT(t), fencestore.Admission{Resource: "gen/2", Token: 1, Floor: fencestore.Mark{Token: 9}, HasFloor: true, FloorGeneration: after})
	if err != nil || d.Admitted || !d.Regressed || d.FloorVoid || d.Mark != 9 {
		t.Fatalf("token 1 against a floor of 9 seen after the last reset = %+v, %v; want refused against the floor", d, err)
	}
	// A raise is an operator's change too: a floor of 6 seen before the
	// raise to 4 is set aside, and token 5 is admitted.
	seen = admit(t, s, "gen/3", 1, fencestore.AtLeast).Generation
	if _, _, _, err := s.Raise(ctx, "gen/3", fencestore.Mark{Token: 4}); err != nil {
		t.Fatal(err)
	}
	d, err = s.Admit(ctxT(t), fencestore.Admission{Resource: "gen/3", Token: 5, Floor: fencestore.Mark{Token: 6}, HasFloor: true, FloorGeneration: seen})
	if err != nil || !d.Admitted || !d.FloorVoid || d.Mark != 5 {
		t.Fatalf("token 5 after a raise to 4, with a floor of 6 seen before it = %+v, %v; want admitted, the floor set aside", d, err)
	}
	if restore == nil {
		return
	}
	// The generation of gen/4's part of the store (its slot on a Redis
	// Cluster): at least 1, its own write.
	last := admit(t, s, "gen/4", 1, fencestore.AtLeast).Generation
	restore(t, s, last-1)
	// Token 2 over the mark 1: an admission that wrote anything would
	// leave 2 behind.
	_, err = s.Admit(ctxT(t), fencestore.Admission{Resource: "gen/4", Token: 2})
	var lost *fencestore.LostError
	if !errors.As(err, &lost) || !lost.Rollback || lost.Seen != last || lost.Got != last-1 || !errors.Is(err, fencestore.ErrStoreLost) {
		t.Fatalf("admission on a store gone back from %d to %d = %v, want a *LostError with Rollback", last, last-1, err)
	}
	if m, _, err := s.Get(ctx, "gen/4"); err != nil || m.Token != 1 {
		t.Fatalf("gen/4 after the refused admission = %+v, %v", m, err)
	}
	// Its next admission too: nothing heals a rollback but an operator
	// (on a Redis Cluster, one in another slot is the replica's to stop:
	// it marks the whole store lost).
	if _, err := s.Admit(ctxT(t), fencestore.Admission{Resource: "gen/4", Token: 2}); !errors.As(err, &lost) {
		t.Fatalf("second admission on a store gone back = %v, want a *LostError", err)
	}
}

func testFloor(t *testing.T, s KeeperStore, _ func(t *testing.T, s KeeperStore)) {
	ctx := ctxT(t)
	floor := fencestore.Mark{Token: 10}
	admit(t, s, "f/1", 10, fencestore.AtLeast)
	if _, _, err := s.Reset(ctx, "f/1", nil); err != nil {
		t.Fatal(err)
	}
	steps := []struct {
		a          fencestore.Admission
		admitted   bool
		regressed  bool
		markAfter  fencestore.Mark
		storedMark fencestore.Mark
	}{
		// The mark is gone; 5 is refused against the floor, which is
		// written back.
		{fencestore.Admission{Resource: "f/1", Token: 5, Floor: floor, HasFloor: true}, false, true, floor, floor},
		// Healed: the same floor finds nothing to raise.
		{fencestore.Admission{Resource: "f/1", Token: 9, Floor: floor, HasFloor: true}, false, false, floor, floor},
		// An equal token under >= is admitted and the mark stays.
		{fencestore.Admission{Resource: "f/1", Token: 10, Floor: floor, HasFloor: true}, true, false, floor, floor},
	}
	for i, st := range steps {
		d, err := s.Admit(ctxT(t), st.a)
		if err != nil {
			t.Fatalf("step %d: %v", i, err)
		}
		got := fencestore.Mark{Token: d.Mark, Sequence: d.Sequence, HasSequence: d.HasSequence}
		if d.Admitted != st.admitted || d.Regressed != st.regressed || got != st.markAfter {
			t.Fatalf("step %d (%+v): %+v, want admitted %v regressed %v mark %+v", i, st.a, d, st.admitted, st.regressed, st.markAfter)
		}
		if m, ok, err := s.Get(ctx, "f/1"); err != nil || !ok || m != st.storedMark {
			t.Fatalf("step %d: stored mark %+v, %v, %v; want %+v", i, m, ok, err, st.storedMark)
		}
	}
	// A regressed mark (3 < floor 10) and a newer token: admitted, and the
	// mark becomes the token, not the floor.
	if _, _, err := s.Reset(ctx, "f/2", &fencestore.Mark{Token: 3}); err != nil {
		t.Fatal(err)
	}
	d, err := s.Admit(ctxT(t), fencestore.Admission{Resource: "f/2", Token: 11, Floor: floor, HasFloor: true})
	if err != nil || !d.Admitted || !d.Regressed || d.Mark != 11 {
		t.Fatalf("11 over a regressed mark: %+v, %v", d, err)
	}
	// A floor with a sequence: (7, 2) stored below (7, 4).
	if _, _, err := s.Reset(ctx, "f/3", &fencestore.Mark{Token: 7, Sequence: 2, HasSequence: true}); err != nil {
		t.Fatal(err)
	}
	seqFloor := fencestore.Mark{Token: 7, Sequence: 4, HasSequence: true}
	d, err = s.Admit(ctxT(t), fencestore.Admission{Resource: "f/3", Token: 7, Sequence: 3, HasSequence: true, Floor: seqFloor, HasFloor: true})
	if err != nil || d.Admitted || !d.Regressed || d.Sequence != 4 || !d.StaleSequence(fencestore.Admission{Token: 7, HasSequence: true}) {
		t.Fatalf("(7,3) over a regressed (7,2) with floor (7,4): %+v, %v", d, err)
	}
}

func testMarks(t *testing.T, s KeeperStore, _ func(t *testing.T, s KeeperStore)) {
	ctx := ctxT(t)
	for i := range 5 {
		admit(t, s, fmt.Sprintf("m/%d", i), uint64(10+i), fencestore.AtLeast)
	}
	admit(t, s, "other/1", 1, fencestore.AtLeast)
	if _, err := s.Admit(ctx, fencestore.Admission{Resource: "m/0", Token: 10, Sequence: 3, HasSequence: true}); err != nil {
		t.Fatal(err)
	}
	if m, ok, err := s.Get(ctx, "m/0"); err != nil || !ok || m != (fencestore.Mark{Token: 10, Sequence: 3, HasSequence: true}) {
		t.Fatalf("Get m/0 = %+v, %v, %v", m, ok, err)
	}
	if _, ok, err := s.Get(ctx, "m/none"); err != nil || ok {
		t.Fatalf("Get of an absent mark = %v, %v", ok, err)
	}

	// Paging: every m/ mark exactly once, none of other/.
	seen := map[string]fencestore.Mark{}
	cursor, pages := "", 0
	for {
		page, next, err := s.List(ctx, "m/", cursor, 2)
		if err != nil {
			t.Fatal(err)
		}
		pages++
		for _, e := range page {
			if _, dup := seen[e.Resource]; dup {
				t.Fatalf("List returned %s twice", e.Resource)
			}
			seen[e.Resource] = e.Mark
		}
		if next == "" {
			break
		}
		if pages > 10 {
			t.Fatal("List does not end")
		}
		cursor = next
	}
	if len(seen) != 5 || seen["m/4"].Token != 14 || seen["m/0"].Sequence != 3 {
		t.Fatalf("List m/ = %+v", seen)
	}

	// Raise moves forward only.
	old, had, changed, err := s.Raise(ctx, "m/1", fencestore.Mark{Token: 5})
	if err != nil || !had || changed || old.Token != 11 {
		t.Fatalf("Raise below the mark = %+v %v %v %v; want unchanged 11", old, had, changed, err)
	}
	old, had, changed, err = s.Raise(ctx, "m/1", fencestore.Mark{Token: 50})
	if err != nil || !had || !changed || old.Token != 11 {
		t.Fatalf("Raise above the mark = %+v %v %v %v", old, had, changed, err)
	}
	if _, had, changed, err := s.Raise(ctx, "m/new", fencestore.Mark{Token: 3}); err != nil || had || !changed {
		t.Fatalf("Raise of an absent mark: %v %v %v", had, changed, err)
	}
	if d := admit(t, s, "m/1", 49, fencestore.AtLeast); d.Admitted {
		t.Fatal("49 admitted after the mark was raised to 50")
	}
	// Reset moves backward, or deletes.
	if old, had, err := s.Reset(ctx, "m/1", &fencestore.Mark{Token: 2}); err != nil || !had || old.Token != 50 {
		t.Fatalf("Reset = %+v %v %v", old, had, err)
	}
	if d := admit(t, s, "m/1", 3, fencestore.AtLeast); !d.Admitted {
		t.Fatal("3 refused after a reset to 2")
	}
	if _, had, err := s.Reset(ctx, "m/1", nil); err != nil || !had {
		t.Fatalf("Reset (delete) = %v %v", had, err)
	}
	if _, ok, err := s.Get(ctx, "m/1"); err != nil || ok {
		t.Fatalf("Get after delete: %v %v", ok, err)
	}
}
