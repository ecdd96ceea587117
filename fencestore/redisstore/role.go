package redisstore

import (
	"github.com/redis/go-redis/v9"

	"github.com/fenceproxy/fenceproxy/fencestore"
)

// RoleError reports a Redis server that answers as a replica (a URL that
// reaches a replica, a master demoted by a failover that fenceproxy does not
// follow): admissions run only on a master, since a replica's copy of the
// marks may be behind. The admission scripts are flagged as writes
// (scripts.go), so Redis refuses them there (READONLY) before they decide
// anything. It unwraps to a *fencestore.UnsafeError, and so to
// fencestore.ErrUnavailable: the request gets 503 store-unavailable whose
// detail names the role, and nothing is forwarded.
type RoleError struct {
	// Role is the role the server answered with ("replica" when it
	// refused a script as one; INFO's "slave" when read from there).
	Role string
}

func (e *RoleError) Error() string {
	return "redisstore: " + e.Reason()
}

// Reason says what is wrong and what to do, without an address or a
// credential: safe to show to a client.
func (e *RoleError) Reason() string {
	return "the Redis server answers as a replica (role " + e.Role + "), and admissions run only on a master: " +
		"point the store at the master, or at Sentinel"
}

// Unwrap makes errors.As find a *fencestore.UnsafeError (whose Reason names
// the role) and errors.Is find fencestore.ErrUnavailable.
func (e *RoleError) Unwrap() error { return &fencestore.UnsafeError{Reason: e.Reason()} }

// roleError returns a *RoleError when err is Redis refusing a script as a
// replica does, else nil.
func roleError(err error) error {
	if err != nil && redis.IsReadOnlyError(err) {
		return &RoleError{Role: "replica"}
	}
	return nil
}
