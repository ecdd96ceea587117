package proxy

import (
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"github.com/fenceproxy/fenceproxy/fencestore"
)

// decision is the outcome of one request, the "decision" label of
// fenceproxy_requests_total.
type decision uint8

const (
	decAdmitted decision = iota
	decStale
	decMissing
	decMalformed
	decUnfenced
	decUnavailable
	decBadRequest
	decInvalid       // a signed token that does not verify (401)
	decWrongResource // a signed token for another resource (403)
	numRealDecisions
	// A refusal on a dry-run route (enforce: false) is counted as its
	// would_ twin, numRealDecisions places further on, and forwarded.
	numDecisions = 2 * numRealDecisions
)

// would is d's dry-run twin: would_stale for stale.
func (d decision) would() decision { return d + numRealDecisions }

var decisionNames = func() [numDecisions]string {
	names := [numDecisions]string{
		decAdmitted:      "admitted",
		decStale:         "stale",
		decMissing:       "missing",
		decMalformed:     "malformed",
		decUnfenced:      "unfenced",
		decUnavailable:   "unavailable",
		decBadRequest:    "bad_request",
		decInvalid:       "invalid",
		decWrongResource: "wrong_resource",
	}
	for d := decision(0); d < numRealDecisions; d++ {
		names[d.would()] = "would_" + names[d]
	}
	return names
}()

func (d decision) String() string { return decisionNames[d] }

// drainOutcome is how an admitted request passed the drain barrier, the
// "outcome" label of fenceproxy_drain_total.
type drainOutcome uint8

const (
	drainNone    drainOutcome = iota // nothing older was in flight
	drainWaited                      // it waited until the older requests ended
	drainExpired                     // an older request reached its deadline instead
	drainTimeout                     // FENCE_DRAIN_TIMEOUT (or its own deadline) ended the wait: not forwarded
	numDrainOutcomes
)

var drainOutcomeNames = [numDrainOutcomes]string{
	drainNone: "none", drainWaited: "waited", drainExpired: "expired", drainTimeout: "timeout",
}

// Metrics holds fenceproxy's Prometheus collectors. Create it once per
// process with NewMetrics and hand it to New and NewAdmin.
type Metrics struct {
	Registry       *prometheus.Registry
	requests       *prometheus.CounterVec
	admission      *prometheus.HistogramVec
	upstreamErrors *prometheus.CounterVec
	drainWait      *prometheus.HistogramVec
	drain          *prometheus.CounterVec
	regressions    *prometheus.CounterVec
	clientGone     *prometheus.CounterVec
	inFlight       prometheus.Gauge
	upstreamTime   *prometheus.HistogramVec
	upstreamClass  *prometheus.CounterVec
	storeBatch     prometheus.Histogram
	storeRoundTrip prometheus.Histogram
	// The store's health as the admin's last look found it (storehealth.go).
	storeUp    prometheus.Gauge
	storeState *prometheus.GaugeVec
	// What the status page shows beyond the counters (recent.go).
	recent    recentRefusals
	contested contestedResources
	// modes is each route in force by name, true when it is a dry run
	// (enforce: false): the status page's mode column follows the table in
	// force, not the would_ series a route once had.
	modes atomic.Pointer[map[string]bool]
}

