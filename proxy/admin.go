package proxy

import (
	"context"
	"net/http"
	"net/http/pprof"
	"sync/atomic"
	"time"

	"github.com/go-chi/chi/v5"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"go.uber.org/zap"

	"github.com/fenceproxy/fenceproxy/fencestore"
)

// ReadinessCheck is one more condition of the store's health besides its
// answering (for example: Redis could evict marks). A non-nil error makes
// the store's state unsafe (lost if it wraps fencestore.ErrStoreLost), shown
// on the status page and in the metrics; with ReadyRequiresStore it also
// makes the proxy not ready, the error's text being the answer's body.
type ReadinessCheck func(ctx context.Context) error

// AdminOptions configure the admin handler.
type AdminOptions struct {
	Store   fencestore.Store
	Timeout time.Duration // bound on one look at the store (a ping, a check); if zero, 500ms
	Metrics *Metrics
	Checks  []ReadinessCheck
	// ReadyRequiresStore makes /readyz answer 503 while the store is not
	// ok (down, unsafe or lost). Off by default: a store's trouble then
	// refuses only fenced requests (503), and the replica stays in its
	// Service for the requests that need no store, reads above all.
	ReadyRequiresStore bool
	// StoreEvery is how often WatchStore looks at the store; if zero, 5s.
	StoreEvery time.Duration
	Logger     *zap.Logger // if nil, nothing is logged
	// Pprof serves the runtime profiles under /debug/pprof/. Off by default:
	// profiles reveal internals and cost CPU while taken.
	Pprof bool
	// StoreKind names the store on the status page (redis, bolt, etcd,
	// memory). If empty, "unknown".
	StoreKind string
	// Config is the configuration the status page shows, called on every
	// view (so it can show what a reload put in force); its values are shown
	// as given, so it must redact secrets (StatusConfig does). If nil, none
	// is shown.
	Config func() []ConfigItem
}

// Admin serves /healthz, /readyz, /metrics, and the status page: / for a
// person, /status.json for a program (status.go).
type Admin struct {
	http.Handler
	draining atomic.Bool
	status   *statusPage
	health   *storeHealth
}

// NewAdmin builds the admin handler.
func NewAdmin(o AdminOptions) *Admin {
	if o.Timeout <= 0 {
		o.Timeout = 500 * time.Millisecond
	}
	if o.Logger == nil {
		o.Logger = zap.NewNop()
	}
	if o.StoreEvery <= 0 {
		o.StoreEvery = defaultStoreEvery
	}
	a := &Admin{health: &storeHealth{o: o}}
	mux := chi.NewMux()
	mux.Get("/healthz", func(w http.ResponseWriter, r *http.Request) {
		plain(w, http.StatusOK, "ok")
	})
	mux.Get("/readyz", func(w http.ResponseWriter, r *http.Request) {
		if a.draining.Load() {
			plain(w, http.StatusServiceUnavailable, "draining: shutting down")
			return
		}
		if !o.ReadyRequiresStore {
			// The last look (WatchStore's), not a new one: a probe every
			// few seconds from the kubelet need not ping the store too.
			if st := a.health.lastLook(); st.State != "" && st.State != StoreOK {
				plain(w, http.StatusOK, "ready; the fence store is "+string(st.State)+
					": "+st.State.effect()+", unfenced requests flow (FENCE_READY_REQUIRES_STORE=false)")
				return
			}
			plain(w, http.StatusOK, "ready")
			return
		}
		if st := a.health.look(r.Context()); st.State != StoreOK {
			plain(w, http.StatusServiceUnavailable, st.reason())
			return
		}
		plain(w, http.StatusOK, "ready")
	})
	a.status = newStatusPage(o, &a.draining, a.health)
	mux.Get("/", a.status.serveHTML) // exactly "/": other paths stay 404
	mux.Get("/status.json", a.status.serveJSON)
	if o.Metrics != nil {
		mux.Handle("/metrics", promhttp.HandlerFor(o.Metrics.Registry, promhttp.HandlerOpts{}))
	}
	if o.Pprof {
		mux.HandleFunc("/debug/pprof/*", pprof.Index)
		mux.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
		mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
		mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
		mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	}
	a.Handler = mux
	return a
}

// SetDraining makes /readyz answer 503 from now on, so the load balancer
// stops sending new requests while in-flight ones finish.
func (a *Admin) SetDraining() { a.draining.Store(true) }

func plain(w http.ResponseWriter, status int, msg string) {
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	_, _ = w.Write([]byte(msg + "\n"))
}
