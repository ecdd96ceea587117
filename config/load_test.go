package config

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"io/fs"
	"math/big"
	"net/url"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"go.uber.org/zap/zapcore"
)

const upstream = "http://127.0.0.1:3000"

// withUpstream returns a valid environment: FENCE_UPSTREAM_URL plus kv.
func withUpstream(kv map[string]string) map[string]string {
	m := map[string]string{"FENCE_UPSTREAM_URL": upstream}
	for k, v := range kv {
		m[k] = v
	}
	return m
}

// problemLines returns the lines of err, failing the test if err is nil.
func problemLines(t *testing.T, err error) []string {
	t.Helper()
	if err == nil {
		t.Fatal("got no error")
	}
	return strings.Split(err.Error(), "\n")
}

// requireProblems fails unless every want is a substring of some line of err.
func requireProblems(t *testing.T, err error, wants ...string) {
	t.Helper()
	lines := problemLines(t, err)
	for _, want := range wants {
		found := false
		for _, l := range lines {
			if strings.Contains(l, want) {
				found = true
				break
			}
		}
		if !found {
			t.Errorf("no problem line contains %q; got:\n%v", want, err)
		}
	}
}

func TestLoadDefaults(t *testing.T) {
	for _, blank := range []bool{false, true} {
		name := "unset"
		env := withUpstream(nil)
		if blank { // a variable set to "" gets its default too
			name = "empty"
			for _, k := range []string{
				"FENCE_LISTEN_ADDR", "FENCE_ADMIN_ADDR", "FENCE_REDIS_URL", "FENCE_STORE", "FENCE_BOLT_PATH",
				"FENCE_ROUTES_FILE", "FENCE_TOKEN_HEADER", "FENCE_KEY_PREFIX", "FENCE_STORE_TIMEOUT",
				"FENCE_SHUTDOWN_TIMEOUT", "FENCE_LOG_LEVEL", "FENCE_REDIS_SENTINEL_ADDRS",
				"FENCE_REDIS_MASTER_NAME", "FENCE_REDIS_CLUSTER_ADDRS", "FENCE_REDIS_USERNAME",
				"FENCE_REDIS_PASSWORD", "FENCE_REDIS_TLS_CA_FILE", "FENCE_REDIS_MIN_REPLICAS",
				"FENCE_REDIS_WAIT_TIMEOUT", "FENCE_REDIS_EVICTION", "FENCE_REDIS_PERSISTENCE",
				"FENCE_BODY_TIMEOUT", "FENCE_SEQUENCE_HEADER",
			} {
				env[k] = ""
			}
		}
		t.Run(name, func(t *testing.T) {
			got, err := Load(env)
			if err != nil {
				t.Fatal(err)
			}
			want := &Config{
				UpstreamURL:     &url.URL{Scheme: "http", Host: "127.0.0.1:3000"},
				ListenAddr:      ":8080",
				AdminAddr:       ":9090",
				Store:           StoreBolt,
				BoltPath:        "fenceproxy.db",
				RoutesFile:      "",
				TokenHeader:     "Fencing-Token",
				SequenceHeader:  "Fencing-Sequence",
				KeyPrefix:       "fence:",
				StoreTimeout:    500 * time.Millisecond,
				ShutdownTimeout: 25 * time.Second,
				BodyTimeout:     60 * time.Second,
				UpstreamTimeout: 30 * time.Second,
				Drain:           true,
				StoreInitAuto:   true,
				MarkCache:       100000,
				TokenLeeway:     5 * time.Second,
				LogLevel:        zapcore.InfoLevel,
				Redis: Redis{
					MasterName:  "mymaster",
					MinReplicas: 0,
					WaitTimeout: 100 * time.Millisecond,
					Eviction:    EvictionRefuse,
					Persistence: PersistenceWarn,
				},
				Routes: DefaultRoutes(),
			}
			if !reflect.DeepEqual(got, want) {
				t.Errorf("got  %+v\nwant %+v", got, want)
			}
		})
	}
}

func TestDefaultRoutes(t *testing.T) {
	d := DefaultRoutes()
	want := Route{
		Name:     "default",
		Methods:  []string{"POST", "PUT", "PATCH", "DELETE"},
		Fence:    true,
		Resource: Template{Raw: "default", Parts: []Part{{Kind: PartLiteral, Value: "default"}}},
		Compare:  CompareAtLeast,
	}
	if len(d.Routes) != 0 || !reflect.DeepEqual(d.Default, want) {
		t.Fatalf("DefaultRoutes() = %+v", d)
	}
	d.Default.Methods[0] = "GET" // callers get their own copy
	if DefaultRoutes().Default.Methods[0] != "POST" {
		t.Fatal("DefaultRoutes shares its methods slice")
	}
}

