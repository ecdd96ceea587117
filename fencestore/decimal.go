package fencestore

// DecimalFault is the rule a string breaks to not be a canonical decimal
// uint64 (ParseDecimal); DecimalOK when it breaks none.
type DecimalFault uint8

const (
	DecimalOK          DecimalFault = iota
	DecimalEmpty                    // no digits
	DecimalNotDigits                // a byte other than ASCII '0'-'9' (a sign, a space, a non-ASCII digit)
	DecimalLeadingZero              // more than one digit, the first a '0'
	DecimalTooLong                  // more than 20 digits
	DecimalOutOfRange               // 20 digits above 18446744073709551615
)

// maxDecimal is math.MaxUint64 spelled in decimal. Two canonical decimal
// strings of equal length compare as numbers when compared as strings, so a
// 20-digit number is in range iff it is not greater than this string: the
// overflow check is exact and needs no arithmetic.
const maxDecimal = "18446744073709551615"

// ParseDecimal parses the one spelling fenceproxy gives a number, wherever
// it gives one (a token, a sequence, a stored mark, a {name:uint} path
// segment): a canonical decimal uint64, 1 to 20 ASCII digits, no sign, no
// leading zero unless the number is 0, at most 18446744073709551615. It is
// the only Go implementation of that rule; the Redis scripts' Lua
// canonical (redisstore/marks.lua) implements it once more, and both are
// tested against one table of cases (testdata/decimals.txt). It allocates
// nothing.
//
// A number has exactly one spelling so that it is one string everywhere: if
// "007" were 7, a log, a metric label or an upstream re-checking the header
// would see two values where the fence saw one.
func ParseDecimal[T string | []byte](s T) (uint64, DecimalFault) {
	if len(s) == 0 {
		return 0, DecimalEmpty
	}
	// Byte-wise, so non-ASCII digits such as "١٢" are refused. v may wrap
	// for a long input; it is returned only once the length and range
	// checks below have passed.
	var v uint64
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c < '0' || c > '9' {
			return 0, DecimalNotDigits
		}
		v = v*10 + uint64(c-'0')
	}
	switch {
	case len(s) > 1 && s[0] == '0':
		return 0, DecimalLeadingZero
	case len(s) > len(maxDecimal):
		return 0, DecimalTooLong
	case len(s) == len(maxDecimal) && string(s) > maxDecimal:
		return 0, DecimalOutOfRange
	}
	return v, DecimalOK
}
