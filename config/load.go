package config

import (
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"net/textproto"
	"net/url"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/caarlos0/env/v11"
	"go.uber.org/zap/zapcore"
)

// rawEnv is the environment as given. Every field is a string so that
// validation, not env, reports a bad value, in words that name the variable.
// env applies the defaults, also to a variable set to "".
type rawEnv struct {
	UpstreamURL     string `env:"FENCE_UPSTREAM_URL" shown:"(required)" help:"base URL of the protected service, e.g. http://127.0.0.1:3000 (serve only)"`
	ListenAddr      string `env:"FENCE_LISTEN_ADDR" envDefault:":8080" help:"data-plane listener (authz: where questions are asked)"`
	AdminAddr       string `env:"FENCE_ADMIN_ADDR" envDefault:":9090" help:"admin listener: /healthz, /readyz, /metrics, the status page"`
	Store           string `env:"FENCE_STORE" shown:"redis with a Redis address, else bolt" help:"redis, etcd, bolt (an embedded durable file) or memory (tests and demos only)"`
	BoltPath        string `env:"FENCE_BOLT_PATH" envDefault:"fenceproxy.db" help:"file of the embedded bolt store"`
	RoutesFile      string `env:"FENCE_ROUTES_FILE" help:"YAML route table (re-read on change and SIGHUP); unset: the default rule for every request"`
	TokenHeader     string `env:"FENCE_TOKEN_HEADER" envDefault:"Fencing-Token" help:"request header carrying the fencing token"`
	SequenceHeader  string `env:"FENCE_SEQUENCE_HEADER" envDefault:"Fencing-Sequence" help:"request header carrying the sequence on a route with sequence: required or optional"`
	KeyPrefix       string `env:"FENCE_KEY_PREFIX" envDefault:"fence:" help:"namespace of the marks in the store"`
	StoreTimeout    string `env:"FENCE_STORE_TIMEOUT" envDefault:"500ms" help:"bound on one admission; past it the request gets 503"`
	ShutdownTimeout string `env:"FENCE_SHUTDOWN_TIMEOUT" envDefault:"25s" help:"bound on draining in-flight requests at SIGTERM (below the pod's terminationGracePeriodSeconds)"`
	LogLevel        string `env:"FENCE_LOG_LEVEL" envDefault:"info" help:"zap level; logs are JSON lines on stderr"`
	ReadyRequires   string `env:"FENCE_READY_REQUIRES_STORE" envDefault:"false" help:"true: /readyz fails while the store is down, unsafe or lost (false: only fenced requests get 503; reads keep flowing)"`
	AdminPprof      string `env:"FENCE_ADMIN_PPROF" envDefault:"false" help:"serve net/http/pprof under /debug/pprof/ on the admin port"`
	BodyTimeout     string `env:"FENCE_BODY_TIMEOUT" envDefault:"60s" help:"bound on the client's sending of one request body (waiting at the drain barrier does not count)"`
	UpstreamTimeout string `env:"FENCE_UPSTREAM_TIMEOUT" envDefault:"30s" help:"bound on an admitted request from admission to the end of its response (also the drain barrier's in-flight deadline)"`
	Drain           string `env:"FENCE_DRAIN" envDefault:"on" help:"on: the drain barrier on every fenced route without drain: false; off: none"`
	DrainTimeout    string `env:"FENCE_DRAIN_TIMEOUT" shown:"(unset: wait)" help:"bound on one wait at the drain barrier; past it 503 drain-timeout"`
	StoreInit       string `env:"FENCE_STORE_INIT" envDefault:"auto" help:"auto: the first replica on an empty store writes its identity record; manual: only fenceproxy store init does"`
	MarkCache       string `env:"FENCE_MARK_CACHE" envDefault:"100000" help:"resources whose greatest mark each replica remembers, to heal a store that lost one; 0: off"`
	TokenKeysFile   string `env:"FENCE_TOKEN_KEYS_FILE" help:"a JWK Set: fenced requests must carry a token signed by one of its keys (re-read on change and SIGHUP)"`
	TokenLeeway     string `env:"FENCE_TOKEN_LEEWAY" envDefault:"5s" help:"clock skew allowed for a signed token's exp and nbf (0s to 1h)"`
	MethodOverride  string `env:"FENCE_METHOD_OVERRIDE_HEADERS" shown:"(none)" help:"comma list of more headers read as the method (beside X-HTTP-Method-Override, X-HTTP-Method, X-Method-Override)"`
	AuthzPathPrefix string `env:"FENCE_AUTHZ_PATH_PREFIX" help:"authz only: removed from a question's own path when no X-Original-URI or X-Forwarded-Uri names the original"`
	AuthzGRPCAddr   string `env:"FENCE_AUTHZ_GRPC_ADDR" shown:"(unset: off)" help:"authz only: listener of Envoy's gRPC Authorization/Check"`

	EtcdEndpoints string `env:"FENCE_ETCD_ENDPOINTS" help:"with FENCE_STORE=etcd: comma list of host:port or http(s)://host:port members"`
	EtcdUsername  string `env:"FENCE_ETCD_USERNAME" help:"etcd RBAC user (read and write on the key prefix)"`
	EtcdPassword  string `env:"FENCE_ETCD_PASSWORD" help:"password of FENCE_ETCD_USERNAME"`
	EtcdCAFile    string `env:"FENCE_ETCD_TLS_CA_FILE" help:"PEM bundle to verify the etcd members (TLS)"`
	EtcdCertFile  string `env:"FENCE_ETCD_TLS_CERT_FILE" help:"client certificate for etcd (with FENCE_ETCD_TLS_KEY_FILE), read again at each new connection when it changed"`
	EtcdKeyFile   string `env:"FENCE_ETCD_TLS_KEY_FILE" help:"private key of FENCE_ETCD_TLS_CERT_FILE"`

	RedisURL      string `env:"FENCE_REDIS_URL" help:"redis://[user:pass@]host:port/db or rediss://...; set, the store is Redis"`
	SentinelAddrs string `env:"FENCE_REDIS_SENTINEL_ADDRS" help:"comma list of host:port Redis sentinels; the store follows the master they name"`
	MasterName    string `env:"FENCE_REDIS_MASTER_NAME" envDefault:"mymaster" help:"the sentinel master name"`
	ClusterAddrs  string `env:"FENCE_REDIS_CLUSTER_ADDRS" help:"comma list of host:port seed nodes of a Redis Cluster"`
	Username      string `env:"FENCE_REDIS_USERNAME" help:"Redis ACL user for sentinel or cluster data nodes (a URL carries its own)"`
	Password      string `env:"FENCE_REDIS_PASSWORD" help:"password of FENCE_REDIS_USERNAME"`
	TLSCAFile     string `env:"FENCE_REDIS_TLS_CA_FILE" help:"PEM bundle to verify Redis; TLS is on with rediss:// or when this is set"`
	MinReplicas   string `env:"FENCE_REDIS_MIN_REPLICAS" envDefault:"0" help:"Redis replicas that must acknowledge a mark (WAIT) before forwarding; fewer in time: 503"`
	WaitTimeout   string `env:"FENCE_REDIS_WAIT_TIMEOUT" envDefault:"100ms" help:"bound on that acknowledgement"`
	Eviction      string `env:"FENCE_REDIS_EVICTION" envDefault:"refuse" help:"when Redis could evict marks (maxmemory-policy): refuse, warn or off"`
	Persistence   string `env:"FENCE_REDIS_PERSISTENCE" envDefault:"warn" help:"when Redis does not fsync every write: warn, refuse or off"`
	Settings      string `env:"FENCE_REDIS_SETTINGS" shown:"(unset: read with CONFIG GET)" help:"Redis settings as you state them, for a server that refuses CONFIG GET: e.g. maxmemory-policy=noeviction,appendonly=yes,appendfsync=always"`
}

