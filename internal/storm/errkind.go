package storm

import (
	"context"
	"database/sql/driver"
	"errors"
	"fmt"
	"io"
	"net"
	"sort"
	"strings"
	"sync"

	"github.com/go-sql-driver/mysql"
)

// ErrKind sorts an error a library call returned during the storm by what
// caused it. Faults give "timeout", "refused", "conn_lost", "redis_loading"
// and "broker"; anything else is "other", which the storm reports in full:
// it may be a library bug rather than a fault.
func ErrKind(err error) string {
	if err == nil {
		return ""
	}
	s := err.Error()
	var ne net.Error
	switch {
	case errors.Is(err, ErrBroker):
		return "broker"
	case errors.Is(err, context.DeadlineExceeded), errors.Is(err, context.Canceled),
		errors.As(err, &ne) && ne.Timeout(),
		strings.Contains(s, "i/o timeout"),
		strings.Contains(s, "canceling statement due to user request"), // PostgreSQL 57014 after a context cancel
		strings.Contains(s, "Query execution was interrupted"):         // MariaDB 1317
		return "timeout"
	case strings.Contains(s, "connection refused"):
		return "refused"
	case strings.HasPrefix(s, "LOADING") || strings.Contains(s, ": LOADING "):
		return "redis_loading"
	case errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF),
		errors.Is(err, driver.ErrBadConn), errors.Is(err, mysql.ErrInvalidConn),
		errors.Is(err, net.ErrClosed),
		strings.Contains(s, "connection reset"), strings.Contains(s, "broken pipe"),
		strings.Contains(s, "EOF"), strings.Contains(s, "conn closed"),
		strings.Contains(s, "closed network connection"), strings.Contains(s, "bad connection"),
		strings.Contains(s, "failed to connect"), strings.Contains(s, "server closed the connection"),
		strings.Contains(s, "terminating connection"):
		return "conn_lost"
	}
	return "other"
}

// ErrBroker is what the storm's simulated broker returns when it refuses a
// delayed send.
var ErrBroker = errors.New("storm: broker unavailable")

// Counter counts errors (or anything else) by kind, keeping a few samples.
type Counter struct {
	mu      sync.Mutex
	n       map[string]int
	samples map[string][]string
}

// NewCounter returns an empty Counter.
func NewCounter() *Counter {
	return &Counter{n: map[string]int{}, samples: map[string][]string{}}
}

// Add counts one event of kind, with a sample text.
func (c *Counter) Add(kind, sample string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.n[kind]++
	if len(c.samples[kind]) < 3 {
		c.samples[kind] = append(c.samples[kind], sample)
	}
}

// Err counts err under "<what>:<ErrKind(err)>" and returns its kind; nil
// errors are not counted.
func (c *Counter) Err(what string, err error) string {
	if err == nil {
		return ""
	}
	k := ErrKind(err)
	c.Add(what+":"+k, err.Error())
	return k
}

// Map returns the counts.
func (c *Counter) Map() map[string]int {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := make(map[string]int, len(c.n))
	for k, v := range c.n {
		out[k] = v
	}
	return out
}

// Get returns the count of kind.
func (c *Counter) Get(kind string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.n[kind]
}

// Total returns the sum of the counts whose kind ends with suffix ("" for all).
func (c *Counter) Total(suffix string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	t := 0
	for k, v := range c.n {
		if strings.HasSuffix(k, suffix) {
			t += v
		}
	}
	return t
}

// Samples describes the samples of the kinds ending with suffix.
func (c *Counter) Samples(suffix string) []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []string
	for k, ss := range c.samples {
		if strings.HasSuffix(k, suffix) {
			for _, s := range ss {
				out = append(out, fmt.Sprintf("%s: %s", k, s))
			}
		}
	}
	sort.Strings(out)
	return out
}