func TestLoadValues(t *testing.T) {
	ca := writeCA(t)
	tests := []struct {
		name  string
		env   map[string]string
		check func(*Config) bool
	}{
		{"upstream with path", map[string]string{"FENCE_UPSTREAM_URL": "https://api.internal:8443/base"},
			func(c *Config) bool { return c.UpstreamURL.String() == "https://api.internal:8443/base" }},
		{"ready does not require the store by default", nil, func(c *Config) bool { return !c.ReadyRequiresStore }},
		{"ready requires the store", map[string]string{"FENCE_READY_REQUIRES_STORE": "true"}, func(c *Config) bool { return c.ReadyRequiresStore }},
		{"redis settings stated", map[string]string{"FENCE_REDIS_URL": "redis://r:6379",
			"FENCE_REDIS_SETTINGS": " appendfsync=always, maxmemory-policy=volatile-lru ,appendonly=yes"},
			func(c *Config) bool {
				return c.Redis.Settings == RedisSettings{MaxmemoryPolicy: "volatile-lru", AppendOnly: "yes", AppendFsync: "always"} &&
					c.Redis.Settings.String() == "maxmemory-policy=volatile-lru,appendonly=yes,appendfsync=always"
			}},
		{"redis settings unset", map[string]string{"FENCE_REDIS_URL": "redis://r:6379"},
			func(c *Config) bool { return !c.Redis.Settings.Stated() }},
		{"listen", map[string]string{"FENCE_LISTEN_ADDR": "127.0.0.1:8000"},
			func(c *Config) bool { return c.ListenAddr == "127.0.0.1:8000" }},
		{"admin ipv6", map[string]string{"FENCE_ADMIN_ADDR": "[::1]:9000"},
			func(c *Config) bool { return c.AdminAddr == "[::1]:9000" }},
		{"both on port 0", map[string]string{"FENCE_LISTEN_ADDR": ":0", "FENCE_ADMIN_ADDR": ":0"},
			func(c *Config) bool { return c.ListenAddr == ":0" && c.AdminAddr == ":0" }},
		{"same port, different hosts", map[string]string{"FENCE_LISTEN_ADDR": "10.0.0.1:8080", "FENCE_ADMIN_ADDR": "127.0.0.1:8080"},
			func(c *Config) bool { return c.AdminAddr == "127.0.0.1:8080" }},
		{"etcd", map[string]string{"FENCE_STORE": "etcd", "FENCE_ETCD_ENDPOINTS": " 127.0.0.1:2379, https://e2:2379 ", "FENCE_ETCD_USERNAME": "fence", "FENCE_ETCD_PASSWORD": "pw"},
			func(c *Config) bool {
				return c.Store == StoreEtcd && len(c.Etcd.Endpoints) == 2 && c.Etcd.Endpoints[1] == "https://e2:2379" && c.Etcd.Username == "fence"
			}},
		{"store init manual", map[string]string{"FENCE_STORE_INIT": "manual"},
			func(c *Config) bool { return !c.StoreInitAuto }},
		{"drain off", map[string]string{"FENCE_DRAIN": "off"},
			func(c *Config) bool { return !c.Drain && c.DrainTimeout == 0 }},
		{"drain timeout and upstream timeout", map[string]string{"FENCE_DRAIN_TIMEOUT": "2s", "FENCE_UPSTREAM_TIMEOUT": "1m"},
			func(c *Config) bool {
				return c.Drain && c.DrainTimeout == 2*time.Second && c.UpstreamTimeout == time.Minute
			}},
		{"memory", map[string]string{"FENCE_STORE": "memory"},
			func(c *Config) bool { return c.Store == StoreMemory }},
		{"bolt path", map[string]string{"FENCE_BOLT_PATH": "/var/lib/fence/marks.db"},
			func(c *Config) bool { return c.BoltPath == "/var/lib/fence/marks.db" }},
		{"method override headers", map[string]string{"FENCE_METHOD_OVERRIDE_HEADERS": " x-verb , X-HTTP-Method-Override,X-Tunnel-Method"},
			func(c *Config) bool {
				return slices.Equal(c.MethodOverrideHeaders, []string{"X-Verb", "X-Tunnel-Method"})
			}},
		{"no method override headers", map[string]string{},
			func(c *Config) bool { return c.MethodOverrideHeaders == nil }},
		{"token header canonical", map[string]string{"FENCE_TOKEN_HEADER": "x-fence-token"},
			func(c *Config) bool { return c.TokenHeader == "X-Fence-Token" }},
		{"sequence header canonical", map[string]string{"FENCE_SEQUENCE_HEADER": "x-fence-seq"},
			func(c *Config) bool { return c.SequenceHeader == "X-Fence-Seq" }},
		{"sequence header may be Fencing-Token once the token moved", map[string]string{"FENCE_TOKEN_HEADER": "X-Token", "FENCE_SEQUENCE_HEADER": "fencing-token"},
			func(c *Config) bool { return c.TokenHeader == "X-Token" && c.SequenceHeader == "Fencing-Token" }},
		{"key prefix", map[string]string{"FENCE_KEY_PREFIX": "app1:fence:"},
			func(c *Config) bool { return c.KeyPrefix == "app1:fence:" }},
		{"store timeout", map[string]string{"FENCE_STORE_TIMEOUT": "2s"},
			func(c *Config) bool { return c.StoreTimeout == 2*time.Second }},
		{"shutdown timeout", map[string]string{"FENCE_SHUTDOWN_TIMEOUT": "1m"},
			func(c *Config) bool { return c.ShutdownTimeout == time.Minute }},
		{"log level", map[string]string{"FENCE_LOG_LEVEL": "debug"},
			func(c *Config) bool { return c.LogLevel == zapcore.DebugLevel }},
		{"log level upper case", map[string]string{"FENCE_LOG_LEVEL": "WARN"},
			func(c *Config) bool { return c.LogLevel == zapcore.WarnLevel }},
		{"redis url", map[string]string{"FENCE_REDIS_URL": "rediss://u:secret@redis:6380/2"},
			func(c *Config) bool { return c.Store == StoreRedis && c.Redis.URL == "rediss://u:secret@redis:6380/2" }},
		{"sentinel", map[string]string{
			"FENCE_REDIS_SENTINEL_ADDRS": " s1:26379, s2:26379 ,s3:26379", "FENCE_REDIS_MASTER_NAME": "fence",
			"FENCE_REDIS_USERNAME": "proxy", "FENCE_REDIS_PASSWORD": "pw",
		}, func(c *Config) bool {
			return c.Store == StoreRedis && reflect.DeepEqual(c.Redis.SentinelAddrs, []string{"s1:26379", "s2:26379", "s3:26379"}) &&
				c.Redis.MasterName == "fence" && c.Redis.Username == "proxy" && c.Redis.Password == "pw"
		}},
		{"cluster", map[string]string{"FENCE_REDIS_CLUSTER_ADDRS": "n1:7000,[fd00::1]:7001"},
			func(c *Config) bool {
				return c.Store == StoreRedis && reflect.DeepEqual(c.Redis.ClusterAddrs, []string{"n1:7000", "[fd00::1]:7001"})
			}},
		{"replicas and wait", map[string]string{"FENCE_REDIS_URL": "redis://r:6379", "FENCE_REDIS_MIN_REPLICAS": "2", "FENCE_REDIS_WAIT_TIMEOUT": "250ms"},
			func(c *Config) bool { return c.Redis.MinReplicas == 2 && c.Redis.WaitTimeout == 250*time.Millisecond }},
		{"eviction", map[string]string{"FENCE_REDIS_EVICTION": "warn"},
			func(c *Config) bool { return c.Redis.Eviction == EvictionWarn }},
		{"tls ca", map[string]string{"FENCE_REDIS_URL": "redis://r:6379", "FENCE_REDIS_TLS_CA_FILE": ca},
			func(c *Config) bool { return c.Redis.TLSCAFile == ca }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			env := withUpstream(nil)
			for k, v := range tt.env {
				env[k] = v
			}
			c, err := Load(env)
			if err != nil {
				t.Fatal(err)
			}
			if !tt.check(c) {
				t.Errorf("unexpected config: %+v", c)
			}
		})
	}
}

