-- cloudwego/biz-demo gomall: the order service's Order and OrderItem of
-- gomall/app/order/biz/model/{base,order,order_item}.go (commit
-- 1f5ae2cfa29bf8ca3a22037488406c24d1ab8ed9) as GORM's AutoMigrate creates
-- them on MySQL: int becomes bigint, uint32 int unsigned, string longtext
-- unless sized, time.Time datetime(3) written in the process's zone
-- (loc=Local in the DSN), the embedded Consignee flattened. The table is named
-- `order`, a reserved word. order_state 'placed', 'paid', 'canceled', a
-- longtext. No deadline, no window, no payment id, no seats.
CREATE TABLE `order` (
  `id` bigint AUTO_INCREMENT,
  `created_at` datetime(3) NULL,
  `updated_at` datetime(3) NULL,
  `order_id` varchar(256),
  `user_id` int unsigned,
  `user_currency` longtext,
  `email` longtext,
  `street_address` longtext,
  `city` longtext,
  `state` longtext,
  `country` longtext,
  `zip_code` int,
  `order_state` longtext,
  PRIMARY KEY (`id`),
  UNIQUE INDEX `idx_order_order_id` (`order_id`)
);

CREATE TABLE `order_item` (
  `id` bigint AUTO_INCREMENT,
  `created_at` datetime(3) NULL,
  `updated_at` datetime(3) NULL,
  `product_id` int unsigned,
  `order_id_refer` varchar(256),
  `quantity` int,
  `cost` float,
  PRIMARY KEY (`id`),
  INDEX `idx_order_item_order_id_refer` (`order_id_refer`)
);
