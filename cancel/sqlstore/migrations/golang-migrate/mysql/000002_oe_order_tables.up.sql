-- orderexpiry's oe_order and oe_order_seat for mysql: generated from cancel/sqlstore/schema/mysql.sql
-- by go test ./cancel/sqlstore -run TestMigrationFiles -update-migrations; do not edit.

CREATE TABLE IF NOT EXISTS oe_order (
    order_no      VARCHAR(64)  CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
    user_id       VARCHAR(64)  CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
    show_id       VARCHAR(64)  CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
    status        SMALLINT     NOT NULL DEFAULT 0, -- 0 pending, 1 paid, 2 cancelled
    expire_at_ms  BIGINT       NOT NULL,
    created_at_ms BIGINT       NOT NULL,
    updated_at_ms BIGINT       NOT NULL,
    cancel_reason VARCHAR(16)  CHARACTER SET ascii COLLATE ascii_bin NULL,
    payment_id    VARCHAR(64)  CHARACTER SET ascii COLLATE ascii_bin NULL, -- the payment that paid it
    seats         VARCHAR(3300) CHARACTER SET ascii COLLATE ascii_bin NULL, -- the seats it was placed with, sorted, comma-separated (kept after a cancel: a late payment reinstates from it)
    seat_limit    INT          NULL, -- the purchase limit it was placed with (0: none), kept for a late payment
    lock_id       VARCHAR(41)  CHARACTER SET ascii COLLATE ascii_bin NULL, -- the seat lock it holds (cancel.Placement.LockID)
    warned_at_ms  BIGINT       NULL, -- its expiry warning fired
    PRIMARY KEY (order_no),
    KEY oe_order_status_expire (status, expire_at_ms)
) ENGINE=InnoDB;

CREATE TABLE IF NOT EXISTS oe_order_seat (
    show_id  VARCHAR(64) CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
    seat_id  VARCHAR(64) CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
    order_no VARCHAR(64) CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
    state    SMALLINT    NOT NULL DEFAULT 1, -- 1 locked, 2 sold
    PRIMARY KEY (show_id, seat_id),
    KEY oe_order_seat_order (order_no)
) ENGINE=InnoDB;
