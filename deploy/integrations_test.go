package deploy

// The integrations of fenceproxy's authorization mode (fenceproxy authz):
// the Envoy bootstraps, the Istio policy and mesh configuration, the Traefik
// middleware and the ingress-nginx Ingress under integrations/, each decoded
// strictly into its project's own types where they are served to this
// module (Envoy's go-control-plane, Istio's api and client-go), and the
// properties fenceproxy's guarantee needs checked on them. Every check has a
// case that breaks it and expects the failure.

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	bootstrapv3 "github.com/envoyproxy/go-control-plane/envoy/config/bootstrap/v3"
	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	extauthzv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ext_authz/v3"
	_ "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/router/v3"
	hcmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	upstreamhttpv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/upstreams/http/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/known/anypb"
	meshv1alpha1 "istio.io/api/mesh/v1alpha1"
	securityv1beta1 "istio.io/api/security/v1beta1"
	istioclient "istio.io/client-go/pkg/apis/security/v1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"
	k8sjson "sigs.k8s.io/json"
	"sigs.k8s.io/yaml"
)

var integrationsDir = "integrations"

func readFile(t *testing.T, path string) string {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(data)
}

// wantBreak replaces the first old in doc with new, runs check on the result
// (a decoding error is its one problem) and requires a problem containing
// want. A doc without old fails the case: the file changed under it.
func wantBreak(t *testing.T, doc, old, new, want string, check func(doc string) ([]string, error)) {
	t.Helper()
	if !strings.Contains(doc, old) {
		t.Fatalf("the file changed: %q is not in it; update the case", old)
	}
	probs, err := check(strings.Replace(doc, old, new, 1))
	if err != nil {
		probs = []string{err.Error()}
	}
	got := strings.Join(probs, "\n")
	t.Log(got)
	if got == "" || !strings.Contains(got, want) {
		t.Errorf("want a problem containing %q, got:\n%s", want, got)
	}
}

// span is the part of doc from the first from through the next through.
func span(t *testing.T, doc, from, through string) string {
	t.Helper()
	i := strings.Index(doc, from)
	j := strings.Index(doc[max(i, 0):], through)
	if i < 0 || j < 0 {
		t.Fatalf("the file changed: %q ... %q is not in it; update the case", from, through)
	}
	return doc[i : i+j+len(through)]
}

// ---------------------------------------------------------------------------
// Envoy

// fenceHeaders are the request headers fenceproxy reads with its default
// configuration: the token (FENCE_TOKEN_HEADER) and the sequence
// (FENCE_SEQUENCE_HEADER), lower case as Envoy matches them.
var fenceHeaders = []string{"fencing-token", "fencing-sequence"}

// minAuthzTimeout is what the front proxy must wait for fenceproxy at least:
// above FENCE_STORE_TIMEOUT's default (500ms), so that a slow store is
// answered by fenceproxy's own 503 store-unavailable (with its problem and
// Retry-After), not by the front proxy giving up.
const minAuthzTimeout = 500 * time.Millisecond

// loadEnvoy decodes an Envoy bootstrap as Envoy reads it: YAML (duplicate
// keys refused) to JSON to protojson, which refuses unknown fields and
// resolves every typed_config's @type against the types registered by the
// imports above (an extension this file does not import is an error, as an
// extension Envoy was not built with would be). Then the protoc-gen-validate
// rules of every message are run, also inside each Any (ValidateAll does not
// look into an Any by itself).
func loadEnvoy(doc []byte) (*bootstrapv3.Bootstrap, error) {
	data, err := yaml.YAMLToJSONStrict(doc)
	if err != nil {
		return nil, err
	}
	b := new(bootstrapv3.Bootstrap)
	if err := protojson.Unmarshal(data, b); err != nil {
		return nil, fmt.Errorf("decoding: %w", err)
	}
	if err := validateDeep(b); err != nil {
		return nil, fmt.Errorf("validation rules: %w", err)
	}
	return b, nil
}

// validateDeep runs ValidateAll on m and on the content of every Any within
// it, at any depth.
func validateDeep(m proto.Message) error {
	var errs []error
	var visit func(m proto.Message)
	visit = func(m proto.Message) {
		if v, ok := m.(interface{ ValidateAll() error }); ok {
			if err := v.ValidateAll(); err != nil {
				errs = append(errs, fmt.Errorf("%s: %w", m.ProtoReflect().Descriptor().FullName(), err))
			}
		}
		for _, a := range anys(m.ProtoReflect()) {
			inner, err := a.UnmarshalNew()
			if err != nil {
				errs = append(errs, fmt.Errorf("%s: %w", a.GetTypeUrl(), err))
				continue
			}
			visit(inner)
		}
	}
	visit(m)
	return errors.Join(errs...)
}

// anys returns the Any messages inside m, without looking into them.
func anys(m protoreflect.Message) []*anypb.Any {
	var out []*anypb.Any
	var walk func(m protoreflect.Message)
	walk = func(m protoreflect.Message) {
		if a, ok := m.Interface().(*anypb.Any); ok {
			out = append(out, a)
			return
		}
		m.Range(func(fd protoreflect.FieldDescriptor, v protoreflect.Value) bool {
			if fd.Message() == nil {
				return true
			}
			switch {
			case fd.IsList():
				for i := 0; i < v.List().Len(); i++ {
					walk(v.List().Get(i).Message())
				}
			case fd.IsMap():
				if fd.MapValue().Message() != nil {
					v.Map().Range(func(_ protoreflect.MapKey, mv protoreflect.Value) bool {
						walk(mv.Message())
						return true
					})
				}
			default:
				walk(v.Message())
			}
			return true
		})
	}
	walk(m)
	return out
}

func unpack[T proto.Message](a *anypb.Any) (T, bool) {
	var zero T
	if a == nil {
		return zero, false
	}
	m, err := a.UnmarshalNew()
	if err != nil {
		return zero, false
	}
	t, ok := m.(T)
	return t, ok
}

// checkEnvoy asserts what fenceproxy needs from an Envoy in front of an app:
// every HTTP listener asks fenceproxy (ext_authz) before its router, fails
// closed, answers 503 when fenceproxy cannot be reached, sends no body,
// waits longer than fenceproxy's store timeout, reaches fenceproxy over a
// cluster that exists (HTTP/2 for gRPC), sends only the headers fenceproxy
// reads (HTTP service), normalises the path before the check, and no route
// turns the check off. It returns every problem.
func checkEnvoy(b *bootstrapv3.Bootstrap) []string {
	var probs []string
	bad := func(format string, args ...any) { probs = append(probs, fmt.Sprintf(format, args...)) }
	clusters := map[string]*clusterv3.Cluster{}
	for _, c := range b.GetStaticResources().GetClusters() {
		clusters[c.GetName()] = c
	}
	hcms := 0
	for _, l := range b.GetStaticResources().GetListeners() {
		for _, fc := range l.GetFilterChains() {
			for _, f := range fc.GetFilters() {
				hcm, ok := unpack[*hcmv3.HttpConnectionManager](f.GetTypedConfig())
				if !ok {
					continue
				}
				hcms++
				where := "listener " + l.GetName()
				if !hcm.GetNormalizePath().GetValue() || !hcm.GetMergeSlashes() {
					bad("%s: normalize_path and merge_slashes must be true: fenceproxy decides on the path it is sent and cannot rewrite the one the app receives", where)
				}
				if a := hcm.GetPathWithEscapedSlashesAction(); a != hcmv3.HttpConnectionManager_REJECT_REQUEST && a != hcmv3.HttpConnectionManager_UNESCAPE_AND_REDIRECT {
					bad("%s: path_with_escaped_slashes_action is %s, want REJECT_REQUEST (an encoded slash is one path to fenceproxy and another to the app)", where, a)
				}
				checkEnvoyRoutes(bad, where, hcm.GetRouteConfig(), clusters)
				authz, router := -1, -1
				for i, hf := range hcm.GetHttpFilters() {
					if hf.GetDisabled() {
						continue
					}
					if ea, ok := unpack[*extauthzv3.ExtAuthz](hf.GetTypedConfig()); ok {
						if authz >= 0 {
							bad("%s: a second ext_authz filter (%s)", where, hf.GetName())
						}
						authz = i
						checkExtAuthz(bad, where+": "+hf.GetName(), ea, clusters)
					}
					if strings.HasSuffix(string(hf.GetTypedConfig().MessageName()), ".router.v3.Router") && router < 0 {
						router = i
					}
				}
				switch {
				case authz < 0:
					bad("%s: no enabled ext_authz filter: every request reaches the app unasked", where)
				case router >= 0 && router < authz:
					bad("%s: the router comes before ext_authz: requests are forwarded before fenceproxy is asked", where)
				}
			}
		}
	}
	if hcms == 0 {
		bad("no HTTP connection manager in any listener")
	}
	return probs
}

func checkEnvoyRoutes(bad func(string, ...any), where string, rc *routev3.RouteConfiguration, clusters map[string]*clusterv3.Cluster) {
	if rc == nil {
		bad("%s: no static route_config (RDS is not checked)", where)
		return
	}
	for _, vh := range rc.GetVirtualHosts() {
		if _, off := vh.GetTypedPerFilterConfig()["envoy.filters.http.ext_authz"]; off {
			bad("%s: virtual host %s has per-route ext_authz settings: it may turn the check off", where, vh.GetName())
		}
		removed := append(slices.Clone(rc.GetRequestHeadersToRemove()), vh.GetRequestHeadersToRemove()...)
		for _, h := range reservedHeaders {
			if !slices.ContainsFunc(removed, func(r string) bool { return strings.EqualFold(r, h) }) {
				bad("%s: virtual host %s does not list %s in request_headers_to_remove: a client's copy would reach the app", where, vh.GetName(), h)
			}
		}
		for _, r := range vh.GetRoutes() {
			if c := r.GetRoute().GetCluster(); c != "" && clusters[c] == nil {
				bad("%s: a route of %s names cluster %q, which is not defined", where, vh.GetName(), c)
			}
		}
		for _, p := range mustAsk {
			r, i, err := envoyRouteFor(vh, p)
			switch {
			case err != nil:
				bad("%s: virtual host %s: %v", where, vh.GetName(), err)
				return
			case r != nil && authzOff(r):
				bad("%s: %s reaches route %d of %s, which turns ext_authz off: a request a route can fence would reach the app unasked", where, p, i, vh.GetName())
			}
		}
		for _, p := range reads {
			if r, i, err := envoyRouteFor(vh, p); err == nil && r != nil && !authzOff(r) {
				bad("%s: %s reaches route %d of %s, which asks fenceproxy: reads would fail while it is down; turn ext_authz off on a route that matches only GET, HEAD and OPTIONS without a method override", where, p, i, vh.GetName())
			}
		}
	}
}

// reservedHeaders are the request headers the app must never get from a
// client (fenceproxy's answer headers, and headers frameworks read as the
// path).
var reservedHeaders = []string{"fence-decision", "fence-problem", "x-original-url", "x-rewrite-url"}

