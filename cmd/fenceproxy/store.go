package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"
	"go.uber.org/zap"

	"github.com/fenceproxy/fenceproxy/config"
	"github.com/fenceproxy/fenceproxy/fencestore"
	"github.com/fenceproxy/fenceproxy/fencestore/boltstore"
	"github.com/fenceproxy/fenceproxy/fencestore/etcdstore"
	"github.com/fenceproxy/fenceproxy/fencestore/memstore"
	"github.com/fenceproxy/fenceproxy/fencestore/redisstore"
	"github.com/fenceproxy/fenceproxy/proxy"
)

// openedStore is the chosen store, the readiness checks that come with it,
// and the watches to run beside it while serving.
type openedStore struct {
	store fencestore.Store
	// keeper is the store's operator side (identity, marks commands); nil
	// for a store that has none.
	keeper fencestore.Keeper
	checks []proxy.ReadinessCheck
	// watches run until their ctx ends; serve stops them before it closes
	// the store.
	watches []func(context.Context)
}

// releaseDropper is a store that retries the releases it could not send
// (Redis, etcd) and has to drop some when too many wait.
type releaseDropper interface{ DroppedReleases() uint64 }

// registerDropped exports the releases d dropped unsent.
func registerDropped(reg prometheus.Registerer, d releaseDropper) {
	reg.MustRegister(prometheus.NewCounterFunc(prometheus.CounterOpts{
		Name: "fenceproxy_drain_releases_dropped_total",
		Help: "Releases of in-flight requests dropped before the store acknowledged them, because too many were " +
			"waiting to be sent again: each may hold the newer requests of its resource until their waiters give it up.",
	}, func() float64 { return float64(d.DroppedReleases()) }))
}

func openStore(ctx context.Context, cfg *config.Config, log *zap.Logger, reg prometheus.Registerer, settingsEvery time.Duration,
	onRoundTrip func(fencestore.RoundTrip)) (openedStore, error) {
	switch cfg.Store {
	case config.StoreMemory:
		log.Warn("FENCE_STORE=memory: marks live in this process only and vanish on restart, " +
			"so a stale holder is admitted again after one; use it for tests and demos only")
		s := memstore.New()
		return openedStore{store: s, keeper: s}, nil
	case config.StoreBolt:
		s, err := boltstore.Open(cfg.BoltPath, boltstore.Options{KeyPrefix: cfg.KeyPrefix})
		if err != nil {
			return openedStore{}, fmt.Errorf("FENCE_BOLT_PATH: %w", err)
		}
		return openedStore{store: s, keeper: s}, nil
	case config.StoreRedis:
		return openRedis(ctx, cfg, log, reg, settingsEvery, onRoundTrip)
	case config.StoreEtcd:
		e := cfg.Etcd
		client, err := etcdstore.NewClient(etcdstore.ClientOptions{
			Endpoints: e.Endpoints, Username: e.Username, Password: e.Password,
			CAFile: e.CAFile, CertFile: e.CertFile, KeyFile: e.KeyFile, Logger: log.Named("etcd"),
		})
		if err != nil {
			// With a username the client authenticates at once: a wrong
			// password, or no member reachable within the dial timeout.
			return openedStore{}, fmt.Errorf("FENCE_ETCD_ENDPOINTS: %w", err)
		}
		s := etcdstore.New(client, etcdstore.Options{KeyPrefix: cfg.KeyPrefix, Logger: log.Named("etcd"), OnRoundTrip: onRoundTrip})
		registerDropped(reg, s)
		return openedStore{store: s, keeper: s}, nil
	}
	return openedStore{}, fmt.Errorf("FENCE_STORE: unknown store %q", cfg.Store)
}

// redisLog routes go-redis's own messages (one per failed dial, by default
// printed to stderr unstructured) into the JSON log at debug: every failed
// admission is already logged as a refusal, so at info they would only repeat
// it, once per request while Redis is down.
type redisLog struct{ log *zap.Logger }

func (l redisLog) Printf(_ context.Context, format string, v ...any) {
	if ce := l.log.Check(zap.DebugLevel, "go-redis"); ce != nil {
		ce.Write(zap.String("detail", fmt.Sprintf(format, v...)))
	}
}

