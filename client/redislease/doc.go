// Package redislease is a lease (a lock with a time limit) in Redis whose
// every acquisition mints a fencing token: the token to send with
// client.WithToken so that fenceproxy can refuse the writes of a holder that
// has lost the lease without knowing it.
//
//	lease := redislease.New(rdb, "orders/42", redislease.Options{TTL: 10 * time.Second})
//	token, err := lease.AcquireWait(ctx, 100*time.Millisecond)
//	...
//	ctx = client.WithToken(ctx, token) // every write of this holding carries it
//	...
//	err = lease.Release(ctx)
//
// # The lease and the token do different jobs
//
// The lease's TTL is what lets another holder in when the holder dies or
// stalls. It cannot stop the old holder: a process paused (GC, SIGSTOP, a
// slow disk, a VM migration) after acquiring resumes believing it still holds
// the lease, and may send a write before it next talks to Redis. No check the
// holder makes can close that gap, because the pause can fall between the
// check and the write. The token is what makes the old holder harmless: the
// fenced resource (fenceproxy) remembers the greatest token it has seen and
// refuses smaller ones, so once the new holder has written, the old holder's
// writes are refused as stale. Renew tells a holder that is still running that
// it has lost the lease (ErrNotHeld); only the token protects the resource.
//
// # Guarantees
//
//   - Each acquisition, and only a successful one, increments the lease's
//     counter in the same Lua script that grants the lease, so every grant's
//     token is greater than the token of every earlier grant of that lease, and
//     two grants never share a token. Tokens start at 1.
//   - Renew and Release act only if this Lease's owner id still holds the
//     lease, checked and done in one script: a holder whose lease expired and
//     went to another owner can neither extend nor delete the new owner's.
//   - Tokens are read as decimal strings and parsed exactly. Redis counters are
//     signed 64-bit, so tokens go up to 2^63-1, within what fenceproxy takes.
//
// # Signed tokens
//
// A proxy with FENCE_TOKEN_KEYS_FILE accepts only signed tokens: a JWS whose
// fence claim is the token, signed by a key it knows, so that a client that
// can reach it cannot simply send a huge number. Give the Lease the private
// key that `fenceproxy token keygen` wrote, and it mints one at every grant
// and renewal:
//
//	key, err := redislease.ParseSigningKey(privateJWK) // keygen's --private file
//	lease := redislease.New(rdb, "orders/42", redislease.Options{
//		TTL: 10 * time.Second, SigningKey: key, SignGrace: 2 * time.Second, SignResource: "orders/42",
//	})
//	_, err = lease.AcquireWait(ctx, 0)
//	ctx = client.WithSignedToken(ctx, lease.SignedToken())
//
// The signed token expires SignGrace after the TTL it was minted for, so a
// holder that renews sends the token of its last renewal:
// client.WithSignedToken(ctx, lease.SignedToken()) after each Renew. Its
// fence is Token(); the plain token stays available for proxies that do not
// verify signatures. docs/tokens.md has the rest (keys, rotation, answers).
//
// # Keys
//
// With the default prefix, lease "orders/42" is two string keys:
//
//	fencelease:orders/42        the holder's owner id, with the TTL (PX)
//	fencelease:orders/42:token  the token counter, INCR'd, never expires
//
// The counter must never expire nor be deleted: if it were, tokens would start
// again at 1, every new holder would be refused as stale by a proxy that had
// seen a greater token, and if the proxy's marks were lost too, an old holder's
// token could be admitted again. Do not delete it to "reset" a lease; delete
// only the lease key. The proxy keeps its marks under another default prefix
// ("fence:" plus the resource name), so the two never share a key; keep the
// prefixes distinct if you change either.
//
// # What the guarantees rest on
//
// The counter is only as durable as Redis makes it. After a crash, a Redis
// without persistence restarts the counter at 0; with AOF and
// appendfsync always, an acknowledged token survives a crash of the server.
// With asynchronous replication a failover can lose the last increments, and
// the new primary then mints tokens that were already given out; that breaks
// the guarantee, so run the lease on one durable primary, or accept that
// window knowingly. A maxmemory-policy of allkeys-* may evict the counter, so
// use noeviction (or a volatile-* policy, which evicts only keys with a TTL:
// the lease key, which lets another holder in early, but never the counter).
//
// On Redis Cluster both keys of a lease must hash to the same slot, since one
// script touches both: give the lease name a hash tag, e.g. "{orders/42}", and
// keep braces out of the prefix.
//
// The TTL is counted by the Redis server's clock from when it runs the script;
// the holder cannot know exactly when that was, so it should treat its lease
// as lasting TTL from before it sent Acquire, minus any clock drift it fears.
// It does not matter for safety: the token, not the TTL, protects the
// resource.
//
// The client should be created with ContextTimeoutEnabled: true, so that a
// call gives up when its context does.
package redislease