// overrideHeaders are the method override headers fenceproxy reads.
var overrideHeaders = []string{"x-http-method-override", "x-http-method", "x-method-override"}

// probe is a request tried against a front proxy's configuration.
type probe struct {
	method, path string
	headers      map[string]string // lower-case names
}

func (p probe) String() string {
	s := p.method + " " + p.path
	for k, v := range p.headers {
		s += " (" + k + ": " + v + ")"
	}
	return s
}

// mustAsk are requests a route can fence, or that could make the app act
// on another method: the front proxy must ask fenceproxy about each.
var mustAsk = []probe{
	{"PUT", "/orders/1", nil}, {"POST", "/orders", nil}, {"PATCH", "/orders/1", nil}, {"DELETE", "/orders/1", nil},
	{"MKCOL", "/dav/x", nil}, {"get", "/orders/1", nil},
	{"GET", "/orders/1", map[string]string{"x-http-method-override": "PUT"}},
	{"GET", "/orders/1", map[string]string{"x-http-method": "DELETE"}},
	{"HEAD", "/orders/1", map[string]string{"x-method-override": "PATCH"}},
	{"POST", "/orders/1", map[string]string{"x-http-method-override": "GET"}},
	{"GET", "/orders/1?_method=PUT", nil}, {"GET", "/orders/1?a=1&%5Fmethod=PUT", nil}, {"OPTIONS", "/orders/1?_METHOD=put", nil},
	{"GET", "/orders/1?_%6Dethod=PUT", nil},
}

// reads are requests no route fences by default: not asked, they keep
// flowing while fenceproxy is down.
var reads = []probe{
	{"GET", "/orders/1", nil}, {"HEAD", "/orders/1?page=2", nil}, {"OPTIONS", "/", nil}, {"GET", "/search?q=a%20b", nil},
	{"GET", "/orders/1", map[string]string{"accept": "application/json"}},
}

// envoyRouteFor is the first route of vh that p matches (Envoy's order), and
// its index; nil when none does. It understands the matchers the shipped
// files use (prefix, path, safe_regex; header matchers with present_match
// or string_match, invert_match) and refuses the others rather than guess.
func envoyRouteFor(vh *routev3.VirtualHost, p probe) (*routev3.Route, int, error) {
	pathOnly, _, _ := strings.Cut(p.path, "?")
	for i, r := range vh.GetRoutes() {
		m := r.GetMatch()
		if len(m.GetQueryParameters()) > 0 || m.GetGrpc() != nil || m.GetDynamicMetadata() != nil || m.GetTlsContext() != nil {
			return nil, 0, fmt.Errorf("route %d: a matcher this check does not evaluate", i)
		}
		ok := false
		switch {
		case m.GetPrefix() != "" || m.GetPathSpecifier() == nil:
			ok = strings.HasPrefix(pathOnly, m.GetPrefix())
		case m.GetPath() != "":
			ok = pathOnly == m.GetPath()
		case m.GetSafeRegex() != nil:
			re, err := regexp.Compile("^(?:" + m.GetSafeRegex().GetRegex() + ")$")
			if err != nil {
				return nil, 0, fmt.Errorf("route %d: %w", i, err)
			}
			ok = re.MatchString(pathOnly)
		default:
			return nil, 0, fmt.Errorf("route %d: a path matcher this check does not evaluate", i)
		}
		for _, h := range m.GetHeaders() {
			if !ok {
				break
			}
			hm, err := envoyHeaderMatch(h, p)
			if err != nil {
				return nil, 0, fmt.Errorf("route %d: %w", i, err)
			}
			ok = hm
		}
		if ok {
			return r, i, nil
		}
	}
	return nil, -1, nil
}

// envoyHeaderMatch is Envoy's HeaderUtility::matchHeaders for the matchers
// envoyRouteFor understands: an absent header matches only a present_match
// (false, or true and inverted).
func envoyHeaderMatch(h *routev3.HeaderMatcher, p probe) (bool, error) {
	name := strings.ToLower(h.GetName())
	var value string
	var present bool
	switch name {
	case ":method":
		value, present = p.method, true
	case ":path":
		value, present = p.path, true
	default:
		value, present = p.headers[name]
	}
	if pm, isPresent := h.GetHeaderMatchSpecifier().(*routev3.HeaderMatcher_PresentMatch); isPresent {
		return present == pm.PresentMatch != h.GetInvertMatch(), nil
	}
	if !present {
		return false, nil
	}
	sm := h.GetStringMatch()
	if sm == nil {
		return false, fmt.Errorf("header %s: a matcher this check does not evaluate", name)
	}
	v, ignore := value, sm.GetIgnoreCase()
	fold := func(s string) string {
		if ignore {
			return strings.ToLower(s)
		}
		return s
	}
	var ok bool
	switch {
	case sm.GetSafeRegex() != nil:
		re, err := regexp.Compile("^(?:" + sm.GetSafeRegex().GetRegex() + ")$")
		if err != nil {
			return false, fmt.Errorf("header %s: %w", name, err)
		}
		ok = re.MatchString(v)
	case sm.GetExact() != "":
		ok = fold(v) == fold(sm.GetExact())
	case sm.GetPrefix() != "":
		ok = strings.HasPrefix(fold(v), fold(sm.GetPrefix()))
	case sm.GetSuffix() != "":
		ok = strings.HasSuffix(fold(v), fold(sm.GetSuffix()))
	case sm.GetContains() != "":
		ok = strings.Contains(fold(v), fold(sm.GetContains()))
	default:
		return false, fmt.Errorf("header %s: a string matcher this check does not evaluate", name)
	}
	return ok != h.GetInvertMatch(), nil
}

// authzOff reports whether route r turns the ext_authz filter off.
func authzOff(r *routev3.Route) bool {
	a, ok := r.GetTypedPerFilterConfig()["envoy.filters.http.ext_authz"]
	if !ok {
		return false
	}
	per, ok := unpack[*extauthzv3.ExtAuthzPerRoute](a)
	return !ok || per.GetDisabled()
}

func checkExtAuthz(bad func(string, ...any), where string, ea *extauthzv3.ExtAuthz, clusters map[string]*clusterv3.Cluster) {
	if ea.GetFailureModeAllow() {
		bad("%s: failure_mode_allow is true: while fenceproxy is unreachable (or answers 503) every request would be forwarded unfenced", where)
	}
	if ea.GetWithRequestBody() != nil {
		bad("%s: with_request_body is set: fenceproxy reads no body, and Envoy would buffer every body before asking", where)
	}
	switch c := ea.GetStatusOnError().GetCode(); {
	case ea.GetStatusOnError() == nil:
		bad("%s: status_on_error is unset, so Envoy answers 403 when fenceproxy cannot be asked; want ServiceUnavailable (503): a 403 tells a client it may not write, not that it may retry", where)
	case c != typev3.StatusCode_ServiceUnavailable:
		bad("%s: status_on_error is %v, want ServiceUnavailable (503): a 403 tells a client it may not write, not that it may retry", where, c)
	}
	if ea.GetTransportApiVersion().String() != "V3" {
		bad("%s: transport_api_version must be V3", where)
	}
	switch {
	case ea.GetGrpcService() != nil:
		g := ea.GetGrpcService()
		if g.GetTimeout().AsDuration() <= minAuthzTimeout {
			bad("%s: grpc_service.timeout %v must exceed fenceproxy's store timeout (%v); Envoy's default is 200ms", where, g.GetTimeout().AsDuration(), minAuthzTimeout)
		}
		name := g.GetEnvoyGrpc().GetClusterName()
		c := clusters[name]
		switch {
		case name == "":
			bad("%s: grpc_service must use envoy_grpc with a cluster", where)
		case c == nil:
			bad("%s: grpc_service names cluster %q, which is not defined", where, name)
		case !http2(c):
			bad("%s: cluster %s must speak HTTP/2 (typed_extension_protocol_options http2_protocol_options) for gRPC", where, name)
		}
		if len(ea.GetAllowedHeaders().GetPatterns()) > 0 {
			checkAllowedHeaders(bad, where, ea)
		}
	case ea.GetHttpService() != nil:
		h := ea.GetHttpService()
		if h.GetServerUri().GetTimeout().AsDuration() <= minAuthzTimeout {
			bad("%s: http_service.server_uri.timeout %v must exceed fenceproxy's store timeout (%v)", where, h.GetServerUri().GetTimeout().AsDuration(), minAuthzTimeout)
		}
		if name := h.GetServerUri().GetCluster(); clusters[name] == nil {
			bad("%s: http_service.server_uri names cluster %q, which is not defined", where, name)
		}
		if h.GetPathOverride() != "" {
			bad("%s: path_override replaces the original path: fenceproxy would decide every request on one path", where)
		}
		checkAllowedHeaders(bad, where, ea)
	default:
		bad("%s: neither grpc_service nor http_service", where)
	}
}

// checkAllowedHeaders: the headers sent to fenceproxy are exactly named
// ones, include the token, and include nothing a client could use to name
// another request (X-Original-*, X-Forwarded-*).
func checkAllowedHeaders(bad func(string, ...any), where string, ea *extauthzv3.ExtAuthz) {
	ps := ea.GetAllowedHeaders().GetPatterns()
	if len(ps) == 0 {
		bad("%s: allowed_headers is empty: Envoy's HTTP check sends no token header, so every fenced write would be refused 428", where)
		return
	}
	var names []string
	for _, p := range ps {
		e := strings.ToLower(p.GetExact())
		if e == "" {
			bad("%s: allowed_headers must be exact names (a prefix or regex can match a header a client adds)", where)
			continue
		}
		if strings.HasPrefix(e, "x-original-") || strings.HasPrefix(e, "x-forwarded-") {
			bad("%s: allowed_headers sends %s: a client's copy would tell fenceproxy to decide on another request", where, e)
		}
		names = append(names, e)
	}
	if !slices.Contains(names, fenceHeaders[0]) {
		bad("%s: allowed_headers lacks the token header %s", where, fenceHeaders[0])
	}
	for _, h := range overrideHeaders {
		if !slices.Contains(names, h) {
			bad("%s: allowed_headers lacks the method override header %s: fenceproxy would fence the request as its own method, the app apply the override", where, h)
		}
	}
}

func http2(c *clusterv3.Cluster) bool {
	o, ok := unpack[*upstreamhttpv3.HttpProtocolOptions](c.GetTypedExtensionProtocolOptions()["envoy.extensions.upstreams.http.v3.HttpProtocolOptions"])
	return ok && o.GetExplicitHttpConfig().GetHttp2ProtocolOptions() != nil
}

var envoyFiles = []string{"envoy.yaml", "envoy-http.yaml"}

// TestEnvoyBootstraps: both shipped bootstraps decode strictly into Envoy's
// types, pass its validation rules and fenceproxy's checks.
func TestEnvoyBootstraps(t *testing.T) {
	for _, name := range envoyFiles {
		t.Run(name, func(t *testing.T) {
			b, err := loadEnvoy([]byte(readFile(t, filepath.Join(integrationsDir, "envoy", name))))
			if err != nil {
				t.Fatal(err)
			}
			if probs := checkEnvoy(b); len(probs) > 0 {
				t.Errorf("checks:\n%s", strings.Join(probs, "\n"))
			}
		})
	}
}

