-- XianPostsandTelecommunications/TTMS: Order and Ticket of
-- ttms-backend/internal/model/automigrate/{order,ticket}.go (commit
-- a9b890be61c9af8903444d45e19eb27ac41810ba) as GORM's AutoMigrate would create
-- them on PostgreSQL (TTMS itself runs MySQL): bigserial, timestamptz, bigint
-- for uint. Same columns as ttms.mysql.sql.
CREATE TABLE "orders" (
  "id" bigserial,
  "created_at" timestamptz,
  "updated_at" timestamptz,
  "deleted_at" timestamptz,
  "order_id" varchar(100) NOT NULL,
  "plan_id" integer NOT NULL,
  "user_id" integer NOT NULL,
  "movie_id" bigint,
  "user_name" varchar(20) NOT NULL,
  "cinema_name" varchar(30) NOT NULL,
  "status" varchar(20),
  "seats" varchar(1000) NOT NULL,
  "price" real,
  "seats_id" varchar(200) NOT NULL,
  PRIMARY KEY ("id")
);
CREATE INDEX IF NOT EXISTS "idx_orders_deleted_at" ON "orders" ("deleted_at");

CREATE TABLE "tickets" (
  "id" bigserial,
  "created_at" timestamptz,
  "updated_at" timestamptz,
  "deleted_at" timestamptz,
  "plan_id" bigint,
  "user_id" bigint,
  "seat_id" bigint,
  "price" decimal NOT NULL,
  "ticket_status" varchar(100),
  "lock_time" timestamptz,
  PRIMARY KEY ("id")
);
CREATE INDEX IF NOT EXISTS "idx_tickets_deleted_at" ON "tickets" ("deleted_at");
CREATE INDEX IF NOT EXISTS "idx_tickets_user_id" ON "tickets" ("user_id");
