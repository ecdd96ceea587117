package client_test

import (
	"testing"

	"go.uber.org/goleak"
)

// Every test closes its servers and idle connections; a goroutine left behind
// is a leaked response body or connection.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}