// TestEnvoyChecksCanFail breaks the bootstraps one property at a time; the
// decoding, the validation rules or the checks must say so.
func TestEnvoyChecksCanFail(t *testing.T) {
	grpc := readFile(t, filepath.Join(integrationsDir, "envoy", "envoy.yaml"))
	httpv := readFile(t, filepath.Join(integrationsDir, "envoy", "envoy-http.yaml"))
	cases := []struct {
		name, doc, old, new, want string
	}{
		// Decoding (protojson against Envoy's types).
		{"unknown field", grpc, "transport_api_version: V3", "transport_api_version: V3\n                      frobnicate: true", `unknown field "frobnicate"`},
		{"failure_mode_allow typo", grpc, "failure_mode_allow: false", "failure_mode_alow: false", `unknown field "failure_mode_alow"`},
		{"unknown extension type", grpc, "ext_authz.v3.ExtAuthz", "ext_authz.v3.ExtAuth", "unable to resolve"},
		{"duplicate key", grpc, "failure_mode_allow: false", "failure_mode_allow: false\n                      failure_mode_allow: true", `key "failure_mode_allow" already set`},
		{"wrong type", grpc, "timeout: 1s", "timeout: soon", `invalid google.protobuf.Duration value "soon"`},
		// Validation rules, inside the Anys.
		{"status_on_error undefined code", grpc, "{code: ServiceUnavailable}", "{code: 42}", "Code: value must be one of the defined enum values"},
		{"server_uri without timeout", httpv, "                          timeout: 1s\n", "", "Timeout: value is required"},
		{"cluster without name", grpc, "    - name: app\n", "    - name: \"\"\n", "Name: value length must be at least 1"},
		// fenceproxy's checks.
		{"missing cluster", grpc, "    - name: fenceproxy_authz\n", "    - name: fenceproxy_authz_renamed\n", `names cluster "fenceproxy_authz", which is not defined`},
		{"missing HTTP cluster", httpv, "cluster: fenceproxy_authz\n", "cluster: fenceproxy\n", `names cluster "fenceproxy", which is not defined`},
		{"route to a missing cluster", grpc, "route: {cluster: app,", "route: {cluster: ap,", `names cluster "ap"`},
		{"fails open", grpc, "failure_mode_allow: false", "failure_mode_allow: true", "failure_mode_allow is true"},
		{"fails open (HTTP)", httpv, "failure_mode_allow: false", "failure_mode_allow: true", "failure_mode_allow is true"},
		{"403 on error", grpc, "status_on_error: {code: ServiceUnavailable}", "status_on_error: {code: Forbidden}", "status_on_error is Forbidden"},
		{"default status on error", grpc, "status_on_error: {code: ServiceUnavailable}", "", "status_on_error is unset"},
		{"sends the body", grpc, "failure_mode_allow: false", "failure_mode_allow: false\n                      with_request_body: {max_request_bytes: 8192}", "with_request_body is set"},
		{"short timeout", grpc, "timeout: 1s", "timeout: 0.2s", "must exceed fenceproxy's store timeout"},
		{"no timeout (Envoy's 200ms)", grpc, "                        timeout: 1s\n", "", "must exceed fenceproxy's store timeout"},
		{"gRPC over HTTP/1", grpc, "http2_protocol_options: {}", "http_protocol_options: {}", "must speak HTTP/2"},
		{"router first", grpc, "                  - name: envoy.filters.http.ext_authz", "                  - name: envoy.filters.http.router\n                    typed_config:\n                      \"@type\": type.googleapis.com/envoy.extensions.filters.http.router.v3.Router\n                  - name: envoy.filters.http.ext_authz", "the router comes before ext_authz"},
		{"ext_authz disabled", grpc, "                  - name: envoy.filters.http.ext_authz\n", "                  - name: envoy.filters.http.ext_authz\n                    disabled: true\n", "no enabled ext_authz filter"},
		{"turned off for writes", grpc, "# Everything else is asked.\n                        - match: {prefix: \"/\"}\n                          route: {cluster: app, timeout: 30s}", "- match: {prefix: \"/\"}\n                          route: {cluster: app, timeout: 30s}\n                          typed_per_filter_config:\n                            envoy.filters.http.ext_authz:\n                              \"@type\": type.googleapis.com/envoy.extensions.filters.http.ext_authz.v3.ExtAuthzPerRoute\n                              disabled: true", "PUT /orders/1 reaches route 1 of app, which turns ext_authz off"},
		{"a write method among the reads", grpc, `regex: "GET|HEAD|OPTIONS"`, `regex: "GET|HEAD|OPTIONS|DELETE"`, "DELETE /orders/1 reaches route 0 of app, which turns ext_authz off"},
		{"reads without a method", grpc, "                              - name: \":method\"\n                                string_match: {safe_regex: {regex: \"GET|HEAD|OPTIONS\"}}\n", "", "PUT /orders/1 reaches route 0"},
		{"an override header not excluded", grpc, "                              - {name: x-http-method, present_match: true, invert_match: true}\n", "", "(x-http-method: DELETE) reaches route 0"},
		{"_method not excluded", grpc, "invert_match: true\n                          route:", "invert_match: false\n                          route:", "GET /orders/1?_method=PUT reaches route 0"},
		{"an escaped _method not excluded", grpc, "(method|%[46]d)", "(method)", "GET /orders/1?_%6Dethod=PUT reaches route 0"},
		{"reads asked", grpc, "                          typed_per_filter_config:\n                            envoy.filters.http.ext_authz:\n                              \"@type\": type.googleapis.com/envoy.extensions.filters.http.ext_authz.v3.ExtAuthzPerRoute\n                              disabled: true\n", "", "which asks fenceproxy: reads would fail while it is down"},
		{"a matcher not understood", grpc, "                                invert_match: true\n                          route:", "                                invert_match: true\n                            query_parameters: [{name: a, present_match: true}]\n                          route:", "a matcher this check does not evaluate"},
		{"client headers kept", grpc, "request_headers_to_remove: [fence-decision, fence-problem, x-original-url, x-rewrite-url]", "request_headers_to_remove: [fence-decision, fence-problem, x-original-url]", "does not list x-rewrite-url in request_headers_to_remove"},
		{"HTTP: an override header not sent", httpv, "                          - {exact: x-method-override, ignore_case: true}\n", "", "lacks the method override header x-method-override"},
		{"no path normalisation", grpc, "normalize_path: true", "normalize_path: false", "normalize_path and merge_slashes must be true"},
		{"no slash merging", grpc, "merge_slashes: true", "merge_slashes: false", "normalize_path and merge_slashes must be true"},
		{"no slash merging (HTTP)", httpv, "merge_slashes: true", "merge_slashes: false", "normalize_path and merge_slashes must be true"},
		{"escaped slashes kept", grpc, "REJECT_REQUEST", "KEEP_UNCHANGED", "path_with_escaped_slashes_action is KEEP_UNCHANGED"},
		{"HTTP: a client's X-Original-URI sent", httpv, "- {exact: fencing-sequence, ignore_case: true}", "- {exact: fencing-sequence, ignore_case: true}\n                          - {exact: x-original-uri, ignore_case: true}", "sends x-original-uri"},
		{"HTTP: headers by prefix", httpv, "- {exact: fencing-sequence, ignore_case: true}", "- {prefix: x-, ignore_case: true}", "must be exact names"},
		{"HTTP: no allowed headers", httpv, span(t, httpv, "                      allowed_headers:\n", "x-method-override, ignore_case: true}\n"), "", "allowed_headers is empty"},
		{"HTTP: token not sent", httpv, "- {exact: fencing-token, ignore_case: true}", "- {exact: authorization, ignore_case: true}", "lacks the token header"},
		{"HTTP: path override", httpv, "path_prefix: /fence", "path_override: /check", "path_override replaces"},
	}
	check := func(doc string) ([]string, error) {
		b, err := loadEnvoy([]byte(doc))
		if err != nil {
			return nil, err
		}
		return checkEnvoy(b), nil
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) { wantBreak(t, tc.doc, tc.old, tc.new, tc.want, check) })
	}
}

// ---------------------------------------------------------------------------
// fenceproxy authz on Kubernetes (integrations/authz): the workload the
// Istio, Traefik and ingress-nginx examples call.

// The authz tests check the variant with its own Redis, so that the checks
// of that Redis run too; TestAuthzExistingRedis checks the default.
var authzDir = filepath.Join("examples", "authz-bundled-redis")

// authzObjects are the authz kustomization's objects, for a test to change.
type authzObjects struct {
	objs   []Object
	dep    *appsv1.Deployment
	c      *corev1.Container
	env    *corev1.ConfigMap
	routes *corev1.ConfigMap
	svc    *corev1.Service
	policy *networkingv1.NetworkPolicy
	pdb    *policyv1.PodDisruptionBudget
}

func loadAuthz(t *testing.T, docs [][]byte) *authzObjects {
	t.Helper()
	objs := sampleObjects(t, docs)
	a := &authzObjects{
		objs:   objs,
		dep:    get[*appsv1.Deployment](t, objs, "fenceproxy-authz"),
		env:    get[*corev1.ConfigMap](t, objs, "fenceproxy-authz-env"),
		routes: get[*corev1.ConfigMap](t, objs, "fenceproxy-authz-routes"),
		svc:    get[*corev1.Service](t, objs, "fenceproxy-authz"),
		policy: get[*networkingv1.NetworkPolicy](t, objs, "fenceproxy-authz-ingress"),
		pdb:    get[*policyv1.PodDisruptionBudget](t, objs, "fenceproxy-authz"),
	}
	if cs := a.dep.Spec.Template.Spec.Containers; len(cs) != 1 {
		t.Fatal("the authz Deployment changed shape: update loadAuthz")
	}
	a.c = &a.dep.Spec.Template.Spec.Containers[0]
	return a
}

// TestAuthzWorkload: the authz kustomization passes Check (security
// context, resources, its Redis) and CheckAuthz, and is what the
// integrations call: the gRPC and HTTP forms on the ports they name.
func TestAuthzWorkload(t *testing.T) {
	a := loadAuthz(t, renderJSON(t, authzDir))
	if err := Check(a.objs).Err(); err != nil {
		t.Errorf("Check:\n%v", err)
	}
	rep := CheckAuthz(a.objs)
	if err := rep.Err(); err != nil {
		t.Fatalf("CheckAuthz:\n%v", err)
	}
	if len(rep.Authz) != 1 {
		t.Fatalf("want one authz workload, got %+v", rep.Authz)
	}
	z := rep.Authz[0]
	if z.Workload != "Deployment/fenceproxy-authz/fenceproxy-authz" || z.Redis != "StatefulSet/fenceproxy-authz/redis" ||
		len(z.DisruptionBudgets) != 1 || len(z.NetworkPolicies) != 1 {
		t.Errorf("got %+v", z)
	}
	if _, set := a.env.Data["FENCE_UPSTREAM_URL"]; set || z.Config.UpstreamURL != nil {
		t.Error("the authz environment sets FENCE_UPSTREAM_URL: it has no upstream")
	}
	if z.Config.Authz.GRPCAddr != ":9191" || z.GRPCPort != 9191 || z.ServiceGRPCPort != 9191 || z.ServiceHTTPPort != 8080 ||
		z.ServiceName != "fenceproxy-authz" || z.ServiceNamespace != "fenceproxy-authz" {
		t.Errorf("ports: %+v", z)
	}
}

