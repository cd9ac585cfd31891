-- cloudwego/biz-demo gomall: the order service's Order and OrderItem of
-- gomall/app/order/biz/model/{base,order,order_item}.go (commit
-- 1f5ae2cfa29bf8ca3a22037488406c24d1ab8ed9) as GORM's AutoMigrate creates
-- them on PostgreSQL (gomall itself runs MySQL): int bigserial, uint32
-- bigint, string text unless sized, time.Time timestamptz. Same columns as
-- gomall.mysql.sql.
CREATE TABLE "order" (
  "id" bigserial,
  "created_at" timestamptz,
  "updated_at" timestamptz,
  "order_id" varchar(256),
  "user_id" bigint,
  "user_currency" text,
  "email" text,
  "street_address" text,
  "city" text,
  "state" text,
  "country" text,
  "zip_code" integer,
  "order_state" text,
  PRIMARY KEY ("id")
);
CREATE UNIQUE INDEX IF NOT EXISTS "idx_order_order_id" ON "order" ("order_id");

CREATE TABLE "order_item" (
  "id" bigserial,
  "created_at" timestamptz,
  "updated_at" timestamptz,
  "product_id" bigint,
  "order_id_refer" varchar(256),
  "quantity" integer,
  "cost" real,
  PRIMARY KEY ("id")
);
CREATE INDEX IF NOT EXISTS "idx_order_item_order_id_refer" ON "order_item" ("order_id_refer");
