// Command httpservice shows how a host embeds orderexpiry in an existing
// order service, as a net/http service:
//
//	POST /orders              place: lock seats in Redis, insert the order in
//	                          the service's own SQL transaction, send the
//	                          expiry message after commit
//	GET  /orders/{no}         read the caller's order
//	POST /orders/{no}/pay     payment callback (409 when it lost to a cancel)
//	POST /orders/{no}/cancel  the caller cancels (user in the X-User header)
//	GET  /metrics             Prometheus metrics (expiry/prometheus)
//
// with the reconciler running beside the server; SIGINT/SIGTERM stop all of
// it cleanly. By default it runs on embedded infrastructure (a SQLite file in
// a temporary directory, miniredis, the in-process sender with RocketMQ's
// default levels); flags select real servers.
//
//	go run ./examples/httpservice -expiry 30s
//	curl -si -X POST localhost:8080/orders -H 'X-User: alice' -d '{"show_id":"s1","seats":["A1","A2"]}'
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strings"
	"sync"
	"syscall"
	"time"
)

type config struct {
	Addr      string
	Expiry    time.Duration
	Limit     int
	Reconcile time.Duration
	MySQL     string
	Postgres  string
	Redis     string
	RocketMQ  string
	Broker    string
	Verbose   bool
}

func parseFlags(args []string, stdout io.Writer) (config, error) {
	var c config
	fs := flag.NewFlagSet("httpservice", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.Usage = func() {}
	fs.StringVar(&c.Addr, "addr", "127.0.0.1:8080", "listen `address`")
	fs.DurationVar(&c.Expiry, "expiry", 15*time.Minute, "payment window of an order")
	fs.IntVar(&c.Limit, "limit", 6, "seats one user may hold in one show")
	fs.DurationVar(&c.Reconcile, "reconcile", time.Minute, "interval of the reconciler's rounds")
	fs.StringVar(&c.MySQL, "mysql", "", "MySQL/MariaDB `DSN` instead of SQLite, e.g. 'oe:oe@tcp(127.0.0.1:13306)/oe'")
	fs.StringVar(&c.Postgres, "postgres", "", "PostgreSQL `DSN` instead of SQLite, e.g. 'postgres://oe:oe@127.0.0.1:15432/oe?sslmode=disable'")
	fs.StringVar(&c.Redis, "redis", "", "Redis `ADDR` (host:port or redis:// URL) instead of miniredis")
	fs.StringVar(&c.RocketMQ, "rocketmq", "", "RocketMQ name server `NAMESRV` instead of the in-process sender (timer mode: a 5.x broker)")
	fs.StringVar(&c.Broker, "rocketmq-broker", "127.0.0.1:10911", "RocketMQ broker `ADDR` on which the service creates its topic")
	fs.BoolVar(&c.Verbose, "v", false, "debug logs")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			fmt.Fprint(stdout, "httpservice: an order service over HTTP with orderexpiry embedded.\n\nUsage: go run ./examples/httpservice [flags]\n\nFlags:\n")
			fs.SetOutput(stdout)
			fs.PrintDefaults()
		}
		return c, err
	}
	switch {
	case fs.NArg() > 0:
		return c, fmt.Errorf("unexpected argument %q", fs.Arg(0))
	case c.Expiry <= 0:
		return c, fmt.Errorf("-expiry %v: want a positive duration", c.Expiry)
	case c.Limit < 1:
		return c, fmt.Errorf("-limit %d: want at least 1", c.Limit)
	case c.Reconcile <= 0:
		return c, fmt.Errorf("-reconcile %v: want a positive duration", c.Reconcile)
	case c.MySQL != "" && c.Postgres != "":
		return c, errors.New("-mysql and -postgres exclude each other")
	}
	return c, nil
}

func main() {
	cfg, err := parseFlags(os.Args[1:], os.Stdout)
	if errors.Is(err, flag.ErrHelp) {
		return
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "httpservice: %s (see -h)\n", oneLine(err))
		os.Exit(2)
	}
	level := slog.LevelInfo
	if cfg.Verbose {
		level = slog.LevelDebug
	}
	logger := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: level}))
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := serve(ctx, cfg, nil, logger); err != nil {
		fmt.Fprintln(os.Stderr, "httpservice:", oneLine(err))
		os.Exit(2)
	}
}

// serve runs the service until ctx is done, on ln (nil: listen on cfg.Addr),
// then stops it in order: the HTTP server (waiting for requests in flight),
// the reconciler, the transport (waiting for deliveries in progress), Redis
// and the database.
func serve(ctx context.Context, cfg config, ln net.Listener, logger *slog.Logger) error {
	tr, err := newTransport(cfg)
	if err != nil {
		return err
	}
	defer func() {
		if err := tr.close(); err != nil {
			logger.Warn("transport did not close cleanly", "err", err)
		}
	}()
	e, err := openEnv(ctx, cfg)
	if err != nil {
		return err
	}
	defer func() {
		if err := e.close(); err != nil {
			logger.Warn("closing the database or Redis", "err", err)
		}
	}()
	app, shell, err := New(ctx, Config{DB: e.db, Dialect: e.dialect, Redis: e.rdb, Sender: tr.sender,
		Expiry: cfg.Expiry, Limit: cfg.Limit, ReconcileEvery: cfg.Reconcile, Logger: logger})
	if err != nil {
		return err
	}
	if err := tr.attach(shell); err != nil {
		return err // the deferred close stops the sender
	}
	if ln == nil {
		if ln, err = net.Listen("tcp", cfg.Addr); err != nil {
			return err
		}
	}
	srv := &http.Server{Handler: app.Handler(), ReadHeaderTimeout: 10 * time.Second, ErrorLog: slog.NewLogLogger(logger.Handler(), slog.LevelWarn)}

	recCtx, stopRec := context.WithCancel(context.WithoutCancel(ctx))
	var wg sync.WaitGroup
	wg.Go(func() {
		if err := app.RunReconciler(recCtx); err != nil && recCtx.Err() == nil {
			logger.Error("reconciler stopped", "err", err)
		}
	})
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()
	logger.Info("serving", "addr", ln.Addr().String(), "expiry", cfg.Expiry, "reconcile", cfg.Reconcile, "orders", e.about[0], "seats", e.about[1], "timer", tr.about)

	var serveErr error
	select {
	case <-ctx.Done():
		shutdownCtx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		serveErr = srv.Shutdown(shutdownCtx)
		cancel()
		<-served
	case serveErr = <-served:
	}
	stopRec()
	wg.Wait()
	if err := tr.close(); err != nil {
		logger.Warn("transport did not close cleanly", "err", err)
	}
	logger.Info("stopped")
	if errors.Is(serveErr, http.ErrServerClosed) {
		return nil
	}
	return serveErr
}

func oneLine(err error) string { return strings.Join(strings.Fields(err.Error()), " ") }
