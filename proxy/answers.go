package proxy

import "net/http"

// refusal names one way fencing refuses a request. The handler decides only
// which one applies and why (the detail); answers says what the client gets
// for it, in one place: a new problem type is a new row, not a new literal
// in the handler.
type refusal uint8

const (
	refAmbiguousPath     refusal = iota + 1 // an encoded slash, a ';', a NUL... in the path
	refMethodCase                           // fenced only once upper-cased
	refAmbiguousNumber                      // a {name:uint} parameter not canonical
	refTokenRequired                        // the token header absent
	refTokenMalformed                       // not a canonical decimal, repeated, a list
	refTokenInvalid                         // a signed token that does not verify
	refSequenceRequired                     // the sequence header absent
	refSequenceMalformed                    // the sequence not a canonical decimal
	refHopByHop                             // Connection names a header the fence reads
	refQueryMalformed                       // the query string names the resource and does not parse
	refResourceUnnamed                      // the resource template cannot be filled
	refWrongResource                        // a signed token for another resource
	refBodyIncomplete                       // the body ended early or was too large to read first
	refBodyTimeout                          // the body did not arrive within FENCE_BODY_TIMEOUT
	refStoreUnavailable                     // the store failed or did not answer in time
	refStoreLost                            // the store lost its identity record
	refStale                                // the token is older than the mark
	refStaleSequence                        // the sequence is not above the mark's, for that token
	refDrainTimeout                         // FENCE_DRAIN_TIMEOUT passed at the barrier
	refDrainDeadline                        // the upstream deadline passed at the barrier
	refOriginalAmbiguous                    // authorization mode: the original request named twice, differently
	refNotCanonical                         // authorization mode: a fenced path not spelled canonically
	refFragment                             // a raw '#' in the request target (or the original URI)
	refMethodOverride                       // a method override that frameworks could read otherwise
	refReservedHeader                       // authorization mode: a client's Fence-Decision, X-Original-URL...
	numRefusals
)

// reply is what a client gets for a refusal, and how it is counted.
type reply struct {
	decision decision
	status   int
	typ      string
	title    string
	// always: refused on a dry-run route too. Either there is nothing whole
	// to forward (a body that could not be read), or the refusal's route is
	// not the one the request would reach (an ambiguous path or original
	// request is charged to the default rule, a lower-case method to that
	// method's route): forwarding it because that route is dry-run could
	// slip past an enforcing route (the upstream decodes "%2F" or upper-cases
	// "put") or send another path than the one asked for.
	always bool
}

var answers = [numRefusals]reply{
	refAmbiguousPath:     {decBadRequest, http.StatusBadRequest, TypeBadRequest, "Ambiguous path", true},
	refMethodCase:        {decBadRequest, http.StatusBadRequest, TypeBadRequest, "Method not in upper case", true},
	refAmbiguousNumber:   {decBadRequest, http.StatusBadRequest, TypeBadRequest, "Ambiguous number in path", false},
	refTokenRequired:     {decMissing, http.StatusPreconditionRequired, TypeTokenRequired, "Fencing token required", false},
	refTokenMalformed:    {decMalformed, http.StatusBadRequest, TypeTokenMalformed, "Malformed fencing token", false},
	refTokenInvalid:      {decInvalid, http.StatusUnauthorized, TypeTokenInvalid, "Invalid fencing token", false},
	refSequenceRequired:  {decMissing, http.StatusPreconditionRequired, TypeSequenceRequired, "Fencing sequence required", false},
	refSequenceMalformed: {decMalformed, http.StatusBadRequest, TypeSequenceMalformed, "Malformed fencing sequence", false},
	refHopByHop:          {decBadRequest, http.StatusBadRequest, TypeBadRequest, "Bad request", false},
	refQueryMalformed:    {decBadRequest, http.StatusBadRequest, TypeBadRequest, "Bad request", false},
	refResourceUnnamed:   {decBadRequest, http.StatusBadRequest, TypeBadRequest, "Resource cannot be named", false},
	refWrongResource:     {decWrongResource, http.StatusForbidden, TypeTokenWrongResource, "Fencing token for another resource", false},
	refBodyIncomplete:    {decBadRequest, http.StatusBadRequest, TypeBadRequest, "Request body incomplete", true},
	refBodyTimeout:       {decBadRequest, http.StatusRequestTimeout, TypeBadRequest, "Request body incomplete", true},
	refStoreUnavailable:  {decUnavailable, http.StatusServiceUnavailable, TypeStoreUnavailable, "Fence store unavailable", false},
	refStoreLost:         {decUnavailable, http.StatusServiceUnavailable, TypeStoreLost, "Fence store lost its marks", false},
	refStale:             {decStale, http.StatusConflict, TypeStaleToken, "Stale fencing token", false},
	refStaleSequence:     {decStale, http.StatusConflict, TypeStaleSequence, "Stale fencing sequence", false},
	// An admitted request (counted so) that did not get past the barrier.
	refDrainTimeout:      {decAdmitted, http.StatusServiceUnavailable, TypeDrainTimeout, "Older requests still in flight", false},
	refDrainDeadline:     {decAdmitted, http.StatusGatewayTimeout, "about:blank", http.StatusText(http.StatusGatewayTimeout), false},
	refOriginalAmbiguous: {decBadRequest, http.StatusBadRequest, TypeBadRequest, "Ambiguous original request", true},
	refNotCanonical:      {decBadRequest, http.StatusBadRequest, TypeBadRequest, "Path not in canonical form", false},
	// Charged to the default rule (the route is not known yet), so refused
	// on a dry-run route too.
	refFragment:       {decBadRequest, http.StatusBadRequest, TypeBadRequest, "Fragment in request target", true},
	refMethodOverride: {decBadRequest, http.StatusBadRequest, TypeBadRequest, "Ambiguous method override", true},
	refReservedHeader: {decBadRequest, http.StatusBadRequest, TypeBadRequest, "Reserved header", true},
}

// problemFor is the problem answering k, with its detail.
func problemFor(k refusal, detail string) *problem {
	a := &answers[k]
	return &problem{Type: a.typ, Title: a.title, Status: a.status, Detail: detail, ref: k}
}
