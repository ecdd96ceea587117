package config

import (
	"fmt"
	"net/url"
	"time"

	"go.uber.org/zap/zapcore"
)

// StoreKind names the admission store implementation.
type StoreKind string

// The stores FENCE_STORE accepts.
const (
	StoreRedis  StoreKind = "redis"
	StoreBolt   StoreKind = "bolt"
	StoreMemory StoreKind = "memory"
	StoreEtcd   StoreKind = "etcd"
)

// Config is fenceproxy's validated configuration: the environment plus the
// routes file. A Config returned by Load is complete; nothing downstream needs
// to check it again.
type Config struct {
	UpstreamURL     *url.URL      // FENCE_UPSTREAM_URL (http or https, with a host); nil from LoadAuthz
	ListenAddr      string        // FENCE_LISTEN_ADDR
	AdminAddr       string        // FENCE_ADMIN_ADDR
	Store           StoreKind     // FENCE_STORE, or derived from the Redis variables
	BoltPath        string        // FENCE_BOLT_PATH
	RoutesFile      string        // FENCE_ROUTES_FILE ("" = default rule only)
	TokenHeader     string        // FENCE_TOKEN_HEADER, in canonical MIME form
	SequenceHeader  string        // FENCE_SEQUENCE_HEADER, in canonical MIME form; never the token header
	KeyPrefix       string        // FENCE_KEY_PREFIX
	StoreTimeout    time.Duration // FENCE_STORE_TIMEOUT (> 0)
	ShutdownTimeout time.Duration // FENCE_SHUTDOWN_TIMEOUT (> 0): bound on draining at SIGTERM
	LogLevel        zapcore.Level // FENCE_LOG_LEVEL
	AdminPprof      bool          // FENCE_ADMIN_PPROF: serve net/http/pprof on the admin port
	// ReadyRequiresStore (FENCE_READY_REQUIRES_STORE): /readyz fails while
	// the store is not ok. False by default: the store's trouble refuses
	// fenced requests only, and the replica stays in its Service.
	ReadyRequiresStore bool
	BodyTimeout        time.Duration // FENCE_BODY_TIMEOUT (> 0): bound on reading one request body from the client
	UpstreamTimeout    time.Duration // FENCE_UPSTREAM_TIMEOUT (> 0): bound on a fenced request from admission to the end of its response
	Drain              bool          // FENCE_DRAIN (on): the drain barrier, for every fenced route without drain: false
	MarkCache          int           // FENCE_MARK_CACHE (>= 0): resources whose greatest seen mark a replica remembers, to heal a store that lost it
	StoreInitAuto      bool          // FENCE_STORE_INIT=auto: the first replica on a store with no marks and no identity record writes one
	DrainTimeout       time.Duration // FENCE_DRAIN_TIMEOUT: bound on one wait at the barrier; 0 (unset) waits until the older requests end or reach their deadlines
	TokenKeysFile      string        // FENCE_TOKEN_KEYS_FILE: a JWK Set; set, every fenced request's token is a JWS of its keys ("" = plain tokens). Read by the caller, not by Load.
	TokenLeeway        time.Duration // FENCE_TOKEN_LEEWAY (0s-1h): clock skew allowed for a signed token's exp and nbf
	// MethodOverrideHeaders (FENCE_METHOD_OVERRIDE_HEADERS) are request
	// headers read as the method besides the three every framework knows,
	// in canonical form; nil: none.
	MethodOverrideHeaders []string
	Redis                 Redis
	Etcd                  Etcd
	Authz                 Authz  // read only by LoadAuthz
	Routes                Routes // from RoutesFile, or DefaultRoutes()
}

// Authz is the authorization mode's configuration (fenceproxy authz).
type Authz struct {
	// Mode is set by LoadAuthz: fenceproxy serves the authorization mode.
	Mode bool
	// PathPrefix (FENCE_AUTHZ_PATH_PREFIX) is removed from a question's own
	// path when no header names the original URI (Envoy's HTTP ext_authz
	// path_prefix); "" removes nothing.
	PathPrefix string
	// GRPCAddr (FENCE_AUTHZ_GRPC_ADDR) is the listener of Envoy's gRPC
	// Authorization/Check; "" is off.
	GRPCAddr string
}

// Etcd is the etcd connection configuration, set when Config.Store is
// StoreEtcd.
type Etcd struct {
	Endpoints []string // FENCE_ETCD_ENDPOINTS
	Username  string   // FENCE_ETCD_USERNAME
	Password  string   // FENCE_ETCD_PASSWORD
	CAFile    string   // FENCE_ETCD_TLS_CA_FILE
	CertFile  string   // FENCE_ETCD_TLS_CERT_FILE
	KeyFile   string   // FENCE_ETCD_TLS_KEY_FILE
}

