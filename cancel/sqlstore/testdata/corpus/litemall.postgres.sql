-- linlinjava/litemall: the order tables of litemall-db/sql/litemall_table.sql
-- (commit a1ef964a718b7277925b19ea26afe78ea3a1d325), MySQL only upstream,
-- written for PostgreSQL as a port would (integer for int(11), smallint for
-- smallint(6) and tinyint(1), timestamp for datetime). Same columns as
-- litemall.mysql.sql.
CREATE TABLE litemall_order (
  id serial PRIMARY KEY,
  user_id integer NOT NULL,
  order_sn varchar(63) NOT NULL,
  order_status smallint NOT NULL,
  aftersale_status smallint DEFAULT 0,
  consignee varchar(63) NOT NULL,
  mobile varchar(63) NOT NULL,
  address varchar(127) NOT NULL,
  message varchar(512) NOT NULL DEFAULT '',
  order_price numeric(10,2) NOT NULL,
  actual_price numeric(10,2) NOT NULL,
  pay_id varchar(63) DEFAULT NULL,
  pay_time timestamp DEFAULT NULL,
  ship_sn varchar(63) DEFAULT NULL,
  end_time timestamp DEFAULT NULL,
  add_time timestamp DEFAULT NULL,
  update_time timestamp DEFAULT NULL,
  deleted smallint DEFAULT 0
);

CREATE TABLE litemall_order_goods (
  id serial PRIMARY KEY,
  order_id integer NOT NULL DEFAULT 0,
  goods_id integer NOT NULL DEFAULT 0,
  goods_name varchar(127) NOT NULL DEFAULT '',
  product_id integer NOT NULL DEFAULT 0,
  number smallint NOT NULL DEFAULT 0,
  price numeric(10,2) NOT NULL DEFAULT 0.00,
  add_time timestamp DEFAULT NULL,
  update_time timestamp DEFAULT NULL,
  deleted smallint DEFAULT 0
);
CREATE INDEX order_id ON litemall_order_goods (order_id);
CREATE INDEX goods_id ON litemall_order_goods (goods_id);

CREATE TABLE litemall_system (
  id serial PRIMARY KEY,
  key_name varchar(255) NOT NULL,
  key_value varchar(255) NOT NULL,
  add_time timestamp DEFAULT NULL,
  update_time timestamp DEFAULT NULL,
  deleted smallint DEFAULT 0
);

INSERT INTO litemall_system (key_name, key_value) VALUES ('litemall_order_unpaid', '30');
