package proxy

import (
	"testing"
	"time"
	"unsafe"
)

func TestSharedDeadline(t *testing.T) {
	const timeout = 500 * time.Millisecond
	s := newSharedDeadline(timeout)
	t0 := time.Now()
	first := s.context(t0)
	tests := []struct {
		name  string
		at    time.Duration // after t0
		share bool          // gets first's context
	}{
		{"same instant", 0, true},
		{"within the grain", deadlineGrain / 2, true},
		{"last nanosecond of the grain", deadlineGrain - 1, true},
		{"next grain", deadlineGrain, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			start := t0.Add(tc.at)
			ctx := s.context(start)
			if (ctx == first) != tc.share {
				t.Fatalf("shares the first context: %v, want %v", ctx == first, tc.share)
			}
			d, ok := ctx.Deadline()
			if !ok {
				t.Fatal("no deadline")
			}
			// At least the timeout, at most one grain more.
			if budget := d.Sub(start); budget < timeout || budget > timeout+deadlineGrain {
				t.Fatalf("budget %v, want within [%v, %v]", budget, timeout, timeout+deadlineGrain)
			}
		})
	}
}

// The shared context really ends at its deadline.
func TestSharedDeadlineExpires(t *testing.T) {
	s := newSharedDeadline(time.Millisecond)
	ctx := s.context(time.Now())
	select {
	case <-ctx.Done():
	case <-time.After(10 * time.Second):
		t.Fatal("the admission context never ended")
	}
	if ctx.Err() == nil {
		t.Fatal("Err is nil after Done")
	}
}

// A wall clock stepped backwards (NTP, a resumed VM) must not make every
// admission 503 until the wall clock catches up: the grain is judged on the
// monotonic clock. Before, the cached context (long expired) was handed to
// every request whose wall-clock time fell before its end.
func TestSharedDeadlineSurvivesWallClockStepBack(t *testing.T) {
	s := newSharedDeadline(time.Millisecond)
	t0 := time.Now()
	first := s.context(t0)
	<-first.Done() // the first grain's context has expired

	// What time.Now() returns after the clock was set back an hour: the
	// wall reading an hour earlier, the monotonic reading later.
	later := time.Now()
	stepped := wallStepped(later, -time.Hour)
	if !stepped.Round(0).Before(t0.Round(0)) || stepped.Sub(later) != 0 {
		t.Fatal("the test's stepped time is not what a backward step gives")
	}
	ctx := s.context(stepped)
	if ctx == first || ctx.Err() != nil {
		t.Fatalf("after a backward step the admission got an expired context (err %v)", ctx.Err())
	}
}

// wallStepped returns t with its wall clock moved by d and its monotonic
// reading kept, as time.Now() reads after the system clock is stepped. The
// time package offers no way to build such a value, so this writes the wall
// seconds of the hasMonotonic encoding (bits 30..62 of the first word; see
// the comment on time.Time's fields) directly.
func wallStepped(t time.Time, d time.Duration) time.Time {
	type timeRep struct {
		wall uint64
		ext  int64
		loc  *time.Location
	}
	if d%time.Second != 0 {
		panic("whole seconds only")
	}
	r := (*timeRep)(unsafe.Pointer(&t))
	const hasMonotonic = 1 << 63
	if r.wall&hasMonotonic == 0 {
		panic("t has no monotonic reading")
	}
	r.wall = uint64(int64(r.wall) + int64(d/time.Second)<<30)
	return t
}
