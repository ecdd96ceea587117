// Package redisstore is the fencestore.Store for Redis: one string key per
// resource, KeyPrefix+resource, holding the mark with no TTL, advanced by one
// Lua script (admit.lua, EVALSHA with EVAL on NOSCRIPT) so that each admission
// is atomic on the server. The value is the mark's stored form
// (fencestore.ParseMarkValue): the token as a canonical decimal, followed,
// once a request with a sequence was admitted with that token, by ':' and
// the sequence ("42" or "42:7"). So GET still begins with the token, and the
// sequence shares the token's key: one key per resource, on a Redis Cluster
// too, with no hash tags. Admissions decide as fencestore.Admission.Decide
// does. Comparison is exact over the whole uint64 range because the script
// compares decimal strings by length and then byte by byte, token first and
// then sequence, never as Lua numbers (doubles); a stored value of any other
// shape ("42:", "42:07") makes that resource's admissions fail (closed), it is
// never read as absent. Mark returns the token alone. Durability is Redis's: an acknowledged mark survives a crash only as
// far as the server's AOF/fsync settings and replication do, and with
// Options.MinReplicas each admission also waits (WAIT) for that many replicas,
// which narrows but does not close the window in which a failover loses a mark.
//
// The client must be created with ContextTimeoutEnabled: true, or an admission
// can outlive the caller's deadline by the client's read timeout. It should have
// MaxRetries: -1: a retried ">" admission whose first reply was lost finds its
// own token as the mark and is refused, so the request gets a spurious refusal
// (never a wrongful admission). New logs a warning when either option is
// unset. A cluster client re-sends after a network error whatever MaxRetries
// says (up to MaxRedirects times), so admissions do not go through it: each
// runs on the node client of its key's master (ClusterClient.MasterForKey),
// which retries only as MaxRetries allows. A lost reply is then an error, and
// so is a MOVED or ASK redirection (the script did not run); a failed
// admission asks the cluster client for a fresh slot map. With a dead server
// every admission spends its whole deadline redialling unless DialerRetries is
// small (go-redis tries 5 times, 100ms apart, by default); the deadline holds
// either way. A key of another type under the prefix (a hash, say) fails its
// own admissions only, batched or not.
package redisstore
