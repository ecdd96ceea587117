package proxy

import (
	"cmp"
	"fmt"
	"net/url"
	"strconv"
	"strings"

	"github.com/fenceproxy/fenceproxy/config"
)

// The status page's configuration section: what is configured and in
// force, in the words of `fenceproxy check`, with secrets redacted.

// StatusConfig describes cfg for the status page: every setting that
// decides what the proxy does, with its secrets redacted (a URL's password
// as url.URL.Redacted writes it, a password variable as "(set)"). routes
// is the route table in force (a reload replaces the one in cfg), kids the
// key ids of the signing keys in force, version the build's.
func StatusConfig(cfg *config.Config, routes config.Routes, kids []string, version string) []ConfigItem {
	var items []ConfigItem
	add := func(name, value string) { items = append(items, ConfigItem{Name: name, Value: value}) }
	or := func(v, unset string) string { return cmp.Or(v, "(unset: "+unset+")") }
	add("version", version)
	if cfg.Authz.Mode {
		add("mode", "authz: answers the fencing decision for a proxy in front; forwards nothing")
		add("FENCE_AUTHZ_PATH_PREFIX", or(cfg.Authz.PathPrefix, "nothing removed"))
		add("FENCE_AUTHZ_GRPC_ADDR", or(cfg.Authz.GRPCAddr, "gRPC off"))
	} else {
		add("mode", "reverse proxy")
		if cfg.UpstreamURL != nil {
			add("FENCE_UPSTREAM_URL", cfg.UpstreamURL.Redacted())
		}
	}
	add("FENCE_LISTEN_ADDR", cfg.ListenAddr)
	add("FENCE_ADMIN_ADDR", cfg.AdminAddr)
	if cfg.Store == config.StoreMemory {
		add("FENCE_STORE", "memory: marks live in this process only and vanish on restart (tests and demos only)")
	} else {
		add("FENCE_STORE", string(cfg.Store))
	}
	switch cfg.Store {
	case config.StoreBolt:
		add("FENCE_BOLT_PATH", cfg.BoltPath)
	case config.StoreRedis:
		r := cfg.Redis
		switch {
		case r.URL != "":
			add("FENCE_REDIS_URL", redactURL(r.URL))
		case len(r.SentinelAddrs) > 0:
			add("FENCE_REDIS_SENTINEL_ADDRS", strings.Join(r.SentinelAddrs, ", "))
			add("FENCE_REDIS_MASTER_NAME", r.MasterName)
		default:
			add("FENCE_REDIS_CLUSTER_ADDRS", strings.Join(r.ClusterAddrs, ", "))
		}
		if r.URL == "" {
			add("FENCE_REDIS_USERNAME", or(r.Username, "none"))
			add("FENCE_REDIS_PASSWORD", secret(r.Password))
		}
		add("FENCE_REDIS_TLS_CA_FILE", or(r.TLSCAFile, "system roots when TLS is on"))
		add("FENCE_REDIS_MIN_REPLICAS", strconv.Itoa(r.MinReplicas))
		add("FENCE_REDIS_WAIT_TIMEOUT", r.WaitTimeout.String())
		add("FENCE_REDIS_EVICTION", string(r.Eviction))
		add("FENCE_REDIS_PERSISTENCE", string(r.Persistence))
		add("FENCE_REDIS_SETTINGS", or(r.Settings.String(), "read with CONFIG GET"))
	case config.StoreEtcd:
		e := cfg.Etcd
		eps := make([]string, len(e.Endpoints))
		for i, ep := range e.Endpoints {
			eps[i] = redactURL(ep)
		}
		add("FENCE_ETCD_ENDPOINTS", strings.Join(eps, ", "))
		add("FENCE_ETCD_USERNAME", or(e.Username, "no authentication"))
		add("FENCE_ETCD_PASSWORD", secret(e.Password))
		add("FENCE_ETCD_TLS_CA_FILE", or(e.CAFile, "system roots when TLS is on"))
		add("FENCE_ETCD_TLS_CERT_FILE", or(e.CertFile, "no client certificate"))
	}
	add("FENCE_KEY_PREFIX", cfg.KeyPrefix)
	add("FENCE_STORE_INIT", map[bool]string{true: "auto", false: "manual"}[cfg.StoreInitAuto])
	add("FENCE_STORE_TIMEOUT", cfg.StoreTimeout.String())
	add("FENCE_MARK_CACHE", map[bool]string{true: strconv.Itoa(cfg.MarkCache), false: "0 (off)"}[cfg.MarkCache > 0])
	add("FENCE_TOKEN_HEADER", cfg.TokenHeader)
	add("FENCE_SEQUENCE_HEADER", cfg.SequenceHeader)
	if cfg.TokenKeysFile == "" {
		add("FENCE_TOKEN_KEYS_FILE", "(unset: plain decimal tokens, not signed)")
	} else {
		add("FENCE_TOKEN_KEYS_FILE", cfg.TokenKeysFile+": signed tokens required; key ids in force: "+strings.Join(kids, ", "))
		add("FENCE_TOKEN_LEEWAY", cfg.TokenLeeway.String())
	}
	noDrain := cfg.Authz.Mode || !cfg.Drain
	if !cfg.Authz.Mode {
		add("FENCE_DRAIN", map[bool]string{true: "off", false: "on"}[noDrain])
		add("FENCE_DRAIN_TIMEOUT", map[bool]string{true: cfg.DrainTimeout.String(),
			false: "(unset: wait until older requests end or reach their deadlines)"}[cfg.DrainTimeout > 0])
		add("FENCE_UPSTREAM_TIMEOUT", cfg.UpstreamTimeout.String())
		add("FENCE_BODY_TIMEOUT", cfg.BodyTimeout.String())
	}
	add("FENCE_READY_REQUIRES_STORE", strconv.FormatBool(cfg.ReadyRequiresStore))
	add("FENCE_SHUTDOWN_TIMEOUT", cfg.ShutdownTimeout.String())
	add("FENCE_LOG_LEVEL", cfg.LogLevel.String())
	add("FENCE_ADMIN_PPROF", strconv.FormatBool(cfg.AdminPprof))
	add("FENCE_ROUTES_FILE", or(cfg.RoutesFile, "every fenced write shares the one resource \"default\""))
	for _, r := range routes.Routes {
		add("route "+r.Name, routeSummary(r, r.Path, noDrain))
	}
	add("default rule", routeSummary(routes.Default, "any path no route matches", noDrain))
	return items
}

