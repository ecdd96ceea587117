package proxy

import (
	"bytes"
	"cmp"
	"context"
	_ "embed"
	"encoding/json"
	"html/template"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"go.uber.org/zap"
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
	// State: ok, down, unsafe or lost (StoreState): see StoreState for
	// what each admits.
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
