// Package rocketmq is the RocketMQ transport of orderexpiry, on
// github.com/apache/rocketmq-client-go/v2: a Sender (expiry.DelaySender) and
// a Consumer that feeds an *expiry.Shell.
//
// Two modes:
//
//   - ModeLevels (any 4.x or 5.x broker): each message gets the delay level
//     that levels.Table.Plan picks for the time left (with Config.Slack), from
//     the table the broker is configured with (messageDelayLevel). Messages
//     arrive early; the Handler re-arms them for the rest.
//   - ModeTimer (5.x broker with timerWheelEnable=true): one message with the
//     exact delay, as the relative property TIMER_DELAY_MS so that the
//     broker's clock counts it. Delays above Config.MaxTimerDelay (the
//     broker's timerMaxDelaySec) are capped, and the Handler re-arms at the
//     cap. A 5.x broker with timerWheelEnable=false refuses timer messages:
//     Send fails with an error wrapping ErrTimerRefused, and there is no
//     silent fallback. A 4.x broker does not know the property and delivers
//     at once, so every hop would come straight back and be re-armed: never
//     use ModeTimer against 4.x.
//
// The order number is the message key, the body is expiry's versioned
// encoding, the trace id travels in the user property "oe_trace", and the
// W3C trace context (expiry.Trace) in the user properties "traceparent" and
// "tracestate", the names of the W3C headers.
//
// "Not yet due" is a new delayed send plus success, never the broker's retry:
// the consumer asks for a retry (ConsumeRetryLater) only when the Shell says
// a transient failure happened (the database is down), so the message comes
// back instead of being lost. Bad messages are acknowledged by the Shell.
//
// # Names
//
//   - Sender, NewSender, Consumer, NewConsumer, StartConsumer (NewConsumer
//     then Start, waiting for a new topic's route), Config: the transport and
//     its wiring;
//   - Mode, ModeLevels, ModeTimer, ParseMode, DefaultSlack: how messages are
//     delayed (a level table, or 5.x timer messages), chosen by the host;
//   - TraceProperty, TraceParentProperty, TraceStateProperty: the message
//     properties that carry the trace context, for a host that reads the topic
//     with its own tools;
//   - EnsureTopic (a topic created before a consumer starts) and UseLogger
//     (the client's logs through slog): the client's setup, which a host
//     otherwise writes itself; ErrTimerRefused: a broker without timer
//     messages.
package rocketmq

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	rmq "github.com/apache/rocketmq-client-go/v2"
	"github.com/apache/rocketmq-client-go/v2/admin"
	"github.com/apache/rocketmq-client-go/v2/consumer"
	"github.com/apache/rocketmq-client-go/v2/primitive"
	"github.com/apache/rocketmq-client-go/v2/producer"

	"github.com/seatflow/orderexpiry/expiry"
	"github.com/seatflow/orderexpiry/levels"
)

// Mode chooses how delays are expressed to the broker.
type Mode uint8

// The modes; see the package documentation.
const (
	ModeLevels Mode = iota
	ModeTimer
)

// String returns "levels" or "timer".
func (m Mode) String() string {
	if m == ModeTimer {
		return "timer"
	}
	return "levels"
}

// ParseMode reads "levels" or "timer".
func ParseMode(s string) (Mode, error) {
	switch s {
	case "levels":
		return ModeLevels, nil
	case "timer":
		return ModeTimer, nil
	}
	return 0, fmt.Errorf("rocketmq: unknown mode %q (want levels or timer)", s)
}

// DefaultSlack is the Slack a zero Config gets.
const DefaultSlack = time.Second

// TraceProperty is the message property that carries the trace id.
const TraceProperty = "oe_trace"

// The user properties that carry a message's W3C trace context
// (expiry.Message.Trace). The Sender sets them only for a context that
// passes expiry.Trace.Clean (printable ASCII, bounded), so no value can
// carry client-go's property separators; the Consumer hands whatever a
// producer put there to the Processor, whose Shell bounds it again.
const (
	TraceParentProperty = "traceparent"
	TraceStateProperty  = "tracestate"
)

// timerDelayProperty is the broker's relative timer property (5.x).
const timerDelayProperty = "TIMER_DELAY_MS"

