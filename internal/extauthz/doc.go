// Package extauthz answers Envoy's external authorization call
// (envoy.service.auth.v3.Authorization/Check, the ext_authz filter of Envoy
// and Istio) by adapting it onto the http.Handler of fenceproxy's
// authorization mode, so the gRPC form and the HTTP form share one admission
// code path: routes, tokens, stores, metrics and problem answers are the
// handler's, never this package's.
//
// A Check is turned into an *http.Request that describes the original
// request as Envoy saw it (method, request target with its query, Host,
// headers, scheme, protocol; never a body), whose context is the call's, so
// Envoy's deadline and cancellation reach the store. The handler's answer is
// recorded in memory and mapped back: a 2xx allows (status OK), with the
// handler's Fence-Decision header set on the request sent upstream; any other
// status is a denied response carrying the same status, headers and
// problem+json body. A request the adapter cannot read (no HTTP attributes, a
// request target that is not an origin-form path, a method or header that is
// not valid HTTP) is denied 400 without reaching the handler. A handler that
// panics is denied 500: the server keeps serving and nothing is allowed.
//
// Envoy's attributes are authoritative. The HTTP form lets a front proxy name
// the original request in X-Original-Method, X-Original-URI,
// X-Forwarded-Method and X-Forwarded-Uri; over gRPC those headers can only
// have come from the client, which could then have a different path or method
// fenced than the one Envoy forwards (a bypass). So all four are dropped from
// the client's headers, and X-Original-Method and X-Original-URI are set to
// Envoy's method and path, which also keeps the handler from removing
// FENCE_AUTHZ_PATH_PREFIX from a path that never carried it.
//
// Every answer is a CheckResponse, never a gRPC error, so a refusal is a
// denial and not an "authorization service failed" that Envoy's
// failure_mode_allow could turn into a pass. Envoy must still be configured
// with failure_mode_allow false: a call that times out or cannot connect is
// outside this package.
//
// The drain barrier cannot work in authorization mode: fenceproxy decides
// and never sees the request reach the upstream, nor its response, so it
// cannot know when an admitted request stops being in flight. Requests are
// fenced (a stale token is refused) but not ordered at the upstream.
package extauthz
