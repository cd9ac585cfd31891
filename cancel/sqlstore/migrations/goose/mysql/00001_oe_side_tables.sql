-- orderexpiry's oe_payment_discrepancy and oe_order_side for mysql: generated from cancel/sqlstore/schema/mysql.sql
-- by go test ./cancel/sqlstore -run TestMigrationFiles -update-migrations; do not edit.

-- +goose Up
CREATE TABLE IF NOT EXISTS oe_payment_discrepancy (
    payment_id     VARCHAR(64) CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
    scope          VARCHAR(255) CHARACTER SET ascii COLLATE ascii_bin NOT NULL DEFAULT '', -- the store's (Store.Scope): its rows only are its
    order_no       VARCHAR(64) CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
    user_id        VARCHAR(64) CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
    status         SMALLINT    NOT NULL, -- 0 the payment paid or reinstated the order (honoured, settled at once), else the order's when it came, refunded: 1 paid by another, 2 cancelled, 3 in a status the host owns, 4 pending (SQL went back in time, or the host reopened it)
    recorded_at_ms BIGINT      NOT NULL,
    tried_at_ms    BIGINT      NOT NULL, -- the hook's last start: claimed again a lease later
    settled_at_ms  BIGINT      NULL,     -- the hook succeeded
    PRIMARY KEY (scope, payment_id),
    KEY oe_payment_discrepancy_scope_due (scope, settled_at_ms, tried_at_ms),
    KEY oe_payment_discrepancy_order (scope, order_no, status)
) ENGINE=InnoDB;

CREATE TABLE IF NOT EXISTS oe_order_side (
    scope         VARCHAR(255)  CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
    order_no      VARCHAR(64)   CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
    seats         VARCHAR(3300) CHARACTER SET ascii COLLATE ascii_bin NOT NULL, -- sorted, comma-separated
    seat_limit    INT           NOT NULL,
    lock_id       VARCHAR(41)   CHARACTER SET ascii COLLATE ascii_bin NULL,
    created_at_ms BIGINT        NOT NULL,
    warned_at_ms  BIGINT        NULL,
    PRIMARY KEY (scope, order_no)
) ENGINE=InnoDB;

-- +goose Down
DROP TABLE IF EXISTS oe_order_side;
DROP TABLE IF EXISTS oe_payment_discrepancy;
