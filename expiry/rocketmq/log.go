package rocketmq

import (
	"context"
	"log/slog"
	"sync"
	"sync/atomic"

	"github.com/apache/rocketmq-client-go/v2/rlog"
)

// client-go reads its logger from a global without synchronisation, so it is
// installed once, before any client exists, and what it writes to is swapped
// atomically afterwards.
var (
	install sync.Once
	target  atomic.Pointer[slog.Logger]
)

// UseLogger routes client-go's logging (a process-wide setting of client-go)
// to l: its errors as errors, everything else at debug level (its warnings
// repeat every rebalance for conditions that are normal, such as a group's
// retry topic not existing yet), so a default logger stays quiet. NewSender, NewConsumer and
// EnsureTopic route it to their logger (slog.Default() if none was given
// yet). Safe to call at any time.
func UseLogger(l *slog.Logger) {
	if l == nil {
		l = slog.Default()
	}
	target.Store(l)
	install.Do(func() { rlog.SetLogger(slogAdapter{}) })
}

// routeDefault installs the adapter with slog.Default() unless a logger was
// chosen already, so that no client-go call writes to stderr on its own.
func routeDefault() {
	if target.Load() == nil {
		UseLogger(nil)
	}
}

type slogAdapter struct{}

func (slogAdapter) log(level slog.Level, msg string, fields map[string]interface{}) {
	l := target.Load()
	if l == nil || !l.Enabled(context.Background(), level) {
		return
	}
	attrs := make([]any, 0, 2*len(fields)+2)
	attrs = append(attrs, "component", "rocketmq-client-go")
	for k, v := range fields {
		attrs = append(attrs, k, v)
	}
	l.Log(context.Background(), level, msg, attrs...)
}

func (a slogAdapter) Debug(msg string, f map[string]interface{})   { a.log(slog.LevelDebug-4, msg, f) }
func (a slogAdapter) Info(msg string, f map[string]interface{})    { a.log(slog.LevelDebug, msg, f) }
func (a slogAdapter) Warning(msg string, f map[string]interface{}) { a.log(slog.LevelDebug, msg, f) }
func (a slogAdapter) Error(msg string, f map[string]interface{})   { a.log(slog.LevelError, msg, f) }
func (a slogAdapter) Fatal(msg string, f map[string]interface{})   { a.log(slog.LevelError+4, msg, f) }
func (slogAdapter) Level(string)                                   {}
func (slogAdapter) OutputPath(string) error                        { return nil }
