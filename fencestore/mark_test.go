package fencestore

import (
	"math"
	"testing"
)

func TestParseMarkValue(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want Mark
		ok   bool
	}{
		{"42", Mark{Token: 42}, true},
		{"42:7", Mark{Token: 42, Sequence: 7, HasSequence: true}, true},
		{"0:0", Mark{HasSequence: true}, true},
		{"18446744073709551615:18446744073709551615", Mark{Token: math.MaxUint64, Sequence: math.MaxUint64, HasSequence: true}, true},
		{"42:", Mark{}, false},
		{":7", Mark{}, false},
		{"42:07", Mark{}, false},
		{"42:7:1", Mark{}, false},
		{"42 7", Mark{}, false},
		{"", Mark{}, false},
	} {
		got, ok := ParseMarkValue(tc.in)
		if ok != tc.ok || (ok && got != tc.want) {
			t.Errorf("ParseMarkValue(%q) = %+v, %v; want %+v, %v", tc.in, got, ok, tc.want, tc.ok)
		}
		if ok {
			if back := string(got.AppendValue(nil)); back != tc.in {
				t.Errorf("AppendValue(%+v) = %q, want %q", got, back, tc.in)
			}
		}
	}
}

// Decide against a mark, every branch; the conformance suite checks the
// stores against written-out steps too.
func TestDecide(t *testing.T) {
	seq := func(tok, s uint64) Mark { return Mark{Token: tok, Sequence: s, HasSequence: true} }
	for _, tc := range []struct {
		name     string
		a        Admission
		m        Mark
		hasMark  bool
		admitted bool
		next     Mark
		write    bool
	}{
		{"no mark", Admission{Token: 3}, Mark{}, false, true, Mark{Token: 3}, true},
		{"no mark, sequence", Admission{Token: 3, Sequence: 1, HasSequence: true}, Mark{}, false, true, seq(3, 1), true},
		{"lower token", Admission{Token: 2, Sequence: 9, HasSequence: true}, seq(3, 1), true, false, seq(3, 1), false},
		{"greater token, lower sequence", Admission{Token: 4, Sequence: 0, HasSequence: true}, seq(3, 1), true, true, seq(4, 0), true},
		{"greater token, no sequence, >", Admission{Token: 4, Compare: Greater}, seq(3, 1), true, true, Mark{Token: 4}, true},
		{"equal token, greater sequence", Admission{Token: 3, Sequence: 2, HasSequence: true}, seq(3, 1), true, true, seq(3, 2), true},
		{"equal pair", Admission{Token: 3, Sequence: 1, HasSequence: true}, seq(3, 1), true, false, seq(3, 1), false},
		{"equal token, mark without sequence", Admission{Token: 3, Sequence: 0, HasSequence: true}, Mark{Token: 3}, true, true, seq(3, 0), true},
		{"equal token, no sequence, >=", Admission{Token: 3}, seq(3, 1), true, true, seq(3, 1), false},
		{"equal token, no sequence, >", Admission{Token: 3, Compare: Greater}, seq(3, 1), true, false, seq(3, 1), false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d, next, write := tc.a.Decide(tc.m, tc.hasMark)
			if d.Admitted != tc.admitted || next != tc.next || write != tc.write {
				t.Fatalf("Decide = %+v, %+v, %v; want admitted %v, %+v, %v", d, next, write, tc.admitted, tc.next, tc.write)
			}
			if want := (Decision{Admitted: tc.admitted, Mark: next.Token, Sequence: next.Sequence, HasSequence: next.HasSequence}); d != want {
				t.Fatalf("decision %+v does not report the mark after it, %+v", d, want)
			}
		})
	}
}
