package main

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"strconv"
	"time"

	"github.com/apache/rocketmq-client-go/v2/admin"
	"github.com/apache/rocketmq-client-go/v2/primitive"

	"github.com/seatflow/orderexpiry/expiry"
	"github.com/seatflow/orderexpiry/expiry/rocketmq"
)

// rmqTopic creates a fresh topic for one bench case and returns a config for
// it, and a cleanup that deletes the topic.
func (c *common) rmqTopic(ctx context.Context, tag string) (rocketmq.Config, func(), error) {
	name := "oe_bench_" + tag + "_" + strconv.FormatInt(time.Now().UnixNano()%1e9, 36)
	ns := []string{c.namesrv}
	cctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	if err := rocketmq.EnsureTopic(cctx, ns, c.broker, name); err != nil {
		return rocketmq.Config{}, nil, err
	}
	// client-go warns about routes of not-yet-created retry topics while a
	// new consumer starts; keep its errors only.
	quiet := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelError}))
	if c.verbose {
		quiet = c.log
	}
	cfg := rocketmq.Config{NameServers: ns, Topic: name, Group: name + "_g", Runtime: expiry.Runtime{Logger: quiet}}
	return cfg, func() {
		a, err := admin.NewAdmin(admin.WithResolver(primitive.NewPassthroughResolver(ns)))
		if err != nil {
			return
		}
		defer a.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := a.DeleteTopic(ctx, admin.WithTopicDelete(name), admin.WithBrokerAddrDelete(c.broker), admin.WithNameSrvAddr(ns)); err != nil {
			c.log.Warn("delete topic", "topic", name, "err", err)
		}
	}, nil
}

// rmqConsumer starts a consumer, retrying while a new topic's route
// propagates to the name server.
func rmqConsumer(cfg rocketmq.Config, p expiry.Processor) (*rocketmq.Consumer, error) {
	deadline := time.Now().Add(40 * time.Second)
	for {
		c, err := rocketmq.NewConsumer(cfg, p)
		if err != nil {
			return nil, err
		}
		if err = c.Start(); err == nil {
			return c, nil
		}
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		_ = c.Close(ctx)
		cancel()
		if time.Now().After(deadline) {
			return nil, fmt.Errorf("consumer did not start: %w", err)
		}
		time.Sleep(500 * time.Millisecond)
	}
}

func closeConsumer(c *rocketmq.Consumer) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_ = c.Close(ctx)
}