// Environ turns kv, as os.Environ returns it ("KEY=value" entries), into the
// map Load reads. As with os.Getenv, the first of repeated keys wins; entries
// without '=' or with an empty key are skipped.
func Environ(kv []string) map[string]string {
	m := make(map[string]string, len(kv))
	for _, e := range kv {
		k, v, ok := strings.Cut(e, "=")
		if !ok || k == "" {
			continue
		}
		if _, seen := m[k]; !seen {
			m[k] = v
		}
	}
	return m
}

// Load reads the configuration from environ (a nil map is an empty
// environment; pass Environ(os.Environ()) for the process's) and from the
// routes file FENCE_ROUTES_FILE names, if any, and validates all of it. It
// returns a complete Config or, if anything is wrong, an error listing every
// problem, one per line, each starting with the variable it concerns (routes
// file problems start with FENCE_ROUTES_FILE and the file's name, then name
// the route). No message contains FENCE_REDIS_PASSWORD or a URL's password.
func Load(environ map[string]string) (*Config, error) { return load(environ, false) }

// LoadAuthz is Load for the authorization mode (fenceproxy authz): there
// is no upstream, so FENCE_UPSTREAM_URL is not needed (and ignored when
// set, so that one environment can serve both modes), and
// FENCE_AUTHZ_PATH_PREFIX and FENCE_AUTHZ_GRPC_ADDR are read.
func LoadAuthz(environ map[string]string) (*Config, error) { return load(environ, true) }

