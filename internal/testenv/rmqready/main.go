// Command rmqready waits until a RocketMQ name server and broker accept a
// real message. It is run by internal/testenv/rocketmq.sh after starting the
// two JVMs: it waits until the broker has registered with the name server,
// creates the topic "oe_ready" (or -topic) on the broker (admin API) and sends one message,
// retrying each step until one send succeeds or -timeout runs out.
//
// Exit status 0 means a send returned SEND_OK; otherwise it prints one line
// naming the last error and exits 1.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"strconv"
	"time"

	"github.com/apache/rocketmq-client-go/v2/admin"
	"github.com/apache/rocketmq-client-go/v2/primitive"
	"github.com/apache/rocketmq-client-go/v2/producer"
	"github.com/apache/rocketmq-client-go/v2/rlog"
)

// quietLogger drops everything client-go logs (it logs through logrus to
// stderr at info level by default).
type quietLogger struct{}

func (quietLogger) Debug(string, map[string]interface{})   {}
func (quietLogger) Info(string, map[string]interface{})    {}
func (quietLogger) Warning(string, map[string]interface{}) {}
func (quietLogger) Error(string, map[string]interface{})   {}
func (quietLogger) Fatal(string, map[string]interface{})   {}
func (quietLogger) Level(string)                           {}
func (quietLogger) OutputPath(string) error                { return nil }

// topic is created on the broker given and sent to (-topic): a topic that only that
// broker holds, so that the send proves that broker.
var topic = "oe_ready"

var verbose bool

func logf(format string, args ...interface{}) {
	if verbose {
		fmt.Fprintf(os.Stderr, "%s rmqready: %s\n", time.Now().Format("15:04:05.000"), fmt.Sprintf(format, args...))
	}
}

func main() {
	namesrv := flag.String("namesrv", "127.0.0.1:19876", "name server address host:port")
	broker := flag.String("broker", "127.0.0.1:20911", "broker address host:port (the topic is created there)")
	timeout := flag.Duration("timeout", 120*time.Second, "give up after this long")
	flag.StringVar(&topic, "topic", topic, "topic to create on -broker and send to (one per broker, so that the send reaches that broker)")
	flag.BoolVar(&verbose, "v", false, "print every failed attempt to stderr")
	flag.Parse()

	rlog.SetLogger(quietLogger{})

	ctx, cancel := context.WithTimeout(context.Background(), *timeout)
	defer cancel()
	if err := waitReady(ctx, *namesrv, *broker); err != nil {
		fmt.Fprintf(os.Stderr, "rmqready: broker %s via name server %s not ready after %s: %v\n",
			*broker, *namesrv, *timeout, err)
		os.Exit(1)
	}
}

func waitReady(ctx context.Context, namesrv, broker string) error {
	resolver := primitive.NewPassthroughResolver([]string{namesrv})
	lastErr := errors.New("no attempt made")
	registered, topicCreated := false, false
	for attempt := 1; ; attempt++ {
		switch {
		case !registered:
			// A topic created before the broker's first registration with the
			// name server can stay without a route for ~10 s (the name server
			// rejects the early topic registration), so wait for it first.
			if err := brokerRegistered(ctx, resolver); err != nil {
				lastErr = fmt.Errorf("broker not registered with the name server yet: %w", err)
			} else {
				registered = true
				logf("broker registered with the name server")
				continue
			}
		case !topicCreated:
			if err := createTopic(ctx, resolver, broker); err != nil {
				lastErr = fmt.Errorf("create topic %s: %w", topic, err)
			} else {
				topicCreated = true
				logf("topic %s created", topic)
				continue
			}
		default:
			err := sendOne(ctx, resolver, attempt)
			if err == nil {
				logf("sent to %s", topic)
				return nil
			}
			lastErr = fmt.Errorf("send to %s: %w", topic, err)
		}
		logf("%v", lastErr)
		select {
		case <-ctx.Done():
			return lastErr
		case <-time.After(500 * time.Millisecond):
		}
	}
}

// brokerRegistered reports whether the name server has a route for a system
// topic that every broker registers (SELF_TEST_TOPIC).
func brokerRegistered(ctx context.Context, resolver primitive.NsResolver) error {
	adm, err := admin.NewAdmin(admin.WithResolver(resolver))
	if err != nil {
		return err
	}
	defer adm.Close()
	mqs, err := adm.FetchPublishMessageQueues(ctx, "SELF_TEST_TOPIC")
	if err != nil {
		return err
	}
	if len(mqs) == 0 {
		return errors.New("no queue for SELF_TEST_TOPIC")
	}
	return nil
}

func createTopic(ctx context.Context, resolver primitive.NsResolver, broker string) error {
	adm, err := admin.NewAdmin(admin.WithResolver(resolver))
	if err != nil {
		return err
	}
	defer adm.Close()
	cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	// CreateTopic reports transport errors only, not the broker's answer; the
	// send below is the real check.
	return adm.CreateTopic(cctx,
		admin.WithTopicCreate(topic),
		admin.WithBrokerAddrCreate(broker),
		admin.WithReadQueueNums(1),
		admin.WithWriteQueueNums(1),
	)
}

// sendOne uses a fresh producer per attempt: client-go caches a missing route
// and a failed connection, and a new producer starts from scratch.
func sendOne(ctx context.Context, resolver primitive.NsResolver, attempt int) error {
	p, err := producer.NewDefaultProducer(
		producer.WithNsResolver(resolver),
		producer.WithGroupName("oe_ready_producer"),
		producer.WithInstanceName("oe_ready_"+strconv.Itoa(os.Getpid())+"_"+strconv.Itoa(attempt)),
		producer.WithRetry(0),
		producer.WithSendMsgTimeout(3*time.Second),
	)
	if err != nil {
		return err
	}
	if err := p.Start(); err != nil {
		return err
	}
	defer func() { _ = p.Shutdown() }()
	sctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	res, err := p.SendSync(sctx, primitive.NewMessage(topic, []byte("ready")))
	if err != nil {
		return err
	}
	if res.Status != primitive.SendOK {
		return fmt.Errorf("send status %d", res.Status)
	}
	return nil
}
