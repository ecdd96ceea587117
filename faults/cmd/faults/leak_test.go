package main

import (
	"testing"

	"go.uber.org/goleak"
)

// The harness leaves nothing running: every process stopped by its PID,
// every server, client and toxiproxy link closed.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}