// authzCase breaks the authz workload one way: Check or CheckAuthz must
// report a finding containing want, at level.
type authzCase struct {
	name   string
	break_ func(a *authzObjects)
	want   string
	level  level
}

// authzBreaks are the cases of TestAuthzChecksCanFail, also run by
// TestFindingMessages.
func authzBreaks(t *testing.T) []authzCase {
	setEnv := func(a *authzObjects, k, v string) { a.env.Data[k] = v }
	port := func(a *authzObjects, name string) *corev1.ContainerPort {
		for i := range a.c.Ports {
			if a.c.Ports[i].Name == name {
				return &a.c.Ports[i]
			}
		}
		t.Fatalf("no port %s", name)
		return nil
	}
	return []authzCase{
		// config.LoadAuthz and the routes file.
		{"bad env value", func(a *authzObjects) { setEnv(a, "FENCE_STORE_TIMEOUT", "soon") }, "config.LoadAuthz", errLevel},
		{"bad path prefix", func(a *authzObjects) { setEnv(a, "FENCE_AUTHZ_PATH_PREFIX", "fence") }, "FENCE_AUTHZ_PATH_PREFIX", errLevel},
		{"unknown variable", func(a *authzObjects) { setEnv(a, "FENCE_AUTHZ_GRPC", ":9191") }, "FENCE_AUTHZ_GRPC", errLevel},
		{"gRPC on the admin port", func(a *authzObjects) { setEnv(a, "FENCE_AUTHZ_GRPC_ADDR", ":9090") }, "FENCE_AUTHZ_GRPC_ADDR", errLevel},
		{"routes with an unknown key", func(a *authzObjects) {
			a.routes.Data["routes.yaml"] = strings.Replace(a.routes.Data["routes.yaml"], "compare:", "comparison:", 1)
		}, "comparison", errLevel},
		{"routes not mounted", func(a *authzObjects) { a.c.VolumeMounts = nil }, "no volume is mounted there", errLevel},
		{"drain barrier configured", func(a *authzObjects) { setEnv(a, "FENCE_DRAIN", "on") }, "FENCE_DRAIN is set: it has no effect in authorization mode", warnLevel},
		{"upstream timeout configured", func(a *authzObjects) { setEnv(a, "FENCE_UPSTREAM_TIMEOUT", "30s") }, "FENCE_UPSTREAM_TIMEOUT is set", warnLevel},
		// Listeners against container ports.
		{"listen address drifts", func(a *authzObjects) { setEnv(a, "FENCE_LISTEN_ADDR", ":8081") }, `FENCE_LISTEN_ADDR ":8081" does not match`, errLevel},
		{"on loopback", func(a *authzObjects) { setEnv(a, "FENCE_LISTEN_ADDR", "127.0.0.1:8080") }, "must listen on every interface", errLevel},
		{"gRPC address drifts", func(a *authzObjects) { setEnv(a, "FENCE_AUTHZ_GRPC_ADDR", ":9192") }, `FENCE_AUTHZ_GRPC_ADDR ":9192" does not match`, errLevel},
		{"gRPC off, port declared", func(a *authzObjects) { delete(a.env.Data, "FENCE_AUTHZ_GRPC_ADDR") }, "FENCE_AUTHZ_GRPC_ADDR is unset", errLevel},
		{"gRPC on, no port", func(a *authzObjects) { port(a, AuthzGRPCPortName).Name = "grpc" }, "no container port is named authz-grpc", errLevel},
		{"HTTP port renamed", func(a *authzObjects) { port(a, AuthzHTTPPortName).Name = "http" }, "no container port named authz-http", errLevel},
		// Probes and metrics.
		{"readiness on /healthz", func(a *authzObjects) { a.c.ReadinessProbe.HTTPGet.Path = "/healthz" }, `readinessProbe.httpGet.path is "/healthz"`, warnLevel},
		{"no liveness", func(a *authzObjects) { a.c.LivenessProbe = nil }, "livenessProbe is missing", warnLevel},
		{"readiness on the data port", func(a *authzObjects) { a.c.ReadinessProbe.HTTPGet.Port = intstr.FromString(AuthzHTTPPortName) }, "readinessProbe.httpGet.port", warnLevel},
		{"no scrape annotations", func(a *authzObjects) { a.dep.Spec.Template.Annotations = nil }, "prometheus.io/scrape=true", warnLevel},
		// Availability.
		{"one replica", func(a *authzObjects) { a.dep.Spec.Replicas = ptr.To[int32](1) }, "replicas 1", warnLevel},
		{"no disruption budget", func(a *authzObjects) {
			a.objs = slices.DeleteFunc(a.objs, func(o Object) bool { return o.GVK.Kind == "PodDisruptionBudget" })
		}, "no PodDisruptionBudget", warnLevel},
		{"budget keeps none", func(a *authzObjects) { a.pdb.Spec.MinAvailable = ptr.To(intstr.FromInt32(0)) }, "keeps no pod", warnLevel},
		{"rollout takes pods away", func(a *authzObjects) { a.dep.Spec.Strategy.RollingUpdate.MaxUnavailable = nil }, "maxUnavailable must be 0", warnLevel},
		{"recreate", func(a *authzObjects) {
			a.dep.Spec.Strategy = appsv1.DeploymentStrategy{Type: appsv1.RecreateDeploymentStrategyType}
		}, "strategy Recreate", warnLevel},
		{"grace below the drain", func(a *authzObjects) { a.dep.Spec.Template.Spec.TerminationGracePeriodSeconds = ptr.To[int64](20) }, "terminationGracePeriodSeconds 20s", warnLevel},
		// The store.
		{"memory store", func(a *authzObjects) { setEnv(a, "FENCE_STORE", "memory"); delete(a.env.Data, "FENCE_REDIS_URL") }, "memory forgets", errLevel},
		{"bolt store", func(a *authzObjects) { setEnv(a, "FENCE_STORE", "bolt"); delete(a.env.Data, "FENCE_REDIS_URL") }, "bolt store is one file in one pod", errLevel},
		{"redis URL wrong port", func(a *authzObjects) { setEnv(a, "FENCE_REDIS_URL", "redis://redis-0.redis:6380/0") }, "port 6380 is not a port of Service redis", errLevel},
		// The Service.
		{"Service exposes the admin port", func(a *authzObjects) {
			a.svc.Spec.Ports = append(a.svc.Spec.Ports, corev1.ServicePort{Name: "admin", Port: 9090, TargetPort: intstr.FromString(AdminPortName)})
		}, "targets the admin port", warnLevel},
		{"gRPC port not said to be gRPC", func(a *authzObjects) { a.svc.Spec.Ports[1].AppProtocol = nil; a.svc.Spec.Ports[1].Name = "rpc" }, "says so neither by appProtocol", errLevel},
		{"Service targets nothing", func(a *authzObjects) { a.svc.Spec.Ports[0].TargetPort = intstr.FromInt32(8081) }, "not a port of container authz", errLevel},
		{"no Service", func(a *authzObjects) {
			a.objs = slices.DeleteFunc(a.objs, func(o Object) bool { return o.GVK.Kind == "Service" && o.Name == "fenceproxy-authz" })
		}, "no Service selects the pods", errLevel},
		{"unnamed Service port targets nothing", func(a *authzObjects) {
			a.svc.Spec.Ports = a.svc.Spec.Ports[:1]
			a.svc.Spec.Ports[0].Name = ""
			a.svc.Spec.Ports[0].TargetPort = intstr.FromInt32(8081)
		}, "Service fenceproxy-authz port 8080 has targetPort 8081, not a port of container authz", errLevel},
		// NetworkPolicies.
		{"callers not named", func(a *authzObjects) { a.policy.Spec.Ingress[0].From = nil }, "ingress[0] admits every source", warnLevel},
		{"every port", func(a *authzObjects) { a.policy.Spec.Ingress[0].Ports = nil }, "ingress[0] admits every port", warnLevel},
		{"a foreign port", func(a *authzObjects) { a.policy.Spec.Ingress[0].Ports[0].Port = ptr.To(intstr.FromInt32(3000)) }, "admits port 3000", warnLevel},
		{"no policy", func(a *authzObjects) {
			a.objs = slices.DeleteFunc(a.objs, func(o Object) bool { return o.Name == "fenceproxy-authz-ingress" })
		}, "no NetworkPolicy restricts ingress", warnLevel},
		// The container (CheckAuthz), and hardening (Check).
		{"as a sidecar", func(a *authzObjects) {
			pod := &a.dep.Spec.Template.Spec
			pod.InitContainers = append(pod.InitContainers, *a.c)
		}, "runs fenceproxy authz: the authorization mode is a service of its own", errLevel},
		{"another user", func(a *authzObjects) { a.c.SecurityContext.RunAsUser = ptr.To[int64](1000) }, "runAsUser must be 65532", warnLevel},
		{"writable root", func(a *authzObjects) { a.c.SecurityContext.ReadOnlyRootFilesystem = ptr.To(false) }, "container authz: securityContext.readOnlyRootFilesystem", warnLevel},
		{"no limits", func(a *authzObjects) { a.c.Resources.Limits = nil }, "container authz: resources.limits.cpu must be set", warnLevel},
		{"latest image", func(a *authzObjects) { a.c.Image = "fenceproxy:latest" }, "explicit tag", warnLevel},
	}
}

// checkBoth runs Check and CheckAuthz, as `cmd/render -check` does, and
// returns their errors and warnings.
func checkBoth(objs []Object) (errs, warns []error) {
	rep, arep := Check(objs), CheckAuthz(objs)
	return slices.Concat(rep.Errors, arep.Errors), slices.Concat(rep.Warnings, arep.Warnings)
}

// TestAuthzChecksCanFail breaks the authz workload one property at a time:
// Check or CheckAuthz must report each, at its level.
func TestAuthzChecksCanFail(t *testing.T) {
	docs := renderJSON(t, authzDir)
	for _, tc := range authzBreaks(t) {
		t.Run(tc.name, func(t *testing.T) {
			a := loadAuthz(t, docs)
			tc.break_(a)
			errs, warns := checkBoth(a.objs)
			t.Log(errors.Join(errs...), errors.Join(warns...))
			checkFinding(t, tc.want, tc.level, errs, warns)
		})
	}
}

