-- linlinjava/litemall: the order tables as litemall-db/sql/litemall_table.sql
-- creates them (commit a1ef964a718b7277925b19ea26afe78ea3a1d325), trimmed; column
-- names and types as shipped. order_status 101 pending, 102 cancelled by the
-- user, 103 by the system (timeout), 104 by the admin, 201 paid, 202/203
-- refund asked/done, 301 shipped, 401/402 received. pay_id is the payment
-- id. No deadline column: OrderUnpaidTask cancels add_time + the
-- litemall_system row litemall_order_unpaid (minutes, 30 in
-- litemall_data.sql). No unique key on order_sn, no index but the primary key.
CREATE TABLE `litemall_order` (
  `id` int(11) NOT NULL AUTO_INCREMENT,
  `user_id` int(11) NOT NULL,
  `order_sn` varchar(63) NOT NULL,
  `order_status` smallint(6) NOT NULL,
  `aftersale_status` smallint(6) DEFAULT '0',
  `consignee` varchar(63) NOT NULL,
  `mobile` varchar(63) NOT NULL,
  `address` varchar(127) NOT NULL,
  `message` varchar(512) NOT NULL DEFAULT '',
  `order_price` decimal(10,2) NOT NULL,
  `actual_price` decimal(10,2) NOT NULL,
  `pay_id` varchar(63) DEFAULT NULL,
  `pay_time` datetime DEFAULT NULL,
  `ship_sn` varchar(63) DEFAULT NULL,
  `end_time` datetime DEFAULT NULL,
  `add_time` datetime DEFAULT NULL,
  `update_time` datetime DEFAULT NULL,
  `deleted` tinyint(1) DEFAULT '0',
  PRIMARY KEY (`id`)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4;

CREATE TABLE `litemall_order_goods` (
  `id` int(11) NOT NULL AUTO_INCREMENT,
  `order_id` int(11) NOT NULL DEFAULT '0',
  `goods_id` int(11) NOT NULL DEFAULT '0',
  `goods_name` varchar(127) NOT NULL DEFAULT '',
  `product_id` int(11) NOT NULL DEFAULT '0',
  `number` smallint(5) NOT NULL DEFAULT '0',
  `price` decimal(10,2) NOT NULL DEFAULT '0.00',
  `add_time` datetime DEFAULT NULL,
  `update_time` datetime DEFAULT NULL,
  `deleted` tinyint(1) DEFAULT '0',
  PRIMARY KEY (`id`),
  KEY `order_id` (`order_id`),
  KEY `goods_id` (`goods_id`)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4;

CREATE TABLE `litemall_system` (
  `id` int(11) NOT NULL AUTO_INCREMENT,
  `key_name` varchar(255) NOT NULL,
  `key_value` varchar(255) NOT NULL,
  `add_time` datetime DEFAULT NULL,
  `update_time` datetime DEFAULT NULL,
  `deleted` tinyint(1) DEFAULT '0',
  PRIMARY KEY (`id`) USING BTREE
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 ROW_FORMAT=DYNAMIC;

INSERT INTO `litemall_system` (`key_name`, `key_value`) VALUES ('litemall_order_unpaid', '30');
