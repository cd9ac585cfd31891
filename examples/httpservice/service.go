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
	// OnDiscrepancy is called when a payment arrives for a cancelled order:
	// refund it. Nil: logged only.
	OnDiscrepancy func(context.Context, cancel.Discrepancy)
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
	onDiscrepancy := c.OnDiscrepancy
	if onDiscrepancy == nil {
		onDiscrepancy = func(ctx context.Context, d cancel.Discrepancy) {
			a.log.WarnContext(ctx, "refund due: payment for a cancelled order", "order", d.OrderNo, "user", d.UserID)
		}
	}
	a.svc, err = cancel.New(cancel.Config{Store: a.store, Seats: a.seats, Seller: a.seats,
		Observer: obs, Logger: a.log, OnDiscrepancy: onDiscrepancy})
	if err != nil {
		return nil, nil, err
	}
	h, err := expiry.NewHandler(expiry.HandlerConfig{Canceller: a.svc, Sender: c.Sender, Observer: obs, Logger: a.log})
	if err != nil {
		return nil, nil, err
	}
	if a.sched, err = expiry.NewScheduler(expiry.SchedulerConfig{Sender: c.Sender, Observer: obs, Logger: a.log}); err != nil {
		return nil, nil, err
	}
	a.rec, err = reconcile.New(reconcile.Config{Expired: a.store, Canceller: a.svc, Orders: a.store,
		Locks: a.seats, Seats: a.seats, Seller: a.seats, Claims: a.store, Restorer: a.seats,
		Observer: obs, Logger: a.log})
	if err != nil {
		return nil, nil, err
	}
	return a, expiry.NewShell(h, obs, a.log), nil
}

// RunReconciler repairs what the message path lost, every ReconcileEvery,
// until ctx is done. Run it on every instance: rounds are safe in parallel.
func (a *App) RunReconciler(ctx context.Context) error {
	return a.rec.Run(ctx, a.reconcileEvery)
}

// Place places an order: the seats are locked in Redis first (all or nothing,
// within the purchase limit), then the order is inserted in the service's own
// SQL transaction, and its expiry message is sent only after that commits.
//
// With another transaction manager, collect with an expiry.AfterCommit
// inside the transaction and Flush it from the manager's after-commit hook.
func (a *App) Place(ctx context.Context, p cancel.Placement) error {
	if err := p.Validate(); err != nil {
		return err
	}
	if _, err := a.seats.Lock(ctx, p.Hold(), a.limit); err != nil {
		return err
	}
	err := a.sched.InTx(ctx, a.db, nil, func(tx *sql.Tx, after *expiry.AfterCommit) error {
		if err := a.store.Place(ctx, tx, p); err != nil {
			return err
		}
		// The service's own rows go here, in the same transaction.
		after.Add(p.OrderNo, p.ExpireAt)
		return nil
	})
	if errors.Is(err, expiry.ErrCommitUnknown) {
		// The order may exist: keep the seats; the reconciler frees them
		// after its grace period if it does not, and cancels it if it does.
		return err
	}
	if err != nil {
		// No order, no message: give the seats back now (only those still
		// locked by this order). If this fails too, the reconciler frees
		// them after its grace period.
		if _, rerr := a.seats.Release(context.WithoutCancel(ctx), p.Hold()); rerr != nil {
			a.log.ErrorContext(ctx, "seats not released after a failed placement", "order", p.OrderNo, "err", rerr)
		}
		return err
	}
	return nil
}

// Handler serves the order API:
//
//	POST /orders              place (X-User; JSON {"show_id", "seats"}) → 201
//	GET  /orders/{no}         the caller's order (X-User) → 200
//	POST /orders/{no}/pay     payment callback → 200; after a cancel 409
//	POST /orders/{no}/cancel  the caller's cancel (X-User) → 200; paid 409
//	GET  /metrics             the library's events as Prometheus metrics
func (a *App) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("POST /orders", a.placeOrder)
	mux.HandleFunc("GET /orders/{no}", a.getOrder)
	mux.HandleFunc("POST /orders/{no}/pay", a.payOrder)
	mux.HandleFunc("POST /orders/{no}/cancel", a.cancelOrder)
	mux.Handle("GET /metrics", promhttp.HandlerFor(a.metrics, promhttp.HandlerOpts{}))
	return mux
}

type placeRequest struct {
	ShowID string   `json:"show_id"`
	Seats  []string `json:"seats"`
}

type orderView struct {
	OrderNo  string    `json:"order_no"`
	UserID   string    `json:"user_id"`
	ShowID   string    `json:"show_id"`
	Status   string    `json:"status"`
	ExpireAt time.Time `json:"expire_at"`
	Seats    []string  `json:"seats,omitempty"`
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
	writeJSON(w, http.StatusCreated, view(o, p.Seats))
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
	writeJSON(w, http.StatusOK, view(o, nil))
}

// payOrder is the payment provider's callback (verify its signature in a
// real service). It carries no user; repeated callbacks answer 200 again.
func (a *App) payOrder(w http.ResponseWriter, r *http.Request) {
	res, err := a.svc.Pay(r.Context(), r.PathValue("no"), "")
	if err != nil {
		a.fail(w, r, err) // a payment after the cancel is 409, and has been handed to the refund hook
		return
	}
	writeJSON(w, http.StatusOK, view(res.Order, res.Seats))
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
		writeError(w, http.StatusConflict, "the order is paid")
		return
	}
	writeJSON(w, http.StatusOK, view(res.Order, res.Seats)) // cancelled now, or already (by a timeout or before)
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
		writeError(w, http.StatusBadRequest, err.Error())
	case errors.Is(err, errNoUser):
		writeError(w, http.StatusUnauthorized, err.Error())
	case errors.Is(err, expiry.ErrNotFound), errors.Is(err, cancel.ErrNotOwner):
		writeError(w, http.StatusNotFound, "no such order") // another user's order is not found either
	case errors.Is(err, cancel.ErrDiscrepancy):
		writeError(w, http.StatusConflict, "the order was cancelled before the payment arrived; it will be refunded")
	case errors.Is(err, cancel.ErrSeatUnavailable):
		writeError(w, http.StatusConflict, "a seat is no longer available")
	case errors.Is(err, cancel.ErrLimitExceeded):
		writeError(w, http.StatusTooManyRequests, "purchase limit reached for this show")
	default:
		a.log.ErrorContext(r.Context(), "request failed", "method", r.Method, "path", r.URL.Path, "err", err)
		writeError(w, http.StatusInternalServerError, "internal error")
	}
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v) // the client has gone if this fails
}

func writeError(w http.ResponseWriter, status int, msg string) {
	writeJSON(w, status, map[string]string{"error": msg})
}
