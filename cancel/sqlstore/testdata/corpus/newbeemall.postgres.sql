-- newbee-ltd/newbee-mall: the order tables of src/main/resources/newbee_mall_schema.sql
-- (commit a069069b07027613bf0e7f571736be86f431faee), MySQL only upstream,
-- written for PostgreSQL as a port would (smallint for tinyint(4), timestamp
-- for datetime). Same columns as newbeemall.mysql.sql.
CREATE TABLE tb_newbee_mall_order (
  order_id bigserial PRIMARY KEY,
  order_no varchar(20) NOT NULL DEFAULT '',
  user_id bigint NOT NULL DEFAULT 0,
  total_price integer NOT NULL DEFAULT 1,
  pay_status smallint NOT NULL DEFAULT 0,
  pay_type smallint NOT NULL DEFAULT 0,
  pay_time timestamp NULL,
  order_status smallint NOT NULL DEFAULT 0,
  extra_info varchar(100) NOT NULL DEFAULT '',
  user_name varchar(30) NOT NULL DEFAULT '',
  user_phone varchar(11) NOT NULL DEFAULT '',
  user_address varchar(100) NOT NULL DEFAULT '',
  is_deleted smallint NOT NULL DEFAULT 0,
  create_time timestamp NOT NULL DEFAULT CURRENT_TIMESTAMP,
  update_time timestamp NOT NULL DEFAULT CURRENT_TIMESTAMP
);

CREATE TABLE tb_newbee_mall_order_item (
  order_item_id bigserial PRIMARY KEY,
  order_id bigint NOT NULL DEFAULT 0,
  goods_id bigint NOT NULL DEFAULT 0,
  goods_name varchar(200) NOT NULL DEFAULT '',
  selling_price integer NOT NULL DEFAULT 1,
  goods_count integer NOT NULL DEFAULT 1,
  create_time timestamp NOT NULL DEFAULT CURRENT_TIMESTAMP
);