func load(environ map[string]string, authz bool) (*Config, error) {
	if environ == nil {
		environ = map[string]string{} // env would read the process environment
	}
	var raw rawEnv
	if err := env.ParseWithOptions(&raw, env.Options{Environment: environ}); err != nil {
		return nil, fmt.Errorf("reading the environment: %w", err)
	}

	var problems []error
	bad := func(variable, format string, args ...any) {
		problems = append(problems, errors.New(variable+": "+fmt.Sprintf(format, args...)))
	}
	checkUnknown(environ, bad)
	c := &Config{
		BoltPath:   raw.BoltPath,
		RoutesFile: raw.RoutesFile,
		KeyPrefix:  raw.KeyPrefix,
		Redis: Redis{
			URL:        raw.RedisURL,
			MasterName: raw.MasterName,
			Username:   raw.Username,
			Password:   raw.Password,
			TLSCAFile:  raw.TLSCAFile,
		},
	}

	if err := checkKeyPrefix(raw.KeyPrefix); err != nil {
		bad("FENCE_KEY_PREFIX", "%v", err)
	}
	c.ListenAddr = raw.ListenAddr
	c.AdminAddr = raw.AdminAddr
	checkListeners(raw.ListenAddr, raw.AdminAddr, bad)
	if authz {
		c.Authz = parseAuthz(raw, bad)
	} else {
		c.UpstreamURL = parseUpstream(raw.UpstreamURL, bad)
	}

	if err := checkFenceHeader(raw.TokenHeader); err != nil {
		bad("FENCE_TOKEN_HEADER", "%v", err)
	} else {
		c.TokenHeader = textproto.CanonicalMIMEHeaderKey(raw.TokenHeader)
	}
	// Header names are case-insensitive: "fencing-token" is the token header.
	if err := checkFenceHeader(raw.SequenceHeader); err != nil {
		bad("FENCE_SEQUENCE_HEADER", "%v", err)
	} else if strings.EqualFold(raw.SequenceHeader, raw.TokenHeader) {
		bad("FENCE_SEQUENCE_HEADER", "%q is the token header (FENCE_TOKEN_HEADER); the sequence needs a header of its own", raw.SequenceHeader)
	} else {
		c.SequenceHeader = textproto.CanonicalMIMEHeaderKey(raw.SequenceHeader)
	}

	c.MethodOverrideHeaders = parseOverrideHeaders(raw.MethodOverride, c.TokenHeader, c.SequenceHeader, bad)

	c.StoreTimeout = parsePositiveDuration("FENCE_STORE_TIMEOUT", raw.StoreTimeout, bad)
	c.ShutdownTimeout = parsePositiveDuration("FENCE_SHUTDOWN_TIMEOUT", raw.ShutdownTimeout, bad)
	c.BodyTimeout = parsePositiveDuration("FENCE_BODY_TIMEOUT", raw.BodyTimeout, bad)
	c.UpstreamTimeout = parsePositiveDuration("FENCE_UPSTREAM_TIMEOUT", raw.UpstreamTimeout, bad)
	switch raw.Drain {
	case "on":
		c.Drain = true
	case "off":
	default:
		bad("FENCE_DRAIN", "%q must be on or off", raw.Drain)
	}
	if n, err := strconv.Atoi(raw.MarkCache); err != nil || n < 0 {
		bad("FENCE_MARK_CACHE", "%q must be a whole number of resources, 0 or more (0: no cache)", raw.MarkCache)
	} else {
		c.MarkCache = n
	}
	switch raw.StoreInit {
	case "auto":
		c.StoreInitAuto = true
	case "manual":
	default:
		bad("FENCE_STORE_INIT", "%q must be auto or manual", raw.StoreInit)
	}
	if raw.DrainTimeout != "" {
		c.DrainTimeout = parsePositiveDuration("FENCE_DRAIN_TIMEOUT", raw.DrainTimeout, bad)
	}
	c.TokenKeysFile = raw.TokenKeysFile
	if d, err := time.ParseDuration(raw.TokenLeeway); err != nil || d < 0 || d > time.Hour {
		bad("FENCE_TOKEN_LEEWAY", "%q must be a duration from 0s to 1h (the clock skew allowed for exp and nbf)", raw.TokenLeeway)
	} else {
		c.TokenLeeway = d
	}
	if b, err := strconv.ParseBool(raw.ReadyRequires); err != nil {
		bad("FENCE_READY_REQUIRES_STORE", "%q is not a boolean (true or false)", raw.ReadyRequires)
	} else {
		c.ReadyRequiresStore = b
	}
	if b, err := strconv.ParseBool(raw.AdminPprof); err != nil {
		bad("FENCE_ADMIN_PPROF", "%q is not a boolean (true or false)", raw.AdminPprof)
	} else {
		c.AdminPprof = b
	}
	c.Redis.WaitTimeout = parsePositiveDuration("FENCE_REDIS_WAIT_TIMEOUT", raw.WaitTimeout, bad)

	if lvl, err := zapcore.ParseLevel(raw.LogLevel); err != nil {
		bad("FENCE_LOG_LEVEL", "%q is not a level (debug, info, warn, error, dpanic, panic, fatal)", raw.LogLevel)
	} else {
		c.LogLevel = lvl
	}

	c.Store = deriveStore(raw, bad)
	c.Etcd = parseEtcd(raw, c.Store, bad)
	if raw.RedisURL != "" {
		checkRedisURL(raw.RedisURL, bad)
		if raw.Username != "" || raw.Password != "" {
			bad("FENCE_REDIS_USERNAME, FENCE_REDIS_PASSWORD", "only for sentinel or cluster; FENCE_REDIS_URL carries its own credentials (redis://user:pass@host:port)")
		}
	}
	c.Redis.SentinelAddrs = parseAddrList("FENCE_REDIS_SENTINEL_ADDRS", raw.SentinelAddrs, bad)
	c.Redis.ClusterAddrs = parseAddrList("FENCE_REDIS_CLUSTER_ADDRS", raw.ClusterAddrs, bad)
	if strings.TrimSpace(raw.MasterName) == "" {
		bad("FENCE_REDIS_MASTER_NAME", "blank")
	}
	if n, err := strconv.Atoi(raw.MinReplicas); err != nil || n < 0 {
		bad("FENCE_REDIS_MIN_REPLICAS", "%q is not an integer >= 0", raw.MinReplicas)
	} else {
		c.Redis.MinReplicas = n
	}
	// WAIT runs inside the admission, so its bound must leave room for the
	// script under the store timeout; otherwise every admission that waits
	// for replicas would be cut off by the timeout and answered 503.
	if c.Redis.MinReplicas > 0 && c.Redis.WaitTimeout > 0 && c.StoreTimeout > 0 && c.Redis.WaitTimeout >= c.StoreTimeout {
		bad("FENCE_REDIS_WAIT_TIMEOUT", "%s must be below FENCE_STORE_TIMEOUT (%s) when FENCE_REDIS_MIN_REPLICAS > 0", c.Redis.WaitTimeout, c.StoreTimeout)
	}
	switch e := Eviction(raw.Eviction); e {
	case EvictionRefuse, EvictionWarn, EvictionOff:
		c.Redis.Eviction = e
	default:
		bad("FENCE_REDIS_EVICTION", "%q must be refuse, warn or off", raw.Eviction)
	}
	switch p := Persistence(raw.Persistence); p {
	case PersistenceWarn, PersistenceRefuse, PersistenceOff:
		c.Redis.Persistence = p
	default:
		bad("FENCE_REDIS_PERSISTENCE", "%q must be warn, refuse or off", raw.Persistence)
	}
	c.Redis.Settings = parseRedisSettings(raw.Settings, bad)
	if c.Redis.Settings.Stated() && c.Store != StoreRedis {
		bad("FENCE_REDIS_SETTINGS", "set, but the store is not Redis")
	}
	if raw.TLSCAFile != "" {
		if err := checkCAFile(raw.TLSCAFile); err != nil {
			problems = append(problems, fmt.Errorf("FENCE_REDIS_TLS_CA_FILE: %w", err))
		}
	}

	if raw.RoutesFile == "" {
		c.Routes = DefaultRoutes()
	} else {
		rs, err := ReadRoutes(raw.RoutesFile, c.TokenHeader, c.SequenceHeader)
		if err != nil {
			problems = append(problems, err)
		}
		c.Routes = rs
	}

	if len(problems) > 0 {
		return nil, errors.Join(problems...)
	}
	return c, nil
}

