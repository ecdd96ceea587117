package fencestore

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"
)

// Keeper is what an operator does to a store, beside the proxy's Store: its
// identity and its marks, one at a time. Every store implements it; the
// `fenceproxy store` and `fenceproxy marks` commands, and the start of
// `serve`, use it. The request path never does.
//
// Identity. A store holds one identity record under a key no resource name
// can spell (every resource name is non-empty, so the key is the key prefix
// itself), written once by Init. A replica reads it at start and hands it to
// Expect; from then on every admission checks, in the same atomic step, that
// the record is still there and the same. A store that was emptied, restarted
// without persistence or failed over to a copy that never had it then fails
// every admission with a *LostError, until an operator runs Init with force.
type Keeper interface {
	// Identity returns the store's identity record, "" when it has none.
	Identity(ctx context.Context) (string, error)
	// Init writes a new identity record (NewIdentity, or with force
	// ForceOver the record held) and returns it. Without force it fails
	// with ErrIdentityExists when the store already has one; with force,
	// with ErrNotLost when the store's record is intact (ForceOver).
	Init(ctx context.Context, force bool) (string, error)
	// Expect makes every later admission fail with a *LostError unless the
	// store's identity record is id.
	Expect(id string)
	// HasMarks reports whether the store holds any mark (so a store without
	// an identity record can be told new from one kept by an older version).
	HasMarks(ctx context.Context) (bool, error)
	// MarkLost replaces the identity record with a lost record
	// (LostRecord), so that every replica, one that starts cold included,
	// refuses the store from its next admission, unless the store holds a
	// lost record already or a record that Supersedes want (an operator
	// forced it since): that one is left alone (LostOver). It returns the record the store holds after it. A
	// replica calls it when it finds the store lost (its identity gone or
	// changed, or its generation gone back).
	MarkLost(ctx context.Context, want string) (string, error)

	// Get returns resource's mark, sequence included, and false when it has
	// none.
	Get(ctx context.Context, resource string) (Mark, bool, error)
	// List returns up to limit marks whose resource names begin with prefix,
	// in the store's order, from cursor ("" for the first page); next is ""
	// after the last page. It never blocks the store (SCAN, not KEYS).
	List(ctx context.Context, prefix, cursor string, limit int) (marks []Entry, next string, err error)
	// Raise sets resource's mark to m when m is above it (or it has none),
	// atomically; a mark already at or above m is left alone and reported
	// with changed false. It returns the mark before.
	Raise(ctx context.Context, resource string, m Mark) (old Mark, had, changed bool, err error)
	// Reset sets resource's mark to *m whatever it was, or deletes it when
	// m is nil. It returns the mark before.
	Reset(ctx context.Context, resource string, m *Mark) (old Mark, had bool, err error)
}

// Entry is one resource's mark, as List returns it.
type Entry struct {
	Resource string
	Mark     Mark
}

// ErrIdentityExists is returned by Init without force on a store that has
// an identity record.
var ErrIdentityExists = errors.New("the store already has an identity record (use --force to replace it)")

// ErrStoreLost is wrapped by every *LostError.
var ErrStoreLost = errors.New("fence store lost")

// LostError reports a store whose identity record is gone, or another than
// the one this process saw: it has lost marks (emptied, restarted without
// persistence, failed over to a copy that never had them). It wraps
// ErrUnavailable and ErrStoreLost: the request is refused with 503
// store-lost and nothing is forwarded.
type LostError struct {
	Want  string // the identity this process saw
	Found string // the identity the store has now; "" when it has none
	// Rollback is set when the identity is intact but the store's
	// generation went back (generation.go): Seen is the greatest this
	// process saw there, Got the one the store answered with.
	Rollback  bool
	Seen, Got uint64
}

func (e *LostError) Error() string {
	switch {
	case e.Rollback:
		return fmt.Sprintf("fence store went back in time: its generation is %d, after this process saw %d "+
			"(restored from a backup, or a replica that missed writes took over): marks written since may be gone", e.Got, e.Seen)
	case IsLostRecord(e.Found):
		return "fence store was marked lost (" + e.Found + ") by a replica that found it emptied, replaced or gone back in time"
	case e.Found == "":
		return "fence store lost its identity record " + e.Want + ": it was emptied or replaced, and its marks may be gone"
	}
	return "fence store identity changed from " + e.Want + " to " + e.Found + ": it was replaced, and its marks may be gone"
}

// Unwrap makes errors.Is(err, ErrUnavailable) and errors.Is(err,
// ErrStoreLost) hold.
func (e *LostError) Unwrap() []error { return []error{ErrUnavailable, ErrStoreLost} }

// NewIdentity returns a fresh identity record: 128 random bits in hex.
// An operator's forced record comes from ForceOver.
func NewIdentity() string { return hex.EncodeToString(random()) }

