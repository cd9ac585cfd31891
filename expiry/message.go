package expiry

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"
)

// Message is what travels through a DelaySender: the order to look at, which
// hop of its re-arm chain this is (1 for the first message), the trace id of
// the request that placed the order (for logs), and the W3C trace context the
// message continues (for a tracer; see Tracer).
//
// A warning message (Warning set) asks for the order's expiry warning, Lead
// before its deadline (SchedulerConfig.WarnBefore), instead of its expiry.
type Message struct {
	OrderNo string
	Hop     int
	TraceID string
	// Trace is the W3C trace context of the send (traceparent and
	// tracestate). Like TraceID it is not part of the body: transports carry
	// it beside it, as headers or properties.
	Trace Trace
	// Warning marks the expiry-warning message of the order.
	Warning bool
	// Lead is how long before the deadline the warning is due: whole
	// milliseconds in 1ms..MaxWarnLead; set on warning messages only.
	Lead time.Duration
}

// MaxWarnLead bounds Message.Lead (and SchedulerConfig.WarnBefore).
const MaxWarnLead = 24 * time.Hour

// DelaySender delivers a Message to the consumer after a delay.
//
// Delivery is at least once: a message may arrive twice, late, or (when the
// transport rounds delays, as RocketMQ's fixed levels do) early; the Handler
// is correct under all three. Send returns nil once the transport has accepted
// the message, and an error when it may not have: callers log and count the
// error and rely on the reconciler, they do not retry forever. Send honours
// ctx and must be safe for concurrent use.
type DelaySender interface {
	Send(ctx context.Context, m Message, delay time.Duration) error
}

// ErrBadMessage is wrapped by every error DecodeMessage returns.
var ErrBadMessage = errors.New("orderexpiry: bad message")

// MaxMessageLen is the longest body DecodeMessage looks at; longer bodies are
// rejected without being parsed.
const MaxMessageLen = 256

// MaxHop bounds the hop counter; a chain this long is a bug upstream.
const MaxHop = 1 << 20

// messagePrefix versions the body: a future format gets another prefix and
// old consumers reject it as not theirs rather than misreading it.
var messagePrefix = []byte("oe1 ")

// warningPrefix is the warning message's own format, "oew1 <order-no> <hop>
// <lead-ms>". It is another prefix, not a flag inside the expiry format, so
// that a consumer of an older version counts and drops a warning as a bad
// message (KindBadMessage) instead of taking it for an expiry message.
var warningPrefix = []byte("oew1 ")

// appendMessage appends the body of m: "oe1 <order-no> <hop>", or for a
// warning "oew1 <order-no> <hop> <lead-ms>". The trace id is not part of the
// body; transports carry it as a header or property.
func appendMessage(dst []byte, m Message) []byte {
	if m.Warning {
		dst = append(dst, warningPrefix...)
	} else {
		dst = append(dst, messagePrefix...)
	}
	dst = append(dst, m.OrderNo...)
	dst = append(dst, ' ')
	dst = strconv.AppendInt(dst, int64(m.Hop), 10)
	if m.Warning {
		dst = append(dst, ' ')
		dst = strconv.AppendInt(dst, m.Lead.Milliseconds(), 10)
	}
	return dst
}

// EncodeMessage returns the body of m after checking it.
func EncodeMessage(m Message) ([]byte, error) {
	if err := ValidateID("order number", m.OrderNo); err != nil {
		return nil, err
	}
	if m.Hop < 1 || m.Hop > MaxHop {
		return nil, fmt.Errorf("%w: hop %d outside 1..%d", ErrBadMessage, m.Hop, MaxHop)
	}
	switch {
	case m.Warning && (m.Lead < time.Millisecond || m.Lead > MaxWarnLead || m.Lead%time.Millisecond != 0):
		return nil, fmt.Errorf("%w: warning lead %v is not whole milliseconds in 1ms..%v", ErrBadMessage, m.Lead, MaxWarnLead)
	case !m.Warning && m.Lead != 0:
		return nil, fmt.Errorf("%w: lead %v on an expiry message", ErrBadMessage, m.Lead)
	}
	return appendMessage(make([]byte, 0, len(warningPrefix)+len(m.OrderNo)+20), m), nil
}

// DecodeMessage parses a body written by EncodeMessage, an expiry message or
// a warning. It never panics; any other input (empty, oversized, another
// format, an invalid order number, a bad hop or lead) gives an error
// wrapping ErrBadMessage.
func DecodeMessage(body []byte) (Message, error) {
	if len(body) > MaxMessageLen {
		return Message{}, fmt.Errorf("%w: %d bytes, longer than %d", ErrBadMessage, len(body), MaxMessageLen)
	}
	rest, ok := bytes.CutPrefix(body, messagePrefix)
	warning := false
	if !ok {
		if rest, warning = bytes.CutPrefix(body, warningPrefix); !warning {
			return Message{}, fmt.Errorf("%w: not an orderexpiry v1 message", ErrBadMessage)
		}
	}
	var leadText []byte
	if warning {
		i := bytes.LastIndexByte(rest, ' ')
		if i < 0 {
			return Message{}, fmt.Errorf("%w: warning without its lead", ErrBadMessage)
		}
		rest, leadText = rest[:i], rest[i+1:]
	}
	no, hopText, ok := bytes.Cut(rest, []byte{' '})
	if !ok {
		return Message{}, fmt.Errorf("%w: no hop", ErrBadMessage)
	}
	orderNo := string(no)
	if err := ValidateID("order number", orderNo); err != nil {
		return Message{}, fmt.Errorf("%w: %w", ErrBadMessage, err)
	}
	hop, err := strconv.Atoi(string(hopText))
	// Only the canonical form EncodeMessage writes ("01" and "+1" are not).
	if err != nil || hop < 1 || hop > MaxHop || strconv.Itoa(hop) != string(hopText) {
		return Message{}, fmt.Errorf("%w: hop %q is not a number in 1..%d", ErrBadMessage, hopText, MaxHop)
	}
	if !warning {
		return Message{OrderNo: orderNo, Hop: hop}, nil
	}
	ms, err := strconv.ParseInt(string(leadText), 10, 64)
	if err != nil || ms < 1 || ms > MaxWarnLead.Milliseconds() || strconv.FormatInt(ms, 10) != string(leadText) {
		return Message{}, fmt.Errorf("%w: warning lead %q is not milliseconds in 1..%d", ErrBadMessage, leadText, MaxWarnLead.Milliseconds())
	}
	return Message{OrderNo: orderNo, Hop: hop, Warning: true, Lead: time.Duration(ms) * time.Millisecond}, nil
}

type traceKey struct{}

// WithTraceID returns ctx carrying a trace id, for logs and for messages sent
// from it (the Scheduler and the Handler's re-arm copy it into the message).
func WithTraceID(ctx context.Context, id string) context.Context {
	if id == "" {
		return ctx
	}
	return context.WithValue(ctx, traceKey{}, id)
}

// TraceID returns the trace id carried by ctx, or "".
func TraceID(ctx context.Context) string {
	id, _ := ctx.Value(traceKey{}).(string)
	return id
}
