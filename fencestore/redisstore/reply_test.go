package redisstore

import (
	"testing"
	"time"

	"github.com/fenceproxy/fenceproxy/fencestore"
)

func TestParseReply(t *testing.T) {
	ge, gt := fencestore.AtLeast, fencestore.Greater
	for _, tc := range []struct {
		name  string
		reply any
		token uint64
		cmp   fencestore.Compare
		want  fencestore.Decision
		ok    bool
	}{
		{"admitted", []any{int64(1), "5"}, 5, ge, fencestore.Decision{Admitted: true, Mark: 5}, true},
		{"stale", []any{int64(0), "6"}, 5, ge, fencestore.Decision{Mark: 6}, true},
		{"stale equal gt", []any{int64(0), "5"}, 5, gt, fencestore.Decision{Mark: 5}, true},
		{"max", []any{int64(1), "18446744073709551615"}, 1<<64 - 1, gt, fencestore.Decision{Admitted: true, Mark: 1<<64 - 1}, true},
		{"admitted with another mark", []any{int64(1), "6"}, 5, ge, fencestore.Decision{}, false},
		{"stale equal ge", []any{int64(0), "5"}, 5, ge, fencestore.Decision{}, false},
		{"stale below", []any{int64(0), "4"}, 5, gt, fencestore.Decision{}, false},
		{"flag 2", []any{int64(2), "5"}, 5, ge, fencestore.Decision{}, false},
		{"flag string", []any{"1", "5"}, 5, ge, fencestore.Decision{}, false},
		{"mark int", []any{int64(1), int64(5)}, 5, ge, fencestore.Decision{}, false},
		{"mark leading zero", []any{int64(1), "05"}, 5, ge, fencestore.Decision{}, false},
		{"mark overflow", []any{int64(0), "18446744073709551616"}, 5, ge, fencestore.Decision{}, false},
		{"mark empty", []any{int64(0), ""}, 5, ge, fencestore.Decision{}, false},
		{"three", []any{int64(1), "5", "x"}, 5, ge, fencestore.Decision{}, false},
		{"one", []any{int64(1)}, 5, ge, fencestore.Decision{}, false},
		{"nil", nil, 5, ge, fencestore.Decision{}, false},
		{"string", "OK", 5, ge, fencestore.Decision{}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d, err := parseReply(tc.reply, tc.token, tc.cmp)
			if (err == nil) != tc.ok || d != tc.want {
				t.Errorf("parseReply(%#v, %d, %v) = %+v, %v; want %+v, ok=%t", tc.reply, tc.token, tc.cmp, d, err, tc.want, tc.ok)
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
