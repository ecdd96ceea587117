package fencestore

import (
	"testing"
	"time"
)

// Every waiter of a process times an entry from the first sighting of it:
// a later waiter continues that observation, an earlier one (its reply
// came first, its Drain later) moves it back; a forgotten entry is timed
// anew; the table drops what was abandoned long ago.
func TestWatched(t *testing.T) {
	var w Watched[string]
	t0 := time.Now()
	const bound = 2 * time.Second
	for _, tc := range []struct {
		name string
		id   string
		seen time.Time
		want time.Time
	}{
		{"first sighting", "e1", t0, t0.Add(bound + AbandonMargin)},
		{"a later waiter continues it", "e1", t0.Add(time.Second), t0.Add(bound + AbandonMargin)},
		{"an earlier reply moves it back", "e1", t0.Add(-time.Second), t0.Add(-time.Second + bound + AbandonMargin)},
		{"another entry has its own", "e2", t0.Add(time.Second), t0.Add(time.Second + bound + AbandonMargin)},
	} {
		if got := w.AbandonAt(tc.id, tc.seen, bound); !got.Equal(tc.want) {
			t.Errorf("%s: AbandonAt(%s) = %v, want %v", tc.name, tc.id, got.Sub(t0), tc.want.Sub(t0))
		}
	}
	w.Forget("e1")
	if got, want := w.AbandonAt("e1", t0.Add(3*time.Second), bound), t0.Add(3*time.Second+bound+AbandonMargin); !got.Equal(want) {
		t.Errorf("after Forget: AbandonAt = %v, want %v", got.Sub(t0), want.Sub(t0))
	}
	// Long abandoned: swept at the next sighting of anything.
	w.swept = time.Time{}
	w.AbandonAt("old", t0.Add(-(bound + AbandonMargin + watchedKeep + time.Second)), bound)
	w.swept = time.Time{}
	w.AbandonAt("e2", t0, bound)
	if n := w.size(); n != 2 {
		t.Errorf("after a sweep: %d entries, want 2 (e1, e2)", n)
	}
}