func TestLoadInvalid(t *testing.T) {
	dir := t.TempDir()
	notPEM := filepath.Join(dir, "ca.txt")
	if err := os.WriteFile(notPEM, []byte("not a certificate"), 0o600); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name string
		env  map[string]string // added to a valid environment
		want string            // a substring of the one expected problem
	}{
		{"upstream missing", map[string]string{"FENCE_UPSTREAM_URL": ""}, "FENCE_UPSTREAM_URL: required"},
		{"key prefix a hash tag first", map[string]string{"FENCE_KEY_PREFIX": "{fence}:"}, `FENCE_KEY_PREFIX: "{fence}:" begins with '{'`},
		{"key prefix a brace first", map[string]string{"FENCE_KEY_PREFIX": "{"}, `FENCE_KEY_PREFIX: "{" begins with '{'`},
		{"drain not on or off", map[string]string{"FENCE_DRAIN": "true"}, `FENCE_DRAIN: "true" must be on or off`},
		{"override header not a name", map[string]string{"FENCE_METHOD_OVERRIDE_HEADERS": "X Verb"}, `FENCE_METHOD_OVERRIDE_HEADERS: "X Verb" is not a valid HTTP header name`},
		{"override header hop-by-hop", map[string]string{"FENCE_METHOD_OVERRIDE_HEADERS": "Connection"}, `FENCE_METHOD_OVERRIDE_HEADERS: "Connection" is a hop-by-hop`},
		{"override header is the token's", map[string]string{"FENCE_METHOD_OVERRIDE_HEADERS": "fencing-token"}, `FENCE_METHOD_OVERRIDE_HEADERS: "fencing-token" is the token or the sequence header`},
		{"token header stripped", map[string]string{"FENCE_TOKEN_HEADER": "Fence-Decision"}, `FENCE_TOKEN_HEADER: "Fence-Decision" is removed from every request`},
		{"override header stripped", map[string]string{"FENCE_METHOD_OVERRIDE_HEADERS": "X-Rewrite-URL"}, `FENCE_METHOD_OVERRIDE_HEADERS: "X-Rewrite-URL" is removed from every request`},
		{"override header twice", map[string]string{"FENCE_METHOD_OVERRIDE_HEADERS": "X-Verb,x-verb"}, `FENCE_METHOD_OVERRIDE_HEADERS: "x-verb" is listed twice`},
		{"mark cache negative", map[string]string{"FENCE_MARK_CACHE": "-1"}, `FENCE_MARK_CACHE: "-1" must be a whole number`},
		{"token leeway negative", map[string]string{"FENCE_TOKEN_LEEWAY": "-1s"}, `FENCE_TOKEN_LEEWAY: "-1s" must be a duration from 0s to 1h`},
		{"token leeway not a duration", map[string]string{"FENCE_TOKEN_LEEWAY": "5"}, `FENCE_TOKEN_LEEWAY: "5" must be a duration`},
		{"store init neither auto nor manual", map[string]string{"FENCE_STORE_INIT": "yes"}, `FENCE_STORE_INIT: "yes" must be auto or manual`},
		{"drain timeout zero", map[string]string{"FENCE_DRAIN_TIMEOUT": "0s"}, `FENCE_DRAIN_TIMEOUT: "0s" must be greater than 0`},
		{"drain timeout not a duration", map[string]string{"FENCE_DRAIN_TIMEOUT": "5"}, `FENCE_DRAIN_TIMEOUT: "5" is not a duration`},
		{"upstream timeout negative", map[string]string{"FENCE_UPSTREAM_TIMEOUT": "-1s"}, `FENCE_UPSTREAM_TIMEOUT: "-1s" must be greater than 0`},
		{"upstream not a URL", map[string]string{"FENCE_UPSTREAM_URL": "http://a b:80"}, "FENCE_UPSTREAM_URL: not a URL"},
		{"upstream scheme", map[string]string{"FENCE_UPSTREAM_URL": "ftp://files:21"}, `FENCE_UPSTREAM_URL: "ftp://files:21" must use scheme http or https`},
		{"upstream without scheme", map[string]string{"FENCE_UPSTREAM_URL": "127.0.0.1:3000"}, "FENCE_UPSTREAM_URL: needs a scheme: http://127.0.0.1:3000"},
		{"upstream host without scheme", map[string]string{"FENCE_UPSTREAM_URL": "localhost:3000"}, "FENCE_UPSTREAM_URL: needs a scheme: http://localhost:3000"},
		{"upstream user without scheme", map[string]string{"FENCE_UPSTREAM_URL": "u:secret@app:3000"}, "FENCE_UPSTREAM_URL: the value (not shown: it may hold a password) needs a scheme"},
		{"ready requires store not a boolean", map[string]string{"FENCE_READY_REQUIRES_STORE": "yes please"}, `FENCE_READY_REQUIRES_STORE: "yes please" is not a boolean`},
		{"redis settings not name=value", map[string]string{"FENCE_REDIS_URL": "redis://r:6379", "FENCE_REDIS_SETTINGS": "noeviction"}, `FENCE_REDIS_SETTINGS: entry 1 "noeviction" is not name=value`},
		{"redis settings unknown name", map[string]string{"FENCE_REDIS_URL": "redis://r:6379", "FENCE_REDIS_SETTINGS": "maxmemory=0"}, `FENCE_REDIS_SETTINGS: entry 1: "maxmemory" is not a setting fenceproxy judges`},
		{"redis settings bad value", map[string]string{"FENCE_REDIS_URL": "redis://r:6379", "FENCE_REDIS_SETTINGS": "appendfsync=sometimes,appendonly=no"}, `FENCE_REDIS_SETTINGS: appendfsync="sometimes" must be one of always, everysec, no`},
		{"redis settings twice", map[string]string{"FENCE_REDIS_URL": "redis://r:6379", "FENCE_REDIS_SETTINGS": "appendonly=no,appendonly=no"}, "FENCE_REDIS_SETTINGS: appendonly is stated twice"},
		{"redis settings appendonly without fsync", map[string]string{"FENCE_REDIS_URL": "redis://r:6379", "FENCE_REDIS_SETTINGS": "appendonly=yes"}, "FENCE_REDIS_SETTINGS: appendonly=yes needs appendfsync too"},
		{"redis settings without redis", map[string]string{"FENCE_REDIS_SETTINGS": "appendonly=no"}, "FENCE_REDIS_SETTINGS: set, but the store is not Redis"},
		{"upstream no host", map[string]string{"FENCE_UPSTREAM_URL": "http:///x"}, "FENCE_UPSTREAM_URL: \"http:///x\" has no host"},
		{"upstream query", map[string]string{"FENCE_UPSTREAM_URL": "http://a:1/?x=1"}, "may not have a query"},
		{"upstream empty query", map[string]string{"FENCE_UPSTREAM_URL": "http://a:1/?"}, "may not have a query"},
		{"upstream fragment", map[string]string{"FENCE_UPSTREAM_URL": "http://a:1/#f"}, "may not have a fragment"},
		{"upstream user", map[string]string{"FENCE_UPSTREAM_URL": "http://u:p@a:1/"}, "FENCE_UPSTREAM_URL: the value (not shown: it may hold a password) may not carry user information"},
		{"listen not host:port", map[string]string{"FENCE_LISTEN_ADDR": "8080"}, `FENCE_LISTEN_ADDR: "8080" is not host:port`},
		{"listen bad port", map[string]string{"FENCE_LISTEN_ADDR": ":http"}, `FENCE_LISTEN_ADDR: ":http": port must be a number`},
		{"listen port too big", map[string]string{"FENCE_LISTEN_ADDR": ":70000"}, `FENCE_LISTEN_ADDR: ":70000": port must be a number`},
		{"admin empty port", map[string]string{"FENCE_ADMIN_ADDR": "localhost:"}, `FENCE_ADMIN_ADDR: "localhost:": port must be a number`},
		{"admin equals listen", map[string]string{"FENCE_ADMIN_ADDR": ":8080"}, `FENCE_ADMIN_ADDR: ":8080" must differ from FENCE_LISTEN_ADDR (":8080")`},
		{"admin overlaps listen", map[string]string{"FENCE_LISTEN_ADDR": "0.0.0.0:7000", "FENCE_ADMIN_ADDR": "127.0.0.1:7000"}, "FENCE_ADMIN_ADDR: \"127.0.0.1:7000\" must differ"},
		{"store unknown", map[string]string{"FENCE_STORE": "zookeeper"}, `FENCE_STORE: "zookeeper" must be redis, etcd, bolt or memory`},
		{"etcd without endpoints", map[string]string{"FENCE_STORE": "etcd"}, `FENCE_STORE: etcd needs FENCE_ETCD_ENDPOINTS`},
		{"etcd variable without etcd", map[string]string{"FENCE_ETCD_ENDPOINTS": "127.0.0.1:2379"}, `FENCE_ETCD_ENDPOINTS: set, but FENCE_STORE is not etcd`},
		{"etcd password without user", map[string]string{"FENCE_STORE": "etcd", "FENCE_ETCD_ENDPOINTS": "a:1", "FENCE_ETCD_PASSWORD": "x"}, `FENCE_ETCD_PASSWORD: set without FENCE_ETCD_USERNAME`},
		{"etcd cert without key", map[string]string{"FENCE_STORE": "etcd", "FENCE_ETCD_ENDPOINTS": "a:1", "FENCE_ETCD_TLS_CERT_FILE": "c.pem"}, `go together`},
		{"store case", map[string]string{"FENCE_STORE": "Redis", "FENCE_REDIS_URL": "redis://r:6379"}, `FENCE_STORE: "Redis" must be`},
		{"token header invalid", map[string]string{"FENCE_TOKEN_HEADER": "Fencing Token"}, `FENCE_TOKEN_HEADER: "Fencing Token" is not a valid HTTP header name`},
		{"token header colon", map[string]string{"FENCE_TOKEN_HEADER": "Fencing:Token"}, `FENCE_TOKEN_HEADER: "Fencing:Token" is not a valid`},
		{"token header hop-by-hop", map[string]string{"FENCE_TOKEN_HEADER": "connection"}, `FENCE_TOKEN_HEADER: "connection" is a hop-by-hop or framing header`},
		{"token header TE", map[string]string{"FENCE_TOKEN_HEADER": "TE"}, `FENCE_TOKEN_HEADER: "TE" is a hop-by-hop`},
		{"token header content-length", map[string]string{"FENCE_TOKEN_HEADER": "Content-Length"}, "FENCE_TOKEN_HEADER:"},
		{"token header host", map[string]string{"FENCE_TOKEN_HEADER": "host"}, "FENCE_TOKEN_HEADER:"},
		{"token header proxy-authorization", map[string]string{"FENCE_TOKEN_HEADER": "Proxy-Authorization"}, "FENCE_TOKEN_HEADER:"},
		{"sequence header invalid", map[string]string{"FENCE_SEQUENCE_HEADER": "Fencing Sequence"}, `FENCE_SEQUENCE_HEADER: "Fencing Sequence" is not a valid HTTP header name`},
		{"sequence header hop-by-hop", map[string]string{"FENCE_SEQUENCE_HEADER": "keep-alive"}, `FENCE_SEQUENCE_HEADER: "keep-alive" is a hop-by-hop or framing header`},
		{"sequence header framing", map[string]string{"FENCE_SEQUENCE_HEADER": "Transfer-Encoding"}, `FENCE_SEQUENCE_HEADER: "Transfer-Encoding" is a hop-by-hop or framing header`},
		{"sequence header is the token header", map[string]string{"FENCE_SEQUENCE_HEADER": "fencing-token"},
			`FENCE_SEQUENCE_HEADER: "fencing-token" is the token header (FENCE_TOKEN_HEADER); the sequence needs a header of its own`},
		{"sequence header is a custom token header", map[string]string{"FENCE_TOKEN_HEADER": "X-Lease", "FENCE_SEQUENCE_HEADER": "x-lease"},
			`FENCE_SEQUENCE_HEADER: "x-lease" is the token header (FENCE_TOKEN_HEADER)`},
		{"store timeout not a duration", map[string]string{"FENCE_STORE_TIMEOUT": "abc"}, `FENCE_STORE_TIMEOUT: "abc" is not a duration`},
		{"store timeout unitless", map[string]string{"FENCE_STORE_TIMEOUT": "500"}, `FENCE_STORE_TIMEOUT: "500" is not a duration`},
		{"store timeout zero", map[string]string{"FENCE_STORE_TIMEOUT": "0s"}, `FENCE_STORE_TIMEOUT: "0s" must be greater than 0`},
		{"shutdown timeout negative", map[string]string{"FENCE_SHUTDOWN_TIMEOUT": "-1s"}, `FENCE_SHUTDOWN_TIMEOUT: "-1s" must be greater than 0`},
		{"wait timeout", map[string]string{"FENCE_REDIS_WAIT_TIMEOUT": "soon"}, `FENCE_REDIS_WAIT_TIMEOUT: "soon" is not a duration`},
		{"log level", map[string]string{"FENCE_LOG_LEVEL": "verbose"}, `FENCE_LOG_LEVEL: "verbose" is not a level`},
		{"min replicas negative", map[string]string{"FENCE_REDIS_MIN_REPLICAS": "-1"}, `FENCE_REDIS_MIN_REPLICAS: "-1" is not an integer >= 0`},
		{"min replicas text", map[string]string{"FENCE_REDIS_MIN_REPLICAS": "two"}, `FENCE_REDIS_MIN_REPLICAS: "two" is not an integer >= 0`},
		{"wait timeout not below store timeout", map[string]string{"FENCE_REDIS_MIN_REPLICAS": "1", "FENCE_REDIS_WAIT_TIMEOUT": "500ms"},
			"FENCE_REDIS_WAIT_TIMEOUT: 500ms must be below FENCE_STORE_TIMEOUT (500ms)"},
		{"eviction", map[string]string{"FENCE_REDIS_EVICTION": "allkeys-lru"}, `FENCE_REDIS_EVICTION: "allkeys-lru" must be refuse, warn or off`},
		{"master name blank", map[string]string{"FENCE_REDIS_MASTER_NAME": " "}, "FENCE_REDIS_MASTER_NAME: blank"},
		{"redis url scheme", map[string]string{"FENCE_REDIS_URL": "http://r:6379"}, "FENCE_REDIS_URL: scheme must be redis or rediss"},
		{"redis url unix", map[string]string{"FENCE_REDIS_URL": "unix:///tmp/redis.sock"}, "FENCE_REDIS_URL: scheme must be redis or rediss"},
		{"redis url no host", map[string]string{"FENCE_REDIS_URL": "redis:///0"}, "FENCE_REDIS_URL: has no host"},
		{"redis url bare address", map[string]string{"FENCE_REDIS_URL": "localhost:6379"}, "FENCE_REDIS_URL:"},
		{"redis url db", map[string]string{"FENCE_REDIS_URL": "redis://r:6379/zero"}, "FENCE_REDIS_URL: the path must be a database number"},
		{"redis url unparsable", map[string]string{"FENCE_REDIS_URL": "redis://r:port"}, "FENCE_REDIS_URL: not a valid URL"},
		{"redis url with credentials variables", map[string]string{"FENCE_REDIS_URL": "redis://r:6379", "FENCE_REDIS_USERNAME": "u"},
			"FENCE_REDIS_USERNAME, FENCE_REDIS_PASSWORD: only for sentinel or cluster"},
		{"sentinel empty entry", map[string]string{"FENCE_REDIS_SENTINEL_ADDRS": "s1:26379,,s2:26379"}, "FENCE_REDIS_SENTINEL_ADDRS: entry 2 is empty"},
		{"sentinel trailing comma", map[string]string{"FENCE_REDIS_SENTINEL_ADDRS": "s1:26379, "}, "FENCE_REDIS_SENTINEL_ADDRS: entry 2 is empty"},
		{"sentinel no port", map[string]string{"FENCE_REDIS_SENTINEL_ADDRS": "s1"}, `FENCE_REDIS_SENTINEL_ADDRS: entry 1 "s1" is not host:port`},
		{"cluster no host", map[string]string{"FENCE_REDIS_CLUSTER_ADDRS": ":7000"}, `FENCE_REDIS_CLUSTER_ADDRS: entry 1 ":7000" is not host:port`},
		{"cluster port 0", map[string]string{"FENCE_REDIS_CLUSTER_ADDRS": "n1:0"}, `FENCE_REDIS_CLUSTER_ADDRS: entry 1 "n1:0": port must be a number from 1 to 65535`},
		{"tls ca missing", map[string]string{"FENCE_REDIS_TLS_CA_FILE": filepath.Join(dir, "nope.pem")}, "FENCE_REDIS_TLS_CA_FILE: open " + filepath.Join(dir, "nope.pem")},
		{"tls ca not pem", map[string]string{"FENCE_REDIS_TLS_CA_FILE": notPEM}, "FENCE_REDIS_TLS_CA_FILE: \"" + notPEM + "\" holds no PEM certificate"},
		{"routes file missing", map[string]string{"FENCE_ROUTES_FILE": filepath.Join(dir, "routes.yaml")}, "FENCE_ROUTES_FILE: open " + filepath.Join(dir, "routes.yaml")},
		{"routes file is a directory", map[string]string{"FENCE_ROUTES_FILE": dir}, "FENCE_ROUTES_FILE: read " + dir},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, err := Load(withUpstream(tt.env))
			if c != nil {
				t.Errorf("got a config with an error")
			}
			lines := problemLines(t, err)
			if len(lines) != 1 {
				t.Errorf("want one problem, got:\n%v", err)
			}
			var variable string
			for k := range tt.env {
				if strings.Contains(lines[0], k+":") || strings.Contains(lines[0], k+",") {
					variable = k
				}
			}
			if variable == "" {
				t.Errorf("%q names none of the variables set", lines[0])
			}
			requireProblems(t, err, tt.want)
		})
	}
}