// ReadRoutes reads and validates the routes file at path for a proxy whose
// token and sequence headers are tokenHeader and sequenceHeader: what Load
// does at start, and what a reload does again. Every problem is returned,
// one per line, each prefixed with FENCE_ROUTES_FILE and the path.
func ReadRoutes(path, tokenHeader, sequenceHeader string) (Routes, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return Routes{}, fmt.Errorf("FENCE_ROUTES_FILE: %w", err)
	}
	rs, problems := parseRoutes(data)
	problems = append(problems, fenceHeadersAsResource(rs, tokenHeader, sequenceHeader)...)
	if len(problems) == 0 {
		return rs, nil
	}
	errs := make([]error, len(problems))
	for i, p := range problems {
		errs[i] = fmt.Errorf("FENCE_ROUTES_FILE %q: %w", path, p)
	}
	return rs, errors.Join(errs...)
}

// fenceHeadersAsResource reports the rules whose resource template reads
// the token header or the sequence header: a mark per token, or per
// sequence, fences nothing. An empty header name (one that was itself
// invalid, and reported as such) matches no placeholder.
func fenceHeadersAsResource(rs Routes, tokenHeader, sequenceHeader string) []error {
	var problems []error
	for i, r := range append(slices.Clone(rs.Routes), rs.Default) {
		label := "default"
		if i < len(rs.Routes) {
			label = routeLabel(i, r.Name)
		}
		var token, sequence bool // each reported once per rule
		for _, p := range r.Resource.Parts {
			if p.Kind != PartHeader || p.Value == "" {
				continue
			}
			switch {
			case p.Value == tokenHeader && !token:
				token = true
				problems = append(problems, fmt.Errorf("%s: resource: {header:%s} is the token header (FENCE_TOKEN_HEADER); a mark per token fences nothing", label, p.Value))
			case p.Value == sequenceHeader && !sequence:
				sequence = true
				problems = append(problems, fmt.Errorf("%s: resource: {header:%s} is the sequence header (FENCE_SEQUENCE_HEADER); a mark per sequence fences nothing", label, p.Value))
			}
		}
	}
	return problems
}

