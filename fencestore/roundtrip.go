package fencestore

import "time"

// RoundTrip is one exchange of a store with its server: how many
// admissions and releases of the drain barrier it carried, and how long it
// took. The Redis and etcd stores group concurrent admissions into one round
// trip (a pipeline, a transaction) and report each to their OnRoundTrip
// option, so an operator sees the batch sizes and the store's latency apart
// from the wait in the queue before it.
type RoundTrip struct {
	Admissions int
	Releases   int
	Duration   time.Duration
	Failed     bool // the exchange gave no answer: its deadline passed, the connection failed, or (Redis) every admission it carried got an error
}
