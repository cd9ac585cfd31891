package storm

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"testing"

	toxiproxy "github.com/Shopify/toxiproxy/v2"
	"github.com/rs/zerolog"
)

// Proxies runs a toxiproxy server in this process (no HTTP API: the
// collection is driven directly) to put faults between the library and its
// servers: toxics (latency, reset_peer, timeout) and whole proxies disabled
// for a while.
type Proxies struct {
	srv *toxiproxy.ApiServer
}

// NewProxies returns an empty set of proxies; every proxy is stopped at
// cleanup.
func NewProxies(t testing.TB) *Proxies {
	p := &Proxies{srv: toxiproxy.NewServer(toxiproxy.NewMetricsContainer(nil), zerolog.Nop())}
	t.Cleanup(func() { _ = p.srv.Collection.Clear() })
	return p
}

// Proxy is one TCP proxy with its faults.
type Proxy struct {
	p      *toxiproxy.Proxy
	addr   string
	mu     sync.Mutex
	toxics map[string]bool
}

// Add starts a proxy named name on a random 127.0.0.1 port to upstream.
func (ps *Proxies) Add(t testing.TB, name, upstream string) *Proxy {
	t.Helper()
	p := toxiproxy.NewProxy(ps.srv, name, "127.0.0.1:0", upstream)
	if err := ps.srv.Collection.Add(p, true); err != nil {
		t.Fatalf("storm: start proxy %s: %v", name, err)
	}
	p.Lock()
	addr := p.Listen // the port picked at start; a restart listens on it again
	p.Unlock()
	return &Proxy{p: p, addr: addr, toxics: map[string]bool{}}
}

// Addr is where clients connect.
func (p *Proxy) Addr() string { return p.addr }

// Toxic adds a toxic: typ is a toxiproxy toxic type (latency, reset_peer,
// timeout, ...), stream "upstream" (client to server) or "downstream",
// toxicity the share of connections it applies to, attrs its attributes.
func (p *Proxy) Toxic(name, typ, stream string, toxicity float32, attrs map[string]any) error {
	body, err := json.Marshal(map[string]any{"name": name, "type": typ, "stream": stream, "toxicity": toxicity, "attributes": attrs})
	if err != nil {
		return err
	}
	if _, err := p.p.Toxics.AddToxicJson(strings.NewReader(string(body))); err != nil {
		return fmt.Errorf("storm: add toxic %s to %s: %w", name, p.p.Name, err)
	}
	p.mu.Lock()
	p.toxics[name] = true
	p.mu.Unlock()
	return nil
}

// RemoveToxic removes a toxic added by Toxic.
func (p *Proxy) RemoveToxic(name string) error {
	p.mu.Lock()
	delete(p.toxics, name)
	p.mu.Unlock()
	if err := p.p.Toxics.RemoveToxic(context.Background(), name); err != nil {
		return fmt.Errorf("storm: remove toxic %s from %s: %w", name, p.p.Name, err)
	}
	return nil
}

// Disable stops the proxy: its connections are closed and new ones are
// refused, as if the server were unreachable.
func (p *Proxy) Disable() { p.p.Stop() }

// Enable starts the proxy again on the same address.
func (p *Proxy) Enable() error {
	p.p.Lock()
	enabled := p.p.Enabled
	p.p.Unlock()
	if enabled {
		return nil
	}
	if err := p.p.Start(); err != nil {
		return fmt.Errorf("storm: enable proxy %s: %w", p.p.Name, err)
	}
	return nil
}

// Heal removes every toxic and enables the proxy.
func (p *Proxy) Heal() error {
	p.mu.Lock()
	var names []string
	for n := range p.toxics {
		names = append(names, n)
	}
	p.mu.Unlock()
	for _, n := range names {
		if err := p.RemoveToxic(n); err != nil {
			return err
		}
	}
	return p.Enable()
}
