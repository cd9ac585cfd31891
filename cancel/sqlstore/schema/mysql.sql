-- orderexpiry schema for MySQL 8 / MariaDB 10.6+.
-- Times are epoch milliseconds (BIGINT) so that every dialect compares them
-- the same way, whatever the server's or the session's time zone.
-- Ids are ASCII (expiry.ValidateID) and compare byte for byte (ascii_bin):
-- the server's default collations are case-insensitive, and "ALICE" must not
-- match "alice", nor seat "a1" seat "A1" (invariant I10). The primary keys
-- and indexes are on these columns, so lookups stay index lookups.
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
    -- The reconciler's scan: pending orders by expiry, never a table scan.
    -- InnoDB appends the primary key, so this is (status, expire_at_ms,
    -- order_no): a page of the keyset scan starts at its cursor.
    KEY oe_order_status_expire (status, expire_at_ms)
) ENGINE=InnoDB;

CREATE TABLE IF NOT EXISTS oe_order_seat (
    show_id  VARCHAR(64) CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
    seat_id  VARCHAR(64) CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
    order_no VARCHAR(64) CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
    state    SMALLINT    NOT NULL DEFAULT 1, -- 1 locked, 2 sold
    -- One live claim per seat: the last line of defence against a double sale.
    PRIMARY KEY (show_id, seat_id),
    KEY oe_order_seat_order (order_no)
) ENGINE=InnoDB;

-- Payments that could not be honoured (the order was cancelled, paid by
-- another payment, or is gone), once per payment id of a scope, so that the
-- host's refund hook runs once per payment however often the provider
-- repeats its callback, and is tried again until it succeeds (invariant I9).
-- Payment ids are per scope: each tenant of a shared table may have its own
-- provider account, whose ids can repeat another's.
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
    -- The retry scan of one scope: unsettled by last try (InnoDB appends
    -- payment_id), and the payment that paid an order.
    KEY oe_payment_discrepancy_scope_due (scope, settled_at_ms, tried_at_ms),
    KEY oe_payment_discrepancy_order (scope, order_no, status)
) ENGINE=InnoDB;

-- What a host's own orders table (a Mapping) lacks, kept beside it: the seats
-- an order was placed with, its purchase limit, its seat lock and its warning, keyed by
-- the store's scope (Store.Scope) and the host's order number. The library's
-- own schema keeps these in oe_order.
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
