package fencestore

import (
	"math/rand/v2"
	"slices"
	"testing"
)

// JoinOrder gives the keys back in the order they joined: a key pushed
// while there keeps its place, a removed key is never given, and one
// pushed again after its removal joins last.
func TestJoinOrder(t *testing.T) {
	type step struct {
		op   string // push, remove, oldest
		key  string // push, remove: the key; oldest: the key wanted ("" for none)
		want bool   // push: joined; oldest: found
	}
	for _, tc := range []struct {
		name  string
		steps []step
		left  int
	}{
		{name: "empty", steps: []step{{op: "oldest"}}},
		{name: "first in, first out", steps: []step{
			{op: "push", key: "a", want: true}, {op: "push", key: "b", want: true}, {op: "push", key: "c", want: true},
			{op: "oldest", key: "a", want: true}, {op: "oldest", key: "b", want: true},
		}, left: 1},
		{name: "pushed again keeps its place", steps: []step{
			{op: "push", key: "a", want: true}, {op: "push", key: "b", want: true}, {op: "push", key: "a", want: false},
			{op: "oldest", key: "a", want: true}, {op: "oldest", key: "b", want: true}, {op: "oldest"},
		}},
		{name: "removed is skipped", steps: []step{
			{op: "push", key: "a", want: true}, {op: "push", key: "b", want: true}, {op: "remove", key: "a"},
			{op: "remove", key: "x"}, {op: "oldest", key: "b", want: true}, {op: "oldest"},
		}},
		{name: "back after its removal joins last", steps: []step{
			{op: "push", key: "a", want: true}, {op: "push", key: "b", want: true}, {op: "remove", key: "a"},
			{op: "push", key: "a", want: true}, {op: "oldest", key: "b", want: true}, {op: "oldest", key: "a", want: true},
		}},
		{name: "taken as oldest, then back", steps: []step{
			{op: "push", key: "a", want: true}, {op: "push", key: "b", want: true}, {op: "oldest", key: "a", want: true},
			{op: "push", key: "a", want: true}, {op: "oldest", key: "b", want: true},
		}, left: 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var q JoinOrder[string]
			for i, s := range tc.steps {
				switch s.op {
				case "push":
					if got := q.Push(s.key); got != s.want {
						t.Fatalf("step %d: Push(%q) = %v, want %v", i, s.key, got, s.want)
					}
				case "remove":
					q.Remove(s.key)
					if q.Contains(s.key) {
						t.Fatalf("step %d: %q there after Remove", i, s.key)
					}
				case "oldest":
					if k, ok := q.Oldest(); k != s.key || ok != s.want {
						t.Fatalf("step %d: Oldest() = %q, %v; want %q, %v", i, k, ok, s.key, s.want)
					}
				}
			}
			if q.Len() != tc.left {
				t.Fatalf("Len() = %d, want %d", q.Len(), tc.left)
			}
		})
	}
}

// Against a plain slice of the keys in their join order, over many random
// pushes, removals and takes: the same keys come out in the same order,
// and the stale places never outgrow twice the live keys (plus the slack
// a sweep waits for).
func TestJoinOrderMatchesModel(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	var q JoinOrder[int]
	var model []int
	for i := range 200_000 {
		k := rng.IntN(300)
		switch op := rng.IntN(10); {
		case op < 5:
			joined := !slices.Contains(model, k)
			if joined {
				model = append(model, k)
			}
			if got := q.Push(k); got != joined {
				t.Fatalf("op %d: Push(%d) = %v, want %v", i, k, got, joined)
			}
		case op < 8:
			model = slices.DeleteFunc(model, func(m int) bool { return m == k })
			q.Remove(k)
		default:
			want, found := 0, len(model) > 0
			if found {
				want, model = model[0], model[1:]
			}
			if got, ok := q.Oldest(); got != want || ok != found {
				t.Fatalf("op %d: Oldest() = %d, %v; want %d, %v", i, got, ok, want, found)
			}
		}
		if q.Len() != len(model) {
			t.Fatalf("op %d: Len() = %d, want %d", i, q.Len(), len(model))
		}
		if len(q.order) > 2*len(model)+64 {
			t.Fatalf("op %d: %d places for %d keys", i, len(q.order), len(model))
		}
	}
}
