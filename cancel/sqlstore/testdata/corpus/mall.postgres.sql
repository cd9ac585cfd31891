-- macrozheng/mall: the portal's order tables of document/sql/mall.sql
-- (commit 74eebe067d4f17b2d0b61691bef2748e3a7daf80), MySQL only upstream,
-- written for PostgreSQL as a port would: bigint for bigint(20), integer for
-- int(n), timestamp for datetime. Same columns as mall.mysql.sql.
CREATE TABLE oms_order (
  id bigserial PRIMARY KEY,
  member_id bigint NOT NULL,
  coupon_id bigint NULL,
  order_sn varchar(64) NULL,
  create_time timestamp NULL,
  member_username varchar(64) NULL,
  total_amount numeric(10, 2) NULL,
  pay_amount numeric(10, 2) NULL,
  pay_type integer NULL,
  source_type integer NULL,
  status integer NULL,
  order_type integer NULL,
  receiver_name varchar(100) NOT NULL,
  receiver_phone varchar(32) NOT NULL,
  note varchar(500) NULL,
  delete_status integer NOT NULL DEFAULT 0,
  payment_time timestamp NULL,
  modify_time timestamp NULL
);

CREATE TABLE oms_order_item (
  id bigserial PRIMARY KEY,
  order_id bigint NULL,
  order_sn varchar(64) NULL,
  product_id bigint NULL,
  product_name varchar(200) NULL,
  product_price numeric(10, 2) NULL,
  product_quantity integer NULL,
  product_sku_id bigint NULL
);

CREATE TABLE oms_order_setting (
  id bigserial PRIMARY KEY,
  flash_order_overtime integer NULL,
  normal_order_overtime integer NULL,
  confirm_overtime integer NULL,
  finish_overtime integer NULL,
  comment_overtime integer NULL
);

INSERT INTO oms_order_setting VALUES (1, 60, 120, 15, 7, 7);