// shown quotes a value for an error message, unless it contains '@': a URL
// (or an address someone wrote as one) may then carry a password.
func shown(v string) string {
	if strings.Contains(v, "@") {
		return "the value (not shown: it may hold a password)"
	}
	return strconv.Quote(v)
}

// parseUpstream parses FENCE_UPSTREAM_URL.
func parseUpstream(raw string, bad func(variable, format string, args ...any)) *url.URL {
	const name = "FENCE_UPSTREAM_URL"
	if raw == "" {
		bad(name, "required (the protected service, e.g. http://127.0.0.1:3000)")
		return nil
	}
	if !strings.Contains(raw, "://") {
		// "127.0.0.1:3000" parses as a scheme and an opaque part, or not at
		// all ("first path segment in URL cannot contain colon"): neither
		// message says what is missing.
		if strings.Contains(raw, "@") {
			bad(name, "%s needs a scheme: http:// or https:// before the host", shown(raw))
		} else {
			bad(name, "needs a scheme: http://%s", raw)
		}
		return nil
	}
	u, err := url.Parse(raw)
	if err != nil {
		if strings.Contains(raw, "@") {
			bad(name, "%s is not a URL", shown(raw))
		} else {
			bad(name, "not a URL: %v", err)
		}
		return nil
	}
	ps := upstreamProblems(u)
	for _, p := range ps {
		bad(name, "%s %s", shown(raw), p)
	}
	if len(ps) > 0 {
		return nil
	}
	return u
}

