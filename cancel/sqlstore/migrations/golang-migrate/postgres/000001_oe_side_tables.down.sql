-- orderexpiry's oe_payment_discrepancy and oe_order_side for postgres: generated from cancel/sqlstore/schema/postgres.sql
-- by go test ./cancel/sqlstore -run TestMigrationFiles -update-migrations; do not edit.

DROP TABLE IF EXISTS oe_order_side;
DROP TABLE IF EXISTS oe_payment_discrepancy;