func openRedis(ctx context.Context, cfg *config.Config, log *zap.Logger, reg prometheus.Registerer, settingsEvery time.Duration,
	onRoundTrip func(fencestore.RoundTrip)) (openedStore, error) {
	rlog := log.Named("redis")
	redis.SetLogger(redisLog{rlog})
	client, err := redisClient(&cfg.Redis)
	if err != nil {
		return openedStore{}, err
	}
	s := redisstore.New(client, redisstore.Options{
		KeyPrefix:   cfg.KeyPrefix,
		MinReplicas: cfg.Redis.MinReplicas,
		WaitTimeout: cfg.Redis.WaitTimeout,
		Logger:      rlog,
		OnRoundTrip: onRoundTrip,
	})
	if err := s.Layout(); err != nil {
		_ = s.Close()
		return openedStore{}, fmt.Errorf("FENCE_KEY_PREFIX: %w", err)
	}
	out := openedStore{store: s}
	out.keeper, _ = any(s).(fencestore.Keeper)
	registerDropped(reg, s)

	// Not reaching Redis at start is not fatal: the proxy starts with the
	// store down (fenced requests 503, not ready with
	// FENCE_READY_REQUIRES_STORE=true) and
	// answers 503 until Redis answers, which is what a pod restart loop would
	// achieve, minus the restarts.
	pctx, cancel := context.WithTimeout(ctx, cfg.StoreTimeout)
	defer cancel()
	pingErr := s.Ping(pctx)
	if pingErr != nil {
		log.Warn("redis does not answer yet; refusing fenced requests (503) until it does", zap.Error(pingErr))
	}

	var settings *settingsWatch
	if policy := (settingsPolicy{eviction: cfg.Redis.Eviction, persistence: cfg.Redis.Persistence, stated: cfg.Redis.Settings}); policy.enabled() {
		settings = newSettingsWatch(s.Settings, policy, s, rlog, settingsEvery, cfg.StoreTimeout)
		// Checked before serving, so that the first request meets the
		// verdict; a Redis that does not answer yet is checked once it does.
		if pingErr == nil {
			settings.check(ctx)
		}
		if settings.guard != nil {
			out.store = settings.guard
			out.checks = append(out.checks, settings.guard.ready)
		}
		out.watches = append(out.watches, settings.run)
	}
	// A cluster has a server per shard; its settings are checked on every
	// master, periodically, but there is no one run id to watch.
	if len(cfg.Redis.ClusterAddrs) == 0 {
		mw := newMasterWatch(s, reg, rlog, time.Second, cfg.StoreTimeout)
		if settings != nil {
			mw.changed = settings.poke
		}
		out.watches = append(out.watches, mw.run)
	}
	return out, nil
}

// defaultRedisProtocol is the RESP version the store's client speaks unless
// FENCE_REDIS_URL says protocol=3. RESP2: nothing the stores read needs
// RESP3 (the scripts' replies, ZMSCORE's nil, HMGET, INFO, the pub/sub the
// barrier's waiters listen on, Sentinel and Cluster all read alike in
// both), and under RESP3 go-redis looks for a push notification before
// every reply it reads, about 1% of the proxy's CPU under load, for
// notifications (client-side caching, maintenance events) the store never
// asks for.
const defaultRedisProtocol = 2

// redisClient builds the go-redis client the configuration names. The ACL
// credentials are those of the data nodes; sentinels are asked without them. Every
// client gets ContextTimeoutEnabled, so the store timeout bounds each call,
// and no retries: a retried ">" admission whose first reply was lost would
// find its own mark and answer stale. One dial attempt per call: with Redis
// down, go-redis's default of five dials 100ms apart would turn every request
// into a wait for the full store timeout instead of a prompt 503.
func redisClient(rc *config.Redis) (redis.UniversalClient, error) {
	var tlsConf *tls.Config
	if rc.TLSCAFile != "" {
		pem, err := os.ReadFile(rc.TLSCAFile)
		if err != nil {
			return nil, fmt.Errorf("FENCE_REDIS_TLS_CA_FILE: %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("FENCE_REDIS_TLS_CA_FILE: %s holds no PEM certificate", rc.TLSCAFile)
		}
		tlsConf = &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}
	}
	switch {
	case rc.URL != "":
		opt, err := redis.ParseURL(rc.URL)
		if err != nil {
			return nil, fmt.Errorf("FENCE_REDIS_URL: %w", err)
		}
		if tlsConf != nil {
			if opt.TLSConfig != nil {
				tlsConf.ServerName = opt.TLSConfig.ServerName
			}
			opt.TLSConfig = tlsConf
		}
		switch opt.Protocol {
		case 0:
			opt.Protocol = defaultRedisProtocol
		case 2, 3:
			// The URL's protocol= is the operator's choice.
		default:
			return nil, fmt.Errorf("FENCE_REDIS_URL: protocol=%d: want 2 (RESP2, the default) or 3 (RESP3)", opt.Protocol)
		}
		opt.ContextTimeoutEnabled = true
		opt.MaxRetries = -1
		opt.DialerRetries = 1
		return redis.NewClient(opt), nil
	case len(rc.SentinelAddrs) > 0:
		return redis.NewFailoverClient(&redis.FailoverOptions{
			MasterName:            rc.MasterName,
			SentinelAddrs:         rc.SentinelAddrs,
			Username:              rc.Username,
			Password:              rc.Password,
			TLSConfig:             tlsConf,
			Protocol:              defaultRedisProtocol,
			ContextTimeoutEnabled: true,
			MaxRetries:            -1,
			DialerRetries:         1,
		}), nil
	case len(rc.ClusterAddrs) > 0:
		return redis.NewClusterClient(&redis.ClusterOptions{
			Addrs:                 rc.ClusterAddrs,
			Username:              rc.Username,
			Password:              rc.Password,
			TLSConfig:             tlsConf,
			Protocol:              defaultRedisProtocol,
			ContextTimeoutEnabled: true,
			MaxRetries:            -1,
			DialerRetries:         1,
		}), nil
	}
	return nil, errors.New("FENCE_STORE=redis needs FENCE_REDIS_URL, FENCE_REDIS_SENTINEL_ADDRS or FENCE_REDIS_CLUSTER_ADDRS")
}
