package check

import "fmt"

// Outcome is what the client learned from one operation.
type Outcome uint8

// The outcomes of an operation. Admitted, Stale and Read are definite: the
// store's state is known at some instant inside the operation's interval.
// Unavailable and Failed are indeterminate: the admission may or may not have
// been applied, possibly long after the client stopped waiting.
const (
	// Admitted: the proxy answered with the upstream's response (2xx), or with
	// 502/504 (admitted, then the upstream failed). The mark became Token.
	Admitted Outcome = iota + 1
	// Stale: 409 stale-token; Mark is the highWaterMark the answer carried.
	Stale
	// Unavailable: 503 store-unavailable.
	Unavailable
	// Failed: no answer from the proxy (connection refused or reset, client
	// timeout) or an answer the harness did not expect.
	Failed
	// Read: a direct GET of the mark from Redis, not through the proxy;
	// Mark is the value, 0 when the key was absent.
	Read
)

func (o Outcome) String() string {
	switch o {
	case Admitted:
		return "admitted"
	case Stale:
		return "stale"
	case Unavailable:
		return "unavailable"
	case Failed:
		return "failed"
	case Read:
		return "read"
	}
	return fmt.Sprintf("outcome(%d)", uint8(o))
}

// Op is one operation of a history: a fenced write through a proxy replica, or
// a direct read of a mark. Call and Return are nanoseconds on one monotonic
// clock shared with the upstream's Forward records.
type Op struct {
	ID       string // the request id the upstream records; "" for a read
	Client   int    // the worker that issued it (reads: -1)
	Replica  int    // the proxy replica it went through (reads: -1)
	Resource string
	Token    uint64 // writes only; tokens are >= 1, 0 stands for "no mark"
	// Seq is the request's sequence when HasSeq (a route with sequences).
	Seq     uint64
	HasSeq  bool
	Greater bool // the route compares with ">" (else ">=")
	Outcome Outcome
	Mark    uint64 // Admitted: Token; Stale: the reported mark; Read: the value
	// MarkSeq is the sequence of the reported or read mark when
	// MarkHasSeq (a 409 carrying highWaterSequence, a stored "t:s").
	MarkSeq    uint64
	MarkHasSeq bool
	Status     int // HTTP status, 0 when there was none
	// Problem is the problem type of a refusal the proxy answered with
	// (urn:fenceproxy:store-lost, ...), "" otherwise.
	Problem string
	Call    int64
	Return  int64
}

// Refused reports whether the proxy answered the operation with a refusal of
// its own: nothing of it may reach the upstream.
func (o *Op) Refused() bool {
	return o.Outcome == Stale || o.Outcome == Unavailable ||
		(o.Outcome == Failed && o.Status >= 400 && o.Status != 502 && o.Status != 504)
}

// Establishes returns the mark's token that a completed operation proves the
// store held (at least) at some instant inside its interval, and whether it
// proves one.
func (o *Op) Establishes() (uint64, bool) {
	p, ok := o.EstablishesPair()
	return p.Token, ok
}

// EstablishesPair is Establishes with the sequence: an admitted request
// proves at least its own pair (an unsequenced one admitted at the mark's
// token leaves the mark's sequence as it was, which is above it), a 409 or
// a read the pair it reports.
func (o *Op) EstablishesPair() (Pair, bool) {
	switch o.Outcome {
	case Admitted:
		return o.Req(), true
	case Stale:
		return o.MarkPair(), true
	case Read:
		return o.MarkPair(), o.Mark != 0
	}
	return Pair{}, false
}

// Req is the request's pair.
func (o *Op) Req() Pair { return Pair{Token: o.Token, Seq: o.Seq, HasSeq: o.HasSeq} }

// MarkPair is the reported or read mark's pair.
func (o *Op) MarkPair() Pair { return Pair{Token: o.Mark, Seq: o.MarkSeq, HasSeq: o.MarkHasSeq} }

// Forward is one request the upstream received.
type Forward struct {
	ID       string // the request id header; a forward with an id no Op has is never legitimate
	Resource string
	Token    uint64
	// Seq is the sequence header the upstream received, when HasSeq.
	Seq    uint64
	HasSeq bool
	// At is when the upstream began processing the request (its handler
	// was called: the request line and headers had arrived), on the
	// history's clock.
	At int64
	// End is when the upstream had read the whole body (and held the
	// request, if it was told to) and was about to answer: when the write
	// landed. 0 when unknown (still being processed).
	End int64
	// Abandoned: the proxy had closed the connection (given up on the
	// request: its upstream deadline passed) before the upstream answered.
	// The barrier then no longer waits for it, but the upstream may still
	// be processing it: the documented bound of an upstream that keeps
	// working past the deadline. Reported with the order examples.
	Abandoned bool
}

// Pair is the forwarded request's pair.
func (f *Forward) Pair() Pair { return Pair{Token: f.Token, Seq: f.Seq, HasSeq: f.HasSeq} }
