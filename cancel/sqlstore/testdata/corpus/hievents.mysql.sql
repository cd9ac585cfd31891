-- HiEventsDev/hi.events: orders and order_items of
-- backend/database/migrations/schema.sql with the migrations on orders
-- 2024_06_16_192151_add_locale_to_orders.php and
-- 2024_07_19_033929_add_missing_indexes.php (commit
-- 11310bfd221849fe2243dc3cb0b0f196d0c9e2b2), translated to MariaDB: hi.events
-- ships only PostgreSQL. Translated: generated always as identity to
-- AUTO_INCREMENT, a varchar without a length to varchar(255) (Laravel's
-- string() on MySQL), timestamp(0) to datetime, timestamp (microseconds) to
-- datetime(6), both holding UTC as on PostgreSQL, boolean to bool, jsonb to
-- json; the foreign key of order_items.order_id (integer) to orders.id
-- (bigint) left out, as InnoDB refuses a key between columns of different
-- sizes, which PostgreSQL accepts. The same columns, defaults, unique key
-- and indexes as hievents.postgres.sql otherwise; the gin trigram indexes
-- have no MariaDB form and are left out there too. See that file for what
-- the columns hold.
CREATE TABLE `orders` (
  `id` bigint AUTO_INCREMENT NOT NULL,
  `short_id` varchar(20) NOT NULL,
  `event_id` integer NOT NULL,
  `total_before_additions` numeric(14, 2) DEFAULT 0.00 NOT NULL,
  `total_refunded` numeric(14, 2) DEFAULT 0.00 NOT NULL,
  `total_gross` numeric(14, 2) DEFAULT 0.00 NOT NULL,
  `currency` varchar(3) NOT NULL,
  `first_name` varchar(50) NULL,
  `last_name` varchar(50) NULL,
  `email` varchar(255) NULL,
  `status` varchar(255) NOT NULL,
  `payment_status` varchar(255) NULL,
  `refund_status` varchar(255) NULL,
  `reserved_until` datetime NULL,
  `is_manually_created` bool DEFAULT false NOT NULL,
  `session_id` varchar(40) NULL,
  `public_id` varchar(255) NOT NULL,
  `point_in_time_data` json NULL,
  `payment_gateway` varchar(255) NULL,
  `promo_code_id` integer NULL,
  `promo_code` varchar(255) NULL,
  `address` json NULL,
  `created_at` datetime(6) NOT NULL,
  `updated_at` datetime(6) NULL,
  `deleted_at` datetime(6) NULL,
  `taxes_and_fees_rollup` json NULL,
  `total_tax` numeric(14, 2) DEFAULT 0.00 NOT NULL,
  `total_fee` numeric(14, 2) DEFAULT 0.00 NOT NULL,
  `locale` varchar(20) DEFAULT 'en' NOT NULL,
  PRIMARY KEY (`id`),
  CONSTRAINT `orders_pk` UNIQUE (`public_id`)
) DEFAULT CHARSET=utf8mb4;
CREATE INDEX `orders_promo_code_id_index` ON `orders` (`promo_code_id`);
CREATE INDEX `orders_event_id_status_reserved_until_deleted_at_index` ON `orders` (`event_id`, `status`, `reserved_until`, `deleted_at`);

CREATE TABLE `order_items` (
  `id` bigint AUTO_INCREMENT NOT NULL,
  `total_before_additions` numeric(14, 2) NOT NULL,
  `quantity` integer NOT NULL,
  `order_id` integer NOT NULL,
  `ticket_id` integer NOT NULL,
  `item_name` varchar(255) NULL,
  `price` numeric(14, 2) NOT NULL,
  `price_before_discount` numeric(14, 2) NULL,
  `deleted_at` datetime(6) NULL,
  `total_tax` numeric(14, 2) DEFAULT 0.00 NOT NULL,
  `total_gross` numeric(14, 2) NULL,
  `total_service_fee` numeric(14, 2) DEFAULT 0.00 NULL,
  `taxes_and_fees_rollup` json NULL,
  `ticket_price_id` integer NOT NULL,
  PRIMARY KEY (`id`)
) DEFAULT CHARSET=utf8mb4;
CREATE INDEX `order_items_order_id_index` ON `order_items` (`order_id`);
CREATE INDEX `order_items_ticket_id_index` ON `order_items` (`ticket_id`);
CREATE INDEX `order_items_ticket_price_id_index` ON `order_items` (`ticket_price_id`);