// Redis is the Redis connection configuration; exactly one of URL,
// SentinelAddrs and ClusterAddrs is set when Config.Store is StoreRedis.
type Redis struct {
	URL           string        // FENCE_REDIS_URL
	SentinelAddrs []string      // FENCE_REDIS_SENTINEL_ADDRS
	MasterName    string        // FENCE_REDIS_MASTER_NAME
	ClusterAddrs  []string      // FENCE_REDIS_CLUSTER_ADDRS
	Username      string        // FENCE_REDIS_USERNAME
	Password      string        // FENCE_REDIS_PASSWORD
	TLSCAFile     string        // FENCE_REDIS_TLS_CA_FILE
	MinReplicas   int           // FENCE_REDIS_MIN_REPLICAS (>= 0)
	WaitTimeout   time.Duration // FENCE_REDIS_WAIT_TIMEOUT (> 0)
	Eviction      Eviction      // FENCE_REDIS_EVICTION
	Persistence   Persistence   // FENCE_REDIS_PERSISTENCE
	Settings      RedisSettings // FENCE_REDIS_SETTINGS: as the operator states them, for a server that refuses CONFIG GET
}

// Eviction says what to do when Redis could evict marks (maxmemory-policy).
type Eviction string

// The FENCE_REDIS_EVICTION values.
const (
	EvictionRefuse Eviction = "refuse"
	EvictionWarn   Eviction = "warn"
	EvictionOff    Eviction = "off"
)

// Persistence says what to do when Redis does not persist every write before
// answering (appendonly no, or appendfsync other than always).
type Persistence string

// The FENCE_REDIS_PERSISTENCE values.
const (
	PersistenceWarn   Persistence = "warn"
	PersistenceRefuse Persistence = "refuse"
	PersistenceOff    Persistence = "off"
)

// Routes is the route table: the routes in file order and the rule for a
// request that matches none of them.
type Routes struct {
	Routes  []Route
	Default Route
}

// Compare is a route's comparison, spelled as in the routes file.
type Compare string

// The comparisons a route may name.
const (
	CompareAtLeast Compare = ">="
	CompareGreater Compare = ">"
)

// Route is one validated entry of the routes file (or the default rule, whose
// Path is empty and whose Name is "default").
type Route struct {
	Name    string
	Methods []string // upper case, no duplicates; the methods this route fences
	Path    string   // chi pattern as written; "" for the default rule
	// Pattern is Path as the router registers it: {name:uint} as {name}, and
	// for a case-insensitive route its literal text folded (FoldPath).
	Pattern string
	// UintParams are the path parameters typed {name:uint}: the proxy
	// refuses a request whose segment is not a canonical unsigned integer.
	UintParams []string
	// CaseInsensitive routes are matched against the folded request path
	// (FoldPath), so their path parameters, and with them the resource
	// name, are folded too.
	CaseInsensitive bool
	// Fence is false for a route that forwards with no check; the fields below
	// are then zero.
	Fence    bool
	Resource Template
	Compare  Compare
	// TokenOptional forwards a request without a token unfenced; when false
	// such a request gets 428.
	TokenOptional bool
	// Sequence says whether the requests of one token are ordered by a
	// sequence (the FENCE_SEQUENCE_HEADER header). The zero value is
	// SequenceOff, also for an unfenced route.
	Sequence Sequence
	// NoDrain opts a fenced route out of the drain barrier (drain: false):
	// its requests neither wait for older ones nor hold newer ones back.
	NoDrain bool
	// DryRun (enforce: false) makes every decision, counts and logs it, and
	// forwards every request: a refusal is counted as would_<decision> and
	// not sent. Admissions still move the mark, and only forward.
	DryRun bool
}

// Sequence is a route's sequence key: whether the resource's mark is the
// pair (token, sequence), so that the requests of one lease are admitted in
// order.
type Sequence uint8

// The values of the sequence key.
const (
	// SequenceOff (the default): requests are admitted by token alone under
	// the route's Compare; a sequence header is not read.
	SequenceOff Sequence = iota
	// SequenceRequired: every fenced request carries a sequence; one without
	// gets 428.
	SequenceRequired
	// SequenceOptional: a request with a sequence is admitted by the pair; one
	// without is admitted by token alone under the route's Compare.
	SequenceOptional
)

// String returns the routes-file spelling of s (off, required or optional).
func (s Sequence) String() string {
	switch s {
	case SequenceOff:
		return "off"
	case SequenceRequired:
		return "required"
	case SequenceOptional:
		return "optional"
	}
	return fmt.Sprintf("Sequence(%d)", uint8(s))
}

// Template is a parsed resource template such as "orders/{orderID}" or
// "tenants/{header:X-Tenant}/jobs/{query:job}".
type Template struct {
	Raw   string // the template's canonical spelling (header names canonical); equal to String()
	Parts []Part // literal parts are never empty nor adjacent
}

// PartKind says what fills one part of a Template.
type PartKind uint8

// The kinds of template part.
const (
	PartLiteral PartKind = iota // Value is copied as is
	PartParam                   // Value names a path parameter ("*" for the wildcard)
	PartHeader                  // Value is a canonical MIME header key
	PartQuery                   // Value is a query parameter name
)

// Part is one piece of a Template.
type Part struct {
	Kind  PartKind
	Value string
}
