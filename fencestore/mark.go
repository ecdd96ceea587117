package fencestore

// ParseMark parses a mark as stores keep it: a canonical decimal uint64, 1 to
// 20 ASCII digits, no sign, no leading zero unless the value is 0, at most
// 18446744073709551615. Stores keep marks in this one spelling so that a
// human (`redis-cli GET fence:orders/42`) reads the number and the Redis
// script can compare marks exactly as strings; anything else in a mark's
// place is corruption, and callers refuse it rather than treat it as absent.
// (strconv.ParseUint alone would accept leading zeros.)
func ParseMark[T string | []byte](v T) (uint64, bool) {
	if len(v) == 0 || len(v) > 20 || (len(v) > 1 && v[0] == '0') {
		return 0, false
	}
	var n uint64
	for i := 0; i < len(v); i++ {
		c := v[i]
		if c < '0' || c > '9' {
			return 0, false
		}
		d := uint64(c - '0')
		if n > (1<<64-1-d)/10 {
			return 0, false // overflow
		}
		n = n*10 + d
	}
	return n, true
}
