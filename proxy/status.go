package proxy

import (
	"bytes"
	"cmp"
	"context"
	_ "embed"
	"encoding/json"
	"fmt"
	"html/template"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"go.uber.org/zap"

	"github.com/fenceproxy/fenceproxy/config"
)

// The status page of the admin port: GET / renders it for a person
// (server-side, no script), GET /status.json gives the same report to a
// program. It shows resource names, client-sent details and the
// configuration, so the admin port must not be reachable from outside the
// pod. Everything a client sent is escaped by html/template, and the page
// forbids scripts outright (Content-Security-Policy).

//go:embed status.html
var statusHTML string

var statusTemplate = template.Must(template.New("status").Funcs(template.FuncMap{
	"rate":  func(perSecond float64) string { return strconv.FormatFloat(perSecond, 'f', 2, 64) + "/s" },
	"clock": func(t time.Time) string { return t.UTC().Format("2006-01-02 15:04:05Z") },
	"iso":   func(t time.Time) string { return t.UTC().Format(time.RFC3339Nano) },
	"since": func(now, t time.Time) string { return roundAge(now.Sub(t)) },
	"add1":  func(i int) int { return i + 1 },
}).Parse(statusHTML))

// ConfigItem is one line of the configuration the status page shows. The
// page shows Value as given: whoever builds the items redacts secrets
// (StatusConfig does).
type ConfigItem struct {
	Name  string `json:"name"`
	Value string `json:"value"`
}

// The report, as /status.json spells it. Field names are stable; tokens
// and marks are decimal strings (Refusal, Contested), as in every answer.
type statusReport struct {
	Generated time.Time    `json:"generated"`
	Started   time.Time    `json:"started"` // when the admin handler was built: the process's start
	Store     storeStatus  `json:"store"`
	Rates     rateTable    `json:"rates"`
	Refusals  []Refusal    `json:"refusals"`  // newest first, at most 50
	Contested []Contested  `json:"contested"` // most stale refusals first
	Config    []ConfigItem `json:"config"`
}

// storeStatus is the store's health, every check run, and what /readyz
// answers.
type storeStatus struct {
	Kind string `json:"kind"` // redis, bolt, etcd or memory
	// State: ok, down, unsafe or lost (StoreState); only ok admits.
	State     StoreState `json:"state"`
	Answering bool       `json:"answering"`       // the store answered a ping within the admin's timeout
	Error     string     `json:"error,omitempty"` // the ping's error when it did not
	// Lost: a check says the store lost its identity record
	// (fencestore.ErrStoreLost): every fenced request gets 503 store-lost.
	Lost     bool `json:"lost"`
	Draining bool `json:"draining"`
	// ReadyRequiresStore: FENCE_READY_REQUIRES_STORE=true, /readyz fails
	// while the state is not ok.
	ReadyRequiresStore bool          `json:"readyRequiresStore"`
	Ready              bool          `json:"ready"`  // what /readyz answers: 200 exactly when true
	Checks             []checkResult `json:"checks"` // the store's other checks, in order
}

type checkResult struct {
	OK    bool   `json:"ok"`
	Error string `json:"error,omitempty"`
}

// rateTable is fenceproxy_requests_total per route and decision: the rate
// over the last WindowSeconds (0: not known yet, no earlier reading) and
// the total since start.
type rateTable struct {
	WindowSeconds float64     `json:"windowSeconds"`
	Decisions     []string    `json:"decisions"` // the columns, in the order of every route's Decisions
	Routes        []routeRate `json:"routes"`    // by name
}

type routeRate struct {
	Route  string `json:"route"`
	DryRun bool   `json:"dryRun"` // enforce: false in the table in force (it counts would_ decisions)
	// InForce: the route is in the table in force (false: a reload removed
	// it; its counts stay until the process ends).
	InForce   bool           `json:"inForce"`
	PerSecond float64        `json:"perSecond"`
	Total     uint64         `json:"total"`
	Decisions []decisionRate `json:"decisions"`
}

type decisionRate struct {
	Decision  string  `json:"decision"`
	PerSecond float64 `json:"perSecond"`
	Total     uint64  `json:"total"`
}

// statusPage builds the report from the admin's options.
type statusPage struct {
	o        AdminOptions
	draining *atomic.Bool
	health   *storeHealth
	started  time.Time
	rates    *rateSampler // nil without Metrics
}

