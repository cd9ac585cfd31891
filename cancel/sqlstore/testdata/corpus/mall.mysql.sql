-- macrozheng/mall: the portal's order tables as document/sql/mall.sql creates them
-- (commit 74eebe067d4f17b2d0b61691bef2748e3a7daf80), trimmed to the columns the
-- library needs plus a few bystanders; column names and types as shipped.
-- status 0 pending, 1-3 paid (to ship, shipped, done), 4 closed, 5 invalid.
-- No deadline column: OmsPortalOrderServiceImpl.cancelTimeOutOrder closes an
-- order (status 4) create_time + oms_order_setting.normal_order_overtime
-- minutes after it was placed: a row of another table. No payment id column,
-- no unique key on order_sn, no index but the primary key. Times are wall
-- times of Asia/Shanghai (serverTimezone=Asia/Shanghai in the JDBC URL).
CREATE TABLE `oms_order` (
  `id` bigint(20) NOT NULL AUTO_INCREMENT,
  `member_id` bigint(20) NOT NULL,
  `coupon_id` bigint(20) NULL DEFAULT NULL,
  `order_sn` varchar(64) CHARACTER SET utf8 COLLATE utf8_general_ci NULL DEFAULT NULL,
  `create_time` datetime NULL DEFAULT NULL,
  `member_username` varchar(64) CHARACTER SET utf8 COLLATE utf8_general_ci NULL DEFAULT NULL,
  `total_amount` decimal(10, 2) NULL DEFAULT NULL,
  `pay_amount` decimal(10, 2) NULL DEFAULT NULL,
  `pay_type` int(1) NULL DEFAULT NULL,
  `source_type` int(1) NULL DEFAULT NULL,
  `status` int(1) NULL DEFAULT NULL,
  `order_type` int(1) NULL DEFAULT NULL,
  `receiver_name` varchar(100) CHARACTER SET utf8 COLLATE utf8_general_ci NOT NULL,
  `receiver_phone` varchar(32) CHARACTER SET utf8 COLLATE utf8_general_ci NOT NULL,
  `note` varchar(500) CHARACTER SET utf8 COLLATE utf8_general_ci NULL DEFAULT NULL,
  `delete_status` int(1) NOT NULL DEFAULT 0,
  `payment_time` datetime NULL DEFAULT NULL,
  `modify_time` datetime NULL DEFAULT NULL,
  PRIMARY KEY (`id`) USING BTREE
) ENGINE = InnoDB CHARACTER SET = utf8 COLLATE = utf8_general_ci ROW_FORMAT = DYNAMIC;

CREATE TABLE `oms_order_item` (
  `id` bigint(20) NOT NULL AUTO_INCREMENT,
  `order_id` bigint(20) NULL DEFAULT NULL,
  `order_sn` varchar(64) CHARACTER SET utf8 COLLATE utf8_general_ci NULL DEFAULT NULL,
  `product_id` bigint(20) NULL DEFAULT NULL,
  `product_name` varchar(200) CHARACTER SET utf8 COLLATE utf8_general_ci NULL DEFAULT NULL,
  `product_price` decimal(10, 2) NULL DEFAULT NULL,
  `product_quantity` int(11) NULL DEFAULT NULL,
  `product_sku_id` bigint(20) NULL DEFAULT NULL,
  PRIMARY KEY (`id`) USING BTREE
) ENGINE = InnoDB CHARACTER SET = utf8 COLLATE = utf8_general_ci ROW_FORMAT = DYNAMIC;

CREATE TABLE `oms_order_setting` (
  `id` bigint(20) NOT NULL AUTO_INCREMENT,
  `flash_order_overtime` int(11) NULL DEFAULT NULL,
  `normal_order_overtime` int(11) NULL DEFAULT NULL,
  `confirm_overtime` int(11) NULL DEFAULT NULL,
  `finish_overtime` int(11) NULL DEFAULT NULL,
  `comment_overtime` int(11) NULL DEFAULT NULL,
  PRIMARY KEY (`id`) USING BTREE
) ENGINE = InnoDB CHARACTER SET = utf8 COLLATE = utf8_general_ci ROW_FORMAT = DYNAMIC;

INSERT INTO `oms_order_setting` VALUES (1, 60, 120, 15, 7, 7);
