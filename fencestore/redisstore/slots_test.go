package redisstore

import (
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"
)

// The checksum and the slots of the Cluster specification's examples
// (TestClusterIdentityRecords asks a real cluster for every record's slot).
func TestKeySlot(t *testing.T) {
	if got := crc16(0, "123456789"); got != 0x31C3 {
		t.Fatalf("crc16(123456789) = %#x, want 0x31c3 (the specification's check value)", got)
	}
	for _, tc := range []struct {
		key  string
		want int
	}{
		{"123456789", 0x31C3 % clusterSlots},
		{"{user1000}.following", keySlot("user1000")},
		{"foo{}{bar}", int(crc16(0, "foo{}{bar}")) % clusterSlots}, // an empty tag: the whole key
		{"foo{{bar}}zap", keySlot("{bar")},
		{"foo{bar}{zap}", keySlot("bar")},
		{"{", int(crc16(0, "{")) % clusterSlots},
	} {
		if got := keySlot(tc.key); got != tc.want {
			t.Errorf("keySlot(%q) = %d, want %d", tc.key, got, tc.want)
		}
	}
}

// Three characters of the alphabet reach every slot after any prefix
// (CRC16 is linear: a prefix XORs one constant into every tag's sum), so
// newSlotRecords never fails for want of a tag. Checked here on the empty
// prefix, which covers the argument, and on some others.
func TestRecordTagsCoverEverySlot(t *testing.T) {
	for _, prefix := range []string{"", "fence:", "{", "{{", "a{b", "x" + strings.Repeat("y", 300)} {
		r, err := newSlotRecords(prefix)
		if err != nil {
			t.Fatalf("%q: %v", prefix, err)
		}
		for slot := range clusterSlots {
			name := r.name(slot)
			if got := keySlot(name); got != slot {
				t.Fatalf("%q: record %q is in slot %d, want %d", prefix, name, got, slot)
			}
			if !r.is(name) {
				t.Fatalf("%q: is(%q) = false", prefix, name)
			}
		}
		for _, k := range []string{prefix + "orders/42", "{" + prefix + "abc}:inflight", "{" + prefix + "ab}:identity", r.name(7) + "x"} {
			if r.is(k) {
				t.Errorf("%q: is(%q) = true", prefix, k)
			}
		}
	}
	if _, err := newSlotRecords("fe}nce:"); err == nil || !strings.Contains(err.Error(), "fe}nce:") {
		t.Errorf("a prefix with '}' = %v, want an error naming it", err)
	}
}

// Only a prefix of '{' alone lets a resource name spell a record; the
// store refuses such a name rather than write a mark over a record.
func TestMarkKeyRefusesRecordNames(t *testing.T) {
	for _, tc := range []struct {
		prefix    string
		spellable bool
	}{{"", true}, {"{", true}, {"{{", true}, {"fence:", false}, {"{fence:", false}} {
		cc := redis.NewClusterClient(&redis.ClusterOptions{Addrs: []string{"127.0.0.1:1"}, MaxRetries: -1, ContextTimeoutEnabled: true})
		s := New(cc, Options{KeyPrefix: tc.prefix, MaxBatch: -1})
		if s.records == nil || s.spellable != tc.spellable {
			t.Fatalf("%q: records %v, spellable %v", tc.prefix, s.records != nil, s.spellable)
		}
		name := s.records.name(12345)
		// A mark key begins with the prefix: can one be this record?
		resource, ok := strings.CutPrefix(name, tc.prefix)
		if ok != tc.spellable {
			t.Fatalf("%q: record %q begins with the prefix: %v", tc.prefix, name, ok)
		}
		if _, err := s.markKey("admit", resource); ok && err == nil {
			t.Errorf("%q: markKey(%q) accepted a record's name", tc.prefix, resource)
		}
		if _, err := s.markKey("admit", "orders/42"); err != nil {
			t.Errorf("%q: markKey(orders/42) = %v", tc.prefix, err)
		}
		_ = s.Close()
	}
	// A prefix with a hash tag has the one record, the prefix key, in
	// every mark's slot: no per-slot records.
	cc := redis.NewClusterClient(&redis.ClusterOptions{Addrs: []string{"127.0.0.1:1"}, MaxRetries: -1, ContextTimeoutEnabled: true})
	s := New(cc, Options{KeyPrefix: "{fence}:"})
	defer s.Close()
	if s.records != nil || s.Layout() != nil {
		t.Errorf("a tagged prefix: records %v, Layout %v", s.records != nil, s.Layout())
	}
	if k, err := s.recordFor("{fence}:orders/42"); k != "{fence}:" || err != nil {
		t.Errorf("recordFor = %q, %v", k, err)
	}
}
