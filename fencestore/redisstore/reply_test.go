package redisstore

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/fenceproxy/fenceproxy/fencestore"
)

func TestParseReply(t *testing.T) {
	ge, gt := fencestore.AtLeast, fencestore.Greater
	plain := func(token uint64, cmp fencestore.Compare) fencestore.Admission {
		return fencestore.Admission{Resource: "r", Token: token, Compare: cmp}
	}
	seq := func(token, seq uint64) fencestore.Admission {
		return fencestore.Admission{Resource: "r", Token: token, Sequence: seq, HasSequence: true}
	}
	pair := func(admitted bool, token, seq uint64) fencestore.Decision {
		return fencestore.Decision{Admitted: admitted, Mark: token, Sequence: seq, HasSequence: true}
	}
	for _, tc := range []struct {
		name  string
		reply any
		a     fencestore.Admission
		want  fencestore.Decision
		ok    bool
	}{
		{"admitted", []any{int64(1), "5"}, plain(5, ge), fencestore.Decision{Admitted: true, Mark: 5}, true},
		{"stale", []any{int64(0), "6"}, plain(5, ge), fencestore.Decision{Mark: 6}, true},
		{"stale equal gt", []any{int64(0), "5"}, plain(5, gt), fencestore.Decision{Mark: 5}, true},
		{"max", []any{int64(1), "18446744073709551615"}, plain(1<<64-1, gt), fencestore.Decision{Admitted: true, Mark: 1<<64 - 1}, true},
		{"admitted with another mark", []any{int64(1), "6"}, plain(5, ge), fencestore.Decision{}, false},
		{"stale equal ge", []any{int64(0), "5"}, plain(5, ge), fencestore.Decision{}, false},
		{"stale below", []any{int64(0), "4"}, plain(5, gt), fencestore.Decision{}, false},
		{"flag 2", []any{int64(2), "5"}, plain(5, ge), fencestore.Decision{}, false},
		{"flag string", []any{"1", "5"}, plain(5, ge), fencestore.Decision{}, false},
		{"mark int", []any{int64(1), int64(5)}, plain(5, ge), fencestore.Decision{}, false},
		{"mark leading zero", []any{int64(1), "05"}, plain(5, ge), fencestore.Decision{}, false},
		{"mark overflow", []any{int64(0), "18446744073709551616"}, plain(5, ge), fencestore.Decision{}, false},
		{"mark empty", []any{int64(0), ""}, plain(5, ge), fencestore.Decision{}, false},
		{"three", []any{int64(1), "5", "x"}, plain(5, ge), fencestore.Decision{}, false},
		{"one", []any{int64(1)}, plain(5, ge), fencestore.Decision{}, false},
		{"nil", nil, plain(5, ge), fencestore.Decision{}, false},
		{"string", "OK", plain(5, ge), fencestore.Decision{}, false},

		// With sequences: an admission reports its own pair.
		{"seq admitted", []any{int64(1), "5:7"}, seq(5, 7), pair(true, 5, 7), true},
		{"seq admitted max", []any{int64(1), "18446744073709551615:18446744073709551615"}, seq(1<<64-1, 1<<64-1), pair(true, 1<<64-1, 1<<64-1), true},
		{"seq admitted with another sequence", []any{int64(1), "5:8"}, seq(5, 7), fencestore.Decision{}, false},
		{"seq admitted without its sequence", []any{int64(1), "5"}, seq(5, 7), fencestore.Decision{}, false},
		{"seq admitted with another token", []any{int64(1), "6:7"}, seq(5, 7), fencestore.Decision{}, false},
		// An equal token without a sequence under >= keeps the pair; under >
		// or with a greater token the mark is the token alone.
		{"equal ge keeps the pair", []any{int64(1), "5:7"}, plain(5, ge), pair(true, 5, 7), true},
		{"equal gt admitted", []any{int64(1), "5:7"}, plain(5, gt), fencestore.Decision{}, false},
		{"ge admitted with another token's pair", []any{int64(1), "6:7"}, plain(5, ge), fencestore.Decision{}, false},
		// Refusals Decide gives, and ones it does not.
		{"stale sequence", []any{int64(0), "5:7"}, seq(5, 7), pair(false, 5, 7), true},
		{"stale lower sequence", []any{int64(0), "5:7"}, seq(5, 6), pair(false, 5, 7), true},
		{"stale token with sequence", []any{int64(0), "6:0"}, seq(5, 9), pair(false, 6, 0), true},
		{"stale token, mark without sequence", []any{int64(0), "6"}, seq(5, 9), fencestore.Decision{Mark: 6}, true},
		{"stale equal gt with a pair", []any{int64(0), "5:7"}, plain(5, gt), pair(false, 5, 7), true},
		{"refused by a lower sequence", []any{int64(0), "5:6"}, seq(5, 7), fencestore.Decision{}, false},
		{"refused by a mark without sequence", []any{int64(0), "5"}, seq(5, 7), fencestore.Decision{}, false},
		{"refused by a lower token", []any{int64(0), "4:99"}, seq(5, 0), fencestore.Decision{}, false},
		{"refused ge by an equal pair", []any{int64(0), "5:7"}, plain(5, ge), fencestore.Decision{}, false},
		// Marks that are not a canonical token[:sequence].
		{"empty sequence", []any{int64(0), "6:"}, seq(5, 7), fencestore.Decision{}, false},
		{"sequence leading zero", []any{int64(0), "6:07"}, seq(5, 7), fencestore.Decision{}, false},
		{"two sequences", []any{int64(0), "6:1:2"}, seq(5, 7), fencestore.Decision{}, false},
		{"empty token", []any{int64(0), ":7"}, seq(5, 7), fencestore.Decision{}, false},
		{"sequence overflow", []any{int64(0), "6:18446744073709551616"}, seq(5, 7), fencestore.Decision{}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			// The marks' part of the reply; no barrier: no entry.
			if r, ok := tc.reply.([]any); ok && len(r) == 2 {
				tc.reply = append(r, "", int64(0), "", int64(0), "0")
			}
			d, _, err := parseReply(tc.reply, tc.a, "{r}:inflight", "")
			if (err == nil) != tc.ok || d != tc.want {
				t.Errorf("parseReply(%#v, %+v) = %+v, %v; want %+v, ok=%t", tc.reply, tc.a, d, err, tc.want, tc.ok)
			}
		})
	}
}

