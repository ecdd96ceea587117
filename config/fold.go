package config

import (
	"strings"
	"unicode"
	"unicode/utf8"
)

// FoldPath returns the case-folded form of a canonical path, which a
// case-insensitive route is matched against and which names its resource.
//
// Frameworks that match paths without regard to case disagree on how: ASCII
// only, Unicode upper-casing (ASP.NET Core's OrdinalIgnoreCase), JavaScript's
// case-insensitive regular expressions. Folding more than an upstream does
// only lets two spellings share a mark (safe); folding less would let one
// escape the other's fence. Unicode simple case folding (what
// strings.EqualFold uses) folds what ASCII matching does and nearly all that
// upper-casing does; it misses letters that upper-casing sends to another
// class (the dotless i, U+0131, upper-cases to I) and full folding's
// expansions (ß as ss). So every rune becomes the smallest rune of its
// Unicode simple case-folding orbit ("K", "k" and the Kelvin sign all become
// "k", as do "S", "s" and the long s "ſ" become "s"), ASCII letters in lower
// case. Bytes that are not UTF-8 are kept as they are.
//
// An ASCII path without upper-case letters is returned as is, without
// allocating.
func FoldPath(s string) string {
	i := 0
	for ; i < len(s); i++ {
		if c := s[i]; c >= utf8.RuneSelf || 'A' <= c && c <= 'Z' {
			break
		}
	}
	if i == len(s) {
		return s
	}
	var b strings.Builder
	b.Grow(len(s))
	b.WriteString(s[:i])
	for i < len(s) {
		c := s[i]
		if c < utf8.RuneSelf {
			if 'A' <= c && c <= 'Z' {
				c += 'a' - 'A'
			}
			b.WriteByte(c)
			i++
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && size == 1 {
			b.WriteByte(c)
		} else {
			b.WriteRune(foldRune(r))
		}
		i += size
	}
	return b.String()
}

// foldRune returns the representative of r's case-folding orbit: its
// smallest member, in lower case when that is an ASCII letter.
func foldRune(r rune) rune {
	least := r
	for f := unicode.SimpleFold(r); f != r; f = unicode.SimpleFold(f) {
		least = min(least, f)
	}
	if 'A' <= least && least <= 'Z' {
		least += 'a' - 'A'
	}
	return least
}