func TestLoadErrorsWrapCauses(t *testing.T) {
	_, err := Load(withUpstream(map[string]string{"FENCE_ROUTES_FILE": filepath.Join(t.TempDir(), "none.yaml")}))
	if !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("errors.Is(%v, fs.ErrNotExist) = false", err)
	}
}

func TestLoadReportsEveryProblem(t *testing.T) {
	env := map[string]string{
		"FENCE_LISTEN_ADDR":         "nowhere",
		"FENCE_STORE":               "bolt",
		"FENCE_REDIS_URL":           "redis://r:6379",
		"FENCE_REDIS_CLUSTER_ADDRS": "n1:7000",
		"FENCE_TOKEN_HEADER":        "Upgrade",
		"FENCE_STORE_TIMEOUT":       "abc",
		"FENCE_LOG_LEVEL":           "loud",
		"FENCE_REDIS_EVICTION":      "sometimes",
	}
	_, err := Load(env)
	wants := []string{
		"FENCE_UPSTREAM_URL: required",
		`FENCE_LISTEN_ADDR: "nowhere" is not host:port`,
		"FENCE_REDIS_URL, FENCE_REDIS_CLUSTER_ADDRS: at most one of these may be set",
		`FENCE_STORE: "bolt" contradicts FENCE_REDIS_URL, FENCE_REDIS_CLUSTER_ADDRS`,
		`FENCE_TOKEN_HEADER: "Upgrade" is a hop-by-hop`,
		`FENCE_STORE_TIMEOUT: "abc" is not a duration`,
		`FENCE_LOG_LEVEL: "loud" is not a level`,
		`FENCE_REDIS_EVICTION: "sometimes" must be`,
	}
	requireProblems(t, err, wants...)
	if lines := problemLines(t, err); len(lines) != len(wants) {
		t.Errorf("want %d problems, got %d:\n%v", len(wants), len(lines), err)
	}
}

