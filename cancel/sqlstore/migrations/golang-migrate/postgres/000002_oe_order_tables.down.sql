-- orderexpiry's oe_order and oe_order_seat for postgres: generated from cancel/sqlstore/schema/postgres.sql
-- by go test ./cancel/sqlstore -run TestMigrationFiles -update-migrations; do not edit.

DROP TABLE IF EXISTS oe_order_seat;
DROP TABLE IF EXISTS oe_order;
