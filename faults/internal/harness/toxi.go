package harness

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"

	toxiproxy "github.com/Shopify/toxiproxy/v2"
	"github.com/rs/zerolog"
)

// Toxiproxy runs in process, as a library: no API server, no port of its
// own; the harness drives proxies and toxics through the Go API.

func init() {
	// The toxics log through zerolog's global logger (trace level and up to
	// stderr); nothing of it is wanted in the suite's output.
	zerolog.SetGlobalLevel(zerolog.Disabled)
}

// Toxic is one toxiproxy proxy: a TCP listener on 127.0.0.1 that forwards to
// an upstream address through the toxics added to it.
type Toxic struct {
	p *toxiproxy.Proxy
}

func newToxicServer() *toxiproxy.ApiServer {
	return toxiproxy.NewServer(toxiproxy.NewMetricsContainer(nil), zerolog.Nop())
}

func startToxic(srv *toxiproxy.ApiServer, name, upstream string) (*Toxic, error) {
	p := toxiproxy.NewProxy(srv, name, "127.0.0.1:0", upstream)
	if err := p.Start(); err != nil {
		return nil, fmt.Errorf("toxiproxy %s: %w", name, err)
	}
	return &Toxic{p: p}, nil
}

// Addr is the listener's host:port; it stays the same across Disable and
// Enable.
func (t *Toxic) Addr() string { return t.p.Listen }

// Add adds a toxic: typ is latency, bandwidth, reset_peer, timeout...;
// stream is "upstream" (towards Redis) or "downstream" (towards the client).
func (t *Toxic) Add(name, typ, stream string, attrs map[string]any) error {
	b, err := json.Marshal(map[string]any{"name": name, "type": typ, "stream": stream, "toxicity": 1.0, "attributes": attrs})
	if err != nil {
		return err
	}
	if _, err := t.p.Toxics.AddToxicJson(strings.NewReader(string(b))); err != nil {
		return fmt.Errorf("toxic %s: %w", name, err)
	}
	return nil
}

// Remove removes a toxic; data it held back flows on (latency) or was
// dropped (timeout).
func (t *Toxic) Remove(name string) error {
	return t.p.Toxics.RemoveToxic(context.Background(), name)
}

// Disable cuts the link: the listener closes and every connection through
// it is closed; new connections are refused until Enable.
func (t *Toxic) Disable() { t.p.Stop() }

// Enable listens again on the same address.
func (t *Toxic) Enable() error { return t.p.Start() }

// Close removes every toxic and stops the proxy.
func (t *Toxic) Close() {
	t.p.Toxics.ResetToxics(context.Background())
	t.p.Stop()
}