func TestStoreDerivation(t *testing.T) {
	tests := []struct {
		name    string
		env     map[string]string
		want    StoreKind
		problem string // "" if valid
	}{
		{"nothing set", nil, StoreBolt, ""},
		{"url", map[string]string{"FENCE_REDIS_URL": "redis://r:6379"}, StoreRedis, ""},
		{"sentinel", map[string]string{"FENCE_REDIS_SENTINEL_ADDRS": "s:26379"}, StoreRedis, ""},
		{"cluster", map[string]string{"FENCE_REDIS_CLUSTER_ADDRS": "n:7000"}, StoreRedis, ""},
		{"explicit redis with url", map[string]string{"FENCE_STORE": "redis", "FENCE_REDIS_URL": "redis://r:6379"}, StoreRedis, ""},
		{"explicit bolt", map[string]string{"FENCE_STORE": "bolt"}, StoreBolt, ""},
		{"explicit memory", map[string]string{"FENCE_STORE": "memory"}, StoreMemory, ""},
		{"redis without address", map[string]string{"FENCE_STORE": "redis"}, "",
			"FENCE_STORE: redis needs one of FENCE_REDIS_URL, FENCE_REDIS_SENTINEL_ADDRS, FENCE_REDIS_CLUSTER_ADDRS"},
		{"bolt with url", map[string]string{"FENCE_STORE": "bolt", "FENCE_REDIS_URL": "redis://r:6379"}, "",
			`FENCE_STORE: "bolt" contradicts FENCE_REDIS_URL`},
		{"memory with sentinel", map[string]string{"FENCE_STORE": "memory", "FENCE_REDIS_SENTINEL_ADDRS": "s:26379"}, "",
			`FENCE_STORE: "memory" contradicts FENCE_REDIS_SENTINEL_ADDRS`},
		{"url and sentinel", map[string]string{"FENCE_REDIS_URL": "redis://r:6379", "FENCE_REDIS_SENTINEL_ADDRS": "s:26379"}, "",
			"FENCE_REDIS_URL, FENCE_REDIS_SENTINEL_ADDRS: at most one of these may be set"},
		{"sentinel and cluster", map[string]string{"FENCE_REDIS_SENTINEL_ADDRS": "s:26379", "FENCE_REDIS_CLUSTER_ADDRS": "n:7000"}, "",
			"FENCE_REDIS_SENTINEL_ADDRS, FENCE_REDIS_CLUSTER_ADDRS: at most one of these may be set"},
		{"all three", map[string]string{"FENCE_REDIS_URL": "redis://r:6379", "FENCE_REDIS_SENTINEL_ADDRS": "s:26379", "FENCE_REDIS_CLUSTER_ADDRS": "n:7000"}, "",
			"FENCE_REDIS_URL, FENCE_REDIS_SENTINEL_ADDRS, FENCE_REDIS_CLUSTER_ADDRS: at most one"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, err := Load(withUpstream(tt.env))
			if tt.problem != "" {
				requireProblems(t, err, tt.problem)
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if c.Store != tt.want {
				t.Errorf("Store = %q, want %q", c.Store, tt.want)
			}
		})
	}
}

