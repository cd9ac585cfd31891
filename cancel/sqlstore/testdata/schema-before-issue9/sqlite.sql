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
    cancel_reason TEXT
);
-- The reconciler's scan: pending orders by expiry, never a table scan.
CREATE INDEX IF NOT EXISTS oe_order_status_expire ON oe_order (status, expire_at_ms);

CREATE TABLE IF NOT EXISTS oe_order_seat (
    show_id  TEXT NOT NULL,
    seat_id  TEXT NOT NULL,
    order_no TEXT NOT NULL,
    state    INTEGER     NOT NULL DEFAULT 1, -- 1 locked, 2 sold
    -- One live claim per seat: the last line of defence against a double sale.
    PRIMARY KEY (show_id, seat_id)
);
CREATE INDEX IF NOT EXISTS oe_order_seat_order ON oe_order_seat (order_no);
