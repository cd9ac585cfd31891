package main

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"time"

	prom "github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/redis/go-redis/v9"

	"github.com/seatflow/orderexpiry/cancel"
	"github.com/seatflow/orderexpiry/cancel/redisseat"
	"github.com/seatflow/orderexpiry/cancel/sqlstore"
	"github.com/seatflow/orderexpiry/expiry"
	"github.com/seatflow/orderexpiry/expiry/prometheus"
	"github.com/seatflow/orderexpiry/reconcile"
)

// Config is what the order service is built from: the host's own database
// and Redis, the transport's sender, and its business settings.
type Config struct {
	DB      *sql.DB
	Dialect sqlstore.Dialect
	Redis   redis.UniversalClient
	// Namespace prefixes the service's Redis keys; "" means
	// redisseat.DefaultNamespace. Services sharing a Redis need their own.
	Namespace string
	Sender    expiry.DelaySender // the transport's sender (expiry/rocketmq in production)

	Expiry         time.Duration // payment window; 0: 15 minutes
	Limit          int           // seats one user may hold in one show; 0: 6
	ReconcileEvery time.Duration // 0: one minute
	Logger         *slog.Logger  // nil: slog.Default()
	// Observer, if set, receives the library's events besides the service's
	// own Prometheus metrics (served on GET /metrics).
	Observer expiry.Observer
	// OnDiscrepancy is called when money arrives that the order cannot take
	// (it was cancelled, or paid by another payment): refund it, keyed by
	// d.PaymentID at the provider. It runs once per payment id; an error
	// leaves it to the reconciler, which calls it again. Nil: logged only.
	OnDiscrepancy func(ctx context.Context, d cancel.Discrepancy) error
	// WarnBefore is how long before its deadline an order's buyer is warned
	// ("your seats will be released in 2 minutes"); 0: 2 minutes, negative:
	// no warnings.
	WarnBefore time.Duration
	// OnWarning notifies the buyer, at most once per order; nil: logged.
	OnWarning func(ctx context.Context, o expiry.Order) error
}

// App is the host's order service with orderexpiry wired in. Its HTTP layer
// (Handler) only decodes, calls and maps errors.
type App struct {
	db             *sql.DB
	store          *sqlstore.Store
	seats          *redisseat.Seats
	svc            *cancel.Service
	sched          *expiry.Scheduler
	rec            *reconcile.Reconciler
	overdue        *prometheus.OverduePoller
	log            *slog.Logger
	metrics        *prom.Registry
	expiry         time.Duration
	limit          int
	reconcileEvery time.Duration
}

