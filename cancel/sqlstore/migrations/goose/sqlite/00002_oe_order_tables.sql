-- orderexpiry's oe_order and oe_order_seat for sqlite: generated from cancel/sqlstore/schema/sqlite.sql
-- by go test ./cancel/sqlstore -run TestMigrationFiles -update-migrations; do not edit.

-- +goose Up
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

CREATE INDEX IF NOT EXISTS oe_order_due ON oe_order (status, expire_at_ms, order_no);

DROP INDEX IF EXISTS oe_order_status_expire;

CREATE TABLE IF NOT EXISTS oe_order_seat (
    show_id  TEXT NOT NULL,
    seat_id  TEXT NOT NULL,
    order_no TEXT NOT NULL,
    state    INTEGER     NOT NULL DEFAULT 1, -- 1 locked, 2 sold
    PRIMARY KEY (show_id, seat_id)
);

CREATE INDEX IF NOT EXISTS oe_order_seat_order ON oe_order_seat (order_no);

-- +goose Down
DROP TABLE IF EXISTS oe_order_seat;
DROP TABLE IF EXISTS oe_order;