// TestIsAuthzContainer: the authz workload is told by its image and
// subcommand, not by a container name.
func TestIsAuthzContainer(t *testing.T) {
	for _, tc := range []struct {
		c    corev1.Container
		want bool
	}{
		{corev1.Container{Image: "fenceproxy:dev", Args: []string{"authz"}}, true},
		{corev1.Container{Image: "registry.example.com/team/fenceproxy:v1.2.3", Args: []string{"authz"}}, true},
		{corev1.Container{Image: "fenceproxy@sha256:0123", Command: []string{"/fenceproxy", "authz"}}, true},
		{corev1.Container{Image: "fenceproxy:dev"}, false},
		{corev1.Container{Image: "fenceproxy:dev", Args: []string{"serve"}}, false},
		{corev1.Container{Image: "fenceproxy:dev", Args: []string{"check", "authz"}}, false},
		{corev1.Container{Image: "other:1", Args: []string{"authz"}}, false},
	} {
		if got := IsAuthzContainer(&tc.c); got != tc.want {
			t.Errorf("%+v: %v, want %v", tc.c, got, tc.want)
		}
	}
}

// authzService is what the integrations must call: the Service of the
// authz kustomization, as CheckAuthz found it.
func authzService(t *testing.T) Authz {
	t.Helper()
	a := loadAuthz(t, renderJSON(t, authzDir))
	rep := CheckAuthz(a.objs)
	if err := rep.Err(); err != nil || len(rep.Authz) != 1 {
		t.Fatalf("the authz workload: %v %+v", err, rep.Authz)
	}
	return rep.Authz[0]
}

func (z Authz) host() string {
	return z.ServiceName + "." + z.ServiceNamespace + ".svc.cluster.local"
}

func (z Authz) podLabels(t *testing.T) map[string]string {
	t.Helper()
	a := loadAuthz(t, renderJSON(t, authzDir))
	return a.dep.Spec.Template.Labels
}

// decodeStrict decodes one Kubernetes-style JSON object into v: unknown or
// duplicate fields, and fields in another case, are errors.
func decodeStrict(data []byte, v any) error {
	strict, err := k8sjson.UnmarshalStrict(data, v)
	if err != nil {
		return err
	}
	return errors.Join(strict...)
}

// splitDocs splits a YAML stream into its documents, each as strict JSON.
func splitDocs(stream string) ([][]byte, error) {
	var docs [][]byte
	for _, d := range strings.Split("\n"+stream, "\n---\n") {
		if strings.TrimSpace(stripComments(d)) == "" {
			continue
		}
		data, err := yaml.YAMLToJSONStrict([]byte(d))
		if err != nil {
			return nil, err
		}
		docs = append(docs, data)
	}
	return docs, nil
}

func stripComments(doc string) string {
	var out []string
	for _, l := range strings.Split(doc, "\n") {
		if !strings.HasPrefix(strings.TrimSpace(l), "#") {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}

// ---------------------------------------------------------------------------
// Istio

// loadIstio decodes the AuthorizationPolicy and the mesh configuration. The
// policy's envelope is decoded strictly into istio.io/client-go's type; its
// spec, which that type decodes leniently (Istio's generated UnmarshalJSON
// allows unknown fields), is decoded again with protojson into istio.io/api's
// message, which refuses them. The mesh configuration is a values file for
// the istiod chart: meshConfig and nothing else, decoded with protojson into
// istio.io/api's MeshConfig.
func loadIstio(policyDoc, meshDoc string) (*securityv1beta1.AuthorizationPolicy, *istioclient.AuthorizationPolicy, *meshv1alpha1.MeshConfig, error) {
	docs, err := splitDocs(policyDoc)
	if err != nil {
		return nil, nil, nil, err
	}
	if len(docs) != 1 {
		return nil, nil, nil, fmt.Errorf("want one AuthorizationPolicy, got %d documents", len(docs))
	}
	obj := new(istioclient.AuthorizationPolicy)
	if err := decodeStrict(docs[0], obj); err != nil {
		return nil, nil, nil, fmt.Errorf("AuthorizationPolicy: %w", err)
	}
	if gvk := obj.GroupVersionKind(); gvk != istioclient.SchemeGroupVersion.WithKind("AuthorizationPolicy") {
		return nil, nil, nil, fmt.Errorf("want %s AuthorizationPolicy, got %s", istioclient.SchemeGroupVersion, gvk)
	}
	var raw struct {
		Spec json.RawMessage `json:"spec"`
	}
	if err := json.Unmarshal(docs[0], &raw); err != nil {
		return nil, nil, nil, err
	}
	spec := new(securityv1beta1.AuthorizationPolicy)
	if err := protojson.Unmarshal(raw.Spec, spec); err != nil {
		return nil, nil, nil, fmt.Errorf("AuthorizationPolicy spec: %w", err)
	}

	values, err := yaml.YAMLToJSONStrict([]byte(meshDoc))
	if err != nil {
		return nil, nil, nil, err
	}
	var top map[string]json.RawMessage
	if err := json.Unmarshal(values, &top); err != nil {
		return nil, nil, nil, err
	}
	for k := range top {
		if k != "meshConfig" {
			return nil, nil, nil, fmt.Errorf("mesh configuration: unexpected key %q (want meshConfig only)", k)
		}
	}
	mesh := new(meshv1alpha1.MeshConfig)
	if err := protojson.Unmarshal(top["meshConfig"], mesh); err != nil {
		return nil, nil, nil, fmt.Errorf("meshConfig: %w", err)
	}
	return spec, obj, mesh, nil
}

// checkIstio: a CUSTOM policy that selects the app (never fenceproxy authz)
// and matches requests, whose provider is an envoyExtAuthzGrpc provider of
// the mesh configuration that reaches the authz Service's gRPC port, fails
// closed with 503, waits longer than fenceproxy's store timeout and sends
// no body.
func checkIstio(spec *securityv1beta1.AuthorizationPolicy, obj *istioclient.AuthorizationPolicy, mesh *meshv1alpha1.MeshConfig, z Authz, authzLabels map[string]string) []string {
	var probs []string
	bad := func(format string, args ...any) { probs = append(probs, fmt.Sprintf(format, args...)) }
	if spec.GetAction() != securityv1beta1.AuthorizationPolicy_CUSTOM {
		bad("action is %s, want CUSTOM (an external authorizer)", spec.GetAction())
	}
	if len(spec.GetRules()) == 0 {
		bad("no rules: a CUSTOM policy without rules never asks fenceproxy")
	}
	asks := func(p probe) bool {
		for i, r := range spec.GetRules() {
			m, err := istioRuleMatches(r, p)
			if err != nil {
				bad("rule %d: %v", i, err)
				return true
			}
			if m {
				return true
			}
		}
		return false
	}
	for _, p := range append(slices.Clone(mustAsk), reservedProbes...) {
		if p.queryOverride() {
			continue // the policy cannot see the query: the README says so
		}
		if !asks(p) {
			bad("%s is not asked: a request a route can fence, or that the app could act on otherwise, would reach it unasked", p)
		}
	}
	for _, p := range reads {
		if asks(p) {
			bad("%s is asked: reads would fail while fenceproxy is down; ask for every method but GET, HEAD and OPTIONS, and for reads with a method override or a reserved header", p)
		}
	}
	sel := spec.GetSelector().GetMatchLabels()
	switch {
	case len(sel) == 0 && len(spec.GetTargetRefs()) == 0 && spec.GetTargetRef() == nil:
		bad("no selector: the policy applies to every workload of namespace %q", obj.Namespace)
	case len(sel) > 0 && labels.SelectorFromSet(sel).Matches(labels.Set(authzLabels)) && (obj.Namespace == z.ServiceNamespace || obj.Namespace == "istio-system"):
		bad("the selector matches fenceproxy authz's own pods: it would ask itself")
	}
	name := spec.GetProvider().GetName()
	var provider *meshv1alpha1.MeshConfig_ExtensionProvider
	for _, p := range mesh.GetExtensionProviders() {
		if p.GetName() == name {
			provider = p
		}
	}
	if provider == nil {
		bad("provider %q is not among the mesh configuration's extensionProviders", name)
		return probs
	}
	g := provider.GetEnvoyExtAuthzGrpc()
	if g == nil {
		bad("provider %q is not envoyExtAuthzGrpc: over HTTP, Istio turns fenceproxy's 503 into statusOnError without its problem", name)
		return probs
	}
	svc := g.GetService()
	if i := strings.Index(svc, "/"); i >= 0 {
		svc = svc[i+1:]
	}
	if svc != z.host() {
		bad("provider service %q is not fenceproxy authz's Service %s", g.GetService(), z.host())
	}
	if g.GetPort() != uint32(z.ServiceGRPCPort) {
		bad("provider port %d is not the Service's gRPC port %d", g.GetPort(), z.ServiceGRPCPort)
	}
	if g.GetFailOpen() {
		bad("failOpen is true: while fenceproxy cannot be asked every request would be forwarded unfenced")
	}
	if g.GetStatusOnError() != "503" {
		bad("statusOnError is %q, want \"503\" (Istio's default 403 tells a client it may not write, not that it may retry)", g.GetStatusOnError())
	}
	if g.GetTimeout() == nil || g.GetTimeout().AsDuration() <= minAuthzTimeout {
		bad("timeout %v must be set above fenceproxy's store timeout (%v); Istio's default is 600s", g.GetTimeout().AsDuration(), minAuthzTimeout)
	}
	if g.GetIncludeRequestBodyInCheck() != nil {
		bad("includeRequestBodyInCheck is set: fenceproxy reads no body")
	}
	return probs
}

// reservedProbes are reads carrying a header the app must never get from a
// client: a front proxy that cannot strip it asks, and fenceproxy refuses.
var reservedProbes = []probe{
	{"GET", "/orders/1", map[string]string{"fence-decision": "admitted"}},
	{"GET", "/orders/1", map[string]string{"fence-problem": "{}"}},
	{"GET", "/orders/1", map[string]string{"x-original-url": "/admin"}},
	{"HEAD", "/orders/1", map[string]string{"x-rewrite-url": "/admin"}},
}

// queryOverride reports whether p is a read whose only override is in its
// query (_method).
func (p probe) queryOverride() bool {
	return len(p.headers) == 0 && (p.method == "GET" || p.method == "HEAD" || p.method == "OPTIONS") && strings.Contains(p.path, "?")
}

// istioRuleMatches evaluates one rule of a CUSTOM policy as Istio does for
// the fields the shipped policy uses (to.operation methods, notMethods,
// paths, notPaths; when on request.headers[...] with values), and refuses
// any other rather than guess.
func istioRuleMatches(r *securityv1beta1.Rule, p probe) (bool, error) {
	if len(r.GetFrom()) > 0 {
		return false, errors.New("from: a source this check does not evaluate")
	}
	pathOnly, _, _ := strings.Cut(p.path, "?")
	toMatch := len(r.GetTo()) == 0
	for _, to := range r.GetTo() {
		o := to.GetOperation()
		if len(o.GetHosts())+len(o.GetNotHosts())+len(o.GetPorts())+len(o.GetNotPorts()) > 0 {
			return false, errors.New("to.operation: hosts or ports, which this check does not evaluate")
		}
		ok := (len(o.GetMethods()) == 0 || slices.ContainsFunc(o.GetMethods(), func(v string) bool { return istioValue(v, p.method) })) &&
			!slices.ContainsFunc(o.GetNotMethods(), func(v string) bool { return istioValue(v, p.method) }) &&
			(len(o.GetPaths()) == 0 || slices.ContainsFunc(o.GetPaths(), func(v string) bool { return istioValue(v, pathOnly) })) &&
			!slices.ContainsFunc(o.GetNotPaths(), func(v string) bool { return istioValue(v, pathOnly) })
		toMatch = toMatch || ok
	}
	if !toMatch {
		return false, nil
	}
	for _, c := range r.GetWhen() {
		name, ok := strings.CutPrefix(c.GetKey(), "request.headers[")
		if !ok || !strings.HasSuffix(name, "]") || len(c.GetNotValues()) > 0 {
			return false, fmt.Errorf("when: %s, which this check does not evaluate", c.GetKey())
		}
		v, present := p.headers[strings.ToLower(strings.TrimSuffix(name, "]"))]
		if !present || !slices.ContainsFunc(c.GetValues(), func(want string) bool { return istioValue(want, v) }) {
			return false, nil
		}
	}
	return true, nil
}

// istioValue is Istio's string match: exact, "*" (any), "prefix*" or
// "*suffix".
func istioValue(pattern, v string) bool {
	switch {
	case pattern == "*":
		return v != ""
	case strings.HasSuffix(pattern, "*"):
		return strings.HasPrefix(v, strings.TrimSuffix(pattern, "*"))
	case strings.HasPrefix(pattern, "*"):
		return strings.HasSuffix(v, strings.TrimPrefix(pattern, "*"))
	}
	return pattern == v
}

func TestIstio(t *testing.T) {
	z := authzService(t)
	dir := filepath.Join(integrationsDir, "istio")
	spec, obj, mesh, err := loadIstio(readFile(t, filepath.Join(dir, "authorization-policy.yaml")), readFile(t, filepath.Join(dir, "mesh-config.yaml")))
	if err != nil {
		t.Fatal(err)
	}
	if probs := checkIstio(spec, obj, mesh, z, z.podLabels(t)); len(probs) > 0 {
		t.Errorf("checks:\n%s", strings.Join(probs, "\n"))
	}
}

func TestIstioChecksCanFail(t *testing.T) {
	z := authzService(t)
	authzLabels := z.podLabels(t)
	dir := filepath.Join(integrationsDir, "istio")
	policy, mesh := readFile(t, filepath.Join(dir, "authorization-policy.yaml")), readFile(t, filepath.Join(dir, "mesh-config.yaml"))
	cases := []struct {
		name     string
		inPolicy bool
		old, new string
		want     string
	}{
		// Decoding.
		{"unknown spec field", true, "action: CUSTOM", "actoin: CUSTOM", `unknown field "actoin"`},
		{"unknown provider field", true, "    name: fenceproxy\n  rules:", "    name: fenceproxy\n    timeout: 1s\n  rules:", `unknown field "timeout"`},
		{"unknown metadata field", true, "  namespace: orders", "  namespace: orders\n  labelz: {}", `unknown field "metadata.labelz"`},
		{"wrong API version", true, "security.istio.io/v1", "security.istio.io/v2", "want security.istio.io/v1 AuthorizationPolicy"},
		{"unknown action", true, "action: CUSTOM", "action: CUSTOMISED", `unknown value "\"CUSTOMISED\""`},
		{"mesh: unknown provider field", false, "failOpen: false", "failopen: false", `unknown field "failopen"`},
		{"mesh: wrong type", false, "port: 9191", "port: grpc", "invalid value for uint32"},
		{"mesh: extra top-level key", false, "meshConfig:", "meshconfig: {}\nmeshConfig:", `unexpected key "meshconfig"`},
		// The checks.
		{"ALLOW instead of CUSTOM", true, "action: CUSTOM\n  provider:\n    name: fenceproxy\n", "action: ALLOW\n", "action is ALLOW"},
		{"no rules", true, "  rules:\n", "  rulez_removed:\n", `unknown field "rulez_removed"`},
		{"empty rules", true, span(t, policy, "  rules:\n", "x-rewrite-url]\", values: [\"*\"]}]\n"), "  rules: []\n", "no rules"},
		{"every request asked", true, "notMethods: [GET, HEAD, OPTIONS]", "notMethods: []", "GET /orders/1 is asked: reads would fail"},
		{"a write not asked", true, "notMethods: [GET, HEAD, OPTIONS]", "notMethods: [GET, HEAD, OPTIONS, DELETE]", "DELETE /orders/1 is not asked"},
		{"an override header not asked", true, `    - when: [{key: "request.headers[x-http-method]", values: ["*"]}]` + "\n", "", "(x-http-method: DELETE) is not asked"},
		{"a reserved header not asked", true, `    - when: [{key: "request.headers[fence-decision]", values: ["*"]}]` + "\n", "", "(fence-decision: admitted) is not asked"},
		{"a condition not understood", true, `key: "request.headers[x-rewrite-url]", values: ["*"]`, `key: "source.ip", values: ["10.0.0.1"]`, "source.ip, which this check does not evaluate"},
		{"no selector", true, "  selector:\n    matchLabels:\n      app.kubernetes.io/name: orders\n", "", "no selector"},
		{"provider misnamed", true, "    name: fenceproxy\n", "    name: fence-proxy\n", `provider "fence-proxy" is not among`},
		{"fails open", false, "failOpen: false", "failOpen: true", "failOpen is true"},
		{"403 on error", false, `statusOnError: "503"`, `statusOnError: "403"`, `statusOnError is "403"`},
		{"default status on error", false, `        statusOnError: "503"` + "\n", "", `statusOnError is ""`},
		{"default timeout (600s)", false, "        timeout: 1s\n", "", "must be set above"},
		{"wrong port", false, "port: 9191", "port: 8080", "is not the Service's gRPC port 9191"},
		{"wrong service", false, "service: fenceproxy-authz.fenceproxy-authz.svc.cluster.local", "service: fenceproxy-authz.default.svc.cluster.local", "is not fenceproxy authz's Service"},
		{"sends the body", false, "        failOpen: false\n", "        failOpen: false\n        includeRequestBodyInCheck: {maxRequestBytes: 8192}\n", "includeRequestBodyInCheck is set"},
		{"HTTP provider", false, "      envoyExtAuthzGrpc:\n", "      envoyExtAuthzHttp:\n", "is not envoyExtAuthzGrpc"},
		{"asks itself", true, "  namespace: orders\n", "  namespace: fenceproxy-authz\n", "matches fenceproxy authz's own pods"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			doc := mesh
			if tc.inPolicy {
				doc = policy
			}
			wantBreak(t, doc, tc.old, tc.new, tc.want, func(doc string) ([]string, error) {
				p, m := policy, doc
				if tc.inPolicy {
					p, m = doc, mesh
				}
				if tc.name == "asks itself" {
					p = strings.Replace(p, "app.kubernetes.io/name: orders", "app.kubernetes.io/name: "+authzLabels["app.kubernetes.io/name"], 1)
				}
				spec, obj, mc, err := loadIstio(p, m)
				if err != nil {
					return nil, err
				}
				return checkIstio(spec, obj, mc, z, authzLabels), nil
			})
		})
	}
}

// ---------------------------------------------------------------------------
// Traefik

// Traefik's Go module is not served to this module, so its objects are
// decoded strictly into the local structs below, which mirror the CRDs'
// schemas for what the file uses (traefik.io/v1alpha1 Middleware with
// forwardAuth or headers.customRequestHeaders, and IngressRoute; Traefik
// v3.7's docs/content/reference/dynamic-configuration/traefik.io_*.yaml): a
// field the CRD does not have, or a misspelled one, is an error as the API
// server's structural schema would make it (it would prune it silently).
type traefikMiddleware struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata"`
	Spec              struct {
		ForwardAuth *traefikForwardAuth `json:"forwardAuth,omitempty"`
		Headers     *struct {
			CustomRequestHeaders map[string]string `json:"customRequestHeaders,omitempty"`
		} `json:"headers,omitempty"`
	} `json:"spec"`
}