// ErrTimerRefused reports that the broker does not accept timer messages
// (a 5.x broker with timerWheelEnable=false). It is permanent: use ModeLevels
// or enable the timer wheel. The broker's timer flow control is not this
// error: it is transient and handled like any failed send (a failed re-arm
// comes back through the broker's retry, a failed first send is left to the
// reconciler).
var ErrTimerRefused = errors.New("rocketmq: broker refused a timer message")

// timerRefused recognises the broker's refusal. The broker answers
// SYSTEM_ERROR, a code it uses for much else, so the remark is what tells
// (5.x: "accurate timer message is not enabled, timerWheelEnable is false").
func timerRefused(err error) bool {
	msg := err.Error()
	return strings.Contains(msg, "timer message is not enabled") || strings.Contains(msg, "timerWheelEnable is false")
}

// Config configures a Sender or a Consumer.
type Config struct {
	// NameServers are the name server addresses (host:port). Required.
	NameServers []string
	// Topic carries the expiry messages. Required. Create it first
	// (EnsureTopic): a push consumer cannot start on a topic without a route.
	Topic string
	// Group is the consumer group (Consumer) or producer group (Sender).
	// Required.
	Group string
	Mode  Mode
	// Levels is the broker's messageDelayLevel table (ModeLevels); the zero
	// Table means levels.Default.
	Levels levels.Table
	// Slack lets the last hop land up to this long after the deadline, which
	// saves hops (ModeLevels): 0 means one second (a 10s order is then one
	// hop, not six); a negative Slack means none, the greedy rule.
	Slack time.Duration
	// MaxTimerDelay caps a timer message's delay (ModeTimer); 0 means three
	// days, the broker's default timerMaxDelaySec.
	MaxTimerDelay time.Duration
	// SendTimeout bounds a send; 0 means 3 seconds.
	SendTimeout time.Duration
	// Consumers is how many messages the Consumer handles at once; 0: 20.
	Consumers int
	// Runtime: the Logger receives this package's logs and client-go's (see
	// UseLogger); the Observer gets a KindSent event for every message the
	// broker accepted.
	expiry.Runtime
}

func (c *Config) check() error {
	switch {
	case len(c.NameServers) == 0:
		return errors.New("rocketmq: Config.NameServers is empty")
	case c.Topic == "":
		return errors.New("rocketmq: Config.Topic is empty")
	case c.Group == "":
		return errors.New("rocketmq: Config.Group is empty")
	}
	if c.Levels.Len() == 0 {
		c.Levels = levels.Default
	}
	if c.Slack == 0 {
		c.Slack = DefaultSlack
	}
	if c.MaxTimerDelay <= 0 {
		c.MaxTimerDelay = 72 * time.Hour
	}
	if c.SendTimeout <= 0 {
		c.SendTimeout = 3 * time.Second
	}
	if c.Consumers <= 0 {
		c.Consumers = 20
	}
	c.Runtime = c.Runtime.WithDefaults()
	return nil
}

// Sender sends delayed expiry messages. Safe for concurrent use.
type Sender struct {
	cfg Config
	p   rmq.Producer
}

// NewSender starts a producer.
func NewSender(cfg Config) (*Sender, error) {
	if err := cfg.check(); err != nil {
		return nil, err
	}
	UseLogger(cfg.Logger)
	p, err := rmq.NewProducer(
		producer.WithNsResolver(primitive.NewPassthroughResolver(cfg.NameServers)),
		producer.WithGroupName(cfg.Group),
		producer.WithInstanceName(instanceName()),
		producer.WithSendMsgTimeout(cfg.SendTimeout),
		producer.WithRetry(1),
	)
	if err != nil {
		return nil, fmt.Errorf("rocketmq: new producer: %w", err)
	}
	if err := p.Start(); err != nil {
		return nil, fmt.Errorf("rocketmq: start producer: %w", err)
	}
	return &Sender{cfg: cfg, p: p}, nil
}