func TestSecretsNeverShown(t *testing.T) {
	const secret = "s3cr3tPa55"
	envs := []map[string]string{
		{"FENCE_REDIS_URL": "http://u:" + secret + "@r:6379"},
		{"FENCE_REDIS_URL": "redis://u:" + secret + "@:6379"},
		{"FENCE_REDIS_URL": "redis://u:" + secret + "@r:port"},
		{"FENCE_REDIS_URL": "redis://u:" + secret + "%zz@r:6379"},
		{"FENCE_REDIS_URL": "redis://u:12/" + secret + "@r:6379"},
		{"FENCE_REDIS_URL": "redis://u:" + secret + "/x@r:6379"},
		{"FENCE_REDIS_URL": "redis://u:" + secret + "@r:6379/x#frag"},
		{"FENCE_REDIS_URL": "redis://u:" + secret + "@r:6379", "FENCE_REDIS_PASSWORD": secret},
		{"FENCE_REDIS_URL": "redis://u:" + secret + "@r:6379", "FENCE_STORE": "bolt", "FENCE_REDIS_CLUSTER_ADDRS": "n:1"},
		{"FENCE_REDIS_PASSWORD": secret, "FENCE_STORE": "redis"},
		{"FENCE_REDIS_PASSWORD": secret, "FENCE_REDIS_SENTINEL_ADDRS": "u:" + secret + "@s:26379"},
		{"FENCE_REDIS_CLUSTER_ADDRS": "n1:7000,u:" + secret + "@n2"},
		{"FENCE_UPSTREAM_URL": "http://u:" + secret + "@up:80"},
		{"FENCE_UPSTREAM_URL": "ftp://u:" + secret + "@up:80/?q#f"},
		{"FENCE_UPSTREAM_URL": "http://u:" + secret + "@up:port"},
		{"FENCE_UPSTREAM_URL": "http://u:" + secret + "%zz@up"},
		{"FENCE_UPSTREAM_URL": "http://u:12/" + secret + "@up?x"},
	}
	for i, kv := range envs {
		_, err := Load(withUpstream(kv))
		if err == nil {
			t.Errorf("case %d: no error", i)
			continue
		}
		if strings.Contains(err.Error(), secret) {
			t.Errorf("case %d: the password appears in:\n%v", i, err)
		}
	}
}