// upstreamProblems lists what is wrong with u as the upstream URL.
func upstreamProblems(u *url.URL) []string {
	var ps []string
	if u.Scheme != "http" && u.Scheme != "https" {
		ps = append(ps, "must use scheme http or https")
	}
	if u.Hostname() == "" {
		ps = append(ps, "has no host")
	}
	if u.User != nil {
		ps = append(ps, "may not carry user information")
	}
	if u.RawQuery != "" || u.ForceQuery {
		ps = append(ps, "may not have a query")
	}
	if u.Fragment != "" {
		ps = append(ps, "may not have a fragment")
	}
	return ps
}

// parseAuthz reads the authorization mode's variables.
func parseAuthz(raw rawEnv, bad func(variable, format string, args ...any)) Authz {
	a := Authz{Mode: true, PathPrefix: raw.AuthzPathPrefix, GRPCAddr: raw.AuthzGRPCAddr}
	if p := a.PathPrefix; p != "" {
		u, err := url.ParseRequestURI(p)
		switch {
		case err != nil || !strings.HasPrefix(p, "/") || u.RawQuery != "" || u.ForceQuery || strings.Contains(p, "#"):
			bad("FENCE_AUTHZ_PATH_PREFIX", "%q must be a path starting with / (no query), e.g. /fence", p)
		case u.EscapedPath() != p:
			bad("FENCE_AUTHZ_PATH_PREFIX", "%q must be written as it is sent (percent-encoded where needed)", p)
		case strings.Contains(p, "//"):
			// The proxy removes one trailing "/" and wants a "/" next:
			// with an empty segment no question's path would match.
			bad("FENCE_AUTHZ_PATH_PREFIX", "%q has an empty segment (//), e.g. use /fence", p)
		}
	}
	if a.GRPCAddr != "" {
		_, gp, ok := splitListenAddr("FENCE_AUTHZ_GRPC_ADDR", a.GRPCAddr, bad)
		if ok && gp != 0 {
			for _, other := range []struct{ name, addr string }{{"FENCE_LISTEN_ADDR", raw.ListenAddr}, {"FENCE_ADMIN_ADDR", raw.AdminAddr}} {
				if _, op, err := net.SplitHostPort(other.addr); err == nil && op == strconv.FormatUint(gp, 10) {
					bad("FENCE_AUTHZ_GRPC_ADDR", "%q must use another port than %s (%q)", a.GRPCAddr, other.name, other.addr)
				}
			}
		}
	}
	return a
}

// checkListeners checks FENCE_LISTEN_ADDR and FENCE_ADMIN_ADDR and that they
// are different listeners (port 0, any free port, may appear in both).
func checkListeners(listen, admin string, bad func(variable, format string, args ...any)) {
	lh, lp, lok := splitListenAddr("FENCE_LISTEN_ADDR", listen, bad)
	ah, ap, aok := splitListenAddr("FENCE_ADMIN_ADDR", admin, bad)
	if !lok || !aok || lp != ap || lp == 0 {
		return
	}
	if lh == ah || anyHost(lh) || anyHost(ah) {
		bad("FENCE_ADMIN_ADDR", "%q must differ from FENCE_LISTEN_ADDR (%q)", admin, listen)
	}
}