func TestParseReplyBarrier(t *testing.T) {
	const fkey = "{r}:inflight"
	flying := fencestore.Admission{Resource: "r", Token: 42, Compare: fencestore.AtLeast, Flight: time.Second}
	flyingSeq := fencestore.Admission{Resource: "r", Token: 42, Sequence: 7, HasSequence: true, Flight: time.Second}
	odd := fencestore.Admission{Resource: "r", Token: 42, Compare: fencestore.AtLeast, Flight: time.Second + time.Microsecond}
	grounded := fencestore.Admission{Resource: "r", Token: 42, Compare: fencestore.AtLeast}
	const (
		order    = "00000000000000000042:--------------------"
		orderSeq = "00000000000000000042:00000000000000000007"
		order41  = "00000000000000000041:--------------------"
		second   = ":000000001000:"
	)
	member := order + second + "ab12"
	olderMember := order41 + ":000000030000:cd34"
	none := ""
	for _, tc := range []struct {
		name   string
		reply  []any
		a      fencestore.Admission
		want   fencestore.Flight
		olders []older
		ok     bool
	}{
		{"entered", []any{int64(1), "42", member, int64(0), none}, flying,
			fencestore.Flight{Key: fkey, Ref: member, Order: flying.Order()}, nil, true},
		{"older", []any{int64(1), "42", member, int64(1), olderMember}, flying,
			fencestore.Flight{Older: true, Key: fkey, Ref: member, Order: flying.Order()},
			[]older{{member: olderMember, bound: 30 * time.Second}}, true},
		{"with a sequence, after none", []any{int64(1), "42:7", orderSeq + second + "x", int64(1), member}, flyingSeq,
			fencestore.Flight{Older: true, Key: fkey, Ref: orderSeq + second + "x", Order: flyingSeq.Order()},
			[]older{{member: member, bound: time.Second}}, true},
		// The bound is rounded up to whole milliseconds, never down.
		{"bound rounded up", []any{int64(1), "42", order + ":000000001001:x", int64(0), none}, odd,
			fencestore.Flight{Key: fkey, Ref: order + ":000000001001:x", Order: odd.Order()}, nil, true},
		{"bound cut", []any{int64(1), "42", order + second + "x", int64(0), none}, odd, fencestore.Flight{}, nil, false},
		{"another bound", []any{int64(1), "42", order + ":000000002000:x", int64(0), none}, flying, fencestore.Flight{}, nil, false},
		{"no entry for a barrier", []any{int64(1), "42", "", int64(0), none}, flying, fencestore.Flight{}, nil, false},
		{"another order", []any{int64(1), "42", orderSeq + second + "x", int64(0), none}, flying, fencestore.Flight{}, nil, false},
		{"short member", []any{int64(1), "42", order + ":1:x", int64(0), none}, flying, fencestore.Flight{}, nil, false},
		{"older 2 short of the cap", []any{int64(1), "42", member, int64(2), olderMember}, flying, fencestore.Flight{}, nil, false},
		{"older 3", []any{int64(1), "42", member, int64(3), olderMember}, flying, fencestore.Flight{}, nil, false},
		{"older without a snapshot", []any{int64(1), "42", member, int64(1), none}, flying, fencestore.Flight{}, nil, false},
		{"a snapshot, not older", []any{int64(1), "42", member, int64(0), olderMember}, flying, fencestore.Flight{}, nil, false},
		{"a snapshot of a later order", []any{int64(1), "42:7", orderSeq + second + "x", int64(1), orderSeq + second + "y"}, flyingSeq,
			fencestore.Flight{}, nil, false},
		{"a snapshot entry misshapen", []any{int64(1), "42", member, int64(1), order41 + ":1:x"}, flying, fencestore.Flight{}, nil, false},
		{"a snapshot not a string", []any{int64(1), "42", member, int64(0), []any{}}, flying, fencestore.Flight{}, nil, false},
		{"older a string", []any{int64(1), "42", member, "0", none}, flying, fencestore.Flight{}, nil, false},
		{"entry without a barrier", []any{int64(1), "42", member, int64(0), none}, grounded, fencestore.Flight{}, nil, false},
		{"older without a barrier", []any{int64(1), "42", "", int64(1), olderMember}, grounded, fencestore.Flight{}, nil, false},
		{"entry for a refusal", []any{int64(0), "43", member, int64(0), none}, flying, fencestore.Flight{}, nil, false},
		{"refused, no entry", []any{int64(0), "43", "", int64(0), none}, flying, fencestore.Flight{}, nil, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d, snap, err := parseReply(append(tc.reply, int64(0), "0"), tc.a, fkey, "")
			if (err == nil) != tc.ok || d.Flight != tc.want || fmt.Sprint(snap.olders) != fmt.Sprint(tc.olders) || snap.more {
				t.Errorf("parseReply(%#v) = %+v %v, %v; want flight %+v %v, ok=%t", tc.reply, d.Flight, snap, err, tc.want, tc.olders, tc.ok)
			}
		})
	}
}