type traefikForwardAuth struct {
	AddAuthCookiesToResponse []string `json:"addAuthCookiesToResponse,omitempty"`
	Address                  string   `json:"address,omitempty"`
	AuthRequestHeaders       []string `json:"authRequestHeaders,omitempty"`
	AuthResponseHeaders      []string `json:"authResponseHeaders,omitempty"`
	AuthResponseHeadersRegex string   `json:"authResponseHeadersRegex,omitempty"`
	AuthSigninURL            string   `json:"authSigninURL,omitempty"`
	ForwardBody              bool     `json:"forwardBody,omitempty"`
	HeaderField              string   `json:"headerField,omitempty"`
	MaxBodySize              *int64   `json:"maxBodySize,omitempty"`
	MaxResponseBodySize      *int64   `json:"maxResponseBodySize,omitempty"`
	PreserveLocationHeader   bool     `json:"preserveLocationHeader,omitempty"`
	PreserveRequestMethod    bool     `json:"preserveRequestMethod,omitempty"`
	TLS                      *struct {
		CAOptional         *bool  `json:"caOptional,omitempty"`
		CASecret           string `json:"caSecret,omitempty"`
		CertSecret         string `json:"certSecret,omitempty"`
		InsecureSkipVerify bool   `json:"insecureSkipVerify,omitempty"`
	} `json:"tls,omitempty"`
	TrustForwardHeader *bool `json:"trustForwardHeader,omitempty"`
}

type traefikIngressRoute struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata"`
	Spec              struct {
		EntryPoints []string `json:"entryPoints,omitempty"`
		Routes      []struct {
			Kind        string `json:"kind,omitempty"`
			Match       string `json:"match"`
			Priority    int    `json:"priority,omitempty"`
			Middlewares []struct {
				Name      string `json:"name"`
				Namespace string `json:"namespace,omitempty"`
			} `json:"middlewares,omitempty"`
			Services []struct {
				Name      string             `json:"name"`
				Namespace string             `json:"namespace,omitempty"`
				Port      intstr.IntOrString `json:"port,omitempty"`
			} `json:"services,omitempty"`
		} `json:"routes"`
	} `json:"spec"`
}

// traefikObjects are the file's objects.
type traefikObjects struct {
	auth, strip *traefikMiddleware
	route       *traefikIngressRoute
}

// loadTraefik decodes the Middlewares and the IngressRoute that uses them.
func loadTraefik(doc string) (*traefikObjects, error) {
	docs, err := splitDocs(doc)
	if err != nil {
		return nil, err
	}
	o := &traefikObjects{}
	for _, d := range docs {
		var tm metav1.TypeMeta
		if err := json.Unmarshal(d, &tm); err != nil {
			return nil, err
		}
		switch tm.APIVersion + " " + tm.Kind {
		case "traefik.io/v1alpha1 Middleware":
			mw := new(traefikMiddleware)
			if err := decodeStrict(d, mw); err != nil {
				return nil, fmt.Errorf("Middleware: %w", err)
			}
			switch {
			case mw.Spec.ForwardAuth != nil:
				o.auth = mw
			case mw.Spec.Headers != nil:
				o.strip = mw
			}
		case "traefik.io/v1alpha1 IngressRoute":
			o.route = new(traefikIngressRoute)
			if err := decodeStrict(d, o.route); err != nil {
				return nil, fmt.Errorf("IngressRoute: %w", err)
			}
		default:
			return nil, fmt.Errorf("unexpected object %s %s", tm.APIVersion, tm.Kind)
		}
	}
	if o.auth == nil || o.route == nil {
		return nil, errors.New("want a traefik.io/v1alpha1 Middleware with forwardAuth and an IngressRoute")
	}
	return o, nil
}

