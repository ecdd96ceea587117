package proxy

import (
	"testing"

	"go.uber.org/goleak"
)

// Every test leaves no goroutine behind: servers, stores and their
// background workers are all stopped.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}
