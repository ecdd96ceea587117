package fencestore

import (
	"errors"
	"fmt"
	"testing"
	"time"
)

// An operator's force is refused over an intact record and otherwise
// stamped after every stamp the store holds, whatever this host's clock:
// the replicas take up only a record stamped no earlier than the one they
// expect.
func TestForceOver(t *testing.T) {
	now := time.Now().UnixMilli()
	ahead := fmt.Sprintf("forced-%013d-%032x", now+3_600_000, 1)
	lostAhead := LostRecord(ahead)
	intact := NewIdentity()
	for _, tc := range []struct {
		name  string
		held  []string
		after int64 // the stamp the new record must exceed (-1: refused)
	}{
		{"none", []string{""}, now - 1},
		{"no copies", nil, now - 1},
		{"intact", []string{intact}, -1},
		{"intact in every copy", []string{intact, intact}, -1},
		{"a copy emptied", []string{intact, ""}, now - 1},
		{"forced ahead", []string{ahead}, now + 3_600_000},
		{"lost over a record forced ahead", []string{lostAhead}, now + 3_600_000},
		{"copies, one forced ahead", []string{"", ahead}, now + 3_600_000},
		{"lost over an unforced record", []string{LostRecord(intact)}, now - 1},
		{"forced before stamps were kept", []string{"forced-" + intact}, now - 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := ForceOver(tc.held...)
			if tc.after < 0 {
				if !errors.Is(err, ErrNotLost) {
					t.Fatalf("ForceOver(%q) = %q, %v; want ErrNotLost", tc.held, got, err)
				}
				return
			}
			if err != nil || !Forced(got) || forcedAt(got) <= tc.after {
				t.Fatalf("ForceOver(%q) = %q, %v; want a forced record stamped after %d", tc.held, got, err, tc.after)
			}
			for _, h := range tc.held {
				if Forced(h) && !Supersedes(got, h) {
					t.Errorf("ForceOver(%q) = %q does not supersede %q", tc.held, got, h)
				}
			}
		})
	}
}

// MarkLost's rule: a lost record or a newer forced one stays; anything
// else is replaced by a lost record that carries the stamp of the record
// expected, so that the next force supersedes that one.
func TestLostOver(t *testing.T) {
	want := fmt.Sprintf("forced-%013d-%032x", time.Now().Add(time.Hour).UnixMilli(), 2)
	newer := fmt.Sprintf("forced-%013d-%032x", time.Now().Add(2*time.Hour).UnixMilli(), 3)
	older := fmt.Sprintf("forced-%013d-%032x", time.Now().UnixMilli(), 4)
	lost := LostRecord("")
	for _, tc := range []struct {
		name, held string
		keep       bool
	}{
		{"none", "", false},
		{"intact", NewIdentity(), false},
		{"the record expected", want, false},
		{"forced before it (a backup)", older, false},
		{"forced since", newer, true},
		{"lost already", lost, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, keep := LostOver(tc.held, want)
			switch {
			case keep != tc.keep:
				t.Fatalf("LostOver(%q) keep = %v, want %v", tc.held, keep, tc.keep)
			case keep && got != tc.held:
				t.Fatalf("LostOver(%q) kept %q", tc.held, got)
			case !keep && (!IsLostRecord(got) || stamp(got) != forcedAt(want)):
				t.Fatalf("LostOver(%q) = %q; want a lost record stamped %d", tc.held, got, forcedAt(want))
			}
			if !keep && !IdentityShaped(got) {
				t.Errorf("lost record %q is not identity-shaped", got)
			}
		})
	}
}
