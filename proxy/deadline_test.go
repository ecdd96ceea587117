package proxy

import (
	"testing"
	"time"
)

func TestSharedDeadline(t *testing.T) {
	const timeout = 500 * time.Millisecond
	s := sharedDeadline{timeout: timeout}
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
	s := sharedDeadline{timeout: time.Millisecond}
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
