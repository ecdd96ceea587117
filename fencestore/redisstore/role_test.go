package redisstore_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/fenceproxy/fenceproxy/fencestore"
	"github.com/fenceproxy/fenceproxy/fencestore/redisstore"
	"github.com/fenceproxy/fenceproxy/fencestore/redisstore/redistest"
)

// A store pointed at a replica admits nothing, whatever the admission would
// decide: Redis refuses the admission script there (READONLY), since it is
// flagged as a write, before it runs. Without the flag, a refusal, or an
// equal token under >=, wrote nothing and was decided on the replica's copy
// of the marks, which may be behind. The error names the role, wraps
// fencestore.ErrUnavailable, and reads as an UnsafeError (503
// store-unavailable, its detail naming the role).
func TestReplicaRefusesAdmissions(t *testing.T) {
	primary, replica := startReplicated(t)
	for _, tc := range []struct {
		name string
		opts redisstore.Options
	}{{"batched", redisstore.Options{}}, {"unbatched", redisstore.Options{MaxBatch: -1}}} {
		t.Run(tc.name, func(t *testing.T) {
			master, prefix := newStore(t, primary, tc.opts)
			if _, err := master.Admit(t.Context(), fencestore.Admission{Resource: "r", Token: 42}); err != nil {
				t.Fatal(err)
			}
			// The replica has the mark.
			redistest.Poll(t, 5*time.Second, "the mark replicated", func() error {
				v, err := replica.Client(t).Get(t.Context(), prefix+"r").Result()
				if err == nil && v != "42" {
					err = errors.New("GET = " + v)
				}
				return err
			})
			tc.opts.KeyPrefix = prefix
			onReplica := redisstore.New(redis.NewClient(replica.Options()), tc.opts)
			defer onReplica.Close()
			for _, a := range []fencestore.Admission{
				{Resource: "r", Token: 41},                      // a refusal: writes nothing
				{Resource: "r", Token: 42},                      // an equal token under >=: writes nothing
				{Resource: "r", Token: 43, Flight: time.Minute}, // an admission with the barrier
				{Resource: "new", Token: 1},
			} {
				d, err := onReplica.Admit(t.Context(), a)
				var role *redisstore.RoleError
				var unsafe *fencestore.UnsafeError
				if !errors.As(err, &role) || !errors.Is(err, fencestore.ErrUnavailable) || !errors.As(err, &unsafe) {
					t.Fatalf("Admit(%+v) on a replica = %+v, %v; want a *RoleError wrapping ErrUnavailable", a, d, err)
				}
				if !strings.Contains(unsafe.Reason, "replica") || !strings.Contains(unsafe.Reason, "master") {
					t.Errorf("reason %q does not name the role", unsafe.Reason)
				}
			}
			if v, err := primary.Client(t).Get(t.Context(), prefix+"r").Result(); err != nil || v != "42" {
				t.Errorf("master's mark = %q, %v; want 42 untouched", v, err)
			}
		})
	}
}
