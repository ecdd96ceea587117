package etcdstore

import (
	"bytes"
	"errors"
	"strconv"

	"github.com/fenceproxy/fenceproxy/fencestore"
)

// The key layout and the value format (doc.go explains them).

const (
	// padWidth is the width of a token or a sequence in a stored value and
	// in an in-flight key: every uint64 fits in 20 decimal digits.
	padWidth = 20
	// orderWidth is the width of an order in an in-flight key: the token,
	// ':', and the sequence or 20 '-' for none.
	orderWidth = 2*padWidth + 1
	// lenWidth is the width of the resource name's length in an in-flight
	// key (decimal); etcd refuses requests far below 10^10 bytes.
	lenWidth = 10
	// idWidth is the width of an in-flight record's id: the replica's 16
	// hex digits, '.', and a count in 16 hex digits.
	idWidth = 16 + 1 + 16
)

// noSequence stands for the sequence of an order without one: '-' sorts
// below every digit, so (t) comes before every (t, s).
const noSequence = "--------------------"

// zeros19 sorts below every well-formed value. The admission transaction
// writes over a stored value only when it also compares above zeros19, so
// that a value that is empty, all zeros and shorter than 20 bytes, or that
// begins with a byte below '0' (" 42", "-1") is never overwritten. Whatever
// is stored, Admit parses the value it read in the same transaction, and an
// admission that meets a value of any other shape fails (closed).
const zeros19 = "0000000000000000000"

// inflightPart follows the key prefix in every in-flight key.
const inflightPart = "\x00inflight/"

// operatorPart follows the key prefix in the operator's key (keeper.go).
const operatorPart = "\x00operator"

// errReservedName refuses a resource name that no mark may have: the empty
// name is the identity record's key, and names that begin with a NUL byte
// are the store's own (the in-flight records).
var errReservedName = errors.New("resource names that are empty or begin with a NUL byte are reserved by the etcd store")

// reserved reports whether resource is a name the store refuses.
func reserved(resource string) bool { return resource == "" || resource[0] == 0 }

// layout is where a store's keys live under its prefix.
type layout struct {
	prefix string
	// identity is the identity record's key: the prefix itself, or "\x00"
	// when the prefix is empty (etcd has no empty key).
	identity string
	// inflight begins every in-flight key.
	inflight string
	// operator is put by every Raise and Reset that writes (an empty
	// value): its ModRevision is the generation of the operator's last
	// change of marks (keeper.go).
	operator string
	// marksFrom and marksEnd bound the marks: every key from the prefix
	// followed by a byte above NUL to the end of the prefix (end "\x00":
	// to the end of the keyspace, as etcd reads a range end of NUL).
	marksFrom, marksEnd string
}

func newLayout(prefix string) layout {
	l := layout{
		prefix:    prefix,
		identity:  prefix,
		inflight:  prefix + inflightPart,
		operator:  prefix + operatorPart,
		marksFrom: prefix + "\x01",
		marksEnd:  prefixEnd(prefix),
	}
	if prefix == "" {
		l.identity = "\x00"
	}
	return l
}

// prefixEnd is the end of the range of keys that begin with p: etcd's
// "\x00" (to the end of the keyspace) when p is empty or all 0xff.
func prefixEnd(p string) string {
	b := []byte(p)
	for i := len(b) - 1; i >= 0; i-- {
		if b[i] < 0xff {
			b[i]++
			return string(b[:i+1])
		}
	}
	return "\x00"
}

// markKey is resource's mark key.
func (l layout) markKey(resource string) string { return l.prefix + resource }

// flightRange is the part every in-flight key of resource begins with:
// the in-flight prefix, the name's length in 10 digits, and the name. The
// length makes the ranges of two resources disjoint whatever bytes their
// names hold ("a" and "a\x00..." differ in length).
func (l layout) flightRange(resource string) string {
	b := make([]byte, 0, len(l.inflight)+lenWidth+len(resource)+orderWidth+1+idWidth)
	b = append(b, l.inflight...)
	b = appendPadded(b, uint64(len(resource)), lenWidth)
	return string(append(b, resource...))
}

// flightKey is the key of one in-flight record: flightRange, the order,
// '/', and the record's id.
func flightKey(rng string, order fencestore.Mark, id string) string {
	b := make([]byte, 0, len(rng)+orderWidth+1+len(id))
	b = append(b, rng...)
	b = appendOrder(b, order)
	b = append(b, '/')
	return string(append(b, id...))
}

// olderRange returns the range of the in-flight keys of the records
// ordered before the record at key: from its resource's flightRange up to
// (not including) the key's own order. A record of an equal order begins
// with that bound and so is outside it.
func olderRange(key string) (from, end string, ok bool) {
	n := len(key) - 1 - idWidth
	if n < orderWidth || key[n] != '/' {
		return "", "", false
	}
	return key[:n-orderWidth], key[:n], true
}

// appendOrder appends m's place in the barrier's order: 20 digits of
// token, ':', 20 digits of sequence or 20 '-' for none. The bytes sort as
// fencestore.Mark.Before orders.
func appendOrder(b []byte, m fencestore.Mark) []byte {
	b = appendPadded(b, m.Token, padWidth)
	b = append(b, ':')
	if m.HasSequence {
		return appendPadded(b, m.Sequence, padWidth)
	}
	return append(b, noSequence...)
}

// appendValue appends m as a mark's value: the token in 20 digits, and,
// when m has a sequence, ':' and the sequence in 20 digits. The bytes sort
// as fencestore.Mark.Before orders: a shorter value (no sequence) is a
// prefix of the longer ones of its token.
func appendValue(b []byte, m fencestore.Mark) []byte {
	b = appendPadded(b, m.Token, padWidth)
	if m.HasSequence {
		b = append(b, ':')
		b = appendPadded(b, m.Sequence, padWidth)
	}
	return b
}

// value returns m's stored value.
func value(m fencestore.Mark) string {
	return string(appendValue(make([]byte, 0, orderWidth), m))
}

// parseValue parses a stored mark: exactly 20 digits, or 20 digits, ':'
// and 20 digits, each at most 18446744073709551615. Anything else is
// corrupt.
func parseValue(v []byte) (fencestore.Mark, bool) {
	switch len(v) {
	case padWidth:
		tok, ok := parsePadded(v)
		return fencestore.Mark{Token: tok}, ok
	case orderWidth:
		tok, ok1 := parsePadded(v[:padWidth])
		seq, ok2 := parsePadded(v[padWidth+1:])
		return fencestore.Mark{Token: tok, Sequence: seq, HasSequence: true}, ok1 && ok2 && v[padWidth] == ':'
	}
	return fencestore.Mark{}, false
}

// parsePadded reads a zero-padded decimal: without its leading zeros it is
// a canonical one (fencestore.ParseMark, the project's one definition).
func parsePadded(v []byte) (uint64, bool) {
	t := bytes.TrimLeft(v, "0")
	if len(t) == 0 {
		return 0, len(v) > 0
	}
	return fencestore.ParseMark(t)
}

// appendPadded appends n in decimal, zero-padded to width digits.
func appendPadded(b []byte, n uint64, width int) []byte {
	var d [20]byte
	v := strconv.AppendUint(d[:0], n, 10)
	for range width - len(v) {
		b = append(b, '0')
	}
	return append(b, v...)
}
