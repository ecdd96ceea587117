// Package etcdstore is the fencestore.Store and fencestore.Keeper in etcd
// (the v3 API, through go.etcd.io/etcd/client/v3): marks that are
// linearizable and survive the loss of a minority of members, and a drain
// barrier across replicas timed by each process's own monotonic clock.
//
//	client, err := etcdstore.NewClient(etcdstore.ClientOptions{Endpoints: eps, ...})
//	store := etcdstore.New(client, etcdstore.Options{KeyPrefix: "fence:", Logger: log})
//
// New takes ownership of the client (Close closes it). NewClient makes one
// as the store needs it: TLS from PEM files, a username and password for
// etcd's RBAC, keepalive pings, no logging to stderr. etcd 3.4 and later
// serve it (the tests run on 3.7.3, and pass on Debian's 3.4.23).
//
// # Keys and values
//
// Everything lives under the key prefix, so one RBAC permission covers it
// (`etcdctl role grant-permission fence readwrite --prefix=true fence:`):
//
//   - A resource's mark: KeyPrefix+resource. Its value is the token as 20
//     decimal digits, zero-padded, and, once a request with a sequence was
//     admitted with that token, ':' and the sequence as 20 digits:
//     `etcdctl get fence:orders/42` shows 00000000000000000042 or
//     00000000000000000042:00000000000000000007. Fixed width makes etcd's
//     byte order of values the numeric order of marks, the (token,
//     sequence) pairs included (a value without a sequence is a prefix of,
//     so below, those with one): the admission transaction compares values
//     in etcd. (The Redis and bolt stores keep the canonical decimal; the
//     padding is etcd's alone.) A value of any other shape is never read
//     as absent: the admissions that meet it fail (see below), Get and List
//     report a *CorruptError, Raise refuses it, Reset replaces it.
//   - The identity record: KeyPrefix itself, which no resource can spell
//     since every resource name is non-empty ("\x00" when the prefix is
//     empty: etcd has no empty key).
//   - In-flight records (the barrier): KeyPrefix+"\x00inflight/", then the
//     resource name's length in 10 digits, the name, the request's order
//     (the token in 20 digits, ':', the sequence in 20 digits or 20 '-' for
//     none, so that the bytes sort as fencestore.Mark.Before orders), '/',
//     and an id (the replica's 16 random hex digits, '.', a count in 16 hex
//     digits). The value is the request's flight bound in nanoseconds;
//     the key carries a lease for garbage collection only. The length
//     keeps the ranges of two resources apart whatever bytes their names
//     hold. Resource names that begin with a NUL byte are the store's own:
//     an admission, Get or Raise of such a name (or of "") fails with an
//     error wrapping fencestore.ErrUnavailable, and List and HasMarks read
//     only from KeyPrefix+"\x01" to the end of the prefix, so they see
//     neither the identity record nor the in-flight records. (No name the
//     proxy builds from a path or a header begins with NUL.)
//   - The operator's key: KeyPrefix+"\x00operator", put by every Raise and
//     Reset that writes (an empty value). Its ModRevision is
//     the store generation of the operator's last change of marks.
//
// # The admission transaction
//
// Each admission is one etcd transaction, nested transactions inside it
// (txn.go draws the tree): read the mark, and then, by comparisons of the
// stored value with constants (below the admission's bound: its own mark,
// or the token followed by ';' for ">=" without a sequence; below the
// floor; below its own mark; absent), put the new mark or not, and
// register the flight when admitted. Decide is expressed as those
// comparisons, so etcd decides in one step and one round trip: there is
// no read before the write, and no retry under contention, which an
// optimistic compare-and-swap on ModRevision would need (two round trips,
// and more under contention). Admit then runs
// fencestore.Admission.Decide, the reference, on the value read in the
// same transaction, and requires etcd to have taken the branch Decide
// takes: the Decision is the reference's, floor healing included, and a
// corrupt value fails the admission (an error wrapping
// fencestore.ErrUnavailable). Every branch that writes also requires the
// stored value to compare above 19 zeros, so that an empty value, a
// shorter run of zeros or a value beginning below '0' is never
// overwritten; a corrupt value whose leading bytes sort below the new mark
// may be (forward, by those bytes), and that admission fails all the same.
//
// Group commit (batch.go): concurrent admissions go to etcd together, the
// transaction of each nested in one transaction that first checks the
// identity record (after Expect; otherwise it returns the record, and
// every admission of the batch a *fencestore.LostError). While a batch is
// on its way, new admissions queue, and the next batch takes them all
// (another leaves beside it only for a long queue, since etcd spends about
// as much on a transaction as on eight admissions, or once it has been in
// flight for 50ms: it may be stuck on a member that stopped answering);
// an idle admission goes at once, with no timer. So one gRPC call, one raft entry, one
// apply and one fsync serve many admissions, and each keeps its own
// decision. etcd evaluates every comparison of a transaction before any
// of its writes, and refuses one that puts a key twice: two admissions of
// one resource never share a batch (the later one waits for the next).
// A batch stays within etcd's default --max-txn-ops (128, counted along
// the nested transactions) and well within its --max-request-bytes. The
// releases of the barrier ride the same batches (below). On the
// project's two-core machine this took fenceproxy on one member from 0.42
// to 0.60-0.65 of its throughput on durable Redis, measured in the same
// runs (docs/performance.md).
//
// Stale is a Decision. Every etcd error, a deadline included, is an error
// wrapping fencestore.ErrUnavailable (and the context's error when the
// caller's context ended): fail closed. A batch is atomic, so an error of
// its transaction is each of its admissions': one by which etcd refused
// it whole without applying any of it, and that one admission can cause
// (a lease etcd no longer has, a key its RBAC denies, a batch over the
// server's own limits), splits the batch until that admission is alone;
// any other error fails them all, and none is sent again. The client
// never re-sends a transaction that may have reached a member, so an
// error is indeterminate only in the way every store's is (the mark may
// have advanced).
//
// Linearizability: a transaction that may write goes through raft, and
// etcd applies the transactions of the cluster in one order, so
// admissions of a resource are atomic and linearizable, refusals too (the
// transaction has writes in its branches, so even one that writes nothing
// is ordered by raft). Every read of the store (Get, List, Mark, Ping,
// HasMarks, Identity, Drain's range reads) is linearizable (etcd's
// ReadIndex), never serializable.
//
// Raise and Reset, the operator's, read the mark and write it in a
// transaction that compares ModRevision with the one read (retried on
// conflict), so they never write over a value they did not see; the same
// transaction puts the operator's key.
//
// # The store generation
//
// The generation of fencestore/generation.go is etcd's revision, which
// every response carries: once the identity is expected, each Decision
// reports its batch's revision, and a response below the greatest this
// process saw is a store gone back in time (a *fencestore.LostError with
// Rollback). An admission with a floor (a mark the replica remembers)
// compares the operator's key's ModRevision with the revision the floor
// was seen at, in its own transaction: a change by an operator since sets
// the floor aside (Decision.FloorVoid), so that a reset to 100 admits 101
// on every replica instead of being raised back to the mark it replaced.
//
// # The drain barrier
//
// An admission with Admission.Flight, once admitted, puts its in-flight
// key in the same transaction (its value the flight bound in nanoseconds,
// canonical decimal), and reads the keys of its resource ordered before it
// (a range ending at its own order, so equal orders never wait), with
// their values: its snapshot, at no extra round trip.
// Decision.Flight.Older is a non-empty snapshot, which the store keeps
// beside the Flight until Release.
//
// Drain waits for that snapshot only: a record put after the admission
// never holds it back (no starvation). The waiters of one resource in one
// process share one watch of its records (flightwatch.go), opened by the
// first and closed with the last; a deletion is handed to the waiters
// whose snapshot holds the key, through a channel of each, so a release
// wakes only the waiters it may unblock, and costs the others no read.
// The watch begins "from now" and remembers what it saw deleted; a waiter
// admitted before the watch began reads what remains of its snapshot once
// after joining (a linearizable read), so no deletion is missed. Each time
// the watch is made again (a lost leader: it requires one; a broken
// stream), and every Options.DrainPoll (1s) while it has waiters, the
// watcher reads the keys its waiters still wait for, one read for all.
// (A watch from the admission's revision would need no read, but etcd
// serves a watch that begins in the past from its unsynced group, caught
// up every 100ms: measured, that delayed wake-ups by up to 100ms.)
//
// A record stops holding a waiter back when it is deleted (released), or
// once the waiter's process has watched it, on its monotonic clock, from
// the reply of the first of its admissions that found it in flight
// (fencestore.Watched: a later waiter continues that watch), for the
// record's bound plus fencestore.AbandonMargin:
// its owner died, froze or lost etcd. The waiter then queues the record's
// deletion and Drain reports expired. Nothing of etcd's clock decides:
// each record carries a lease, but its TTL is the bound plus two days
// (gcAfter), only so that etcd collects records that nobody released and
// nobody waited for; a replica shares one lease among its admissions of a
// flight length for a day, and grants the next in the background. A
// record without a bound in its value is timed with the waiter's own.
//
// Release forgets the snapshot and queues the key for deletion; the
// deletion rides the next batch, ahead of its admissions (so a release
// made before an admission was queued goes in the same transaction, ahead
// of it, or in an earlier one), or goes with other releases alone when no
// admission waits. A transaction of releases that fails is queued again
// after a backoff (50ms doubling to 2s), until etcd acknowledges it or the
// record's lease has collected it (the bound plus two days, on this
// process's clock): not only until the waiters that found it gave it up,
// since a request admitted after an outage longer than the bound finds the
// record and would wait the bound out. At most 65,536 wait: past it the
// release queued first is dropped, logged and counted
// (Store.DroppedReleases). Close sends the releases still
// queued, once. An admission whose caller gave up before its batch
// answered (FENCE_STORE_TIMEOUT: the request got 503, nothing was
// forwarded) may have been applied all the same: its record is released
// once the batch answers, so the deletion comes after the put; if the
// transaction timed out at the client and etcd applies it later still,
// the waiters' own bound ends the wait. A Drain wakes a few milliseconds
// (median) after another replica's Release on one member.
//
// # What survives, and what does not
//
// Marks survive what etcd's raft survives: an admission returns only once
// its transaction is committed on a quorum, so the loss of any minority of
// members loses no mark, and a member that comes back on its data catches
// up. A leader failover costs about one election timeout (1s at the
// defaults) of admissions that fail with 503; those sent just before the
// failure are indeterminate, as every 503 is (TestClusterLeaderKilled
// checks that no mark moves backward across it). The barrier survives it
// too (its records are keys and leases in the same raft log).
//
// What does not survive: losing a quorum stops every admission (503, fail
// closed) until it returns; losing every member's data, or running etcd
// with --unsafe-no-fsync or on disks that lie about fsync, can lose marks.
// An emptied cluster, or one restored from a snapshot taken before the
// identity record was written, is caught by the identity check (every
// admission then fails with a *fencestore.LostError); a restore from a
// snapshot that already had the record, without --bump-revision, sets the
// revision back, which a replica that saw a later one refuses (the store
// generation, above); with --bump-revision (or with every replica
// restarted) it sets marks back without a trace, and only the replicas'
// mark caches (Admission.Floor) heal the resources they remember. The barrier assumes the replicas' clocks run at about the same
// rate (fencestore.AbandonMargin covers a small drift). Each admission that moves a mark, and each flight (its put and
// its delete), adds revisions to etcd's history: run etcd with
// auto-compaction (e.g. --auto-compaction-mode=periodic
// --auto-compaction-retention=1h) and defragment now and then, or the
// space quota (2GiB by default) fills, and etcd refuses writes (503) until
// an operator compacts, defragments and disarms the NOSPACE alarm.
// Compaction never touches current keys, and Drain watches "from now", so
// neither marks nor the barrier depend on history.
package etcdstore