// NewMetrics registers fenceproxy's collectors, plus the Go runtime and
// process collectors, on a fresh registry (never the global one, so tests and
// embedded uses do not collide).
func NewMetrics() *Metrics {
	m := &Metrics{
		Registry: prometheus.NewRegistry(),
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "fenceproxy_requests_total",
			Help: "Requests by route and fencing decision (admitted, stale, missing, malformed, unfenced, unavailable, bad_request, invalid, wrong_resource; on a dry-run route a refusal is would_<decision> and forwarded).",
		}, []string{"route", "decision"}),
		admission: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "fenceproxy_admission_duration_seconds",
			Help: "Time of one admission against the store, by route and outcome (admitted, stale, unavailable).",
			// From 100us (an embedded or local store) to the default 500ms store timeout.
			Buckets: []float64{.0001, .00025, .0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1},
		}, []string{"route", "decision"}),
		upstreamErrors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "fenceproxy_upstream_errors_total",
			Help: "Forwarded requests that got no response from the upstream (answered 502 or 504), by route.",
		}, []string{"route"}),
		drainWait: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "fenceproxy_drain_wait_seconds",
			Help: "Time admitted requests waited at the drain barrier for older requests of their resource to end, by route (only requests that waited).",
			// From a wake on the same host to the default 30s upstream deadline.
			Buckets: []float64{.0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30},
		}, []string{"route"}),
		drain: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "fenceproxy_drain_total",
			Help: "Admitted requests at the drain barrier by route and outcome: none (nothing older in flight), waited, expired (an older request reached its deadline), timeout (not forwarded).",
		}, []string{"route", "outcome"}),
		regressions: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "fenceproxy_mark_regressions_total",
			Help: "Admissions that found the store's mark below the one this replica saw before (lost in a crash, a flush or a failover) and raised it back, by route.",
		}, []string{"route"}),
		clientGone: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "fenceproxy_client_gone_total",
			Help: "Admitted requests in flight whose client went away (timed out, disconnected) before it had the whole answer, by route: each stayed in flight until fenceproxy's own exchange with the upstream ended, the response read and discarded.",
		}, []string{"route"}),
	}
	m.inFlight = prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "fenceproxy_requests_in_flight",
		Help: "Requests on the data port being handled now (fenced or not; in authz mode, questions being answered).",
	})
	m.upstreamTime = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name: "fenceproxy_upstream_duration_seconds",
		Help: "Time of a forward to the upstream, from its start to the end of the response relayed to the client (failures included), by route.",
		// From a loopback answer to the default 30s upstream deadline.
		Buckets: []float64{.0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30},
	}, []string{"route"})
	m.upstreamClass = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "fenceproxy_upstream_responses_total",
		Help: "Responses the upstream gave to forwarded requests, by route and status class (1xx to 5xx); failures with no response are fenceproxy_upstream_errors_total.",
	}, []string{"route", "class"})
	m.storeBatch = prometheus.NewHistogram(prometheus.HistogramOpts{
		Name:    "fenceproxy_store_batch_size",
		Help:    "Admissions and releases one round trip to the store carried (Redis pipelines, etcd transactions).",
		Buckets: []float64{1, 2, 4, 8, 16, 32, 64, 128, 256},
	})
	m.storeRoundTrip = prometheus.NewHistogram(prometheus.HistogramOpts{
		Name:    "fenceproxy_store_round_trip_seconds",
		Help:    "Time of one round trip to the store that carried admissions or releases (not the wait in the queue before it).",
		Buckets: []float64{.0001, .00025, .0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1},
	})
	m.storeUp = prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "fenceproxy_store_up",
		Help: "1 when the store answered the last look (a ping every few seconds), else 0. Reads flow either way; fenced requests get 503 while it is 0.",
	})
	m.storeState = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "fenceproxy_store_state",
		Help: "1 for the store's state at the last look, 0 for the others: ok (fenced requests are admitted), down (it does not answer), unsafe (it answers but is refused: settings that can lose marks, identity not read), lost (its identity record is gone). Only ok admits.",
	}, []string{"state"})
	for _, s := range storeStates {
		m.storeState.WithLabelValues(string(s)) // every state visible at 0 from the start
	}
	m.Registry.MustRegister(m.requests, m.admission, m.upstreamErrors, m.drainWait, m.drain, m.regressions,
		m.clientGone, m.inFlight, m.upstreamTime, m.upstreamClass, m.storeBatch, m.storeRoundTrip, m.storeUp, m.storeState,
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return m
}

// ObserveRoundTrip records one round trip of a store to its server: give
// it to the store's OnRoundTrip option.
func (m *Metrics) ObserveRoundTrip(rt fencestore.RoundTrip) {
	m.storeBatch.Observe(float64(rt.Admissions + rt.Releases))
	m.storeRoundTrip.Observe(rt.Duration.Seconds())
}

// setModes records the modes of the routes of rt, the table now in force.
func (m *Metrics) setModes(rt *router) {
	modes := make(map[string]bool)
	for _, r := range rt.all() {
		modes[r.name] = r.dryRun
	}
	m.modes.Store(&modes)
}

// mode reports whether route is in the table in force, and whether it is
// a dry run there.
func (m *Metrics) mode(route string) (dryRun, inForce bool) {
	modes := m.modes.Load()
	if modes == nil {
		return false, false
	}
	dryRun, inForce = (*modes)[route]
	return dryRun, inForce
}

// routeMetrics are one route's collectors, resolved once at start so the hot
// path does no label lookups.
type routeMetrics struct {
	requests       [numDecisions]prometheus.Counter
	admitted       prometheus.Observer
	stale          prometheus.Observer
	unavailable    prometheus.Observer
	upstreamErrors prometheus.Counter
	upstreamTime   prometheus.Observer
	upstreamClass  [6]prometheus.Counter // by status / 100; 0 for a status outside 100-599
	drainWait      prometheus.Observer
	drain          [numDrainOutcomes]prometheus.Counter
	regressions    prometheus.Counter
	clientGone     prometheus.Counter
}

func (m *Metrics) forRoute(name string, dryRun bool) *routeMetrics {
	rm := &routeMetrics{
		admitted:       m.admission.WithLabelValues(name, decAdmitted.String()),
		stale:          m.admission.WithLabelValues(name, decStale.String()),
		unavailable:    m.admission.WithLabelValues(name, decUnavailable.String()),
		upstreamErrors: m.upstreamErrors.WithLabelValues(name),
		upstreamTime:   m.upstreamTime.WithLabelValues(name),
		drainWait:      m.drainWait.WithLabelValues(name),
		regressions:    m.regressions.WithLabelValues(name),
		clientGone:     m.clientGone.WithLabelValues(name),
	}
	for c := 1; c <= 5; c++ {
		rm.upstreamClass[c] = m.upstreamClass.WithLabelValues(name, string(rune('0'+c))+"xx")
	}
	rm.upstreamClass[0] = m.upstreamClass.WithLabelValues(name, "other")
	for o := drainOutcome(0); o < numDrainOutcomes; o++ {
		rm.drain[o] = m.drain.WithLabelValues(name, drainOutcomeNames[o])
	}
	for d := decision(0); d < numRealDecisions; d++ {
		// Touching every series makes each one visible at 0 from the start, so
		// rate() and alerts work before the first refusal; the would_ series
		// only on a dry-run route (the others never count them).
		rm.requests[d] = m.requests.WithLabelValues(name, d.String())
		if dryRun && d != decAdmitted && d != decUnfenced {
			rm.requests[d.would()] = m.requests.WithLabelValues(name, d.would().String())
		}
	}
	return rm
}