// New migrates the schema and wires the service. It returns the Shell that
// the transport's consumer must hand delivered messages to.
func New(ctx context.Context, c Config) (*App, *expiry.Shell, error) {
	a := &App{db: c.DB, log: c.Logger, expiry: c.Expiry, limit: c.Limit, reconcileEvery: c.ReconcileEvery}
	if a.log == nil {
		a.log = slog.Default()
	}
	if a.expiry <= 0 {
		a.expiry = 15 * time.Minute
	}
	if a.limit <= 0 {
		a.limit = 6
	}
	if a.reconcileEvery <= 0 {
		a.reconcileEvery = time.Minute
	}
	// One Observer for every component: the Prometheus metrics, and the
	// caller's observer if any.
	a.metrics = prom.NewRegistry()
	metrics, err := prometheus.New(a.metrics, "")
	if err != nil {
		return nil, nil, err
	}
	obs := expiry.MultiObserver(metrics, c.Observer)
	if a.store, err = sqlstore.New(c.DB, c.Dialect); err != nil {
		return nil, nil, err
	}
	if err := a.store.Migrate(ctx); err != nil {
		return nil, nil, err
	}
	if a.seats, err = redisseat.New(c.Redis, c.Namespace); err != nil {
		return nil, nil, err
	}
	// A Redis that evicts keys without a TTL would drop seat state under
	// memory pressure: refuse to start on one.
	if err := a.seats.Check(ctx); err != nil {
		return nil, nil, err
	}
	onDiscrepancy := c.OnDiscrepancy
	if onDiscrepancy == nil {
		onDiscrepancy = func(ctx context.Context, d cancel.Discrepancy) error {
			a.log.WarnContext(ctx, "refund due: a payment the order could not take", "payment", d.PaymentID,
				"order", d.OrderNo, "user", d.UserID, "status", d.Status)
			return nil
		}
	}
	// The store records each discrepancy once per payment id, so the hook
	// refunds once however often the provider repeats its callback.
	onWarning := c.OnWarning
	if onWarning == nil {
		onWarning = func(ctx context.Context, o expiry.Order) error {
			a.log.InfoContext(ctx, "expiry warning: the buyer's seats will be released soon", "order", o.No,
				"user", o.UserID, "expire_at", o.ExpireAt, "left", o.Remaining())
			return nil
		}
	}
	warnBefore := c.WarnBefore
	switch {
	case warnBefore == 0:
		warnBefore = 2 * time.Minute
	case warnBefore < 0:
		warnBefore = 0
	}
	if a.sched, err = expiry.NewScheduler(expiry.SchedulerConfig{Sender: c.Sender, Runtime: expiry.Runtime{Observer: obs, Logger: a.log},
		WarnBefore: warnBefore.Truncate(time.Millisecond)}); err != nil {
		return nil, nil, err
	}
	// Late payments are accepted (pretix's default): a payment after the
	// timeout reinstates the order when its seats are still free, and is
	// refunded otherwise. The scheduler sends each order's first messages
	// after its placement committed (its expiry message and its warning),
	// and again for a shortened deadline.
	a.svc, err = cancel.New(cancel.Config{Store: a.store, Seats: a.seats, Runtime: expiry.Runtime{Observer: obs, Logger: a.log}, OnDiscrepancy: onDiscrepancy,
		AcceptLatePayments: true, OnWarning: onWarning, Scheduler: a.sched})
	if err != nil {
		return nil, nil, err
	}
	h, err := expiry.NewHandler(expiry.HandlerConfig{Canceller: a.svc, Warner: a.svc, Sender: c.Sender, Runtime: expiry.Runtime{Observer: obs, Logger: a.log}})
	if err != nil {
		return nil, nil, err
	}
	a.rec, err = reconcile.New(reconcile.Config{Orders: a.store, Seats: a.seats, Service: a.svc,
		Runtime: expiry.Runtime{Observer: obs, Logger: a.log}})
	if err != nil {
		return nil, nil, err
	}
	// The gauges that page someone when messages are lost: pending orders
	// past their deadline, read from the store every ReconcileEvery.
	a.overdue, err = prometheus.NewOverduePoller(a.metrics, "", a.store.Overdue, prometheus.PollerConfig{Interval: a.reconcileEvery})
	if err != nil {
		return nil, nil, err
	}
	return a, expiry.NewShell(h), nil
}

// RunReconciler repairs what the message path lost, every ReconcileEvery,
// until ctx is done, and reads the overdue gauges as often. Run it on every
// instance: rounds are safe in parallel.
func (a *App) RunReconciler(ctx context.Context) error {
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := a.overdue.Run(ctx); err != nil && ctx.Err() == nil {
			a.log.ErrorContext(ctx, "overdue poller stopped", "err", err)
		}
	}()
	defer func() { <-done }()
	return a.rec.Run(ctx, a.reconcileEvery)
}

// Place places an order. The library does the sequence: it validates p, locks
// the seats in Redis (all or nothing, within the purchase limit), runs the
// service's SQL transaction (store.Insert: the order and the service's own
// rows), sends the expiry message once it has committed (Config.Scheduler),
// and gives the seats back if the transaction fails (unless its commit's
// outcome is unknown: then the reconciler decides). An order number placed
// already is an error wrapping cancel.ErrOrderExists, and the existing order
// is untouched.
//
// With another transaction manager, write the transaction function yourself:
// insert with store.Place on the transaction (a cancel.Querier), and
// return once it has committed (examples/orm has gorm, sqlx, ent and pgx).
func (a *App) Place(ctx context.Context, p cancel.Placement) error {
	p.Limit = a.limit
	return a.svc.Place(ctx, p, a.store.Insert(a.db, func(ctx context.Context, tx *sql.Tx, p cancel.Placement) error {
		return nil // the service's own rows go here, in the same transaction
	}))
}

// Handler serves the order API:
//
//	POST /orders              place (X-User; JSON {"show_id", "seats"}) → 201
//	GET  /orders/{no}         the caller's order (X-User) → 200
//	POST /orders/{no}/pay     payment callback (JSON {"payment_id"}) → 200, again
//	                          for a repeated callback, and for a late payment
//	                          after the timeout whose seats are still free
//	                          (the order is reinstated as paid); after the
//	                          user's cancel, an expire-now, a seat re-sold, or
//	                          with another payment id for a paid order, 409
//	                          (refunded)
//	POST /orders/{no}/cancel  the caller's cancel (X-User) → 200; paid 409
//	POST /orders/{no}/extend  the caller asks for more time (X-User; JSON
//	                          {"seconds"}): the deadline becomes at least that
//	                          far from now → 200; already later, 200 unchanged;
//	                          due, paid or cancelled 409
//	POST /admin/orders/{no}/expire  an operator expires a pending order now →
//	                          200 (cancelled, seats released); not pending 409
//	GET  /metrics             the library's events as Prometheus metrics
func (a *App) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("POST /orders", a.placeOrder)
	mux.HandleFunc("GET /orders/{no}", a.getOrder)
	mux.HandleFunc("POST /orders/{no}/pay", a.payOrder)
	mux.HandleFunc("POST /orders/{no}/cancel", a.cancelOrder)
	mux.HandleFunc("POST /orders/{no}/extend", a.extendOrder)
	mux.HandleFunc("POST /admin/orders/{no}/expire", a.expireOrder) // behind the operators' authentication in a real service
	mux.Handle("GET /metrics", promhttp.HandlerFor(a.metrics, promhttp.HandlerOpts{}))
	return mux
}

