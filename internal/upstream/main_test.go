package upstream

import (
	"testing"

	"go.uber.org/goleak"
)

// Every test leaves no goroutine behind: servers, transports (both paths'
// idle connections) and cancellation hooks are all stopped.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}