// Plan returns the level (0 in ModeTimer) and the broker delay a message
// with delay left would be sent with.
func (s *Sender) Plan(delay time.Duration) (level int, brokerDelay time.Duration) {
	if s.cfg.Mode == ModeTimer {
		return 0, min(max(delay, 0), s.cfg.MaxTimerDelay)
	}
	level = s.cfg.Levels.Plan(delay, s.cfg.Slack)
	return level, s.cfg.Levels.Delay(level)
}

// Send implements expiry.DelaySender.
func (s *Sender) Send(ctx context.Context, m expiry.Message, delay time.Duration) error {
	body, err := expiry.EncodeMessage(m)
	if err != nil {
		return fmt.Errorf("rocketmq: send: %w", err)
	}
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("rocketmq: send %s: %w", m.OrderNo, err)
	}
	msg := primitive.NewMessage(s.cfg.Topic, body).WithKeys([]string{m.OrderNo})
	if m.TraceID != "" {
		msg.WithProperty(TraceProperty, m.TraceID)
	}
	if tc := m.Trace.Clean(); tc.Parent != "" {
		msg.WithProperty(TraceParentProperty, tc.Parent)
		if tc.State != "" {
			msg.WithProperty(TraceStateProperty, tc.State)
		}
	}
	level, d := s.Plan(delay)
	if s.cfg.Mode == ModeTimer {
		if d > 0 {
			msg.WithProperty(timerDelayProperty, strconv.FormatInt(d.Milliseconds(), 10))
		}
	} else {
		msg.WithDelayTimeLevel(level)
	}
	ctx, cancel := context.WithTimeout(ctx, s.cfg.SendTimeout)
	defer cancel()
	res, err := s.p.SendSync(ctx, msg)
	if err != nil {
		if s.cfg.Mode == ModeTimer && timerRefused(err) {
			return fmt.Errorf("rocketmq: send %s: %w: %v", m.OrderNo, ErrTimerRefused, err)
		}
		return fmt.Errorf("rocketmq: send %s: %w", m.OrderNo, err)
	}
	if res.Status != primitive.SendOK {
		return fmt.Errorf("rocketmq: send %s: broker answered status %d", m.OrderNo, res.Status)
	}
	s.cfg.Observer.Observe(ctx, expiry.Event{Kind: expiry.KindSent, OrderNo: m.OrderNo, Hop: m.Hop, Level: level, Delay: d})
	return nil
}

// Close shuts the producer down.
func (s *Sender) Close() error {
	if err := s.p.Shutdown(); err != nil {
		return fmt.Errorf("rocketmq: shut down producer: %w", err)
	}
	return nil
}

var instances atomic.Uint64

// instanceName gives every client its own client-go instance: with the
// default one, all producers and consumers of a process share one internal
// client, configured by whichever was created first (other name servers
// are then silently ignored, or creation fails).
func instanceName() string {
	return fmt.Sprintf("oe-%d-%d", os.Getpid(), instances.Add(1))
}

// Consumer is a push consumer that hands every message to an expiry.Processor.
type Consumer struct {
	cfg     Config
	c       rmq.PushConsumer
	mu      sync.Mutex
	closing bool
	started time.Time
	running sync.WaitGroup
}

// NewConsumer subscribes to cfg.Topic; Start begins consuming.
func NewConsumer(cfg Config, p expiry.Processor) (*Consumer, error) {
	if err := cfg.check(); err != nil {
		return nil, err
	}
	if p == nil {
		return nil, errors.New("rocketmq: nil Processor")
	}
	UseLogger(cfg.Logger)
	pc, err := rmq.NewPushConsumer(
		consumer.WithNsResolver(primitive.NewPassthroughResolver(cfg.NameServers)),
		consumer.WithGroupName(cfg.Group),
		consumer.WithInstance(instanceName()),
		consumer.WithConsumeFromWhere(consumer.ConsumeFromFirstOffset),
		consumer.WithConsumeGoroutineNums(cfg.Consumers),
		consumer.WithConsumeMessageBatchMaxSize(1),
	)
	if err != nil {
		return nil, fmt.Errorf("rocketmq: new consumer: %w", err)
	}
	c := &Consumer{cfg: cfg, c: pc}
	err = pc.Subscribe(cfg.Topic, consumer.MessageSelector{}, func(ctx context.Context, msgs ...*primitive.MessageExt) (consumer.ConsumeResult, error) {
		if !c.enter() {
			return consumer.ConsumeRetryLater, nil // shutting down: leave it to the next consumer
		}
		defer c.running.Done()
		result := consumer.ConsumeSuccess
		for _, m := range msgs {
			v := p.Process(ctx, expiry.Delivery{
				Body:    m.Body,
				TraceID: m.GetProperty(TraceProperty),
				Trace:   expiry.Trace{Parent: m.GetProperty(TraceParentProperty), State: m.GetProperty(TraceStateProperty)},
			})
			if v == expiry.Retry {
				result = consumer.ConsumeRetryLater
			}
		}
		return result, nil
	})
	if err != nil {
		return nil, fmt.Errorf("rocketmq: subscribe %s: %w", cfg.Topic, err)
	}
	return c, nil
}

