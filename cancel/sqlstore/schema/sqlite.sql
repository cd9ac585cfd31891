-- orderexpiry schema for SQLite 3.35+.
-- Times are epoch milliseconds (INTEGER) so that every dialect compares them
-- the same way, whatever the server's or the session's time zone.
CREATE TABLE IF NOT EXISTS oe_order (
    order_no      TEXT PRIMARY KEY,
    user_id       TEXT NOT NULL,
    show_id       TEXT NOT NULL,
    status        INTEGER     NOT NULL DEFAULT 0, -- 0 pending, 1 paid, 2 cancelled
    expire_at_ms  INTEGER     NOT NULL,
    created_at_ms INTEGER     NOT NULL,
    updated_at_ms INTEGER     NOT NULL,
    cancel_reason TEXT,
    payment_id    TEXT, -- the payment that paid it
    seats         TEXT,       -- the seats it was placed with, sorted, comma-separated (kept after a cancel: a late payment reinstates from it)
    seat_limit    INTEGER,    -- the purchase limit it was placed with (0: none), kept for a late payment
    lock_id       TEXT,       -- the seat lock it holds (cancel.Placement.LockID)
    warned_at_ms  INTEGER     -- its expiry warning fired
);
-- The reconciler's scan: pending orders by expiry, never a table scan, in
-- (expire_at_ms, order_no) order so that a page starts at its cursor.
CREATE INDEX IF NOT EXISTS oe_order_due ON oe_order (status, expire_at_ms, order_no);
-- The index of earlier versions, without order_no: oe_order_due replaces it.
DROP INDEX IF EXISTS oe_order_status_expire;

CREATE TABLE IF NOT EXISTS oe_order_seat (
    show_id  TEXT NOT NULL,
    seat_id  TEXT NOT NULL,
    order_no TEXT NOT NULL,
    state    INTEGER     NOT NULL DEFAULT 1, -- 1 locked, 2 sold
    -- One live claim per seat: the last line of defence against a double sale.
    PRIMARY KEY (show_id, seat_id)
);
CREATE INDEX IF NOT EXISTS oe_order_seat_order ON oe_order_seat (order_no);

-- Payments that could not be honoured (the order was cancelled, paid by
-- another payment, or is gone), once per payment id of a scope, so that the
-- host's refund hook runs once per payment however often the provider
-- repeats its callback, and is tried again until it succeeds (invariant I9).
-- Payment ids are per scope: each tenant of a shared table may have its own
-- provider account, whose ids can repeat another's.
CREATE TABLE IF NOT EXISTS oe_payment_discrepancy (
    payment_id     TEXT NOT NULL,
    scope          VARCHAR(255) NOT NULL DEFAULT '', -- the store's (Store.Scope): its rows only are its
    order_no       TEXT NOT NULL,
    user_id        TEXT NOT NULL,
    status         INTEGER NOT NULL, -- 0 the payment paid or reinstated the order (honoured, settled at once), else the order's when it came, refunded: 1 paid by another, 2 cancelled, 3 in a status the host owns, 4 pending (SQL went back in time, or the host reopened it)
    recorded_at_ms INTEGER NOT NULL,
    tried_at_ms    INTEGER NOT NULL, -- the hook's last start: claimed again a lease later
    settled_at_ms  INTEGER,          -- the hook succeeded
    PRIMARY KEY (scope, payment_id)
);
-- The retry scan of one scope: unsettled by last try. And the payment that
-- paid an order.
CREATE INDEX IF NOT EXISTS oe_payment_discrepancy_scope_due ON oe_payment_discrepancy (scope, settled_at_ms, tried_at_ms, payment_id);
CREATE INDEX IF NOT EXISTS oe_payment_discrepancy_order ON oe_payment_discrepancy (scope, order_no, status);

-- What a host's own orders table (a Mapping) lacks, kept beside it: the seats
-- an order was placed with, its purchase limit, its seat lock and its warning, keyed by
-- the store's scope (Store.Scope) and the host's order number. The library's
-- own schema keeps these in oe_order.
CREATE TABLE IF NOT EXISTS oe_order_side (
    scope         VARCHAR(255) NOT NULL,
    order_no      VARCHAR(64)  NOT NULL,
    seats         TEXT         NOT NULL, -- sorted, comma-separated
    seat_limit    INTEGER      NOT NULL,
    lock_id       VARCHAR(41),
    created_at_ms BIGINT       NOT NULL,
    warned_at_ms  BIGINT,
    PRIMARY KEY (scope, order_no)
);