func TestWaitTimeoutNeverZero(t *testing.T) {
	// "WAIT n 0" blocks for ever, so no timeout may round down to 0ms.
	for in, want := range map[int64]int64{0: 100, 1: 1, 999_999: 1, 1_000_000: 1, 1_000_001: 2, 250_000_000: 250} {
		s := New(nil, Options{WaitTimeout: time.Duration(in), MaxBatch: -1}) // no client: no batcher to start
		if got := s.waitTimeout.Milliseconds(); got != want {
			t.Errorf("WaitTimeout %dns -> WAIT %dms, want %dms", in, got, want)
		}
	}
}

func TestParseReplyFloor(t *testing.T) {
	floor := fencestore.Mark{Token: 10}
	seqFloor := fencestore.Mark{Token: 7, Sequence: 4, HasSequence: true}
	with := func(a fencestore.Admission, f fencestore.Mark) fencestore.Admission {
		a.Floor, a.HasFloor = f, true
		return a
	}
	plain := func(token uint64, cmp fencestore.Compare) fencestore.Admission {
		return fencestore.Admission{Resource: "r", Token: token, Compare: cmp}
	}
	seq := func(token, seq uint64) fencestore.Admission {
		return fencestore.Admission{Resource: "r", Token: token, Sequence: seq, HasSequence: true}
	}
	reply := func(flag int64, mark string, regressed int64) []any {
		return []any{flag, mark, "", int64(0), "", regressed, "7"}
	}
	for _, tc := range []struct {
		name  string
		reply []any
		a     fencestore.Admission
		want  fencestore.Decision
		ok    bool
	}{
		{"refused by the floor", reply(0, "10", 1), with(plain(5, fencestore.AtLeast), floor), fencestore.Decision{Mark: 10, Regressed: true, Generation: 7}, true},
		{"equal to the floor under >=", reply(1, "10", 1), with(plain(10, fencestore.AtLeast), floor), fencestore.Decision{Admitted: true, Mark: 10, Regressed: true, Generation: 7}, true},
		{"above the floor", reply(1, "11", 1), with(plain(11, fencestore.Greater), floor), fencestore.Decision{Admitted: true, Mark: 11, Regressed: true, Generation: 7}, true},
		{"stale sequence by the floor", reply(0, "7:4", 1), with(seq(7, 3), seqFloor),
			fencestore.Decision{Mark: 7, Sequence: 4, HasSequence: true, Regressed: true, Generation: 7}, true},
		{"not regressed, at the floor", reply(0, "10", 0), with(plain(9, fencestore.AtLeast), floor), fencestore.Decision{Mark: 10, Generation: 7}, true},
		{"not regressed, above it", reply(0, "12", 0), with(plain(9, fencestore.AtLeast), floor), fencestore.Decision{Mark: 12, Generation: 7}, true},
		// An operator changed marks after the floor was seen: decided
		// without it, below it too.
		{"floor set aside", reply(1, "5", 2), with(plain(5, fencestore.AtLeast), floor), fencestore.Decision{Admitted: true, Mark: 5, FloorVoid: true, Generation: 7}, true},
		// Replies the script cannot have given.
		{"regressed without a floor", reply(0, "10", 1), plain(5, fencestore.AtLeast), fencestore.Decision{}, false},
		{"regressed, admitted below the floor", reply(1, "5", 1), with(plain(5, fencestore.AtLeast), floor), fencestore.Decision{}, false},
		{"regressed, refused with another mark", reply(0, "12", 1), with(plain(5, fencestore.AtLeast), floor), fencestore.Decision{}, false},
		{"regressed, refused though the floor admits", reply(0, "10", 1), with(plain(11, fencestore.AtLeast), floor), fencestore.Decision{}, false},
		{"refused below the floor", reply(0, "6", 0), with(plain(5, fencestore.AtLeast), floor), fencestore.Decision{}, false},
		{"admitted below the floor", reply(1, "5", 0), with(plain(5, fencestore.AtLeast), floor), fencestore.Decision{}, false},
		{"regressed 3", reply(0, "10", 3), with(plain(5, fencestore.AtLeast), floor), fencestore.Decision{}, false},
		{"set aside without a floor", reply(1, "5", 2), plain(5, fencestore.AtLeast), fencestore.Decision{}, false},
		{"set aside, refused though it admits", reply(0, "4", 2), with(plain(5, fencestore.AtLeast), floor), fencestore.Decision{}, false},
		{"generation not a number", []any{int64(0), "10", "", int64(0), "", int64(0), "x"}, with(plain(9, fencestore.AtLeast), floor), fencestore.Decision{}, false},
		{"regressed a string", []any{int64(0), "10", "", int64(0), "", "1", "7"}, with(plain(5, fencestore.AtLeast), floor), fencestore.Decision{}, false},
		{"six values", []any{int64(0), "10", "", int64(0), "", int64(0)}, with(plain(5, fencestore.AtLeast), floor), fencestore.Decision{}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d, _, err := parseReply(tc.reply, tc.a, "{r}:inflight", "")
			if (err == nil) != tc.ok || d != tc.want {
				t.Errorf("parseReply(%#v, %+v) = %+v, %v; want %+v, ok=%t", tc.reply, tc.a, d, err, tc.want, tc.ok)
			}
		})
	}
}

