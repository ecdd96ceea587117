package proxy

import (
	"errors"
	"github.com/fenceproxy/fenceproxy/fencestore"
	"github.com/fenceproxy/fenceproxy/fencestore/storetest"
	"strconv"
	"strings"
	"testing"
)

func TestParseToken(t *testing.T) {
	tests := []struct {
		name    string
		values  []string
		want    uint64
		wantErr error // nil, ErrTokenAbsent or one of the errToken* values
	}{
		{name: "absent nil", values: nil, wantErr: ErrTokenAbsent},
		{name: "absent empty slice", values: []string{}, wantErr: ErrTokenAbsent},

		{name: "zero", values: []string{"0"}, want: 0},
		{name: "one digit", values: []string{"7"}, want: 7},
		{name: "small", values: []string{"42"}, want: 42},
		{name: "19 digits", values: []string{"9999999999999999999"}, want: 9999999999999999999},
		{name: "smallest 20 digits", values: []string{"10000000000000000000"}, want: 10000000000000000000},
		{name: "max minus one", values: []string{"18446744073709551614"}, want: 18446744073709551614},
		{name: "max", values: []string{"18446744073709551615"}, want: 18446744073709551615},
		{name: "above 2^53 exact", values: []string{"9007199254740993"}, want: 9007199254740993},
		{name: "spaces trimmed", values: []string{"  42  "}, want: 42},
		{name: "tabs trimmed", values: []string{"\t42\t"}, want: 42},
		{name: "mixed OWS trimmed", values: []string{" \t 42\t "}, want: 42},

		{name: "two lines", values: []string{"1", "1"}, wantErr: errTokenRepeated},
		{name: "two lines one empty", values: []string{"1", ""}, wantErr: errTokenRepeated},
		{name: "three lines", values: []string{"1", "2", "3"}, wantErr: errTokenRepeated},

		{name: "list", values: []string{"1,2"}, wantErr: errTokenList},
		{name: "list with space", values: []string{"1, 2"}, wantErr: errTokenList},
		{name: "trailing comma", values: []string{"1,"}, wantErr: errTokenList},
		{name: "lone comma", values: []string{","}, wantErr: errTokenList},
		{name: "comma and garbage", values: []string{"x,007"}, wantErr: errTokenList},

		{name: "empty", values: []string{""}, wantErr: errTokenEmpty},
		{name: "only spaces", values: []string{"   "}, wantErr: errTokenEmpty},
		{name: "only tab", values: []string{"\t"}, wantErr: errTokenEmpty},

		{name: "plus sign", values: []string{"+5"}, wantErr: errTokenNotDecimal},
		{name: "minus sign", values: []string{"-1"}, wantErr: errTokenNotDecimal},
		{name: "exponent", values: []string{"1e3"}, wantErr: errTokenNotDecimal},
		{name: "hex", values: []string{"0x10"}, wantErr: errTokenNotDecimal},
		{name: "inner space", values: []string{" 1 2"}, wantErr: errTokenNotDecimal},
		{name: "decimal point", values: []string{"7.0"}, wantErr: errTokenNotDecimal},
		{name: "underscore", values: []string{"1_000"}, wantErr: errTokenNotDecimal},
		{name: "arabic-indic digits", values: []string{"١٢"}, wantErr: errTokenNotDecimal},
		{name: "fullwidth digits", values: []string{"１２"}, wantErr: errTokenNotDecimal},
		{name: "letters", values: []string{"abc"}, wantErr: errTokenNotDecimal},
		{name: "CR not trimmed", values: []string{"5\r"}, wantErr: errTokenNotDecimal},
		{name: "LF not trimmed", values: []string{"\n5"}, wantErr: errTokenNotDecimal},
		{name: "VT not trimmed", values: []string{"5\v"}, wantErr: errTokenNotDecimal},
		{name: "NBSP not trimmed", values: []string{"\u00a05"}, wantErr: errTokenNotDecimal},
		{name: "NUL", values: []string{"5\x00"}, wantErr: errTokenNotDecimal},
		{name: "quoted", values: []string{`"5"`}, wantErr: errTokenNotDecimal},
		{name: "non-digit beats leading zero", values: []string{"0x"}, wantErr: errTokenNotDecimal},

		{name: "leading zero", values: []string{"007"}, wantErr: errTokenLeadingZero},
		{name: "double zero", values: []string{"00"}, wantErr: errTokenLeadingZero},
		{name: "zero one", values: []string{"01"}, wantErr: errTokenLeadingZero},
		{name: "padded max", values: []string{"018446744073709551615"}, wantErr: errTokenLeadingZero},
		{name: "many zeros", values: []string{strings.Repeat("0", 30)}, wantErr: errTokenLeadingZero},

		{name: "21 digits", values: []string{"100000000000000000000"}, wantErr: errTokenTooLong},
		{name: "very long", values: []string{strings.Repeat("9", 1000)}, wantErr: errTokenTooLong},

		{name: "max plus one", values: []string{"18446744073709551616"}, wantErr: errTokenOutOfRange},
		{name: "all nines", values: []string{"99999999999999999999"}, wantErr: errTokenOutOfRange},
		{name: "2e19", values: []string{"20000000000000000000"}, wantErr: errTokenOutOfRange},
		{name: "max with higher middle digit", values: []string{"18446744073709552615"}, wantErr: errTokenOutOfRange},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := ParseToken(tt.values)
			if err != tt.wantErr {
				t.Fatalf("ParseToken(%q) error = %v, want %v", tt.values, err, tt.wantErr)
			}
			if err != nil {
				if got != 0 {
					t.Errorf("ParseToken(%q) = %d with an error, want 0", tt.values, got)
				}
				return
			}
			if got != tt.want {
				t.Errorf("ParseToken(%q) = %d, want %d", tt.values, got, tt.want)
			}
		})
	}
}

