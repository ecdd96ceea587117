// Package check judges a history of fenced writes: what each client sent
// through fenceproxy and learned (admitted, stale with the reported mark,
// 503, no answer), marks read straight from the store, and what the upstream
// received. It computes the suite's safety figures (stale admissions,
// unfenced forwards, regressions) and checks linearizability with porcupine
// against a nondeterministic max-register partitioned by resource, in which
// a 503 or an unanswered request may take effect at any time after its call.
//
// It knows nothing of processes or Redis: the harness records, check judges,
// and check's own tests feed it synthetic bad histories.
package check
