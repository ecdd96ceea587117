package redisstore

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/fenceproxy/fenceproxy/fencestore"
)

// The drain barrier in Redis (doc.go has the layout). admit.lua enters an
// admitted request into the in-flight key beside its mark, with its flight
// bound (a duration), and answers the entries ordered before it: the
// request's snapshot, what Drain waits for (drain.go). Nothing here reads a
// clock of Redis's: a waiter times an older entry on its own monotonic
// clock, and Release retries until the store acknowledges or the release is
// moot (release.go).

// DefaultDrainPoll is how often a waiting Drain looks at the entries of its
// snapshot still in flight when no announcement came, when
// Options.DrainPoll is zero.
const DefaultDrainPoll = 250 * time.Millisecond

// maxFlightMillis is the longest flight bound admit.lua takes (12 digits of
// milliseconds, some 31 years); a longer Admission.Flight is cut to it.
const maxFlightMillis = 999_999_999_999

// flightSuffix ends every in-flight key.
const flightSuffix = ":inflight"

// Offsets in a member: the order's 41 bytes, ':', the bound's 12 digits,
// ':', the id.
const (
	orderLen  = 41
	boundEnd  = orderLen + 1 + 12
	memberMin = boundEnd + 2
)

// flightKey returns the in-flight key beside mark, and whether it is in
// mark's Cluster slot. A script may touch the keys of one slot only, so the
// two must share one: besideKey (generation.go) names it after mark's hash
// tag when it has one (`{42}:inflight:fence:orders/{42}`), else after the
// whole mark when it has no '}' (`{fence:orders/42}:inflight`, which hashes
// as `fence:orders/42` does). A mark with a '}' but no tag ("a{}b", "x}y",
// and "") hashes whole, and a name that hashes as it does while being
// another name cannot be built: the key returned then lands in another
// slot, which only a single server can use. Every form begins with '{',
// which no mark key does under a valid prefix (keys.go): no resource name
// spells an in-flight key.
func flightKey(mark string) (string, bool) {
	_, tagged := hashTag(mark)
	return besideKey(mark, flightSuffix), tagged || (mark != "" && !strings.Contains(mark, "}"))
}

// hasHashTag reports whether key hashes by a tag (a part of it) rather than
// whole, as Redis Cluster (and go-redis's Ring) decide it.
func hasHashTag(key string) bool {
	s := strings.IndexByte(key, '{')
	if s < 0 {
		return false
	}
	e := strings.IndexByte(key[s+1:], '}')
	return e > 0
}

// errNoFlightSlot refuses an admission with a barrier on a Cluster or Ring
// client whose mark key has no in-flight key in its slot (flightKey).
var errNoFlightSlot = errors.New("the key has a '}' but no hash tag, so no in-flight key for the drain barrier shares its slot; " +
	"use a resource name (and prefix) without '}', or with a hash tag")

// sharded reports whether the client spreads keys over several servers by
// their slots (Cluster) or hash tags (Ring).
func (s *Store) sharded() bool {
	switch s.client.(type) {
	case *redis.ClusterClient, *redis.Ring:
		return true
	}
	return false
}

// order41 is the order part of an in-flight member for m, as admit.lua
// builds it: the token in 20 digits, ':', and the sequence in 20 digits or
// 20 '-' for none.
func order41(m fencestore.Mark) string {
	b := make([]byte, 0, orderLen)
	b = appendPadded(b, m.Token)
	b = append(b, ':')
	if m.HasSequence {
		b = appendPadded(b, m.Sequence)
	} else {
		b = append(b, "--------------------"...)
	}
	return string(b)
}

func appendPadded(b []byte, n uint64) []byte {
	var d [20]byte
	v := strconv.AppendUint(d[:0], n, 10)
	for range 20 - len(v) {
		b = append(b, '0')
	}
	return append(b, v...)
}

// memberBound reads the flight bound of an in-flight member, and whether
// the member has the shape admit.lua gives it.
func memberBound(m string) (time.Duration, bool) {
	if len(m) < memberMin || m[orderLen] != ':' || m[boundEnd] != ':' {
		return 0, false
	}
	ms, err := strconv.ParseUint(m[orderLen+1:boundEnd], 10, 64)
	if err != nil || ms == 0 {
		return 0, false
	}
	return time.Duration(ms) * time.Millisecond, true
}

// newFlightIDs returns the prefix of the store's entry ids: random, so that
// the entries of replicas sharing the store never collide.
func newFlightIDs() string {
	var b [8]byte
	_, _ = rand.Read(b[:]) // never fails (crypto/rand panics instead)
	return hex.EncodeToString(b[:])
}

