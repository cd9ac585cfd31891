-- orderexpiry's oe_order and oe_order_seat for sqlite: generated from cancel/sqlstore/schema/sqlite.sql
-- by go test ./cancel/sqlstore -run TestMigrationFiles -update-migrations; do not edit.

DROP TABLE IF EXISTS oe_order_seat;
DROP TABLE IF EXISTS oe_order;
