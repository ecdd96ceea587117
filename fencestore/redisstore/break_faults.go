//go:build faultsbreak

package redisstore

import (
	"fmt"
	"os"
)

// faultsBreakVar names the control this test build runs with (break.go).
const faultsBreakVar = "FENCEPROXY_FAULTS_BREAK"

// The controls of break.go, read once at start. Variables, not constants,
// so that this build's tests can set them.
var (
	breakBroadcast = os.Getenv(faultsBreakVar) == "broadcast"
	breakNoRetry   = os.Getenv(faultsBreakVar) == "noretry"
)

func init() {
	// Said loudly: a process running like this must never be taken for a
	// real one, and a misspelled control must not pass for the real system.
	switch v := os.Getenv(faultsBreakVar); {
	case breakBroadcast || breakNoRetry:
		fmt.Fprintf(os.Stderr, "redisstore: BROKEN ON PURPOSE for the fault suite: %s=%s\n", faultsBreakVar, v)
	case v != "":
		fmt.Fprintf(os.Stderr, "redisstore: %s=%q is no control (want broadcast or noretry): nothing broken\n", faultsBreakVar, v)
	}
}
