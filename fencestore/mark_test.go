package fencestore

import "testing"

func TestParseMark(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want uint64
		ok   bool
	}{
		{"0", 0, true},
		{"1", 1, true},
		{"10", 10, true},
		{"9007199254740993", 9007199254740993, true},
		{"18446744073709551615", 1<<64 - 1, true},
		{"18446744073709551616", 0, false},
		{"18446744073709551620", 0, false},
		{"99999999999999999999", 0, false},
		{"100000000000000000000", 0, false},
		{"", 0, false},
		{"00", 0, false},
		{"01", 0, false},
		{"-1", 0, false},
		{"+1", 0, false},
		{" 1", 0, false},
		{"1 ", 0, false},
		{"1_000", 0, false},
		{"0x10", 0, false},
		{"١", 0, false}, // Arabic-Indic digit one
	} {
		got, ok := ParseMark(tc.in)
		if got != tc.want || ok != tc.ok {
			t.Errorf("ParseMark(%q) = %d, %t; want %d, %t", tc.in, got, ok, tc.want, tc.ok)
		}
		if got2, ok2 := ParseMark([]byte(tc.in)); got2 != got || ok2 != ok {
			t.Errorf("ParseMark([]byte(%q)) differs from the string form", tc.in)
		}
	}
}
