package redisstore_test

import (
	"testing"

	"go.uber.org/goleak"
)

// Every test leaves no goroutine behind: servers, stores and their
// background workers are all stopped. Except go-redis's redial of a pool
// whose server was down (tryDial): it sleeps a second between attempts and
// ends at the next one after the server is back or the pool closed, which
// can be after the last test of a run that stopped a server.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m, goleak.IgnoreAnyFunction("github.com/redis/go-redis/v9/internal/pool.(*ConnPool).tryDial"))
}