func TestParseReplyLost(t *testing.T) {
	a := fencestore.Admission{Resource: "r", Token: 5}
	lost := func(found any) []any { return []any{int64(-2), found, "", int64(0), "", int64(0), "0"} }
	back := func(gen any) []any { return []any{int64(-3), gen, "", int64(0), "", int64(0), "0"} }
	for _, tc := range []struct {
		name  string
		reply []any
		want  string // the identity the run checked
		found string
		ok    bool // a *LostError
	}{
		{"gone", lost(""), "id1", "", true},
		{"changed", lost("id2"), "id1", "id2", true},
		{"the same", lost("id1"), "id1", "", false},
		{"no check", lost(""), "", "", false},
		{"not a string", lost(int64(1)), "id1", "", false},
		// The generation went back: lost, the identity intact.
		{"gone back", back("3"), "id1", "id1", true},
		{"gone back, no check", back("3"), "", "", false},
		{"gone back, not a number", back("x"), "id1", "", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, _, err := parseReply(tc.reply, a, "{r}:inflight", tc.want)
			var le *fencestore.LostError
			if got := errors.As(err, &le); got != tc.ok {
				t.Fatalf("parseReply(%#v) = %v; want a *LostError: %t", tc.reply, err, tc.ok)
			}
			if tc.ok && (le.Want != tc.want || le.Found != tc.found) {
				t.Errorf("LostError %+v, want Want %q Found %q", le, tc.want, tc.found)
			}
			if err == nil {
				t.Errorf("no error")
			}
		})
	}
}

// The scripts as the store loads them (marks.lua in front), for the tests
// of the external package that run them directly.
var AdmitSource, ReleaseSource = admitSource, releaseSource