// routeSummary is one rule in the words of `fenceproxy check`.
func routeSummary(r config.Route, path string, noDrain bool) string {
	methods := strings.Join(r.Methods, ",")
	if r.CaseInsensitive {
		path += " (case-insensitive)"
	}
	if !r.Fence {
		return fmt.Sprintf("%s %s: not fenced", cmp.Or(methods, "any method"), path)
	}
	parts := []string{fmt.Sprintf("%s %s -> resource %s", methods, path, r.Resource.Raw), "compare " + string(r.Compare)}
	if r.TokenOptional {
		parts = append(parts, "token optional")
	}
	if r.Sequence != config.SequenceOff {
		parts = append(parts, "sequence "+r.Sequence.String())
	}
	if r.NoDrain || noDrain {
		parts = append(parts, "no drain")
	}
	if r.DryRun {
		parts = append(parts, "dry run (enforce: false)")
	}
	return strings.Join(parts, "; ")
}

// redactURL is raw with its password replaced, as url.URL.Redacted does;
// a raw that does not parse as a URL with a scheme is shown only if it has
// no '@' (host:port), else as "(set)".
func redactURL(raw string) string {
	if u, err := url.Parse(raw); err == nil && u.Scheme != "" && u.Opaque == "" {
		return u.Redacted()
	}
	if strings.Contains(raw, "@") {
		return "(set)"
	}
	return raw
}

func secret(v string) string {
	if v == "" {
		return "(unset)"
	}
	return "(set)"
}