type placeRequest struct {
	ShowID string   `json:"show_id"`
	Seats  []string `json:"seats"`
}

type extendRequest struct {
	Seconds int64 `json:"seconds"` // at least this long from now
}

// maxExtend bounds one extension request.
const maxExtend = 24 * time.Hour

type payRequest struct {
	PaymentID string `json:"payment_id"` // the provider's id of the payment
}

type orderView struct {
	OrderNo  string    `json:"order_no"`
	UserID   string    `json:"user_id"`
	ShowID   string    `json:"show_id"`
	Status   string    `json:"status"`
	ExpireAt time.Time `json:"expire_at"`
	Seats    []string  `json:"seats,omitempty"`
	// PaymentID is the payment that paid the order (on a pay answer).
	PaymentID string `json:"payment_id,omitempty"`
}

func view(o expiry.Order, seats []string) orderView {
	return orderView{OrderNo: o.No, UserID: o.UserID, ShowID: o.ShowID, Status: o.Status.String(), ExpireAt: o.ExpireAt.UTC(), Seats: seats}
}

func (a *App) placeOrder(w http.ResponseWriter, r *http.Request) {
	user, err := userOf(r)
	if err != nil {
		a.fail(w, r, err)
		return
	}
	var req placeRequest
	if err := decode(w, r, &req); err != nil {
		a.fail(w, r, err)
		return
	}
	p := cancel.Placement{OrderNo: "o-" + rand.Text(), UserID: user, ShowID: req.ShowID, Seats: req.Seats,
		ExpireAt: time.Now().Add(a.expiry).Truncate(time.Millisecond)} // the store keeps milliseconds
	if err := a.Place(r.Context(), p); err != nil {
		a.fail(w, r, err)
		return
	}
	w.Header().Set("Location", "/orders/"+p.OrderNo)
	o := expiry.Order{No: p.OrderNo, UserID: user, ShowID: p.ShowID, Status: expiry.StatusPending, ExpireAt: p.ExpireAt}
	a.writeJSON(w, r, http.StatusCreated, view(o, p.Seats))
}

func (a *App) getOrder(w http.ResponseWriter, r *http.Request) {
	user, err := userOf(r)
	if err != nil {
		a.fail(w, r, err)
		return
	}
	no := r.PathValue("no")
	if err := expiry.ValidateID("order number", no); err != nil {
		a.fail(w, r, err)
		return
	}
	o, err := a.store.Order(r.Context(), no)
	if err == nil && o.UserID != user {
		err = cancel.ErrNotOwner // answered like a missing order
	}
	if err != nil {
		a.fail(w, r, err)
		return
	}
	a.writeJSON(w, r, http.StatusOK, view(o, nil))
}

// payOrder is the payment provider's callback (verify its signature in a
// real service). It carries the provider's payment id and no user. A repeated
// callback (the same payment id) answers 200 again; money the order cannot
// take (a cancelled order, or a paid one and another payment id) answers 409
// and has been handed to the refund hook, once per payment id.
func (a *App) payOrder(w http.ResponseWriter, r *http.Request) {
	var req payRequest
	if err := decode(w, r, &req); err != nil {
		a.fail(w, r, err)
		return
	}
	res, err := a.svc.Pay(r.Context(), cancel.Payment{OrderNo: r.PathValue("no"), PaymentID: req.PaymentID})
	if err != nil {
		a.fail(w, r, err)
		return
	}
	v := view(res.Order, res.Seats)
	v.PaymentID = res.PaymentID
	a.writeJSON(w, r, http.StatusOK, v)
}

func (a *App) cancelOrder(w http.ResponseWriter, r *http.Request) {
	user, err := userOf(r)
	if err != nil {
		a.fail(w, r, err)
		return
	}
	res, err := a.svc.UserCancel(r.Context(), r.PathValue("no"), user)
	if err != nil {
		a.fail(w, r, err)
		return
	}
	if res.Order.Status == expiry.StatusPaid {
		a.writeError(w, r, http.StatusConflict, "the order is paid")
		return
	}
	a.writeJSON(w, r, http.StatusOK, view(res.Order, res.Seats)) // cancelled now, or already (by a timeout or before)
}

