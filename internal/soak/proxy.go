// Package soak is the multi-process soak of orderexpiry: three
// instances of an order service (cmd/soakinstance, real OS processes) in one
// consumer group on two RocketMQ brokers, sharing a database and a replicated
// Redis, under a load generator, while an instance is SIGKILLed, a broker is
// SIGKILLed with delayed messages stored on it, and the Redis primary is
// SIGKILLed and its replica promoted. See soak_test.go and README.md in this
// directory.
package soak

import (
	"io"
	"net"
	"sync"
)

// Proxy forwards TCP connections to a target that can be switched: what a
// virtual IP, a DNS name or a Sentinel-aware client gives a host after a Redis
// failover. Switch closes every connection in progress, as a failover does.
type Proxy struct {
	ln     net.Listener
	mu     sync.Mutex
	target string
	conns  map[net.Conn]struct{}
	wg     sync.WaitGroup
}

// NewProxy listens on a free loopback port and forwards to target.
func NewProxy(target string) (*Proxy, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	p := &Proxy{ln: ln, target: target, conns: map[net.Conn]struct{}{}}
	p.wg.Go(p.accept)
	return p, nil
}

// Addr is the address clients dial.
func (p *Proxy) Addr() string { return p.ln.Addr().String() }

// Switch sends new connections to target and closes the current ones.
func (p *Proxy) Switch(target string) {
	p.mu.Lock()
	p.target = target
	for c := range p.conns {
		_ = c.Close()
	}
	p.mu.Unlock()
}

// Close stops the proxy and closes every connection.
func (p *Proxy) Close() {
	_ = p.ln.Close()
	p.Switch("")
	p.wg.Wait()
}

func (p *Proxy) track(c net.Conn, on bool) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if on {
		p.conns[c] = struct{}{}
	} else {
		delete(p.conns, c)
	}
	return true
}

func (p *Proxy) accept() {
	for {
		in, err := p.ln.Accept()
		if err != nil {
			return
		}
		p.mu.Lock()
		target := p.target
		p.mu.Unlock()
		p.wg.Go(func() {
			defer in.Close()
			if target == "" {
				return
			}
			out, err := net.Dial("tcp", target)
			if err != nil {
				return
			}
			defer out.Close()
			p.track(in, true)
			p.track(out, true)
			defer p.track(in, false)
			defer p.track(out, false)
			done := make(chan struct{}, 2)
			go func() { _, _ = io.Copy(out, in); done <- struct{}{} }()
			go func() { _, _ = io.Copy(in, out); done <- struct{}{} }()
			<-done
		})
	}
}