// flightMillis is a's flight bound in whole milliseconds, rounded up: the
// bound the store keeps is never shorter than the replica's own deadline.
func flightMillis(a fencestore.Admission) int64 {
	return int64(min((a.Flight+time.Millisecond-1)/time.Millisecond, maxFlightMillis))
}

// barrierArg is admit.lua's barrier argument for a, which has a flight:
// the bound in whole milliseconds (rounded up), '+' when busy (a request
// of the same in-flight key is in flight here), and a new entry id.
func (s *Store) barrierArg(a fencestore.Admission, busy bool) string {
	b := strconv.FormatInt(flightMillis(a), 10)
	if busy {
		b += "+"
	}
	return b + " " + s.idPrefix + strconv.FormatUint(s.ids.Add(1), 16)
}

// flight is what the store keeps of an admission it entered in flight,
// until its Release.
type flight struct {
	key string
	// moot is when a release of it no longer matters (releaseUntil), on
	// this process's monotonic clock: the in-flight key no longer keeps
	// it, so no request admitted later can find it.
	moot time.Time
	// The snapshot, for a flight admitted with older requests in flight:
	// their members and bounds, when the admission's reply came (a
	// waiter's watch of them starts there), and the subscription's epoch
	// when the admission was sent (drain.go).
	olders   []older
	more     bool
	admitted time.Time
	epoch    uint64
}

// snapshotCap is the most entries a snapshot lists (flight.lua's
// SNAPSHOT): the oldest by order. With more in flight before an admission,
// its Drain waits for those first, then looks for the rest (drain.go).
const snapshotCap = 256

// snapshot is what an admission's reply says it waits for: olders, and
// whether more entries than snapshotCap were ordered before it.
type snapshot struct {
	olders []older
	more   bool
}

// older is one entry of a snapshot.
type older struct {
	member string
	bound  time.Duration
}

// flights are the store's registrations, by member, and how many there
// are of each in-flight key.
type flights struct {
	mu   sync.Mutex
	m    map[string]*flight
	keys map[string]int
}

func (fs *flights) put(member string, f *flight) {
	fs.mu.Lock()
	defer fs.mu.Unlock()
	if fs.m == nil {
		fs.m, fs.keys = make(map[string]*flight), make(map[string]int)
	}
	if old := fs.m[member]; old != nil {
		fs.forget(old.key)
	}
	fs.m[member] = f
	fs.keys[f.key]++
}

// forget counts one registration of key less.
func (fs *flights) forget(key string) {
	if fs.keys[key] <= 1 {
		delete(fs.keys, key)
	} else {
		fs.keys[key]--
	}
}

// busy reports whether a registration of key is in flight: an admission
// entering key then likely finds older entries (admit.lua looks first).
func (fs *flights) busy(key string) bool {
	fs.mu.Lock()
	defer fs.mu.Unlock()
	return fs.keys[key] > 0
}

// get returns a copy of member's registration, and whether there is one.
func (fs *flights) get(member string) (flight, bool) {
	fs.mu.Lock()
	defer fs.mu.Unlock()
	f := fs.m[member]
	if f == nil {
		return flight{}, false
	}
	return *f, true
}

// take removes member's registration and returns it (nil when unknown).
func (fs *flights) take(member string) *flight {
	fs.mu.Lock()
	defer fs.mu.Unlock()
	f := fs.m[member]
	if f != nil {
		delete(fs.m, member)
		fs.forget(f.key)
	}
	return f
}

// drained forgets the snapshot of member's flight: every entry of it is
// gone, and a Drain again returns at once.
func (fs *flights) drained(member string) {
	fs.mu.Lock()
	defer fs.mu.Unlock()
	if f := fs.m[member]; f != nil {
		f.olders, f.more = nil, false
	}
}

// parseOlders reads admit.lua's list of the entries ordered before an
// admission of order own: each must be a member of an earlier order, by
// bytes.
func parseOlders(v any, own string) ([]older, error) {
	text, ok := v.(string)
	if !ok {
		return nil, fmt.Errorf("unexpected snapshot %#v", v)
	}
	if text == "" {
		return nil, nil
	}
	list := strings.Split(text, " ")
	out := make([]older, 0, len(list))
	for _, m := range list {
		bound, shaped := memberBound(m)
		if !shaped || m[:orderLen] >= own {
			return nil, fmt.Errorf("snapshot entry %q is not an entry ordered before %q", m, own)
		}
		out = append(out, older{member: m, bound: bound})
	}
	return out, nil
}
