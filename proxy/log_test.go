package proxy

import (
	"errors"
	"net/http/httptest"
	"net/url"
	"testing"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"

	"github.com/fenceproxy/fenceproxy/config"
	"github.com/fenceproxy/fenceproxy/fencestore"
	"github.com/fenceproxy/fenceproxy/fencestore/memstore"
)

func observedProxy(t *testing.T, store fencestore.Store, level zapcore.Level) (*Proxy, *observer.ObservedLogs) {
	t.Helper()
	core, logs := observer.New(level)
	up, _ := url.Parse("http://127.0.0.1:1")
	p, err := New(Options{Upstream: up, Routes: config.DefaultRoutes(), Store: store, Transport: cannedTransport{}, Logger: zap.New(core)})
	if err != nil {
		t.Fatal(err)
	}
	return p, logs
}

func putTo(p *Proxy, token string) int {
	r := httptest.NewRequest("PUT", "/x", nil)
	r.Header.Set("Fencing-Token", token)
	w := httptest.NewRecorder()
	p.ServeHTTP(w, r)
	return w.Code
}

// During a store outage every fenced request is refused; the log keeps a
// sample (zap's sampler), not a line each. Stale refusals, which an operator
// reads one by one, are all logged.
func TestOutageRefusalsAreSampled(t *testing.T) {
	const n = 1000
	p, logs := observedProxy(t, failingStore{err: fencestore.Unavailable(errors.New("down"))}, zapcore.InfoLevel)
	for range n {
		if code := putTo(p, "1"); code != 503 {
			t.Fatalf("status %d", code)
		}
	}
	got := logs.FilterMessage("refused").Len()
	// The first 10 of each second, then one in 100: a run that crosses a
	// second boundary may log up to twice that.
	if got == 0 || got > 2*(outageLogFirst+n/outageLogThereafter) {
		t.Fatalf("%d refusal lines for %d refusals during an outage", got, n)
	}

	p, logs = observedProxy(t, memstore.New(), zapcore.InfoLevel)
	putTo(p, "100")
	for range n {
		putTo(p, "1")
	}
	if got := logs.FilterMessage("refused").FilterField(zap.String("decision", "stale")).Len(); got != n {
		t.Fatalf("%d stale refusal lines, want %d", got, n)
	}
}

// token and mark are strings in every log line (JSON numbers lose precision
// past 2^53), in the admission's debug line as in a refusal's.
func TestLogTokenAndMarkAreStrings(t *testing.T) {
	p, logs := observedProxy(t, memstore.New(), zapcore.DebugLevel)
	putTo(p, "18446744073709551615")
	putTo(p, "1")
	for _, msg := range []string{"admitted", "refused"} {
		entries := logs.FilterMessage(msg).All()
		if len(entries) != 1 {
			t.Fatalf("%d %q lines", len(entries), msg)
		}
		fields := entries[0].ContextMap()
		for _, k := range []string{"token", "mark"} {
			if _, ok := fields[k].(string); !ok {
				t.Errorf("%s line: %s is %T (%v), want a string", msg, k, fields[k], fields[k])
			}
		}
	}
}