func TestLoadRoutesFile(t *testing.T) {
	dir := t.TempDir()
	good := filepath.Join(dir, "good.yaml")
	bad := filepath.Join(dir, "bad.yaml")
	write := func(path, text string) {
		if err := os.WriteFile(path, []byte(text), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	write(good, "routes:\n  - name: writes\n    path: /orders/{id}\n    resource: orders/{id}\n")
	write(bad, "routes:\n  - name: writes\n    path: /orders/{id}\n    resource: orders/{orderID}\n    compare: '=>'\n")

	c, err := Load(withUpstream(map[string]string{"FENCE_ROUTES_FILE": good}))
	if err != nil {
		t.Fatal(err)
	}
	if c.RoutesFile != good || len(c.Routes.Routes) != 1 || c.Routes.Routes[0].Resource.Raw != "orders/{id}" ||
		!reflect.DeepEqual(c.Routes.Default, DefaultRoutes().Default) {
		t.Errorf("unexpected routes: %+v", c.Routes)
	}

	_, err = Load(withUpstream(map[string]string{"FENCE_ROUTES_FILE": bad, "FENCE_LOG_LEVEL": "x"}))
	requireProblems(t, err,
		`FENCE_ROUTES_FILE "`+bad+`": route "writes": resource: "orders/{orderID}": {orderID} is not a parameter of the path (it has id)`,
		`FENCE_ROUTES_FILE "`+bad+`": route "writes": compare: "=>" must be ">=" or ">"`,
		`FENCE_LOG_LEVEL: "x" is not a level`,
	)
}

func TestLoadTokenHeaderAsResource(t *testing.T) {
	path := filepath.Join(t.TempDir(), "routes.yaml")
	file := "routes:\n  - {name: a, path: /a, resource: 'a/{header:x-token}'}\ndefault:\n  resource: 'd/{header:X-Token}'\n"
	if err := os.WriteFile(path, []byte(file), 0o600); err != nil {
		t.Fatal(err)
	}
	env := withUpstream(map[string]string{"FENCE_ROUTES_FILE": path, "FENCE_TOKEN_HEADER": "X-Token"})
	_, err := Load(env)
	requireProblems(t, err,
		`route "a": resource: {header:X-Token} is the token header (FENCE_TOKEN_HEADER)`,
		`default: resource: {header:X-Token} is the token header`,
	)
	env["FENCE_TOKEN_HEADER"] = "Fencing-Token"
	if _, err := Load(env); err != nil {
		t.Fatal(err)
	}
}

// The sequence header may not name the resource either: a mark per sequence
// fences nothing. Routes are checked whether or not they use a sequence.
func TestLoadSequenceHeaderAsResource(t *testing.T) {
	path := filepath.Join(t.TempDir(), "routes.yaml")
	file := "routes:\n  - {name: a, path: /a, resource: 'a/{header:fencing-sequence}', sequence: required}\n" +
		"  - {name: b, path: /b, resource: 'b/{header:Fencing-Sequence}/{header:Fencing-Token}'}\n" +
		"default:\n  resource: 'd/{header:Fencing-Sequence}/{header:Fencing-Sequence}'\n"
	if err := os.WriteFile(path, []byte(file), 0o600); err != nil {
		t.Fatal(err)
	}
	env := withUpstream(map[string]string{"FENCE_ROUTES_FILE": path})
	_, err := Load(env)
	wants := []string{
		`route "a": resource: {header:Fencing-Sequence} is the sequence header (FENCE_SEQUENCE_HEADER); a mark per sequence fences nothing`,
		`route "b": resource: {header:Fencing-Sequence} is the sequence header`,
		`route "b": resource: {header:Fencing-Token} is the token header`,
		`default: resource: {header:Fencing-Sequence} is the sequence header`,
	}
	requireProblems(t, err, wants...)
	if lines := problemLines(t, err); len(lines) != len(wants) {
		t.Errorf("want %d problems (each header once per rule), got %d:\n%v", len(wants), len(lines), err)
	}
	env["FENCE_SEQUENCE_HEADER"] = "X-Seq"
	env["FENCE_TOKEN_HEADER"] = "X-Token"
	if _, err := Load(env); err != nil {
		t.Fatal(err)
	}
}

func TestLoadNilEnviron(t *testing.T) {
	_, err := Load(nil)
	requireProblems(t, err, "FENCE_UPSTREAM_URL: required")
}

func TestEnviron(t *testing.T) {
	got := Environ([]string{"A=1", "B=x=y", "EMPTY=", "NOEQUALS", "=C:=C:\\", "A=2"})
	want := map[string]string{"A": "1", "B": "x=y", "EMPTY": ""}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("Environ = %v, want %v", got, want)
	}
	if len(Environ(nil)) != 0 {
		t.Error("Environ(nil) is not empty")
	}
}

// writeCA writes a self-signed CA certificate as PEM and returns its path.
func writeCA(t *testing.T) string {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(time.Hour),
		IsCA:                  true,
		BasicConstraintsValid: true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "ca.pem")
	if err := os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// A misspelled variable is a configuration error naming it and the closest
// known name: FENCE_REDIS_ULR once started a replica on its own bolt file.
func TestLoadUnknownVariable(t *testing.T) {
	for _, tc := range []struct {
		name, variable, want string
	}{
		{"transposed", "FENCE_REDIS_ULR", "FENCE_REDIS_ULR: unknown variable; did you mean FENCE_REDIS_URL?"},
		{"missing letter", "FENCE_STORE_TIMOUT", "did you mean FENCE_STORE_TIMEOUT?"},
		{"wrong case word", "FENCE_ROUTE_FILE", "did you mean FENCE_ROUTES_FILE?"},
		{"sequence misspelled", "FENCE_SEQUENCE_HEADR", "FENCE_SEQUENCE_HEADR: unknown variable; did you mean FENCE_SEQUENCE_HEADER?"},
		{"nothing near", "FENCE_XYZZY_PLUGH_FROBNICATE", "FENCE_XYZZY_PLUGH_FROBNICATE: unknown variable (fenceproxy reads: "},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Load(withUpstream(map[string]string{tc.variable: "x"}))
			requireProblems(t, err, tc.want)
		})
	}
}

