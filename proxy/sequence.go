package proxy

import (
	"errors"
	"net/http"

	"github.com/fenceproxy/fenceproxy/config"
)

// ErrSequenceAbsent reports a request without the sequence header on a route
// whose sequence is required (428). Like ErrTokenAbsent it is not a
// *SequenceError: absent and malformed are different answers.
var ErrSequenceAbsent = errors.New("fencing sequence absent")

// SequenceError reports a sequence header that is present but is not exactly
// one canonical decimal uint64: the token's rules (ParseToken), and the same
// fixed reasons, which never echo the header value.
//
// ParseSequence returns one shared *SequenceError per reason, so that
// refusing a sequence allocates nothing; treat the value as read-only.
type SequenceError struct {
	Reason string
}

func (e *SequenceError) Error() string { return "malformed sequence: " + e.Reason }

// sequenceErrors is ParseSequence's error for each fault.
var sequenceErrors = func() [numFaults]error {
	var errs [numFaults]error
	errs[faultAbsent] = ErrSequenceAbsent
	for f := faultAbsent + 1; f < numFaults; f++ {
		errs[f] = &SequenceError{Reason: faultReasons[f]}
	}
	return errs
}()

// ParseSequence parses the sequence header's values (r.Header[name], all
// lines of it) by exactly the token's rules: one header line holding a
// canonical decimal uint64, optional whitespace trimmed, no list. It returns
// ErrSequenceAbsent when values is empty, and otherwise a *SequenceError for
// anything but one canonical number. It allocates nothing.
func ParseSequence(values []string) (uint64, error) {
	v, f := parseDecimalField(values)
	if f != faultNone {
		return 0, sequenceErrors[f]
	}
	return v, nil
}

// errSequenceHopByHop refuses a request whose Connection header names the
// sequence header, as errTokenHopByHop does for the token: the sequence would
// be admitted here and stripped on the way to the upstream.
var errSequenceHopByHop = &SequenceError{Reason: "the Connection header names the sequence header, which would strip it before the upstream"}

// sequenceOf reads r's sequence on route rt, whose sequence is not off. has
// is false for a request without one on a route whose sequence is optional
// (it is then admitted by token alone). The error is ErrSequenceAbsent where
// the sequence is required, or a *SequenceError.
func (p *Proxy) sequenceOf(r *http.Request, rt *route) (seq uint64, has bool, err error) {
	seq, err = ParseSequence(r.Header[p.sequenceHeader])
	switch {
	case err == nil:
		return seq, true, nil
	case err == ErrSequenceAbsent && rt.sequence == config.SequenceOptional:
		return 0, false, nil
	}
	return 0, false, err
}
