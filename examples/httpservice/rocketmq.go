package main

import (
	"context"
	"crypto/rand"
	"errors"
	"strings"
	"time"

	"github.com/seatflow/orderexpiry/expiry"
	"github.com/seatflow/orderexpiry/expiry/rocketmq"
)

// newRocketMQ is the production transport in timer mode: one message per
// order, delayed by the broker's clock; the handler re-arms what arrives
// early and the reconciler catches what is lost.
func newRocketMQ(cfg config) (*transport, error) {
	topic := "oe_orders_" + strings.ToLower(rand.Text()[:8]) // one service instance, one topic: the demo's choice
	rc := rocketmq.Config{NameServers: []string{cfg.RocketMQ}, Topic: topic, Group: topic + "_p", Mode: rocketmq.ModeTimer}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := rocketmq.EnsureTopic(ctx, rc.NameServers, cfg.Broker, topic); err != nil {
		return nil, err
	}
	sender, err := rocketmq.NewSender(rc)
	if err != nil {
		return nil, err
	}
	var consumer *rocketmq.Consumer
	return &transport{
		sender: sender,
		about:  "RocketMQ timer mode, topic " + topic,
		attach: func(sh *expiry.Shell) error {
			rc.Group = topic + "_c"
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			consumer, err = rocketmq.StartConsumer(ctx, rc, sh)
			return err
		},
		close: closeOnce(func() error {
			var errs []error
			if consumer != nil {
				ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
				defer cancel()
				errs = append(errs, consumer.Close(ctx)) // waits for handlers in progress
			}
			return errors.Join(append(errs, sender.Close())...)
		}),
	}, nil
}