func random() []byte {
	var b [16]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never fails on supported platforms
	return b[:]
}

// stamped is a record of kind prefix stamped ms: the stamp in 13 digits,
// '-', 128 random bits in hex.
func stamped(prefix string, ms int64) string {
	return fmt.Sprintf("%s%013d-%s", prefix, max(ms, 0), hex.EncodeToString(random()))
}

// ForceOver is the rule of an operator's Init with force, one for every
// store: held is what the store holds where its identity record lives
// ("" for none; one value per copy where the record has several, a Redis
// Cluster's slots or a Ring's shards). It refuses with ErrNotLost a store
// whose record is intact: one record, the same in every copy, neither lost
// nor forced. Otherwise it returns the forced record to write, stamped
// later than every stamp held (a forced record's, or the one a lost record
// carries from the record it replaced: LostOver), even when this host's
// wall clock is behind the host that stamped it: the replicas take up a
// forced record only when its stamp is no earlier than the one they
// expect (Supersedes).
func ForceOver(held ...string) (string, error) {
	agreed := len(held) > 0
	for _, h := range held {
		agreed = agreed && h == held[0]
	}
	if agreed && held[0] != "" && !IsLostRecord(held[0]) && !Forced(held[0]) {
		return "", ErrNotLost
	}
	at := time.Now().UnixMilli()
	for _, h := range held {
		if st := stamp(h); st > 0 {
			at = max(at, st+1)
		}
	}
	return stamped(forcedPrefix, at), nil
}

// LostOver is the rule of Keeper.MarkLost, one for every store: held is
// the record the store holds, want the one the replica expected. keep is
// true when held stays: a lost record already (an operator's force alone
// ends it), or a forced record that supersedes want (the operator
// recovered since). Otherwise lost is the record to write in held's place;
// it carries the latest stamp of held and want, so that the operator's
// next force (ForceOver) is stamped after the record the replicas expect.
func LostOver(held, want string) (lost string, keep bool) {
	if IsLostRecord(held) || Supersedes(held, want) {
		return held, true
	}
	return LostRecord(want), false
}

// LostRecord returns a fresh lost record (Keeper.MarkLost) to replace the
// record want: what a replica writes in place of the identity record when
// it finds the store lost. It carries want's stamp (0 when want was not
// forced): a Redis store's script keeps the rule of LostOver itself, and
// writes it.
func LostRecord(want string) string {
	return stamped(lostPrefix, stamp(want))
}

const (
	forcedPrefix = "forced-"
	lostPrefix   = "lost-"
)

// Forced reports whether the identity record id was written by an
// operator's Init with force.
func Forced(id string) bool { return strings.HasPrefix(id, forcedPrefix) }

// IsLostRecord reports whether id is a lost record (LostRecord): a replica
// found the store lost, and only an operator's Init with force ends it.
func IsLostRecord(id string) bool { return strings.HasPrefix(id, lostPrefix) }

// forcedAt is when a forced record was written (milliseconds since the
// epoch, or later: ForceOver), 0 for any other record, or a forced one
// from before records carried the time.
func forcedAt(id string) int64 {
	if !Forced(id) {
		return 0
	}
	return stamp(id)
}

// stamp is the stamp of a forced or lost record (0 for another record,
// or one from before records carried it).
func stamp(id string) int64 {
	rest, ok := strings.CutPrefix(id, forcedPrefix)
	if !ok {
		rest, ok = strings.CutPrefix(id, lostPrefix)
	}
	if !ok || len(rest) < 14 || rest[13] != '-' {
		return 0
	}
	ms, err := strconv.ParseInt(rest[:13], 10, 64)
	if err != nil {
		return 0
	}
	return ms
}

// Supersedes reports whether the record found replaces want as the
// operator's recovery: a forced record, another than want, written no
// earlier than want (when want is forced too). A replica that meets such a
// record, lost or not, takes it up; an older forced record (a backup
// taken before the last recovery, restored) does not supersede.
func Supersedes(found, want string) bool {
	return Forced(found) && found != want && forcedAt(found) >= forcedAt(want)
}

// IdentityShaped reports whether v has the shape of an identity record
// (NewIdentity: 32 hex digits, or a forced one) or of a lost record: what a
// store finds under a key of another deployment's when two deployments'
// key prefixes nest.
func IdentityShaped(v string) bool {
	if IsLostRecord(v) || Forced(v) {
		return true
	}
	if len(v) != 32 {
		return false
	}
	for i := 0; i < len(v); i++ {
		c := v[i]
		if (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return false
		}
	}
	return true
}

// ErrNotLost is returned by an operator's forced init on a store whose
// identity record is intact and was never forced: nothing was lost, and
// forcing a new record would only make every replica refuse the store.
var ErrNotLost = errors.New("the store is not lost: its identity record is intact")
