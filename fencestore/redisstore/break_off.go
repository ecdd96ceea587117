//go:build !faultsbreak

package redisstore

// The controls of break.go, off: constants, so that their branches are
// compiled out of every build but the fault suite's.
const (
	breakBroadcast = false
	breakNoRetry   = false
)