// checkTraefik: forwardAuth to the authz Service's HTTP port, Traefik's own
// X-Forwarded-* only (trustForwardHeader false, explicitly), only the
// headers fenceproxy reads from the client, no body, room for the problem,
// no sign-in redirect; the IngressRoute strips the reserved headers on
// every route, asks about every request a route can fence and about no
// read.
func checkTraefik(o *traefikObjects, z Authz) []string {
	var probs []string
	bad := func(format string, args ...any) { probs = append(probs, fmt.Sprintf(format, args...)) }
	mw := o.auth
	fa := mw.Spec.ForwardAuth
	if want := fmt.Sprintf("http://%s:%d/", z.host(), z.ServiceHTTPPort); fa.Address != want {
		bad("address %q, want fenceproxy authz's HTTP Service port %s", fa.Address, want)
	}
	switch {
	case fa.TrustForwardHeader == nil:
		bad("trustForwardHeader is unset: set it to false, so that Traefik replaces a client's X-Forwarded-* headers with its own")
	case *fa.TrustForwardHeader:
		bad("trustForwardHeader is true: a client's X-Forwarded-Uri and X-Forwarded-Method would tell fenceproxy which request to decide on")
	}
	if len(fa.AuthRequestHeaders) == 0 {
		bad("authRequestHeaders is empty, so every client header is sent: a client's X-Original-URI would name another request")
	}
	var sent []string
	for _, h := range fa.AuthRequestHeaders {
		l := strings.ToLower(h)
		if strings.HasPrefix(l, "x-original-") || strings.HasPrefix(l, "x-forwarded-") {
			bad("authRequestHeaders sends the client's %s: it would name another request", h)
		}
		sent = append(sent, l)
	}
	if len(fa.AuthRequestHeaders) > 0 {
		if !slices.Contains(sent, fenceHeaders[0]) {
			bad("authRequestHeaders lacks the token header Fencing-Token")
		}
		for _, h := range overrideHeaders {
			if !slices.Contains(sent, h) {
				bad("authRequestHeaders lacks the method override header %s: fenceproxy would fence the request as its own method, the app apply the override", h)
			}
		}
	}
	if fa.ForwardBody {
		bad("forwardBody is true: fenceproxy reads no body, and Traefik would buffer every body before asking")
	}
	if fa.MaxResponseBodySize == nil || *fa.MaxResponseBodySize < 4096 {
		bad("maxResponseBodySize must be set to at least 4096: a larger refusal body makes Traefik answer 401 instead (unset, Traefik warns and reads any size)")
	}
	if fa.AuthSigninURL != "" {
		bad("authSigninURL turns fenceproxy's 401 into a redirect")
	}

	// The reserved headers: removed on every route.
	if o.strip == nil {
		bad("no Middleware removes the headers a client must not send (headers.customRequestHeaders with empty values)")
	} else {
		for _, h := range reservedHeaders {
			found := false
			for k, v := range o.strip.Spec.Headers.CustomRequestHeaders {
				found = found || (strings.EqualFold(k, h) && v == "")
			}
			if !found {
				bad("Middleware %s does not remove %s (customRequestHeaders %s: \"\"): a client's copy would reach the app", o.strip.Name, h, h)
			}
		}
	}
	uses := func(i int, mw *traefikMiddleware) bool {
		if mw == nil {
			return false
		}
		for _, m := range o.route.Spec.Routes[i].Middlewares {
			if m.Name == mw.Name && (m.Namespace == "" && o.route.Namespace == mw.Namespace || m.Namespace == mw.Namespace) {
				return true
			}
		}
		return false
	}
	for i := range o.route.Spec.Routes {
		if o.strip != nil && !uses(i, o.strip) {
			bad("route %d of IngressRoute %s does not use Middleware %s: a client's Fence-Decision would reach the app", i, o.route.Name, o.strip.Name)
		}
	}
	for _, p := range mustAsk {
		if p.queryOverride() {
			continue // only _method itself is matched: the README says so
		}
		i, err := traefikRouteFor(o.route, p)
		switch {
		case err != nil:
			bad("%v", err)
			return probs
		case i >= 0 && !uses(i, mw):
			bad("%s reaches route %d of IngressRoute %s, which does not use Middleware %s: a request a route can fence would reach the app unasked", p, i, o.route.Name, mw.Name)
		}
	}
	for _, p := range reads {
		if i, err := traefikRouteFor(o.route, p); err == nil && i >= 0 && uses(i, mw) {
			bad("%s reaches route %d of IngressRoute %s, which asks fenceproxy: reads would fail while it is down", p, i, o.route.Name)
		}
	}
	return probs
}

// traefikRouteFor is the index of the route of ir that p reaches: the
// highest priority among those whose rule matches (every route of the file
// sets its priority); -1 when none does.
func traefikRouteFor(ir *traefikIngressRoute, p probe) (int, error) {
	best, bestPrio := -1, 0
	for i, r := range ir.Spec.Routes {
		if r.Priority == 0 {
			return -1, fmt.Errorf("route %d of IngressRoute %s sets no priority: Traefik would order the routes by the length of their rules", i, ir.Name)
		}
		m, err := traefikRuleMatches(r.Match, p)
		if err != nil {
			return -1, fmt.Errorf("route %d of IngressRoute %s: %w", i, ir.Name, err)
		}
		if m && (best < 0 || r.Priority > bestPrio) {
			best, bestPrio = i, r.Priority
		}
	}
	return best, nil
}

// traefikRuleMatches evaluates a Traefik v3 rule on p: &&, ||, ! and
// parentheses over Method, PathPrefix, Path, Header, HeaderRegexp, Query
// and QueryRegexp (the query read as Go's url.ParseQuery reads it, as
// Traefik does). Any other matcher is an error rather than a guess.
func traefikRuleMatches(rule string, p probe) (bool, error) {
	toks, err := traefikTokens(rule)
	if err != nil {
		return false, err
	}
	ev := &traefikEval{toks: toks, p: p}
	v, err := ev.or()
	if err == nil && ev.i != len(toks) {
		err = fmt.Errorf("rule %q: unexpected %q", rule, toks[ev.i])
	}
	return v, err
}

type traefikEval struct {
	toks []string
	i    int
	p    probe
}

func (e *traefikEval) peek() string {
	if e.i < len(e.toks) {
		return e.toks[e.i]
	}
	return ""
}

func (e *traefikEval) or() (bool, error) {
	v, err := e.and()
	for err == nil && e.peek() == "||" {
		e.i++
		var w bool
		w, err = e.and()
		v = v || w
	}
	return v, err
}

func (e *traefikEval) and() (bool, error) {
	v, err := e.unary()
	for err == nil && e.peek() == "&&" {
		e.i++
		var w bool
		w, err = e.unary()
		v = v && w
	}
	return v, err
}

func (e *traefikEval) unary() (bool, error) {
	switch t := e.peek(); {
	case t == "!":
		e.i++
		v, err := e.unary()
		return !v, err
	case t == "(":
		e.i++
		v, err := e.or()
		if e.peek() != ")" {
			return false, errors.New("unbalanced parentheses")
		}
		e.i++
		return v, err
	case t == "":
		return false, errors.New("the rule ends early")
	}
	name := e.toks[e.i]
	e.i++
	if e.peek() != "(" {
		return false, fmt.Errorf("%s: want (", name)
	}
	e.i++
	var args []string
	for e.peek() != ")" {
		a := e.peek()
		if !strings.HasPrefix(a, "`") {
			return false, fmt.Errorf("%s: want a `string`", name)
		}
		args = append(args, strings.Trim(a, "`"))
		e.i++
		if e.peek() == "," {
			e.i++
		}
	}
	e.i++
	return traefikMatcher(name, args, e.p)
}

func traefikMatcher(name string, args []string, p probe) (bool, error) {
	want := map[string]int{"Method": 1, "PathPrefix": 1, "Path": 1, "Header": 2, "HeaderRegexp": 2, "Query": 2, "QueryRegexp": 2}
	n, ok := want[name]
	if !ok {
		return false, fmt.Errorf("matcher %s, which this check does not evaluate", name)
	}
	if len(args) != n {
		return false, fmt.Errorf("%s takes %d arguments", name, n)
	}
	pathOnly, rawQuery, _ := strings.Cut(p.path, "?")
	query, _ := url.ParseQuery(rawQuery)
	full := func(re string) (*regexp.Regexp, error) { return regexp.Compile("^(?:" + re + ")$") }
	switch name {
	case "Method":
		return p.method == args[0], nil
	case "PathPrefix":
		return strings.HasPrefix(pathOnly, args[0]), nil
	case "Path":
		return pathOnly == args[0], nil
	case "Header":
		v, present := p.headers[strings.ToLower(args[0])]
		return present && v == args[1], nil
	case "HeaderRegexp":
		v, present := p.headers[strings.ToLower(args[0])]
		re, err := full(args[1])
		return present && err == nil && re.MatchString(v), err
	case "Query":
		return slices.Contains(query[args[0]], args[1]), nil
	default: // QueryRegexp
		re, err := full(args[1])
		if err != nil {
			return false, err
		}
		return slices.ContainsFunc(query[args[0]], re.MatchString), nil
	}
}

// traefikTokens splits a rule into `strings`, identifiers, and the
// operators && || ! ( ) ,.
func traefikTokens(rule string) ([]string, error) {
	var out []string
	for i := 0; i < len(rule); {
		c := rule[i]
		switch {
		case c == ' ' || c == '\t' || c == '\n':
			i++
		case c == '`':
			j := strings.IndexByte(rule[i+1:], '`')
			if j < 0 {
				return nil, errors.New("an unterminated `string`")
			}
			out = append(out, rule[i:i+j+2])
			i += j + 2
		case strings.HasPrefix(rule[i:], "&&"), strings.HasPrefix(rule[i:], "||"):
			out = append(out, rule[i:i+2])
			i += 2
		case strings.IndexByte("!(),", c) >= 0:
			out = append(out, string(c))
			i++
		default:
			j := i
			for j < len(rule) && (rule[j] == '_' || 'a' <= rule[j]|0x20 && rule[j]|0x20 <= 'z' || '0' <= rule[j] && rule[j] <= '9') {
				j++
			}
			if j == i {
				return nil, fmt.Errorf("unexpected %q in the rule", c)
			}
			out = append(out, rule[i:j])
			i = j
		}
	}
	return out, nil
}