// Kubernetes injects service-link variables for a Service named fence or
// fence-*; they are a neighbour's, not a misspelling, and must not stop the
// pod.
func TestLoadIgnoresServiceLinks(t *testing.T) {
	env := withUpstream(map[string]string{
		"FENCE_SERVICE_HOST":              "10.0.0.1",
		"FENCE_SERVICE_PORT":              "80",
		"FENCE_SERVICE_PORT_HTTP":         "80",
		"FENCE_PORT":                      "tcp://10.0.0.1:80",
		"FENCE_PORT_80_TCP":               "tcp://10.0.0.1:80",
		"FENCE_PORT_80_TCP_ADDR":          "10.0.0.1",
		"FENCE_REDIS_SERVICE_HOST":        "10.0.0.2",
		"FENCE_REDIS_PORT_6379_TCP_PROTO": "tcp",
		"FENCE_REDIS_PORT":                "tcp://10.0.0.2:6379",
	})
	if _, err := Load(env); err != nil {
		t.Fatal(err)
	}
}

func TestKnownVariablesCoverTheEnvironment(t *testing.T) {
	for _, v := range []string{"FENCE_UPSTREAM_URL", "FENCE_REDIS_PERSISTENCE", "FENCE_BODY_TIMEOUT", "FENCE_REDIS_EVICTION", "FENCE_SEQUENCE_HEADER"} {
		if !slices.Contains(KnownVariables(), v) {
			t.Errorf("KnownVariables lacks %s", v)
		}
	}
}

func TestLoadPersistenceAndBodyTimeout(t *testing.T) {
	_, err := Load(withUpstream(map[string]string{"FENCE_REDIS_PERSISTENCE": "always", "FENCE_BODY_TIMEOUT": "0s"}))
	requireProblems(t, err,
		`FENCE_REDIS_PERSISTENCE: "always" must be warn, refuse or off`,
		`FENCE_BODY_TIMEOUT: "0s" must be greater than 0`)
	c, err := Load(withUpstream(map[string]string{"FENCE_REDIS_PERSISTENCE": "refuse", "FENCE_BODY_TIMEOUT": "5s"}))
	if err != nil {
		t.Fatal(err)
	}
	if c.Redis.Persistence != PersistenceRefuse || c.BodyTimeout != 5*time.Second {
		t.Errorf("got %q %v", c.Redis.Persistence, c.BodyTimeout)
	}
}

// The authorization mode needs no upstream and reads its own variables.
func TestLoadAuthz(t *testing.T) {
	cfg, err := LoadAuthz(map[string]string{"FENCE_AUTHZ_PATH_PREFIX": "/fence", "FENCE_AUTHZ_GRPC_ADDR": "127.0.0.1:9191"})
	if err != nil {
		t.Fatal(err)
	}
	if cfg.UpstreamURL != nil || cfg.Authz.PathPrefix != "/fence" || cfg.Authz.GRPCAddr != "127.0.0.1:9191" {
		t.Errorf("LoadAuthz = upstream %v, %+v", cfg.UpstreamURL, cfg.Authz)
	}
	if _, err := LoadAuthz(map[string]string{"FENCE_UPSTREAM_URL": "not a url"}); err != nil {
		t.Errorf("FENCE_UPSTREAM_URL is ignored in authz mode, got %v", err)
	}
	if _, err := Load(nil); err == nil || !strings.Contains(err.Error(), "FENCE_UPSTREAM_URL: required") {
		t.Errorf("serve still needs the upstream: %v", err)
	}
	tests := []struct {
		name string
		env  map[string]string
		want string
	}{
		{"prefix without slash", map[string]string{"FENCE_AUTHZ_PATH_PREFIX": "fence"}, `FENCE_AUTHZ_PATH_PREFIX: "fence" must be a path starting with /`},
		{"prefix with query", map[string]string{"FENCE_AUTHZ_PATH_PREFIX": "/fence?x"}, `FENCE_AUTHZ_PATH_PREFIX: "/fence?x" must be a path`},
		{"prefix not encoded", map[string]string{"FENCE_AUTHZ_PATH_PREFIX": "/a b"}, `FENCE_AUTHZ_PATH_PREFIX`},
		{"prefix with an empty segment", map[string]string{"FENCE_AUTHZ_PATH_PREFIX": "/fence//"}, `FENCE_AUTHZ_PATH_PREFIX: "/fence//" has an empty segment`},
		{"prefix of two slashes", map[string]string{"FENCE_AUTHZ_PATH_PREFIX": "//"}, `FENCE_AUTHZ_PATH_PREFIX: "//" has an empty segment`},
		{"grpc addr no port", map[string]string{"FENCE_AUTHZ_GRPC_ADDR": "127.0.0.1"}, `FENCE_AUTHZ_GRPC_ADDR`},
		{"grpc addr on the data port", map[string]string{"FENCE_AUTHZ_GRPC_ADDR": ":8080"}, `FENCE_AUTHZ_GRPC_ADDR: ":8080" must use another port than FENCE_LISTEN_ADDR`},
		{"grpc addr on the admin port", map[string]string{"FENCE_AUTHZ_GRPC_ADDR": ":9090"}, `must use another port than FENCE_ADMIN_ADDR`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := LoadAuthz(tt.env)
			requireProblems(t, err, tt.want)
		})
	}
}

// Every variable Load reads has a one-line help and a default to show.
func TestVariables(t *testing.T) {
	vars := Variables()
	if len(vars) != len(KnownVariables()) {
		t.Fatalf("%d variables described, %d read", len(vars), len(KnownVariables()))
	}
	for _, v := range vars {
		if !strings.HasPrefix(v.Name, "FENCE_") || v.Help == "" || v.Default == "" || strings.Contains(v.Help, "\n") || len(v.Help) > 140 {
			t.Errorf("%+v: want a FENCE_ name, a default and a help of one short line", v)
		}
	}
}
