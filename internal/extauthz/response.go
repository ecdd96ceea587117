package extauthz

import (
	"encoding/json"
	"maps"
	"net/http"
	"slices"
	"strconv"
	"strings"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	authv3 "github.com/envoyproxy/go-control-plane/envoy/service/auth/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/grpc/codes"
)

// decisionHeader names the handler's decision (admitted, unfenced, stale,
// would_stale, ...) on every answer; decisionKey is its name as sent to
// Envoy.
const (
	decisionHeader = "Fence-Decision"
	decisionKey    = "fence-decision"
)

// checkResponse maps the handler's answer to Envoy's.
//
// A 2xx allows: status OK, and an OkHttpResponse that sets Fence-Decision
// on the request sent upstream, overwriting any the client sent (or
// removing it, when the handler named no decision), so the upstream can
// trust it. No other header of the answer goes upstream: they describe the
// answer (Content-Type of an empty body), not the request.
//
// Anything else denies with the handler's status, headers and body. The
// gRPC code only tells Envoy "denied" (any code but OK does; Envoy answers
// the client from DeniedHttpResponse either way, and failure_mode_allow
// does not apply to a CheckResponse). It is PERMISSION_DENIED for a 4xx,
// the request's own fault, and UNAVAILABLE for a 5xx, where fenceproxy
// could not decide and the client may retry, so that whoever reads the
// gRPC status (logs, traces, a mesh's telemetry) tells the two apart.
func checkResponse(code int, h http.Header, body []byte) *authv3.CheckResponse {
	decision := h.Get(decisionHeader)
	if code >= 200 && code < 300 {
		ok := &authv3.OkHttpResponse{}
		if decision != "" {
			ok.Headers = []*corev3.HeaderValueOption{overwrite(decisionKey, decision)}
		} else {
			ok.HeadersToRemove = []string{decisionKey}
		}
		return &authv3.CheckResponse{
			Status:       &status.Status{Code: int32(codes.OK)},
			HttpResponse: &authv3.CheckResponse_OkResponse{OkResponse: ok},
		}
	}

	grpcCode := codes.PermissionDenied
	if code >= 500 {
		grpcCode = codes.Unavailable
	}
	denied := &authv3.DeniedHttpResponse{
		Status:  &typev3.HttpStatus{Code: httpStatus(code)},
		Headers: deniedHeaders(h),
		Body:    string(body),
	}
	msg := "fenceproxy: " + strconv.Itoa(code)
	if decision != "" {
		msg += " " + decision
	}
	return &authv3.CheckResponse{
		Status:       &status.Status{Code: int32(grpcCode), Message: msg},
		HttpResponse: &authv3.CheckResponse_DeniedResponse{DeniedResponse: denied},
	}
}

// httpStatus is code as Envoy's enum. Envoy refuses a denied response
// whose status is not one of the enum's values, so a status outside it
// becomes 403 (a 4xx) or 500.
func httpStatus(code int) typev3.StatusCode {
	if _, ok := typev3.StatusCode_name[int32(code)]; ok && code >= 200 {
		return typev3.StatusCode(code)
	}
	if code >= 400 && code < 500 {
		return typev3.StatusCode_Forbidden
	}
	return typev3.StatusCode_InternalServerError
}

// notForwarded are answer headers that Envoy computes for the local reply
// itself, or that belong to one connection.
var notForwarded = map[string]bool{
	"Content-Length":    true,
	"Connection":        true,
	"Keep-Alive":        true,
	"Transfer-Encoding": true,
	"Upgrade":           true,
	"Trailer":           true,
}

// deniedHeaders is every header of a refusal (Content-Type, Cache-Control,
// Retry-After, WWW-Authenticate, Fence-Decision, ...) as Envoy header
// options: the first value of a name overwrites what Envoy's local reply
// has, further values are appended.
func deniedHeaders(h http.Header) []*corev3.HeaderValueOption {
	out := make([]*corev3.HeaderValueOption, 0, len(h))
	for _, name := range slices.Sorted(maps.Keys(h)) { // a stable order for logs and tests
		if notForwarded[name] {
			continue
		}
		for i, v := range h[name] {
			o := overwrite(strings.ToLower(name), v)
			if i > 0 {
				o.AppendAction = corev3.HeaderValueOption_APPEND_IF_EXISTS_OR_ADD
			}
			out = append(out, o)
		}
	}
	return out
}

// overwrite sets name (lower-case) to value, replacing what the request or
// reply has.
// The deprecated append field is left unset: Envoy then follows
// append_action (older Envoys read the unset append as false, which also
// overwrites).
func overwrite(name, value string) *corev3.HeaderValueOption {
	return &corev3.HeaderValueOption{
		Header:       &corev3.HeaderValue{Key: name, Value: value},
		AppendAction: corev3.HeaderValueOption_OVERWRITE_IF_EXISTS_OR_ADD,
	}
}

// Answers the adapter gives itself, when the handler could not be asked
// (a CheckRequest it cannot read) or did not answer (it panicked). They
// have the shape of the handler's problems.
const (
	typeBadRequest = "urn:fenceproxy:bad-request"
	// about:blank: a 500 means no more than its status (RFC 9457 4.2.1);
	// fenceproxy has no problem type of its own for an internal failure.
	typeInternal = "about:blank"

	decisionBadRequest = "bad_request"
	decisionError      = "error"
)

type problem struct {
	Type   string `json:"type"`
	Title  string `json:"title"`
	Status int    `json:"status"`
	Detail string `json:"detail"`
}

// badRequest denies a CheckRequest that does not describe a valid HTTP
// request. why is one of the fixed malformed texts.
func badRequest(why malformed) *authv3.CheckResponse {
	return ownProblem(problem{
		Type:   typeBadRequest,
		Title:  "Bad Request",
		Status: http.StatusBadRequest,
		Detail: string(why),
	}, decisionBadRequest)
}

// internalError denies a request whose handler failed (fail closed).
func internalError() *authv3.CheckResponse {
	return ownProblem(problem{
		Type:   typeInternal,
		Title:  "Internal Server Error",
		Status: http.StatusInternalServerError,
		Detail: "the fencing decision failed; nothing was allowed",
	}, decisionError)
}

func ownProblem(p problem, decision string) *authv3.CheckResponse {
	body, _ := json.Marshal(p) // a struct of strings and an int cannot fail
	body = append(body, '\n')
	h := http.Header{
		"Content-Type":  {"application/problem+json"},
		"Cache-Control": {"no-store"},
		decisionHeader:  {decision},
	}
	return checkResponse(p.Status, h, body)
}