// extendOrder gives the caller's pending order more time: its deadline
// becomes at least the asked time from now, by the database's clock. The
// expiry message in flight follows the stored deadline (it re-arms), so
// nothing is sent. A due order is not extended: it is the timeout's.
func (a *App) extendOrder(w http.ResponseWriter, r *http.Request) {
	user, err := userOf(r)
	if err != nil {
		a.fail(w, r, err)
		return
	}
	var req extendRequest
	if err := decode(w, r, &req); err != nil {
		a.fail(w, r, err)
		return
	}
	d := time.Duration(req.Seconds) * time.Second
	if req.Seconds <= 0 || d > maxExtend {
		a.fail(w, r, badRequest{fmt.Errorf("seconds must be in 1..%d", int64(maxExtend/time.Second))})
		return
	}
	res, err := a.svc.Extend(r.Context(), r.PathValue("no"), user, d)
	if err != nil {
		a.fail(w, r, err)
		return
	}
	if !res.Changed && (res.Order.Status != expiry.StatusPending || res.Order.Remaining() <= 0) {
		a.writeError(w, r, http.StatusConflict, "the order is "+res.Order.Status.String()+" or due; it cannot be extended")
		return
	}
	a.writeJSON(w, r, http.StatusOK, view(res.Order, nil))
}

// expireOrder is the operator's "expire it now": the pending order is
// cancelled at once and its seats released. A payment after it is refunded.
func (a *App) expireOrder(w http.ResponseWriter, r *http.Request) {
	res, err := a.svc.ExpireNow(r.Context(), r.PathValue("no"))
	if err != nil {
		a.fail(w, r, err)
		return
	}
	if !res.Changed {
		a.writeError(w, r, http.StatusConflict, "the order is "+res.Order.Status.String())
		return
	}
	a.writeJSON(w, r, http.StatusOK, view(res.Order, res.Seats))
}

var errNoUser = errors.New("missing X-User header")

// userOf returns the caller. A real service takes it from its
// authentication middleware; the example trusts a header.
func userOf(r *http.Request) (string, error) {
	u := r.Header.Get("X-User")
	if u == "" {
		return "", errNoUser
	}
	return u, expiry.ValidateID("user id", u)
}

type badRequest struct{ err error }

func (e badRequest) Error() string { return e.err.Error() }

// decode reads one JSON object of at most 64 KiB, with no unknown fields.
func decode(w http.ResponseWriter, r *http.Request, v any) error {
	dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, 64<<10))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return badRequest{fmt.Errorf("malformed JSON: %w", err)}
	}
	if dec.More() {
		return badRequest{errors.New("malformed JSON: more than one value")}
	}
	return nil
}

// fail maps an error to a status: the library's sentinels say what happened.
func (a *App) fail(w http.ResponseWriter, r *http.Request, err error) {
	var bad badRequest
	switch {
	case errors.As(err, &bad), errors.Is(err, expiry.ErrInvalidID):
		a.writeError(w, r, http.StatusBadRequest, err.Error())
	case errors.Is(err, errNoUser):
		a.writeError(w, r, http.StatusUnauthorized, err.Error())
	case errors.Is(err, expiry.ErrNotFound), errors.Is(err, cancel.ErrNotOwner):
		a.writeError(w, r, http.StatusNotFound, "no such order") // another user's order is not found either
	case errors.Is(err, cancel.ErrDiscrepancy):
		a.writeError(w, r, http.StatusConflict, "the order cannot take this payment (it was cancelled, paid by another payment, or is not ours); it will be refunded")
	case errors.Is(err, cancel.ErrSeatUnavailable):
		a.writeError(w, r, http.StatusConflict, "a seat is no longer available")
	case errors.Is(err, cancel.ErrOrderExists):
		a.writeError(w, r, http.StatusConflict, "an order with this number exists already")
	case errors.Is(err, cancel.ErrLimitExceeded):
		a.writeError(w, r, http.StatusTooManyRequests, "purchase limit reached for this show")
	default:
		a.log.ErrorContext(r.Context(), "request failed", "method", r.Method, "path", r.URL.Path, "err", err)
		a.writeError(w, r, http.StatusInternalServerError, "internal error")
	}
}

func (a *App) writeJSON(w http.ResponseWriter, r *http.Request, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	if err := json.NewEncoder(w).Encode(v); err != nil { // the client has gone
		a.log.DebugContext(r.Context(), "response not written", "method", r.Method, "path", r.URL.Path, "err", err)
	}
}

func (a *App) writeError(w http.ResponseWriter, r *http.Request, status int, msg string) {
	a.writeJSON(w, r, status, map[string]string{"error": msg})
}
