package extauthz

import (
	"testing"

	"go.uber.org/goleak"
)

// Every test leaves no goroutine behind: gRPC servers and client
// connections are all stopped.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}
