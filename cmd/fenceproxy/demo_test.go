package main

import (
	"bytes"
	"context"
	"io"
	"strings"
	"testing"
)

// The demo replays the story against the real proxy: B's write lands, A's
// late write is refused, and the upstream holds B's state.
func TestDemoReplaysTheStory(t *testing.T) {
	var out bytes.Buffer
	err := run(context.Background(), []string{"demo", "-once", "-listen", "127.0.0.1:0", "-pause", "20ms"}, nil, &out, io.Discard)
	if err != nil {
		t.Fatalf("demo: %v\n%s", err, out.String())
	}
	got := out.String()
	for _, want := range []string{
		`"A: ship 3 units" with token 41 -> 200`,
		`"B: ship 5 units" with token 42 -> 200`,
		`"A: cancel the order" with token 41 -> 409 stale: the mark is 42`,
		"The upstream received 2 writes:", // not A's late one
		`/orders/42 = "B: ship 5 units"`,
		"/metrics", // where to watch it
	} {
		if !strings.Contains(got, want) {
			t.Errorf("demo output lacks %q:\n%s", want, got)
		}
	}
}
