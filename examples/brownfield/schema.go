package main

import (
	"context"
	"database/sql"
	"fmt"
	"strings"

	"github.com/seatflow/orderexpiry/cancel/sqlstore"
)

// The order service's own schema, as its own migrations made it over the
// years: SeatFlow's order_info and order_seat. The library does not create,
// alter or own these tables; it is told where its notions live (mapping)
// and checks that at startup (Store.Check).

// migrations are the service's schema versions, applied in order once each
// and recorded in schema_version.
func migrations(d sqlstore.Dialect) []string {
	pk, dt, tiny, opts := "id BIGSERIAL PRIMARY KEY", "TIMESTAMP", "SMALLINT", ""
	switch d {
	case sqlstore.MySQL:
		// The server's defaults: utf8mb4 with a case-insensitive collation.
		pk, dt, tiny, opts = "id BIGINT AUTO_INCREMENT PRIMARY KEY", "DATETIME", "TINYINT", " ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_general_ci"
	case sqlstore.SQLite:
		pk, dt = "id INTEGER PRIMARY KEY AUTOINCREMENT", "TEXT"
	}
	return []string{
		// 1: the first release.
		`CREATE TABLE order_info (
			` + pk + `,
			order_no     VARCHAR(64) NOT NULL,
			user_id      VARCHAR(64) NOT NULL,
			show_id      VARCHAR(64) NOT NULL,
			status       ` + tiny + ` NOT NULL DEFAULT 0, -- 0 unpaid, 1 paid, 2 cancelled
			expire_time  ` + dt + ` NOT NULL,             -- UTC
			amount_cents INT NOT NULL,
			create_time  ` + dt + ` NOT NULL
		)` + opts + `;
		CREATE UNIQUE INDEX uk_order_no ON order_info (order_no);
		CREATE TABLE order_seat (
			show_id  VARCHAR(64) NOT NULL,
			seat_id  VARCHAR(64) NOT NULL,
			order_no VARCHAR(64) NOT NULL,
			PRIMARY KEY (show_id, seat_id)
		)` + opts + `;
		CREATE INDEX idx_seat_order ON order_seat (order_no)`,
		// 2: payments and cancels recorded.
		`ALTER TABLE order_info ADD COLUMN pay_no VARCHAR(64) NULL;
		ALTER TABLE order_info ADD COLUMN cancel_reason VARCHAR(32) NULL;
		ALTER TABLE order_info ADD COLUMN update_time ` + dt + ` NULL`,
		// 3: the channel the order came from, and a note for support.
		`ALTER TABLE order_info ADD COLUMN channel VARCHAR(16) NOT NULL DEFAULT 'web';
		ALTER TABLE order_info ADD COLUMN remark VARCHAR(255) NULL`,
		// 4: the index the expiry scan needs (Store.Check asked for it).
		`CREATE INDEX idx_status_expire ON order_info (status, expire_time, order_no)`,
	}
}

// migrate applies the service's migrations that db lacks.
func migrate(ctx context.Context, db *sql.DB, d sqlstore.Dialect) error {
	if _, err := db.ExecContext(ctx, "CREATE TABLE IF NOT EXISTS schema_version (version INT NOT NULL)"); err != nil {
		return err
	}
	var v int
	if err := db.QueryRowContext(ctx, "SELECT COALESCE(MAX(version), 0) FROM schema_version").Scan(&v); err != nil {
		return err
	}
	for i, m := range migrations(d) {
		if i+1 <= v {
			continue
		}
		for _, q := range strings.Split(m, ";") {
			if strings.TrimSpace(q) == "" {
				continue
			}
			if _, err := db.ExecContext(ctx, q); err != nil {
				return fmt.Errorf("migration %d: %w", i+1, err)
			}
		}
		if _, err := db.ExecContext(ctx, fmt.Sprintf("INSERT INTO schema_version (version) VALUES (%d)", i+1)); err != nil {
			return err
		}
	}
	return nil
}

// mapping tells the library where its notions live in the tables above.
var mapping = sqlstore.Mapping{
	Orders: sqlstore.Orders{
		Table:    "order_info",
		OrderNo:  "order_no",
		UserID:   "user_id",
		ShowID:   "show_id",
		Status:   "status",
		Statuses: sqlstore.Statuses{Pending: 0, Paid: []any{1}, Cancelled: []any{2}},
		Deadline: sqlstore.Time{Column: "expire_time", Type: sqlstore.DateTimeUTC},
		// Optional columns the library writes when it decides an order.
		UpdatedAt:    sqlstore.Time{Column: "update_time", Type: sqlstore.DateTimeUTC},
		CancelReason: "cancel_reason",
		PaymentID:    "pay_no",
		// NOT NULL columns without a default that the service's own
		// insert writes (Service.Place inserts the rows itself): Check
		// names any such column nothing fills.
		Fill: []sqlstore.Condition{{Column: "amount_cents", Value: sqlstore.HostWrites}, {Column: "create_time", Value: sqlstore.HostWrites}},
	},
	// A cancel deletes the order's order_seat rows; a payment keeps them.
	Claims: &sqlstore.Claims{Table: "order_seat", ShowID: "show_id", SeatID: "seat_id", OrderNo: "order_no"},
}
