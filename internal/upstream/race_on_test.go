//go:build race

package upstream

// raceEnabled: under the race detector sync.Pool (net/http's textproto
// readers) drops a share of Puts on purpose, so allocation counts are not
// meaningful.
const raceEnabled = true