// The rates are over about a minute, from a reading kept every 10s.
const (
	rateEvery  = 10 * time.Second
	rateWindow = time.Minute
	// rateMinSpan: a rate over less than this is not shown (two readings a
	// few milliseconds apart say nothing).
	rateMinSpan = time.Second
	// contestedShown is how many contested resources the page lists.
	contestedShown = 20
)

func newStatusPage(o AdminOptions, draining *atomic.Bool, health *storeHealth) *statusPage {
	s := &statusPage{o: o, draining: draining, health: health, started: time.Now()}
	if o.Metrics != nil {
		s.rates = &rateSampler{read: o.Metrics.requestCounts, now: time.Now, every: rateEvery, window: rateWindow}
	}
	return s
}

// SampleRates keeps a reading of the request counters every 10 seconds
// until ctx ends, so that the status page's rates cover the last minute
// whenever it is opened. Without it, readings are taken only when the page
// is read, and the first view shows no rates.
func (a *Admin) SampleRates(ctx context.Context) {
	if a.status.rates == nil {
		return
	}
	t := time.NewTicker(a.status.rates.every)
	defer t.Stop()
	for {
		a.status.rates.observe()
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

func (s *statusPage) serveHTML(w http.ResponseWriter, r *http.Request) {
	var b bytes.Buffer
	if err := statusTemplate.Execute(&b, s.report(r.Context())); err != nil {
		s.o.Logger.Error("rendering the status page", zap.Error(err))
		plain(w, http.StatusInternalServerError, "status page: "+err.Error())
		return
	}
	h := w.Header()
	h.Set("Content-Type", "text/html; charset=utf-8")
	// No script may run, whatever a resource name holds; the inline
	// <style> is the only style; nobody may frame the page.
	h.Set("Content-Security-Policy", "default-src 'none'; style-src 'unsafe-inline'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'")
	statusHeaders(h)
	_, _ = w.Write(b.Bytes())
}

func (s *statusPage) serveJSON(w http.ResponseWriter, r *http.Request) {
	body, err := json.MarshalIndent(s.report(r.Context()), "", "  ")
	if err != nil { // cannot happen: strings, numbers, times
		plain(w, http.StatusInternalServerError, "status: "+err.Error())
		return
	}
	h := w.Header()
	h.Set("Content-Type", "application/json")
	statusHeaders(h)
	_, _ = w.Write(append(body, '\n'))
}

func statusHeaders(h http.Header) {
	h.Set("Cache-Control", "no-store")
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("Referrer-Policy", "no-referrer")
}

// report gathers what the page shows, now.
func (s *statusPage) report(ctx context.Context) statusReport {
	rep := statusReport{
		Generated: time.Now(),
		Started:   s.started,
		Store:     s.storeStatus(ctx),
		Refusals:  []Refusal{},
		Contested: []Contested{},
		Config:    []ConfigItem{},
		Rates:     rateTable{Decisions: []string{}, Routes: []routeRate{}},
	}
	if m := s.o.Metrics; m != nil {
		rep.Refusals = m.RecentRefusals()
		rep.Contested = m.MostContested(contestedShown)
		now, base := s.rates.observe()
		rep.Rates = buildRates(now, base, m.mode)
	}
	if s.o.Config != nil {
		rep.Config = append(rep.Config, s.o.Config()...)
	}
	return rep
}

// storeStatus is a new look at the store, and what /readyz answers with it.
func (s *statusPage) storeStatus(ctx context.Context) storeStatus {
	st := s.health.look(ctx)
	st.Draining = s.draining.Load()
	st.ReadyRequiresStore = s.o.ReadyRequiresStore
	st.Ready = !st.Draining && (st.State == StoreOK || !s.o.ReadyRequiresStore)
	return st
}

// routeDecision is one series of fenceproxy_requests_total.
type routeDecision struct{ route, decision string }

// requestCounts reads fenceproxy_requests_total, every series.
func (m *Metrics) requestCounts() map[routeDecision]float64 {
	ch := make(chan prometheus.Metric, 64)
	go func() { m.requests.Collect(ch); close(ch) }()
	out := make(map[routeDecision]float64)
	for metric := range ch {
		var pb dto.Metric
		if metric.Write(&pb) != nil {
			continue
		}
		var k routeDecision
		for _, l := range pb.GetLabel() {
			switch l.GetName() {
			case "route":
				k.route = l.GetValue()
			case "decision":
				k.decision = l.GetValue()
			}
		}
		out[k] = pb.GetCounter().GetValue()
	}
	return out
}

// countReading is the request counters at one moment.
type countReading struct {
	at     time.Time
	counts map[routeDecision]float64
}

// rateSampler keeps readings of the request counters at least every apart
// and at most window old (so at most window/every+1 of them): the rates are
// the growth since the oldest.
type rateSampler struct {
	read          func() map[routeDecision]float64
	now           func() time.Time
	every, window time.Duration

	mu       sync.Mutex
	readings []countReading // oldest first
}

// observe reads the counters now and returns the reading with the oldest
// one kept within the window, the base of the rates (nil if none). It
// forgets readings older than the window, and keeps this one when the
// newest kept is at least every old.
func (s *rateSampler) observe() (now countReading, base *countReading) {
	s.mu.Lock()
	defer s.mu.Unlock()
	now = countReading{at: s.now(), counts: s.read()}
	s.readings = slices.DeleteFunc(s.readings, func(r countReading) bool { return now.at.Sub(r.at) > s.window })
	if len(s.readings) > 0 {
		b := s.readings[0] // a copy: the slice changes under the next caller
		base = &b
		if now.at.Sub(s.readings[len(s.readings)-1].at) < s.every {
			return now, base
		}
	}
	s.readings = append(s.readings, now)
	return now, base
}

// decisionOrder is a decision's place in the enum (names outside it last).
func decisionOrder(name string) int {
	if i := slices.Index(decisionNames[:], name); i >= 0 {
		return i
	}
	return len(decisionNames)
}

// buildRates turns a reading and its base into the table: one row per
// route; a column for admitted and stale always, would_stale when a route
// is dry-run, and any other decision counted at least once. mode says
// whether a route is a dry run in the table in force (nil: none is): a
// route switched to enforcing keeps its would_ series, at 0 or not, and is
// enforcing all the same.
func buildRates(now countReading, base *countReading, mode func(route string) (dryRun, inForce bool)) rateTable {
	var span time.Duration
	if base != nil {
		span = now.at.Sub(base.at)
	}
	known := span >= rateMinSpan
	t := rateTable{Decisions: []string{}, Routes: []routeRate{}}
	columns := map[string]bool{decAdmitted.String(): true, decStale.String(): true}
	rows := map[string]*routeRate{}
	for k, v := range now.counts {
		row := rows[k.route]
		if row == nil {
			row = &routeRate{Route: k.route}
			rows[k.route] = row
		}
		if mode != nil {
			row.DryRun, row.InForce = mode(k.route)
		}
		if row.DryRun {
			columns[decStale.would().String()] = true
		}
		if v > 0 {
			columns[k.decision] = true
		}
	}
	for d := range columns {
		t.Decisions = append(t.Decisions, d)
	}
	slices.SortFunc(t.Decisions, func(a, b string) int {
		return cmp.Or(cmp.Compare(decisionOrder(a), decisionOrder(b)), strings.Compare(a, b))
	})
	for _, row := range rows {
		for _, d := range t.Decisions {
			k := routeDecision{row.Route, d}
			total := now.counts[k]
			dr := decisionRate{Decision: d, Total: uint64(total)}
			if known {
				// A series born after the base counted from 0.
				dr.PerSecond = max(total-base.counts[k], 0) / span.Seconds()
			}
			row.Decisions = append(row.Decisions, dr)
		}
		for k, v := range now.counts { // all decisions, columns or not
			if k.route == row.Route {
				row.Total += uint64(v)
				if known {
					row.PerSecond += max(v-base.counts[k], 0) / span.Seconds()
				}
			}
		}
		t.Routes = append(t.Routes, *row)
	}
	slices.SortFunc(t.Routes, func(a, b routeRate) int { return strings.Compare(a.Route, b.Route) })
	if known {
		t.WindowSeconds = span.Round(time.Second).Seconds()
	}
	return t
}

// roundAge is d in whole seconds (minutes, hours) for a person.
func roundAge(d time.Duration) string {
	switch {
	case d < time.Second:
		return "0s"
	case d < time.Hour:
		return d.Truncate(time.Second).String()
	default:
		return d.Truncate(time.Minute).String()
	}
}

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
