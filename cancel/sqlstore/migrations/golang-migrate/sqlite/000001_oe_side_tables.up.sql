-- orderexpiry's oe_payment_discrepancy and oe_order_side for sqlite: generated from cancel/sqlstore/schema/sqlite.sql
-- by go test ./cancel/sqlstore -run TestMigrationFiles -update-migrations; do not edit.

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

CREATE INDEX IF NOT EXISTS oe_payment_discrepancy_scope_due ON oe_payment_discrepancy (scope, settled_at_ms, tried_at_ms, payment_id);

CREATE INDEX IF NOT EXISTS oe_payment_discrepancy_order ON oe_payment_discrepancy (scope, order_no, status);

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
