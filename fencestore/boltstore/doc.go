// Package boltstore is a fencestore.Store in one bbolt file, for a proxy that
// runs on one host without Redis. Every admission that advances a mark is a
// bbolt read-write transaction, so it is atomic per resource and, once Admit
// has returned a Decision, on disk: durability is one fsync per group of
// concurrent admissions, not per admission: a single committer decides every
// admission queued while the previous commit was in flight in one
// transaction (group commit, with no timer, so an idle admission is never
// delayed). An admission that changes nothing (a refusal, an equal token
// under ">=") is decided in a read-only transaction and costs no fsync, but
// only when that transaction sees no commit whose fsync may still be running
// (bbolt shows a commit to readers before its fsync returns); otherwise it
// waits for the next group commit. So every Decision, admitted or stale,
// reports a mark that is on disk. The file is locked for one process at a
// time, so the marks cannot be shared by proxies on several hosts or several
// processes; a second process that opens the file fails after
// Options.LockTimeout. Marks are stored as canonical decimal ASCII under
// KeyPrefix+resource in one bucket, the same text as the Redis store's, and a
// value that is not one is reported as a corrupt mark, never read as absent.
package boltstore
