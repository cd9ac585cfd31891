-- newbee-ltd/newbee-mall: the order tables as src/main/resources/newbee_mall_schema.sql
-- creates them (commit a069069b07027613bf0e7f571736be86f431faee), trimmed; column
-- names and types as shipped. order_status 0 pending, 1-4 paid and beyond,
-- -1 closed by the user, -2 closed by timeout, -3 closed by the shop; a second
-- status column pay_status (0, 1, -1). No deadline and no window anywhere: the
-- project never closes an order by timeout. No unique key on order_no, no index
-- but the primary key. Every NOT NULL column has a default.
CREATE TABLE `tb_newbee_mall_order` (
  `order_id` bigint(20) NOT NULL AUTO_INCREMENT,
  `order_no` varchar(20) CHARACTER SET utf8 COLLATE utf8_general_ci NOT NULL DEFAULT '',
  `user_id` bigint(20) NOT NULL DEFAULT 0,
  `total_price` int(11) NOT NULL DEFAULT 1,
  `pay_status` tinyint(4) NOT NULL DEFAULT 0,
  `pay_type` tinyint(4) NOT NULL DEFAULT 0,
  `pay_time` datetime(0) NULL DEFAULT NULL,
  `order_status` tinyint(4) NOT NULL DEFAULT 0,
  `extra_info` varchar(100) CHARACTER SET utf8 COLLATE utf8_general_ci NOT NULL DEFAULT '',
  `user_name` varchar(30) CHARACTER SET utf8 COLLATE utf8_general_ci NOT NULL DEFAULT '',
  `user_phone` varchar(11) CHARACTER SET utf8 COLLATE utf8_general_ci NOT NULL DEFAULT '',
  `user_address` varchar(100) CHARACTER SET utf8 COLLATE utf8_general_ci NOT NULL DEFAULT '',
  `is_deleted` tinyint(4) NOT NULL DEFAULT 0,
  `create_time` datetime(0) NOT NULL DEFAULT CURRENT_TIMESTAMP,
  `update_time` datetime(0) NOT NULL DEFAULT CURRENT_TIMESTAMP,
  PRIMARY KEY (`order_id`) USING BTREE
) ENGINE = InnoDB CHARACTER SET = utf8 COLLATE = utf8_general_ci ROW_FORMAT = Dynamic;

CREATE TABLE `tb_newbee_mall_order_item` (
  `order_item_id` bigint(20) NOT NULL AUTO_INCREMENT,
  `order_id` bigint(20) NOT NULL DEFAULT 0,
  `goods_id` bigint(20) NOT NULL DEFAULT 0,
  `goods_name` varchar(200) CHARACTER SET utf8 COLLATE utf8_general_ci NOT NULL DEFAULT '',
  `selling_price` int(11) NOT NULL DEFAULT 1,
  `goods_count` int(11) NOT NULL DEFAULT 1,
  `create_time` datetime(0) NOT NULL DEFAULT CURRENT_TIMESTAMP,
  PRIMARY KEY (`order_item_id`) USING BTREE
) ENGINE = InnoDB CHARACTER SET = utf8 COLLATE = utf8_general_ci ROW_FORMAT = Dynamic;
