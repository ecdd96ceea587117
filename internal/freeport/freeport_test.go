package freeport

import (
	"net"
	"testing"
)

// Ports asked for back to back are all different and bindable. Without the
// set of ports handed out, 1,000 binds to port 0 across the kernel's ~28,000
// ephemeral ports repeat one with a probability above 0.99999.
func TestPortsDiffer(t *testing.T) {
	seen := map[int]bool{}
	for range 1000 {
		p, err := Port()
		if err != nil {
			t.Fatal(err)
		}
		if seen[p] {
			t.Fatalf("port %d handed out twice", p)
		}
		seen[p] = true
	}
	a, err := Addr()
	if err != nil {
		t.Fatal(err)
	}
	l, err := net.Listen("tcp", a)
	if err != nil {
		t.Fatalf("Addr %s not bindable: %v", a, err)
	}
	_ = l.Close()
}
