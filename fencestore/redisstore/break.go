package redisstore

// Broken on purpose, for the fault suite only. The fault suite must show
// that its herd and failover-barrier scenarios fail when the part they
// check is missing, and those parts (the targeted wake-up, the retried and
// re-sent releases) have no setting: nothing an operator should ever turn
// off. So two controls exist only in a binary built with the build tag
// faultsbreak (break_faults.go), which reads the environment variable
// FENCEPROXY_FAULTS_BREAK once at start:
//   - "broadcast": every announcement of a release wakes every waiter of
//     the store, not only those whose snapshot holds it, and each waiter
//     woken looks at the store (ZMSCORE of its remaining entries), as it
//     would have to with a wake-up that does not say whom it unblocks.
//   - "noretry": a release is sent once and dropped when the store does not
//     acknowledge it, and nothing is sent again when the subscription comes
//     back after a break (a failover).
// Every other build (break_off.go) has both as false constants, so the
// compiler drops their branches: the shipped binary cannot be broken by
// its environment. The variable is not FENCE_*: those are the
// configuration's, and an unknown one is a configuration error.

// kickAll wakes every waiter of the store, whatever its snapshot holds
// (the "broadcast" control). s.wmu is held.
func (s *Store) kickAll() {
	for _, ws := range s.watchers {
		for _, w := range ws {
			select {
			case w.kick <- struct{}{}:
			default:
			}
		}
	}
}
