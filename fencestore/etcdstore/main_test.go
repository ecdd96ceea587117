package etcdstore_test

import (
	"testing"

	"go.uber.org/goleak"
)

// Every test leaves no goroutine behind: clients, stores, their releases
// and grants, and Drains' watches are all stopped.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}
