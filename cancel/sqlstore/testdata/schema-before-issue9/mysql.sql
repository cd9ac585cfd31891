-- orderexpiry schema for MySQL 8 / MariaDB 10.6+.
-- Times are epoch milliseconds (BIGINT) so that every dialect compares them
-- the same way, whatever the server's or the session's time zone.
CREATE TABLE IF NOT EXISTS oe_order (
    order_no      VARCHAR(64)  NOT NULL,
    user_id       VARCHAR(64)  NOT NULL,
    show_id       VARCHAR(64)  NOT NULL,
    status        SMALLINT     NOT NULL DEFAULT 0, -- 0 pending, 1 paid, 2 cancelled
    expire_at_ms  BIGINT       NOT NULL,
    created_at_ms BIGINT       NOT NULL,
    updated_at_ms BIGINT       NOT NULL,
    cancel_reason VARCHAR(16)  NULL,
    PRIMARY KEY (order_no),
    -- The reconciler's scan: pending orders by expiry, never a table scan.
    KEY oe_order_status_expire (status, expire_at_ms)
) ENGINE=InnoDB;

CREATE TABLE IF NOT EXISTS oe_order_seat (
    show_id  VARCHAR(64) NOT NULL,
    seat_id  VARCHAR(64) NOT NULL,
    order_no VARCHAR(64) NOT NULL,
    state    SMALLINT    NOT NULL DEFAULT 1, -- 1 locked, 2 sold
    -- One live claim per seat: the last line of defence against a double sale.
    PRIMARY KEY (show_id, seat_id),
    KEY oe_order_seat_order (order_no)
) ENGINE=InnoDB;