// splitListenAddr splits a listen address into host and port.
func splitListenAddr(variable, addr string, bad func(variable, format string, args ...any)) (string, uint64, bool) {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		bad(variable, "%q is not host:port (e.g. :8080)", addr)
		return "", 0, false
	}
	p, err := strconv.ParseUint(port, 10, 16)
	if err != nil {
		bad(variable, "%q: port must be a number from 0 to 65535", addr)
		return "", 0, false
	}
	return host, p, true
}

// anyHost reports whether host listens on every interface.
func anyHost(host string) bool {
	return host == "" || host == "0.0.0.0" || host == "::"
}

// parsePositiveDuration parses a duration variable that must be above zero.
func parsePositiveDuration(variable, v string, bad func(variable, format string, args ...any)) time.Duration {
	d, err := time.ParseDuration(v)
	switch {
	case err != nil:
		bad(variable, "%q is not a duration (e.g. 500ms, 2s)", v)
	case d <= 0:
		bad(variable, "%q must be greater than 0", v)
	}
	return d
}

// redisAddrVars are the variables that each point the store at Redis.
var redisAddrVars = []string{"FENCE_REDIS_URL", "FENCE_REDIS_SENTINEL_ADDRS", "FENCE_REDIS_CLUSTER_ADDRS"}

// deriveStore returns FENCE_STORE, or the store the Redis variables imply.
func deriveStore(raw rawEnv, bad func(variable, format string, args ...any)) StoreKind {
	var set []string
	for i, v := range []string{raw.RedisURL, raw.SentinelAddrs, raw.ClusterAddrs} {
		if v != "" {
			set = append(set, redisAddrVars[i])
		}
	}
	if len(set) > 1 {
		bad(strings.Join(set, ", "), "at most one of these may be set")
	}
	switch s := StoreKind(raw.Store); {
	case s == "" && len(set) > 0:
		return StoreRedis
	case s == "":
		return StoreBolt
	case s == StoreEtcd:
		if len(set) > 0 {
			bad("FENCE_STORE", "etcd contradicts %s", strings.Join(set, ", "))
		}
		return s
	case s == StoreRedis:
		if len(set) == 0 {
			bad("FENCE_STORE", "redis needs one of %s", strings.Join(redisAddrVars, ", "))
		}
		return s
	case s == StoreBolt || s == StoreMemory:
		if len(set) > 0 {
			bad("FENCE_STORE", "%q contradicts %s (unset it, or use FENCE_STORE=redis)", raw.Store, strings.Join(set, ", "))
		}
		return s
	default:
		bad("FENCE_STORE", "%q must be redis, etcd, bolt or memory", raw.Store)
		return ""
	}
}

// parseEtcd reads the FENCE_ETCD_* variables: FENCE_ETCD_ENDPOINTS is
// required with FENCE_STORE=etcd, and none of them is allowed without it
// (a half-configured store would quietly be another one).
func parseEtcd(raw rawEnv, store StoreKind, bad func(variable, format string, args ...any)) Etcd {
	e := Etcd{Username: raw.EtcdUsername, Password: raw.EtcdPassword,
		CAFile: raw.EtcdCAFile, CertFile: raw.EtcdCertFile, KeyFile: raw.EtcdKeyFile}
	if store != StoreEtcd {
		for name, v := range map[string]string{"FENCE_ETCD_ENDPOINTS": raw.EtcdEndpoints, "FENCE_ETCD_USERNAME": raw.EtcdUsername,
			"FENCE_ETCD_PASSWORD": raw.EtcdPassword, "FENCE_ETCD_TLS_CA_FILE": raw.EtcdCAFile,
			"FENCE_ETCD_TLS_CERT_FILE": raw.EtcdCertFile, "FENCE_ETCD_TLS_KEY_FILE": raw.EtcdKeyFile} {
			if v != "" {
				bad(name, "set, but FENCE_STORE is not etcd")
			}
		}
		return Etcd{}
	}
	for _, ep := range strings.Split(raw.EtcdEndpoints, ",") {
		if ep = strings.TrimSpace(ep); ep != "" {
			e.Endpoints = append(e.Endpoints, ep)
		}
	}
	if len(e.Endpoints) == 0 {
		bad("FENCE_STORE", "etcd needs FENCE_ETCD_ENDPOINTS (a comma list of host:port or http(s)://host:port)")
	}
	if e.Password != "" && e.Username == "" {
		bad("FENCE_ETCD_PASSWORD", "set without FENCE_ETCD_USERNAME")
	}
	if (e.CertFile == "") != (e.KeyFile == "") {
		bad("FENCE_ETCD_TLS_CERT_FILE", "FENCE_ETCD_TLS_CERT_FILE and FENCE_ETCD_TLS_KEY_FILE go together")
	}
	return e
}

