//go:build faultsbreak

package redisstore

// SetBreaks sets the fault suite's controls (break.go) for a test and
// returns what puts them back. Call it before the stores it concerns are
// made, and put them back after they are closed: the stores read them
// without a lock.
func SetBreaks(broadcast, noretry bool) (restore func()) {
	b, n := breakBroadcast, breakNoRetry
	breakBroadcast, breakNoRetry = broadcast, noretry
	return func() { breakBroadcast, breakNoRetry = b, n }
}
