package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"google.golang.org/grpc"

	"github.com/fenceproxy/fenceproxy/config"
	"github.com/fenceproxy/fenceproxy/internal/extauthz"
	"github.com/fenceproxy/fenceproxy/internal/fencejwt"
	"github.com/fenceproxy/fenceproxy/proxy"
)

// serveHooks are serve's inputs that are not configuration; the zero value
// is what the program uses.
type serveHooks struct {
	// listening, if set, is called once both listeners are bound (tests and
	// the demo learn the ports of ":0" addresses from it).
	listening func(data, admin net.Addr)
	// settingsEvery is the period of the Redis settings check; zero means
	// defaultSettingsEvery. Tests shorten it.
	settingsEvery time.Duration
	// identityEvery is how often a store found lost is asked whether an
	// operator forced a new identity record; zero means a second.
	identityEvery time.Duration
	// storeEvery is how often the admin looks at the store for the
	// metrics; zero means every 5s.
	storeEvery time.Duration
	// spanExporter, if set, turns tracing on with it, whatever OTEL_* say
	// (tracing.go).
	spanExporter sdktrace.SpanExporter
}

// serve runs the data and admin listeners until ctx is cancelled, then drains:
// /readyz turns 503, the listeners stop accepting, in-flight requests get up
// to cfg.ShutdownTimeout to finish, and the store is closed last.
func serve(ctx context.Context, cfg *config.Config, stderr io.Writer, hooks serveHooks) error {
	log := newLogger(cfg.LogLevel, stderr)
	defer func() { _ = log.Sync() }()
	gc := osGCSettings()                                                   // GOGC and GOMEMLIMIT's defaults (gcsettings.go)
	tr, err := startTracing(ctx, log.Named("tracing"), hooks.spanExporter) // OTEL_*
	if err != nil {
		return err
	}
	defer tr.shutdown() // last: flushes the spans of the drain

	if cfg.RoutesFile == "" {
		log.Warn("no routes file (FENCE_ROUTES_FILE): every fenced write shares the one resource \"default\", " +
			"so two unrelated writers fence each other; a routes file gives each resource its own mark")
	}
	metrics := proxy.NewMetrics()
	metrics.Registry.MustRegister(buildInfo())
	reloads := newReloadMetrics(metrics.Registry)
	keys, err := loadTokenKeys(cfg, log.Named("tokens"), reloads)
	if err != nil {
		return err
	}
	// The routes file is re-read as the keys file is; the table it gives
	// goes to the handler, which exists only further down.
	var setRoutes func(config.Routes) error
	var routes *reloader
	var routesInForce atomic.Pointer[config.Routes] // for the status page
	routesInForce.Store(&cfg.Routes)
	if cfg.RoutesFile != "" {
		routes, err = newReloader("routes", "FENCE_ROUTES_FILE", cfg.RoutesFile, func() ([]zap.Field, error) {
			rs, err := config.ReadRoutes(cfg.RoutesFile, cfg.TokenHeader, cfg.SequenceHeader)
			if err == nil {
				err = setRoutes(rs)
			}
			if err != nil {
				return nil, err
			}
			routesInForce.Store(&rs)
			return []zap.Field{zap.Int("routes", len(rs.Routes))}, nil
		}, log.Named("routes"), reloads)
		if err != nil {
			return err
		}
	}
	st, err := openStore(ctx, cfg, log, metrics.Registry, hooks.settingsEvery, metrics.ObserveRoundTrip)
	if err != nil {
		return err
	}
	defer func() {
		if err := st.store.Close(); err != nil {
			log.Warn("closing the store", zap.Error(err))
		}
	}()
	if st.keeper != nil {
		every := hooks.identityEvery
		if every <= 0 {
			every = time.Second
		}
		g := newIdentityGuard(st.store, st.keeper, cfg.StoreInitAuto, log.Named("identity"), metrics.Registry, every)
		g.start(ctx, 4*cfg.StoreTimeout)
		st.store = g
		st.checks = append(st.checks, g.ready)
		st.watches = append(st.watches, g.watch)
	}
	var verifier *fencejwt.Verifier
	if keys != nil {
		verifier = keys.verifier
		st.watches = append(st.watches, keys.reloader.watch)
	}

	opts := proxy.Options{
		Upstream:              cfg.UpstreamURL,
		Routes:                cfg.Routes,
		Store:                 st.store,
		TokenHeader:           cfg.TokenHeader,
		SequenceHeader:        cfg.SequenceHeader,
		MethodOverrideHeaders: cfg.MethodOverrideHeaders,
		StoreTimeout:          cfg.StoreTimeout,
		BodyTimeout:           cfg.BodyTimeout,
		UpstreamTimeout:       cfg.UpstreamTimeout,
		NoDrain:               !cfg.Drain,
		DrainTimeout:          cfg.DrainTimeout,
		MarkCache:             cfg.MarkCache,
		Tokens:                verifier,
		Logger:                log.Named("proxy"),
		Metrics:               metrics,
		Transport:             tr.transport(proxy.NewTransport()),
		TracerProvider:        tr.provider(),
	}
	var handler http.Handler
	if cfg.Authz.Mode {
		opts.Logger = log.Named("authz")
		az, err := proxy.NewAuthz(opts, cfg.Authz.PathPrefix)
		if err != nil {
			return err
		}
		handler, setRoutes = az, az.SetRoutes
	} else {
		px, err := proxy.New(opts)
		if err != nil {
			return err
		}
		handler, setRoutes = px, px.SetRoutes
	}
	if routes != nil {
		st.watches = append(st.watches, routes.watch)
	}
	wctx, stopWatches := context.WithCancel(ctx)
	var watches sync.WaitGroup
	for _, w := range st.watches {
		watches.Go(func() { w(wctx) })
	}
	defer func() { stopWatches(); watches.Wait() }() // before the store closes

	admin := proxy.NewAdmin(proxy.AdminOptions{
		Store:   st.store,
		Timeout: cfg.StoreTimeout,
		Metrics: metrics,
		Checks:  st.checks,
		// Off by default: a store in trouble refuses fenced requests (503)
		// but the replica stays in its Service for the rest.
		ReadyRequiresStore: cfg.ReadyRequiresStore,
		StoreEvery:         hooks.storeEvery,
		Logger:             log.Named("admin"),
		Pprof:              cfg.AdminPprof,
		// The status page: what is configured and in force, secrets redacted.
		StoreKind: string(cfg.Store),
		Config: func() []proxy.ConfigItem {
			var kids []string
			if keys != nil {
				kids = sortedKIDs(keys.verifier.Keys())
			}
			return proxy.StatusConfig(cfg, *routesInForce.Load(), kids, buildVersion())
		},
	})
	watches.Go(func() { admin.SampleRates(wctx) }) // the status page's rates
	watches.Go(func() { admin.WatchStore(wctx) })  // fenceproxy_store_up and _state, and the log

	dataLn, err := net.Listen("tcp", cfg.ListenAddr)
	if err != nil {
		return fmt.Errorf("FENCE_LISTEN_ADDR: %w", err)
	}
	adminLn, err := net.Listen("tcp", cfg.AdminAddr)
	if err != nil {
		_ = dataLn.Close()
		return fmt.Errorf("FENCE_ADMIN_ADDR: %w", err)
	}
	errLog := zap.NewStdLog(log.Named("http"))
	dataSrv := &http.Server{
		Handler: tr.handler(handler),
		// Headers must arrive promptly (slowloris); bodies are streamed to the
		// upstream, so there is no whole-request read timeout.
		ReadHeaderTimeout: 10 * time.Second,
		IdleTimeout:       2 * time.Minute,
		ErrorLog:          errLog,
	}
	adminSrv := &http.Server{Handler: admin, ReadHeaderTimeout: 5 * time.Second, ErrorLog: errLog}

	// Envoy's gRPC ext_authz, in the authorization mode when asked for: an
	// adapter onto the same handler, so one code path decides.
	var grpcSrv *grpc.Server
	var ext *extauthz.Server
	var mode []zap.Field
	if cfg.Authz.Mode {
		mode = []zap.Field{zap.String("mode", "authz")}
	} else {
		mode = []zap.Field{zap.String("upstream", cfg.UpstreamURL.Redacted())}
	}
	if cfg.Authz.Mode && cfg.Authz.GRPCAddr != "" {
		grpcLn, err := net.Listen("tcp", cfg.Authz.GRPCAddr)
		if err != nil {
			_, _ = dataLn.Close(), adminLn.Close()
			return fmt.Errorf("FENCE_AUTHZ_GRPC_ADDR: %w", err)
		}
		grpcSrv = grpc.NewServer(tr.grpcOptions()...)
		ext = extauthz.New(handler, log.Named("grpc"))
		ext.Register(grpcSrv)
		go func() { _ = grpcSrv.Serve(grpcLn) }() // ends with GracefulStop or Stop below
		mode = append(mode, zap.String("grpc", grpcLn.Addr().String()))
	}

	errc := make(chan error, 2)
	go func() { errc <- dataSrv.Serve(dataLn) }()
	go func() { errc <- adminSrv.Serve(adminLn) }()
	fields := append([]zap.Field{zap.String("addr", dataLn.Addr().String()), zap.String("admin", adminLn.Addr().String())}, mode...)
	log.Info("listening", append(fields, zap.String("store", string(cfg.Store)),
		zap.Int("routes", len(cfg.Routes.Routes)), zap.String("version", buildVersion()), gc.field())...)
	if hooks.listening != nil {
		hooks.listening(dataLn.Addr(), adminLn.Addr())
	}

	var serveErr error
	select {
	case <-ctx.Done():
		// A string with its unit: zap's JSON writes a Duration as bare seconds.
		log.Info("shutting down: draining in-flight requests", zap.String("timeout", cfg.ShutdownTimeout.String()))
	case serveErr = <-errc:
		log.Error("listener failed", zap.Error(serveErr))
	}
	admin.SetDraining()
	sctx, cancel := context.WithTimeout(context.Background(), cfg.ShutdownTimeout)
	defer cancel()
	if grpcSrv != nil {
		ext.Shutdown() // health NOT_SERVING first, so Envoy stops choosing this replica
		stopped := make(chan struct{})
		go func() { grpcSrv.GracefulStop(); close(stopped) }()
		select {
		case <-stopped:
		case <-sctx.Done():
			grpcSrv.Stop()
		}
	}
	if err := dataSrv.Shutdown(sctx); err != nil {
		log.Warn("drain timed out; closing remaining connections", zap.Error(err))
		_ = dataSrv.Close()
	}
	_ = adminSrv.Shutdown(sctx)
	if serveErr != nil && !errors.Is(serveErr, http.ErrServerClosed) {
		return serveErr
	}
	log.Info("stopped")
	return nil
}

// newLogger writes JSON lines to w at level: the stable field names are
// route, resource, token, mark, decision and duration.
func newLogger(level zapcore.Level, w io.Writer) *zap.Logger {
	enc := zap.NewProductionEncoderConfig()
	enc.TimeKey = "ts"
	enc.EncodeTime = zapcore.ISO8601TimeEncoder
	core := zapcore.NewCore(zapcore.NewJSONEncoder(enc), zapcore.Lock(zapcore.AddSync(w)), level)
	return zap.New(core).Named("fenceproxy")
}