// checkRedisURL checks the form of FENCE_REDIS_URL; redis.ParseURL reads it
// later. Messages never show the URL: it may carry a password.
func checkRedisURL(raw string, bad func(variable, format string, args ...any)) {
	const name = "FENCE_REDIS_URL"
	u, err := url.Parse(raw)
	if err != nil {
		bad(name, "not a valid URL (want redis://[user:pass@]host:port/db or rediss://...)")
		return
	}
	if u.Scheme != "redis" && u.Scheme != "rediss" {
		bad(name, "scheme must be redis or rediss (want redis://[user:pass@]host:port/db)")
		return
	}
	if u.Hostname() == "" {
		bad(name, "has no host (want redis://[user:pass@]host:port/db)")
	}
	if db := strings.TrimPrefix(u.Path, "/"); db != "" {
		if _, err := strconv.ParseUint(db, 10, 31); err != nil {
			bad(name, "the path must be a database number (/0, /1, ...)")
		}
	}
	if u.Fragment != "" {
		bad(name, "may not have a fragment")
	}
}

// parseAddrList parses a comma list of host:port addresses.
func parseAddrList(variable, v string, bad func(variable, format string, args ...any)) []string {
	if v == "" {
		return nil
	}
	var addrs []string
	for i, a := range strings.Split(v, ",") {
		a = strings.TrimSpace(a)
		if a == "" {
			bad(variable, "entry %d is empty", i+1)
			continue
		}
		host, port, err := net.SplitHostPort(a)
		if err != nil || host == "" {
			bad(variable, "entry %d %s is not host:port", i+1, shown(a))
			continue
		}
		if p, err := strconv.ParseUint(port, 10, 16); err != nil || p == 0 {
			bad(variable, "entry %d %s: port must be a number from 1 to 65535", i+1, shown(a))
			continue
		}
		addrs = append(addrs, a)
	}
	return addrs
}

// checkCAFile checks that path is a readable bundle of PEM certificates.
func checkCAFile(path string) error {
	data, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	if !x509.NewCertPool().AppendCertsFromPEM(data) {
		return fmt.Errorf("%q holds no PEM certificate", path)
	}
	return nil
}

// checkKeyPrefix refuses a key prefix under which a resource name could
// spell a key the store keeps for something else than a mark. A mark's key
// is the prefix and the resource name; the identity record is the prefix
// itself (no resource name is empty), and every other key (the generation,
// in-flight records, a Cluster's per-slot identity records) begins with
// '{'. So a prefix that is empty or begins with '{' is the one that lets a
// name through: with "{fence}:" the resource "{42}:inflight:{fence}:orders/{42}"
// would be the in-flight key of another.
func checkKeyPrefix(p string) error {
	switch {
	case p == "":
		return errors.New("must not be empty: a resource name could then spell a key the store keeps beside the marks " +
			"(the generation, the in-flight records), all of which begin with '{'")
	case p[0] == '{':
		return fmt.Errorf("%q begins with '{', as every key the store keeps beside the marks does (the generation, the in-flight records), "+
			"so a resource name could spell one; begin the prefix with another character (a hash tag may follow it: %q)", p, "fence"+p)
	}
	return nil
}