func (c *Consumer) enter() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closing {
		return false
	}
	c.running.Add(1)
	return true
}

// Start begins consuming. It fails if the topic has no route yet.
func (c *Consumer) Start() error {
	c.mu.Lock()
	c.started = time.Now()
	c.mu.Unlock()
	if err := c.c.Start(); err != nil {
		return fmt.Errorf("rocketmq: start consumer on %s: %w", c.cfg.Topic, err)
	}
	return nil
}

// StartConsumer creates a Consumer and starts it, trying again every half
// second while the topic has no route yet (a topic created a moment ago
// reaches the name server within seconds), until ctx is done.
func StartConsumer(ctx context.Context, cfg Config, p expiry.Processor) (*Consumer, error) {
	for {
		c, err := NewConsumer(cfg, p)
		if err != nil {
			return nil, err
		}
		err = c.Start()
		if err == nil {
			return c, nil
		}
		_ = c.Close(context.Background()) // a failed start has shut the client down already
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("%w (gave up: %w)", err, ctx.Err())
		case <-time.After(500 * time.Millisecond):
		}
	}
}

// rebalanceSettle is how long after its start Close lets a consumer's first
// rebalances (a few round trips to the broker each) finish.
const rebalanceSettle = time.Second

// Close stops taking new messages, waits (until ctx is done) for the ones
// being handled, then shuts the client down. client-go's own Shutdown does
// not wait for running handlers; this does.
func (c *Consumer) Close(ctx context.Context) error {
	c.mu.Lock()
	c.closing = true
	c.mu.Unlock()
	done := make(chan struct{})
	go func() { c.running.Wait(); close(done) }()
	var err error
	select {
	case <-done:
	case <-ctx.Done():
		err = fmt.Errorf("rocketmq: handlers still running at shutdown: %w", ctx.Err())
	}
	// A consumer just started is still in its first rebalances (its own and
	// the one the broker's notice of the new member starts), and
	// client-go's Shutdown writes a plain flag that a running rebalance
	// reads unsynchronised: a data race the race detector reports. Give
	// them their moment. (Suspend would stop new ones, but its pullers
	// then sleep 30 s past Shutdown.)
	c.mu.Lock()
	settle := time.Until(c.started.Add(rebalanceSettle))
	c.mu.Unlock()
	if settle > 0 {
		select {
		case <-time.After(settle):
		case <-ctx.Done():
		}
	}
	if serr := c.c.Shutdown(); serr != nil && err == nil {
		err = fmt.Errorf("rocketmq: shut down consumer: %w", serr)
	}
	return err
}

// EnsureTopic creates topic on the broker at brokerAddr (host:port) if it
// does not exist; creating an existing topic is harmless. A push consumer
// cannot start before its topic has a route.
func EnsureTopic(ctx context.Context, nameServers []string, brokerAddr, topic string) error {
	routeDefault()
	a, err := admin.NewAdmin(admin.WithResolver(primitive.NewPassthroughResolver(nameServers)))
	if err != nil {
		return fmt.Errorf("rocketmq: admin: %w", err)
	}
	defer a.Close()
	if err := a.CreateTopic(ctx, admin.WithTopicCreate(topic), admin.WithBrokerAddrCreate(brokerAddr)); err != nil {
		return fmt.Errorf("rocketmq: create topic %s: %w", topic, err)
	}
	return nil
}