// TestTokenErrorAs checks what the handler relies on: errors.As finds a
// *TokenError for a malformed token and not for an absent one, and the
// message carries the documented prefix.
func TestTokenErrorAs(t *testing.T) {
	_, err := ParseToken([]string{"007"})
	var te *TokenError
	if !errors.As(err, &te) {
		t.Fatalf("errors.As(%v, *TokenError) = false", err)
	}
	if te.Reason != "leading zero" {
		t.Errorf("Reason = %q, want %q", te.Reason, "leading zero")
	}
	if got, want := err.Error(), "malformed token: leading zero"; got != want {
		t.Errorf("Error() = %q, want %q", got, want)
	}

	_, err = ParseToken(nil)
	if errors.As(err, &te) {
		t.Errorf("errors.As(ErrTokenAbsent, *TokenError) = true, want false")
	}
	if !errors.Is(err, ErrTokenAbsent) {
		t.Errorf("ParseToken(nil) = %v, want ErrTokenAbsent", err)
	}
}

// TestTokenErrorReasonsDistinct keeps the reasons apart: a log or a problem
// detail must say which rule a token broke.
func TestTokenErrorReasonsDistinct(t *testing.T) {
	all := []*TokenError{
		errTokenRepeated, errTokenList, errTokenEmpty, errTokenNotDecimal,
		errTokenLeadingZero, errTokenTooLong, errTokenOutOfRange,
	}
	seen := map[string]bool{}
	for _, e := range all {
		if e.Reason == "" || seen[e.Reason] {
			t.Errorf("reason %q is empty or repeated", e.Reason)
		}
		seen[e.Reason] = true
	}
}

// ParseSequence follows the token's rules exactly (one parser): for every
// input of TestParseToken's kinds it returns the same value, and an error of
// its own type with the same reason, or ErrSequenceAbsent where the token's
// is ErrTokenAbsent.
func TestParseSequence(t *testing.T) {
	for _, values := range [][]string{
		nil, {}, {"0"}, {"7"}, {" 42\t"}, {"18446744073709551615"}, {"9007199254740993"},
		{"1", "1"}, {"1", ""}, {"7, 8"}, {","}, {""}, {" "}, {"+7"}, {"-1"}, {"7.0"}, {"١٢"}, {"5\r"},
		{"07"}, {"00"}, {"100000000000000000000"}, {"18446744073709551616"}, {"99999999999999999999"},
	} {
		seq, serr := ParseSequence(values)
		tok, terr := ParseToken(values)
		if seq != tok {
			t.Errorf("%q: ParseSequence = %d, ParseToken = %d", values, seq, tok)
		}
		var te *TokenError
		var se *SequenceError
		switch {
		case terr == nil:
			if serr != nil {
				t.Errorf("%q: ParseSequence error %v, ParseToken none", values, serr)
			}
		case terr == ErrTokenAbsent:
			if serr != ErrSequenceAbsent {
				t.Errorf("%q: ParseSequence error %v, want ErrSequenceAbsent", values, serr)
			}
		case !errors.As(terr, &te) || !errors.As(serr, &se) || errors.As(serr, &te):
			t.Errorf("%q: errors %T %v and %T %v, want a *TokenError and a *SequenceError (and not a *TokenError)", values, terr, terr, serr, serr)
		case se.Reason != te.Reason:
			t.Errorf("%q: sequence reason %q, token reason %q", values, se.Reason, te.Reason)
		case serr.Error() != "malformed sequence: "+te.Reason:
			t.Errorf("%q: Error() = %q", values, serr.Error())
		}
	}
	// One shared value per reason, like the token's.
	_, e1 := ParseSequence([]string{"07"})
	_, e2 := ParseSequence([]string{"007"})
	if e1 != e2 {
		t.Error("ParseSequence allocates a new error per refusal")
	}
	if errors.Is(ErrSequenceAbsent, ErrTokenAbsent) || errSequenceHopByHop.Reason == errTokenHopByHop.Reason ||
		!strings.Contains(errSequenceHopByHop.Error(), "sequence header") {
		t.Errorf("the sequence's errors must say sequence: %v, %v", ErrSequenceAbsent, errSequenceHopByHop)
	}
}

