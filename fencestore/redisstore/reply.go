package redisstore

import (
	"fmt"
	"strings"
	"time"

	"github.com/fenceproxy/fenceproxy/fencestore"
)

// parseReply reads the script's {flag, mark, member, older, olders,
// regressed, generation} reply for a, whose in-flight key is fkey and whose run checked
// the identity want ("" for none), and rejects one that the script cannot
// have produced for it: a stale mark reported for an admission, say, would
// forward a request on a wrong answer. A regressed decision must be the one
// a.Decide takes against a's floor, exactly. Otherwise an admission must
// report a's own pair as the mark, or, for an equal token without a sequence
// under >=, that token's unchanged mark; a refusal must report a mark that
// a.Decide refuses; and with a floor no mark below it. An admission with a
// barrier must report an entry of its own order and bound, and entries of
// earlier orders as its snapshot (returned beside the decision), and
// anything else none; older 2 says the snapshot lists the oldest of more
// (snapshotCap).
// A run that found another identity than want gives a *fencestore.LostError.
func parseReply(reply any, a fencestore.Admission, fkey, want string) (fencestore.Decision, snapshot, error) {
	r, ok := reply.([]any)
	if !ok || len(r) != replyLen {
		return fencestore.Decision{}, snapshot{}, fmt.Errorf("unexpected reply %#v", reply)
	}
	flag, ok := r[0].(int64)
	if ok && flag == -1 {
		msg, _ := r[1].(string)
		return fencestore.Decision{}, snapshot{}, &keyError{msg}
	}
	if ok && flag == -2 {
		found, ok := r[1].(string)
		if !ok || want == "" || found == want {
			return fencestore.Decision{}, snapshot{}, fmt.Errorf("unexpected identity reply %#v (expecting %q)", r[1], want)
		}
		return fencestore.Decision{}, snapshot{}, &fencestore.LostError{Want: want, Found: found}
	}
	if ok && flag == -3 {
		text, _ := r[1].(string)
		got, f := fencestore.ParseDecimal(text)
		if want == "" || f != fencestore.DecimalOK {
			return fencestore.Decision{}, snapshot{}, fmt.Errorf("unexpected generation reply %#v", r[1])
		}
		return fencestore.Decision{}, snapshot{}, &fencestore.LostError{Want: want, Found: want, Rollback: true, Got: got}
	}
	genText, _ := r[6].(string)
	gen, f := fencestore.ParseDecimal(genText)
	if f != fencestore.DecimalOK {
		return fencestore.Decision{}, snapshot{}, fmt.Errorf("unexpected generation %#v", r[6])
	}
	if !ok || (flag != 0 && flag != 1) {
		return fencestore.Decision{}, snapshot{}, fmt.Errorf("unexpected admitted flag %#v", r[0])
	}
	text, ok := r[1].(string)
	if !ok {
		return fencestore.Decision{}, snapshot{}, fmt.Errorf("unexpected mark %#v", r[1])
	}
	m, ok := fencestore.ParseMarkValue(text)
	if !ok {
		return fencestore.Decision{}, snapshot{}, fmt.Errorf("mark %q is not a canonical token[:sequence]", text)
	}
	regressed, ok := r[5].(int64)
	if !ok || regressed < 0 || regressed > 2 || (regressed != 0 && !a.HasFloor) {
		return fencestore.Decision{}, snapshot{}, fmt.Errorf("unexpected regressed flag %#v", r[5])
	}
	d := fencestore.Decision{Admitted: flag == 1, Mark: m.Token, Sequence: m.Sequence, HasSequence: m.HasSequence,
		Regressed: regressed == 1, FloorVoid: regressed == 2, Generation: gen}
	if d.FloorVoid {
		// Decided without the floor: check it so.
		a.HasFloor = false
	}
	switch {
	case d.Regressed:
		// Decided against the floor: Decide without a mark says how.
		want, next, _ := a.Decide(fencestore.Mark{}, false)
		if d.Admitted != want.Admitted || m != next {
			return fencestore.Decision{}, snapshot{}, fmt.Errorf("%s over a regressed mark (floor %s) decided %v with mark %q",
				admissionText(a), markText(a.Floor), d.Admitted, text)
		}
	case a.HasFloor && m.Before(a.Floor):
		return fencestore.Decision{}, snapshot{}, fmt.Errorf("%s reported mark %q below its floor %s, not as regressed",
			admissionText(a), text, markText(a.Floor))
	case d.Admitted:
		own := m == fencestore.Mark{Token: a.Token, Sequence: a.Sequence, HasSequence: a.HasSequence}
		unchanged := !a.HasSequence && a.Compare == fencestore.AtLeast && m.Token == a.Token
		if !own && !unchanged {
			return fencestore.Decision{}, snapshot{}, fmt.Errorf("%s admitted with mark %q", admissionText(a), text)
		}
	default:
		if refused, _, _ := a.Decide(m, true); refused.Admitted {
			return fencestore.Decision{}, snapshot{}, fmt.Errorf("%s refused by mark %q, which admits it", admissionText(a), text)
		}
	}
	member, ok1 := r[2].(string)
	older, ok2 := r[3].(int64)
	list, ok3 := r[4].(string)
	if !ok1 || !ok2 || !ok3 || older < 0 || older > 2 || (older != 0) != (list != "") {
		return fencestore.Decision{}, snapshot{}, fmt.Errorf("unexpected in-flight reply %#v", r[2:5])
	}
	if !d.Admitted || a.Flight <= 0 {
		if member != "" || older != 0 {
			return fencestore.Decision{}, snapshot{}, fmt.Errorf("%s without a barrier entered in flight as %q", admissionText(a), member)
		}
		return d, snapshot{}, nil
	}
	own := order41(a.Order())
	if bound, ok := memberBound(member); !ok || !strings.HasPrefix(member, own+":") ||
		bound != time.Duration(flightMillis(a))*time.Millisecond {
		return fencestore.Decision{}, snapshot{}, fmt.Errorf("%s entered in flight as %q", admissionText(a), member)
	}
	olders, err := parseOlders(r[4], own)
	if err != nil {
		return fencestore.Decision{}, snapshot{}, err
	}
	if older == 2 && len(olders) != snapshotCap {
		return fencestore.Decision{}, snapshot{}, fmt.Errorf("a snapshot of %d entries said to list the first %d of more", len(olders), snapshotCap)
	}
	d.Flight = fencestore.Flight{Older: older != 0, Key: fkey, Ref: member, Order: a.Order()}
	return d, snapshot{olders: olders, more: older == 2}, nil
}

// replyLen is the length of admit.lua's reply per admission: {flag, mark,
// member, older, expired, regressed, generation}.
const replyLen = 7

// admissionText spells a's token and sequence as the script's mark would.
func admissionText(a fencestore.Admission) string { return markText(a.Order()) }

// markText spells m as it is stored.
func markText(m fencestore.Mark) string { return string(m.AppendValue(nil)) }

// keyError is admit.lua's answer for one key it could not decide (a corrupt
// mark, a key of another type, a refused write): the script then left no
// in-flight entry for the admission (a failed entry is none, and one made
// before a refused write is taken out), so there is nothing to abandon.
type keyError struct{ msg string }

func (e *keyError) Error() string { return e.msg }
