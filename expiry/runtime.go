package expiry

import "log/slog"

// Runtime is how every component of orderexpiry gets its logger, its
// observer, its clock and its tracer: a host builds one value and puts it in each Config
// (HandlerConfig, SchedulerConfig, cancel.Config, reconcile.Config and the
// transports' Configs), which embed it. The zero Runtime is ready to use.
type Runtime struct {
	// Logger receives the component's logs; nil: slog.Default().
	Logger *slog.Logger
	// Observer receives every Event; nil: NopObserver. See Observer for
	// what it must be (quick, safe for concurrent use).
	Observer Observer
	// Clock is what components wait by (timers, retry pacing) and stamp
	// their own times with; nil: SystemClock. It never decides whether an
	// order is due or a seat lock old: those are the database's and the
	// seat store's clocks (invariant I11), so a host whose clock is skewed
	// waits a little wrong but never cancels early.
	Clock Clock
	// Tracer traces the sends (Scheduler, the Handler's re-arm) and the
	// handling of messages (Shell), carrying the placing request's trace
	// context in each message; nil: NopTracer. expiry/otel provides an
	// OpenTelemetry one.
	Tracer Tracer
}

// WithDefaults returns r with every nil field set to its default.
func (r Runtime) WithDefaults() Runtime {
	if r.Logger == nil {
		r.Logger = slog.Default()
	}
	if r.Observer == nil {
		r.Observer = NopObserver
	}
	if r.Clock == nil {
		r.Clock = SystemClock
	}
	if r.Tracer == nil {
		r.Tracer = NopTracer
	}
	return r
}