// FuzzParseToken maps (a, b, n) to n%3 header lines: none, [a], or [a, b].
func FuzzParseToken(f *testing.F) {
	for _, s := range []string{
		"0", "7", "42", "007", "00", "", " ", "\t", "+5", "-1", "1e3", "0x10", " 1 2",
		"١٢", "1,2", " 42 ", "\t42\t", "9999999999999999999", "10000000000000000000",
		"18446744073709551615", "18446744073709551616", "99999999999999999999",
		"100000000000000000000", "5\r",
	} {
		f.Add(s, "", uint8(1))
	}
	f.Add("1", "1", uint8(2))
	f.Add("", "", uint8(0))

	f.Fuzz(func(t *testing.T, a, b string, n uint8) {
		var values []string
		switch n % 3 {
		case 1:
			values = []string{a}
		case 2:
			values = []string{a, b}
		}

		v, err := ParseToken(values)

		// The sequence is parsed by the same rules: same value, same reason.
		sv, serr := ParseSequence(values)
		var se *SequenceError
		var tre *TokenError
		switch {
		case sv != v:
			t.Fatalf("ParseSequence(%q) = %d, ParseToken = %d", values, sv, v)
		case (err == nil) != (serr == nil), (err == ErrTokenAbsent) != (serr == ErrSequenceAbsent):
			t.Fatalf("ParseSequence(%q) error %v, ParseToken error %v", values, serr, err)
		case errors.As(err, &tre) && (!errors.As(serr, &se) || se.Reason != tre.Reason):
			t.Fatalf("ParseSequence(%q) error %v, ParseToken error %v", values, serr, err)
		}

		if err != nil {
			var te *TokenError
			if err != ErrTokenAbsent && !errors.As(err, &te) {
				t.Fatalf("ParseToken(%q) error %T %v, want *TokenError or ErrTokenAbsent", values, err, err)
			}
			if v != 0 {
				t.Fatalf("ParseToken(%q) = %d with error %v", values, v, err)
			}
		}
		switch len(values) {
		case 0:
			if err != ErrTokenAbsent {
				t.Fatalf("ParseToken(nil) error = %v, want ErrTokenAbsent", err)
			}
			return
		case 2:
			if err != errTokenRepeated {
				t.Fatalf("ParseToken(%q) error = %v, want repeated header", values, err)
			}
			return
		}

		// One value: an independent statement of the rule, checked against
		// strconv for the range.
		trimmed := strings.Trim(a, " \t")
		canonical := !strings.Contains(a, ",") && trimmed != "" &&
			strings.Trim(trimmed, "0123456789") == "" &&
			(len(trimmed) == 1 || trimmed[0] != '0')
		if !canonical {
			if err == nil {
				t.Fatalf("ParseToken(%q) = %d, want an error: not a canonical decimal", a, v)
			}
			return
		}
		want, perr := strconv.ParseUint(trimmed, 10, 64)
		if (perr == nil) != (err == nil) {
			t.Fatalf("ParseToken(%q) error = %v, strconv.ParseUint error = %v", a, err, perr)
		}
		if err != nil {
			if err != errTokenTooLong && err != errTokenOutOfRange {
				t.Fatalf("ParseToken(%q) error = %v, want too long or out of range", a, err)
			}
			return
		}
		if v != want {
			t.Fatalf("ParseToken(%q) = %d, strconv.ParseUint = %d", a, v, want)
		}
		if got := strconv.FormatUint(v, 10); got != trimmed {
			t.Fatalf("ParseToken(%q) = %d, which formats as %q, not the trimmed input %q", a, v, got, trimmed)
		}
	})
}

// The token header holds the one canonical decimal of the shared table;
// around it only optional whitespace, and never a list.
func TestParseTokenDecimals(t *testing.T) {
	for _, c := range storetest.DecimalCases() {
		if strings.ContainsAny(c.In, ",") || trimTokenOWS(c.In) != c.In {
			continue // header rules, tested in TestParseToken
		}
		v, err := ParseToken([]string{c.In})
		switch {
		case c.Fault == fencestore.DecimalOK && (err != nil || v != c.Want):
			t.Errorf("ParseToken(%q) = %d, %v; want %d", c.In, v, err, c.Want)
		case c.Fault != fencestore.DecimalOK && err == nil:
			t.Errorf("ParseToken(%q) = %d, want an error", c.In, v)
		}
		if c.Fault == fencestore.DecimalOK {
			if v2, err := ParseToken([]string{" \t" + c.In + "\t "}); err != nil || v2 != c.Want {
				t.Errorf("ParseToken(%q) with whitespace around: %d, %v", c.In, v2, err)
			}
		}
	}
}
