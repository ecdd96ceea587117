//go:build race

package proxy

// raceEnabled: under the race detector sync.Pool drops a share of Puts on
// purpose, so allocation counts of pooled paths are not meaningful.
const raceEnabled = true
