package redisstore

import (
	"fmt"
	"strings"
)

// The identity on a Cluster: one record in every hash slot (doc.go).
//
// A script may touch the keys of one slot only, so the record an admission
// checks in its run must be in its mark's slot. slotRecords names, for a
// key prefix without a hash tag, one record per slot:
//
//	{<prefix><tag>}:identity
//
// where tag is three characters chosen so that <prefix><tag>, the key's
// hash tag, hashes to that slot. The names begin with "{<prefix>", like
// the in-flight keys, so the ACL pattern that covers those covers these,
// and (with a non-empty prefix) no mark key, which begins with the prefix,
// is one: recordSpellable says when one could be (a prefix of '{' bytes
// only, the empty one included), and markKey then refuses it.
//
// A prefix with a hash tag puts every mark and the prefix key itself in the
// tag's slot: the one record, the prefix key, is in every mark's slot
// already, as on a single server.

const (
	clusterSlots = 16384 // Redis Cluster's hash slots
	recordSuffix = "}:identity"
	// tagAlphabet spells the tags. No '}' (it would end the hash tag) and
	// only bytes a shell or a log shows as they are. Three characters of
	// it reach every slot after any prefix: CRC16 is linear, so a prefix
	// only XORs the same constant into every tag's checksum, and
	// TestRecordTagsCoverEverySlot checks the 64^3 tags once.
	tagAlphabet = "0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ-_"
)

// slotRecords names the identity record of each slot for one prefix.
type slotRecords struct {
	prefix string
	tags   [clusterSlots][3]byte
}

// errPrefixNoRecords refuses the identity on a Cluster whose key prefix
// has a '}' outside a hash tag: the record names' hash tag would end inside
// the prefix, and every record would share one slot.
var errPrefixNoRecords = fmt.Errorf("on a Redis Cluster the identity has a record in every slot, named {<prefix><tag>}%s, "+
	"which a key prefix with a '}' outside a hash tag cannot spell; use a prefix without '}', or with a hash tag "+
	"(all marks then share one slot)", recordSuffix)

// newSlotRecords finds a tag for every slot after prefix, or fails with
// errPrefixNoRecords.
func newSlotRecords(prefix string) (*slotRecords, error) {
	if strings.IndexByte(prefix, '}') >= 0 {
		return nil, fmt.Errorf("redisstore: key prefix %q: %w", prefix, errPrefixNoRecords)
	}
	r := &slotRecords{prefix: prefix}
	found := 0
	seen := make([]bool, clusterSlots)
	base := crc16(0, prefix)
	n := len(tagAlphabet)
	for i := 0; i < n*n*n && found < clusterSlots; i++ {
		t := [3]byte{tagAlphabet[i/(n*n)], tagAlphabet[i/n%n], tagAlphabet[i%n]}
		s := int(crc16(base, string(t[:]))) % clusterSlots
		if !seen[s] {
			seen[s], r.tags[s] = true, t
			found++
		}
	}
	if found < clusterSlots {
		// TestRecordTagsCoverEverySlot rules this out for every prefix.
		return nil, fmt.Errorf("redisstore: key prefix %q: tags reach %d of %d slots", prefix, found, clusterSlots)
	}
	return r, nil
}

// name is the record of slot.
func (r *slotRecords) name(slot int) string {
	t := r.tags[slot]
	return "{" + r.prefix + string(t[:]) + recordSuffix
}

// forKey is the record in key's slot.
func (r *slotRecords) forKey(key string) string { return r.name(keySlot(key)) }

// is reports whether key is a record's name.
func (r *slotRecords) is(key string) bool {
	if len(key) != len(r.prefix)+4+len(recordSuffix) || !strings.HasPrefix(key, "{"+r.prefix) || !strings.HasSuffix(key, recordSuffix) {
		return false
	}
	return key == r.forKey(key)
}

// recordSpellable reports whether a mark key prefix+resource can be a
// record's name: only when prefix is '{' bytes alone (or empty).
func recordSpellable(prefix string) bool {
	return strings.Trim(prefix, "{") == ""
}

// keySlot is Redis Cluster's hash slot of key: CRC16 (XMODEM) of its hash
// tag (the bytes between the first '{' and the first '}' after it, when
// there are any), else of the whole key, modulo 16384. go-redis computes
// the same in an internal package, which cannot be imported.
func keySlot(key string) int {
	if s := strings.IndexByte(key, '{'); s >= 0 {
		if e := strings.IndexByte(key[s+1:], '}'); e > 0 {
			key = key[s+1 : s+1+e]
		}
	}
	return int(crc16(0, key)) % clusterSlots
}

// crc16 continues the CRC16-XMODEM checksum crc over s (polynomial 0x1021,
// initial value 0, as the Cluster specification gives it).
func crc16(crc uint16, s string) uint16 {
	for i := 0; i < len(s); i++ {
		crc = crc<<8 ^ crc16Table[byte(crc>>8)^s[i]]
	}
	return crc
}

var crc16Table = func() (t [256]uint16) {
	for i := range t {
		c := uint16(i) << 8
		for range 8 {
			if c&0x8000 != 0 {
				c = c<<1 ^ 0x1021
			} else {
				c <<= 1
			}
		}
		t[i] = c
	}
	return t
}()
