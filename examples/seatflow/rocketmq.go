package main

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/seatflow/orderexpiry/expiry"
	"github.com/seatflow/orderexpiry/expiry/rocketmq"
)

// newRocketMQ is the production transport: a producer as the DelaySender and
// a push consumer feeding the Shell, on a topic of this run's own.
func newRocketMQ(cfg config, obs expiry.Observer) (*transport, error) {
	mode, err := rocketmq.ParseMode(cfg.Mode)
	if err != nil {
		return nil, setupErrorf("-rocketmq-mode: %w", err)
	}
	topic := "oe_demo_" + strings.TrimSuffix(runPrefix(), "-")
	rc := rocketmq.Config{NameServers: []string{cfg.RocketMQ}, Topic: topic, Group: topic + "_p", Mode: mode, Slack: demoSlack, Runtime: expiry.Runtime{Observer: obs}}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := rocketmq.EnsureTopic(ctx, rc.NameServers, cfg.Broker, topic); err != nil {
		return nil, setupErrorf("%w", err)
	}
	sender, err := rocketmq.NewSender(rc)
	if err != nil {
		return nil, setupErrorf("%w", err)
	}
	var consumer *rocketmq.Consumer
	t := &transport{
		sender:   sender,
		inFlight: func() int { return -1 }, // the broker holds them; unknown here
		about:    fmt.Sprintf("timer:  RocketMQ %s mode, topic %s on %s", mode, topic, cfg.RocketMQ),
	}
	t.attach = func(sh *expiry.Shell) error {
		rc.Group = topic + "_c"
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		c, err := rocketmq.StartConsumer(ctx, rc, sh)
		consumer = c
		return err
	}
	t.close = closeOnce(func() error {
		var errs []error
		if consumer != nil {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			errs = append(errs, consumer.Close(ctx)) // waits for handlers in progress
		}
		return errors.Join(append(errs, sender.Close())...)
	})
	return t, nil
}