func TestTraefik(t *testing.T) {
	z := authzService(t)
	o, err := loadTraefik(readFile(t, filepath.Join(integrationsDir, "traefik", "middleware.yaml")))
	if err != nil {
		t.Fatal(err)
	}
	if probs := checkTraefik(o, z); len(probs) > 0 {
		t.Errorf("checks:\n%s", strings.Join(probs, "\n"))
	}
}

func TestTraefikChecksCanFail(t *testing.T) {
	z := authzService(t)
	doc := readFile(t, filepath.Join(integrationsDir, "traefik", "middleware.yaml"))
	readRule := "PathPrefix(`/`) && (Method(`GET`) || Method(`HEAD`) || Method(`OPTIONS`))"
	cases := []struct{ name, old, new, want string }{
		{"unknown field", "trustForwardHeader: false", "trustForwardHeaders: false", `unknown field "spec.forwardAuth.trustForwardHeaders"`},
		{"field in another case", "maxResponseBodySize: 65536", "maxresponsebodysize: 65536", `unknown field "spec.forwardAuth.maxresponsebodysize"`},
		{"wrong type", "maxResponseBodySize: 65536", "maxResponseBodySize: 64KiB", "cannot unmarshal"},
		{"another middleware kind", "  forwardAuth:\n", "  basicAuth: {}\n  forwardAuth:\n", `unknown field "spec.basicAuth"`},
		{"IngressRoute unknown field", "entryPoints: [web]", "entrypoints: [web]", `unknown field "spec.entrypoints"`},
		{"trusts the client's X-Forwarded-*", "trustForwardHeader: false", "trustForwardHeader: true", "trustForwardHeader is true"},
		{"trustForwardHeader unset", "    trustForwardHeader: false\n", "", "trustForwardHeader is unset"},
		{"every client header", span(t, doc, "    authRequestHeaders:\n", "      - X-Method-Override\n"), "", "authRequestHeaders is empty"},
		{"a client's X-Original-URI", "      - Fencing-Sequence\n", "      - Fencing-Sequence\n      - X-Original-URI\n", "sends the client's X-Original-URI"},
		{"no token", "      - Fencing-Token\n", "", "lacks the token header"},
		{"an override header not sent", "      - X-HTTP-Method\n", "", "lacks the method override header x-http-method"},
		{"body forwarded", "maxResponseBodySize: 65536", "maxResponseBodySize: 65536\n    forwardBody: true", "forwardBody is true"},
		{"problem too large for Traefik", "maxResponseBodySize: 65536", "maxResponseBodySize: 100", "maxResponseBodySize must be set"},
		{"sign-in redirect", "maxResponseBodySize: 65536", "maxResponseBodySize: 65536\n    authSigninURL: https://login.example.com/", "authSigninURL"},
		{"wrong address", ".svc.cluster.local:8080/", ".svc.cluster.local:9191/", "want fenceproxy authz's HTTP Service port"},
		{"writes without the middleware", "        - name: fenceproxy\n", "", "PUT /orders/1 reaches route 1 of IngressRoute orders, which does not use Middleware fenceproxy"},
		{"a write among the reads", "Method(`OPTIONS`))", "Method(`OPTIONS`) || Method(`DELETE`))", "DELETE /orders/1 reaches route 0"},
		{"an override header among the reads", " && !HeaderRegexp(`X-HTTP-Method`, `.*`)", "", "(x-http-method: DELETE) reaches route 0"},
		{"reads asked", "      middlewares:\n        - name: fenceproxy-strip\n      services:", "      middlewares:\n        - name: fenceproxy-strip\n        - name: fenceproxy\n      services:", "which asks fenceproxy: reads would fail"},
		{"priorities swapped", "priority: 10", "priority: 30", "GET /orders/1 reaches route 1 of IngressRoute orders, which asks fenceproxy"},
		{"no priority", "      priority: 20\n", "", "sets no priority"},
		{"a matcher not understood", readRule, readRule + " && ClientIP(`10.0.0.0/8`)", "matcher ClientIP"},
		{"a reserved header kept", "      X-Rewrite-URL: \"\"\n", "", "does not remove x-rewrite-url"},
		{"a route without the strip", "        - name: fenceproxy-strip\n        - name: fenceproxy\n", "        - name: fenceproxy\n", "route 1 of IngressRoute orders does not use Middleware fenceproxy-strip"},
	}
	check := func(doc string) ([]string, error) {
		o, err := loadTraefik(doc)
		if err != nil {
			return nil, err
		}
		return checkTraefik(o, z), nil
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) { wantBreak(t, doc, tc.old, tc.new, tc.want, check) })
	}
}

// ---------------------------------------------------------------------------
// ingress-nginx

func loadIngressNginx(doc string) (*networkingv1.Ingress, *corev1.ConfigMap, error) {
	docs, err := splitDocs(doc)
	if err != nil {
		return nil, nil, err
	}
	var ing *networkingv1.Ingress
	var cm *corev1.ConfigMap
	for _, d := range docs {
		var tm metav1.TypeMeta
		if err := json.Unmarshal(d, &tm); err != nil {
			return nil, nil, err
		}
		switch tm.APIVersion + " " + tm.Kind {
		case "v1 ConfigMap":
			o, err := DecodeJSON(d)
			if err != nil {
				return nil, nil, err
			}
			cm = o.Obj.(*corev1.ConfigMap)
		case "networking.k8s.io/v1 Ingress": // not among Kinds: the kustomizations have none
			ing = new(networkingv1.Ingress)
			if err := decodeStrict(d, ing); err != nil {
				return nil, nil, fmt.Errorf("Ingress: %w", err)
			}
		default:
			return nil, nil, fmt.Errorf("unexpected object %s %s", tm.APIVersion, tm.Kind)
		}
	}
	if ing == nil || cm == nil {
		return nil, nil, errors.New("want an Ingress and a ConfigMap")
	}
	return ing, cm, nil
}

const ingressNginx = "nginx.ingress.kubernetes.io/"

// checkIngressNginx: auth-url to the authz Service's HTTP port; auth-method
// set (the only way the controller sets X-Original-URI itself); the
// client's X-Forwarded-Method and X-Forwarded-Uri removed through
// auth-proxy-set-headers; no cached decisions, no sign-in redirect, no
// snippets.
func checkIngressNginx(ing *networkingv1.Ingress, cm *corev1.ConfigMap, z Authz) []string {
	var probs []string
	bad := func(format string, args ...any) { probs = append(probs, fmt.Sprintf(format, args...)) }
	ann := ing.Annotations
	if want := fmt.Sprintf("http://%s:%d/", z.host(), z.ServiceHTTPPort); ann[ingressNginx+"auth-url"] != want {
		bad("auth-url %q, want fenceproxy authz's HTTP Service port %s", ann[ingressNginx+"auth-url"], want)
	}
	if ann[ingressNginx+"auth-method"] == "" {
		bad("auth-method is unset: the controller then does not set X-Original-URI, and a client's own X-Original-URI names the request fenceproxy decides on")
	}
	for _, a := range []string{"auth-cache-key", "auth-cache-duration"} {
		if _, set := ann[ingressNginx+a]; set {
			bad("%s is set: a cached decision lets a write through without asking fenceproxy", a)
		}
	}
	if _, set := ann[ingressNginx+"auth-signin"]; set {
		bad("auth-signin turns fenceproxy's 401 into a redirect")
	}
	for k := range ann {
		if strings.HasPrefix(k, ingressNginx) && strings.HasSuffix(k, "-snippet") {
			bad("%s: snippets are off by default (and a risk); this example needs none", k)
		}
	}
	if ns, name, _ := strings.Cut(ann[ingressNginx+"auth-proxy-set-headers"], "/"); ns != ing.Namespace || name != cm.Name || cm.Namespace != ing.Namespace {
		bad("auth-proxy-set-headers %q does not name ConfigMap %s/%s", ann[ingressNginx+"auth-proxy-set-headers"], cm.Namespace, cm.Name)
	}
	for _, h := range []string{"X-Forwarded-Method", "X-Forwarded-Uri"} {
		if v, ok := cm.Data[h]; !ok || v != "" {
			bad("ConfigMap %s must set %s to \"\" (removing the client's)", cm.Name, h)
		}
	}
	for h := range cm.Data {
		if strings.EqualFold(h, "X-Original-URI") && ann[ingressNginx+"auth-method"] != "" {
			bad("ConfigMap %s sets %s as auth-method does: the header would be sent twice, and fenceproxy refuses a repeated one", cm.Name, h)
		}
	}
	return probs
}

func TestIngressNginx(t *testing.T) {
	z := authzService(t)
	ing, cm, err := loadIngressNginx(readFile(t, filepath.Join(integrationsDir, "ingress-nginx", "ingress.yaml")))
	if err != nil {
		t.Fatal(err)
	}
	if probs := checkIngressNginx(ing, cm, z); len(probs) > 0 {
		t.Errorf("checks:\n%s", strings.Join(probs, "\n"))
	}
}

func TestIngressNginxChecksCanFail(t *testing.T) {
	z := authzService(t)
	doc := readFile(t, filepath.Join(integrationsDir, "ingress-nginx", "ingress.yaml"))
	cases := []struct{ name, old, new, want string }{
		{"unknown field", "ingressClassName: nginx", "ingressClass: nginx", `unknown field "spec.ingressClass"`},
		{"ConfigMap unknown field", "\ndata:\n", "\ndat:\n", `unknown field "dat"`},
		{"Ingress misplaced field", "  ingressClassName: nginx", "  ingressClassName: nginx\n  annotations: {}", `unknown field "spec.annotations"`},
		{"no auth-method", "    nginx.ingress.kubernetes.io/auth-method: GET\n", "", "auth-method is unset"},
		{"wrong auth-url", ".svc.cluster.local:8080/", ".svc.cluster.local:9090/", "want fenceproxy authz's HTTP Service port"},
		{"cached decisions", "auth-method: GET", "auth-method: GET\n    nginx.ingress.kubernetes.io/auth-cache-key: $remote_user$http_authorization", "auth-cache-key is set"},
		{"sign-in", "auth-method: GET", "auth-method: GET\n    nginx.ingress.kubernetes.io/auth-signin: https://login.example.com/", "auth-signin"},
		{"a snippet", "auth-method: GET", "auth-method: GET\n    nginx.ingress.kubernetes.io/auth-snippet: proxy_set_header X 1;", "snippets are off by default"},
		{"headers ConfigMap not named", "auth-proxy-set-headers: orders/fenceproxy-authz-headers", "auth-proxy-set-headers: orders/other", "does not name ConfigMap"},
		{"client's X-Forwarded-Uri kept", "  X-Forwarded-Uri: \"\"\n", "", "must set X-Forwarded-Uri"},
		{"X-Original-URI twice", "  X-Forwarded-Uri: \"\"\n", "  X-Forwarded-Uri: \"\"\n  X-Original-URI: $request_uri\n", "would be sent twice"},
	}
	check := func(doc string) ([]string, error) {
		ing, cm, err := loadIngressNginx(doc)
		if err != nil {
			return nil, err
		}
		return checkIngressNginx(ing, cm, z), nil
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) { wantBreak(t, doc, tc.old, tc.new, tc.want, check) })
	}
}
