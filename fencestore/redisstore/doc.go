// Package redisstore is the fencestore.Store for Redis: one string key per
// resource, KeyPrefix+resource, holding the mark with no TTL (and, for the
// drain barrier, an in-flight key beside it: see below), advanced by one
// Lua script (admit.lua, EVALSHA with EVAL on NOSCRIPT) so that each admission
// is atomic on the server. The value is the mark's stored form
// (fencestore.ParseMarkValue): the token as a canonical decimal, followed,
// once a request with a sequence was admitted with that token, by ':' and
// the sequence ("42" or "42:7"). So GET still begins with the token, and the
// sequence shares the token's key: one mark key per resource, on a Redis
// Cluster too, with no hash tags. Admissions decide as fencestore.Admission.Decide
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
//
// The drain barrier (fencestore.Flight; flight.go). An admission with
// Admission.Flight enters the admitted request, in the same script run, into
// the in-flight key beside its mark: "{"+tag+"}:inflight:"+mark when the
// mark key has a hash tag (Redis's rule: the first '{', then the first '}'
// after it, something between: `{42}:inflight:fence:orders/{42}`), else
// "{"+KeyPrefix+resource+"}:inflight" when the mark key has no '}' at all
// (`{fence:orders/42}:inflight`: the whole mark key is its tag, so both hash
// alike). Both begin with '{', as no mark key does under a valid prefix
// (keys_test.go enumerates every key kind). Either way the two keys share a Cluster slot (and a Ring shard),
// as a script's keys must. A mark key with a '}' but no tag ("a{}b", "x}y")
// hashes whole, and no other name hashes as it does: on a Cluster or Ring
// client its admissions with the barrier fail closed (an error wrapping
// fencestore.ErrUnavailable that says so; nothing is written), without the
// barrier they are as before; on a single server (plain, Sentinel)
// "{}:inflight:"+mark is used. The in-flight key is a sorted set, every
// score 0, so that members sort by their bytes (Redis compares them with
// memcmp, whatever the server's locale): the order (the token in 20 digits,
// ':', the sequence in 20 digits or 20 '-' for none), ':', the request's
// flight bound (Admission.Flight in milliseconds, rounded up, 12 digits: a
// duration, never a deadline), ':', an id (a random prefix per Store, and a
// count). ZRANGEBYLEX below a request's order lists the requests ordered
// before it; admit.lua answers them with the admission (the request's
// snapshot), and the Drain waits for those and for nothing admitted after
// it, so a stream of later requests ordered before it cannot starve it.
// A snapshot lists at most 256 entries, the oldest by order, so that a
// reply stays small however many wait; with more in flight the Drain waits
// for those, then reads the next ones (ZRANGEBYLEX after the last it waited
// for, below its own order), and so on: it never passes an older entry.
// Only there, beyond 256 older requests in flight on one resource, can an
// unsequenced request of the waiter's own token admitted after it (which
// is ordered before it) be among those read, and be waited for too (its
// release is not announced: the waiter finds it gone by its looks).
// An entry that an admission ordered after it found in flight gets a flag
// in the same key, '~' then the entry's member ('~' sorts after every
// digit, so no range of entries holds one): its release must be announced.
// The admission flags every entry ordered before it, past the snapshot's
// 256 too. In the common case, nothing older in flight, the key is new
// (the last release deleted it): admit.lua enters the entry (ZADD) and
// sets the key's TTL (PEXPIRE NX), whose answer, 1 for a key that had no
// TTL, says the key is new, since every in-flight key gets its TTL in the
// run that creates it; it reads nothing more (no ZRANGEBYLEX, no PTTL).
// A key made without that TTL by hand (PERSIST) is taken for a new one by
// the next admission, which then does not wait for the entries in it.
// No resource name spells an in-flight key, and no two resources share one.
//
// No clock of Redis's decides the barrier (drain.go). A waiter gives up an
// older request of its snapshot only when its release is announced, when a
// look finds it gone, or when the waiter's process has watched it, on its
// monotonic clock (Go's time.Since) since the reply of the first of its
// admissions whose snapshot listed it (fencestore.Watched: a later waiter
// continues that watch rather than begin its own), for the older
// request's bound plus fencestore.AbandonMargin (a second): it then
// removes the entry (announcing it) and Drain reports expired. So a
// step of the server's wall clock, forward or back (NTP, a failover to a
// host whose clock differs), neither lets a newer request start early nor
// holds it longer; the assumption left is that the replicas' clocks run at
// the same rate, within what the margin covers. Nothing can end a flight in
// Redis before the replica's own deadline: the bound is rounded up to the
// millisecond, the watch starts after the older request's admission (it
// was in flight when the snapshot that first showed it was taken), and the
// margin covers the owner's round trip. A request whose replica died holds
// the later ones back for its bound and the margin after each process
// first saw it, no longer; a key nobody waits on keeps such entries until
// a later request watches them out.
//
// Release removes the entry, riding the next group-commit pipeline, or on a
// goroutine of its own without batching; nobody waits for it. On a single
// server (plain or Sentinel) it rides inside the next admission's script
// run, batched or not: admit.lua runs the releases it is given before its
// admissions, so an admission and the release before it cost Redis one
// script run, not two (with MinReplicas, WAIT then covers the release too).
// A release that finds no admission queued waits up to
// Options.ReleaseLinger (DefaultReleaseLinger, 500µs) for one, then goes
// alone (release.lua); one that a Drain of this process waits for, one
// given up as abandoned and one sent again do not wait. The linger delays
// only the wake-up of a waiter on another replica: about 1.1ms at the median
// when the releasing process has nothing else to do (Go's timers then wake
// at millisecond resolution; BenchmarkWakeAcrossReplicas), less under load,
// when an admission comes sooner.
// On a Cluster or Ring a release is a release.lua run of its own in the
// same pipeline (one script run may touch one slot only). A release the store does not acknowledge (a timeout, a lost
// connection, a failover, READONLY) is sent again, backing off from 20ms to
// 1s, until it is acknowledged or the in-flight key no longer keeps the
// entry (three days past its bound, flight.lua's GCSET, on this process's monotonic clock): not
// only until the waiters that found it have given it up, since a request
// admitted after an outage longer than the bound finds the entry and would
// wait the bound out. At most a bounded number are owed at once
// (1024, or four times MaxBatch per pipeline): past it the oldest abandon
// (or release sent again) is dropped, else the oldest release, logged and
// counted (Store.DroppedReleases); the releases acknowledged since ten
// seconds before a break began (the first failure after an
// acknowledgement, however long the failover then takes, up to lookBack) are sent again
// when the subscription comes back after it (a promoted replica may lack
// them; on a Cluster or Ring only a break of the node holding the
// subscription does that), and, on a Cluster, at most every resendEvery
// when an admission or a Ping fails (resendAfterFailure: a failover of
// another node fails the admissions sent to it, and the admin's look). A release made before an admission is
// queued runs before that admission is decided: until it is acknowledged,
// an admission that enters its key carries it again, ahead of itself. An
// admission whose reply never came (its deadline passed, or its connection
// was lost: a master killed as it answered) may have made an entry, which a
// promoted replica keeps: it is released the same way, by its order and id.
//
// Wake-ups are targeted. When the removed entry had a flag (an admission
// ordered after it found it in flight), the release (flight.lua), which
// removes the entry and its flag with one ZREM whose count says whether
// the flag was there, publishes the removed member on
// the channel KeyPrefix+"inflight" (`fence:inflight`); the store's one subscription
// (made on its first admission with a barrier) hands it to the Drains whose
// snapshot holds it, and to no other: no Drain runs a command per release.
// A Drain looks at the store (one ZMSCORE of its snapshot's remaining
// members, nothing else) only every Options.DrainPoll (DefaultDrainPoll,
// 250ms), and when the subscription came back after a break or was not up
// when its admission was sent, for announcements it may have missed. On a
// Cluster, PUBLISH reaches every node, so one subscription hears all
// releases. On a Ring, a release is published on its key's shard, and the
// store subscribes on the one shard its channel's name maps to: a Drain for
// a key on another shard learns by its looks, DrainPoll at the latest.
//
// In-flight keys carry a TTL only to collect a key nobody enters any more:
// the longest flight entered in it plus two days, renewed about once a day,
// so no entry anybody may still wait for expires, even with the server's
// clock a day ahead. In the common case the last release deleted the key
// (Redis removes an empty sorted set), and the admission that creates it
// again sets its TTL with one PEXPIRE NX; only a key that existed already
// is read (PTTL) and renewed when its TTL is short of the flight's need. A volatile-* maxmemory-policy could still evict them
// under memory pressure: that forgets requests in flight (later ones go on
// without waiting for them), which weakens the barrier but never the mark,
// which has no TTL. noeviction instead refuses the entries' writes, and
// those admissions fail, closed.
//
// Admissions only on a master. Every script begins with a Redis 7 shebang
// whose flags leave out no-writes (scripts.go): Redis then counts it as a
// write and refuses it on a replica (READONLY) before it runs, so a URL
// that reaches a replica, or a master demoted by a failover fenceproxy does
// not follow, decides nothing on a copy of the marks that may be behind:
// Admit returns a *RoleError (an UnsafeError naming the role, wrapping
// fencestore.ErrUnavailable). The admission script is also refused while
// Redis is over maxmemory (closed); a release, which frees memory, is
// flagged allow-oom. Redis 7.0 or later is required.
//
// The floor (fencestore.Admission.Floor, a mark the replica saw before).
// admit.lua takes it as a fifth argument per admission ("" for none, else
// its stored form) and decides as Admission.Decide does: a stored mark
// ordered before it (token, then no sequence before any sequence, then
// sequence), or none, has regressed; the decision is taken against the
// floor, the mark after it (at least the floor) is written back in the same
// script run, and the reply's sixth value per admission says so
// (Decision.Regressed). A corrupt mark is not healed: it still fails its
// admissions, closed, until an operator's Reset repairs it.
//
// The generation (fencestore/generation.go; generation.go) is a hash beside
// each identity record, read with it in every admission's run, compared
// with the greatest generation the replica has seen (an argument) and
// advanced when the run writes a mark.
//
// The identity record (fencestore.Keeper; keeper.go) is the key KeyPrefix
// itself (`GET fence:`): every resource name is non-empty, so no mark key is
// it (an empty resource name is refused everywhere), and it is inside the
// prefix, so the ACL pattern ~<prefix>* covers it. With an empty KeyPrefix
// it is the empty key "", which Redis allows. Init writes it with SET NX
// (SET with force). Once Expect names it, every admission checks it inside
// its own script run: admit.lua takes the identity key as a last, odd KEY
// and the identity expected as its last argument, reads it once per run
// after checking the arguments and before any write, and when it is gone or
// another answers -2 with what it found for every admission of the run,
// having written nothing; Admit returns that as the *fencestore.LostError
// itself (it wraps ErrUnavailable and ErrStoreLost). So on a single server
// and through Sentinel, a flush, a restart without persistence or a
// failover to a copy that never had the record fails the first admission
// that meets it, batched or not, with WAIT or not (a batch whose admissions
// expect different records, an Expect between them, is split into one run
// per record). Ping reads the record too, once Expect named it.
//
// On a Ring each shard is a server of its own that runs scripts over any
// of its keys, so every shard holds a copy of the record under the same
// name: Init writes every live shard (the one the key maps to first, so
// that of two Inits at once one wins before the other writes anything
// else), Identity reads them all and is an error when they disagree (a
// shard emptied or replaced: only Init with force ends it), and each
// admission checks its own shard's copy in its script run, as above. What
// no record can see: when a shard is down, go-redis's Ring sends its keys
// to the others, which never had their marks; only the replicas' floors
// heal those.
//
// On a Cluster a script may touch the keys of one slot only, so one
// record cannot serve every admission: every one of the 16384 slots holds
// a copy, named {<prefix><tag>}:identity, where tag is three characters
// chosen (slots.go, once per store) so that the name's hash tag hashes to
// that slot. Each admission passes the copy in its mark's slot as the
// script's identity key and checks it in its run, as above; so a flush, a
// restart without persistence or a failover to an empty replica of any
// master fails the first admission on that master's slots. Init writes
// every copy (slot 0's first, on its master's own client, with SET NX: of
// two Inits at once one wins there before the other writes anything
// else; then the rest in one pipeline), Identity reads all 16384 (copies
// that disagree, some slots holding none, are an error naming the slots,
// which only Init with force ends), and Ping reads the copy of the first
// slot of each range of slots CLUSTER SLOTS lists (a master that lost its
// data lost all of its copies). The names begin with "{<prefix>", as the
// in-flight keys do, so the ACL pattern ~{<prefix>* covers both; a slot
// that migrates takes its copy along. Two prefixes are special: one with a
// hash tag puts every mark and the prefix key in the tag's slot, where the
// prefix key is the one record, as on a single server; one with a '}'
// outside a hash tag cannot name the copies (their hash tag would end
// inside the prefix), and the store refuses it (Layout; fenceproxy
// reports FENCE_KEY_PREFIX). With a prefix of '{' bytes alone, the empty
// one included, a resource name can spell a copy's name: it is refused
// (markKey), not written over the copy.
//
// The operator's reads and writes never block the server: no KEYS. Get is
// one GET. HasMarks SCANs (MATCH, the prefix's glob characters escaped) for
// one key under the prefix that is neither the identity record nor an
// in-flight key (a key named as one, flightKey, that GET finds to be of
// another type: an in-flight key of a mark with a hash tag lies under the
// prefix). List SCANs with MATCH KeyPrefix+prefix, both escaped (* ? [ ] \),
// server by server (the one server; every master of a Cluster, every live
// shard of a Ring, in address order), GETs each batch's keys in one
// pipeline, and skips the identity record and in-flight keys; a corrupt
// mark, or a key of another type, fails the page with an error naming it.
// Its cursor is opaque: the server, the SCAN cursor and COUNT, and, when a
// SCAN batch held more than the page had room for, where in that batch the
// page ended (see List). No page holds a mark twice; a walk may, when the
// keyspace is resized during it (SCAN's guarantee: a mark kept all through
// a walk is listed at least once), and on a Cluster a slot that migrates
// during a walk may be missed or repeated. Raise is raise.lua (GET, and SET
// when the mark moves forward, by the order above); Reset is reset.lua
// (GET, then SET or DEL), which replaces a corrupt mark or a key of another
// type too. Beside what admissions need, an operator's ACL user needs SCAN,
// DEL, EVAL and EVALSHA; `serve` needs SCAN too, to tell a new store from
// one kept by an older version when it finds no identity record (HasMarks).
//
// A build with the tag faultsbreak, the fault suite's only, can be told by
// its environment to wake every waiter on every release or to send each
// release once (break.go): the controls that show the suite's herd and
// failover-barrier scenarios fail without the targeted wake-up and the
// retried releases. Every other build has no such branch.
package redisstore
