-- saleor/saleor: Order of saleor/order/models.py and Channel of
-- saleor/channel/models.py (commit 723cd4eba87dfc72822ade45dc08a3caa548428d).
-- Saleor runs on PostgreSQL only; this is what Django's MySQL backend would
-- create for the same models: UUIDField as char(32) (hex, no dashes),
-- datetime(6) holding UTC (USE_TZ), tinyint(1) for booleans, bigint for the
-- DurationField (microseconds); no sequences, so number has no default.
-- Same columns and indexes as saleor.postgres.sql.
CREATE TABLE `channel_channel` (
  `id` integer AUTO_INCREMENT NOT NULL PRIMARY KEY,
  `name` varchar(250) NOT NULL,
  `slug` varchar(255) NOT NULL UNIQUE,
  `currency_code` varchar(3) NOT NULL,
  `expire_orders_after` integer NULL,
  `delete_expired_orders_after` bigint NOT NULL
) DEFAULT CHARSET=utf8mb4;
INSERT INTO `channel_channel` (`id`, `name`, `slug`, `currency_code`, `expire_orders_after`, `delete_expired_orders_after`)
  VALUES (1, 'Default', 'default-channel', 'USD', 60, 5184000000000);

CREATE TABLE `order_order` (
  `id` char(32) NOT NULL PRIMARY KEY,
  `number` integer NOT NULL UNIQUE,
  `use_old_id` bool NOT NULL,
  `created_at` datetime(6) NOT NULL,
  `updated_at` datetime(6) NOT NULL,
  `expired_at` datetime(6) NULL,
  `status` varchar(32) NOT NULL,
  `authorize_status` varchar(32) NOT NULL,
  `charge_status` varchar(32) NOT NULL,
  `user_id` integer NULL,
  `user_email` varchar(254) NOT NULL,
  `channel_id` integer NOT NULL,
  `origin` varchar(32) NOT NULL,
  `currency` varchar(3) NOT NULL,
  `lines_count` integer UNSIGNED NOT NULL,
  `total_gross_amount` numeric(20, 3) NOT NULL,
  `customer_note` longtext NOT NULL
) DEFAULT CHARSET=utf8mb4;
CREATE INDEX `order_order_updated_at` ON `order_order` (`updated_at`);
CREATE INDEX `order_order_authorize_status` ON `order_order` (`authorize_status`);
CREATE INDEX `order_order_charge_status` ON `order_order` (`charge_status`);
CREATE INDEX `order_order_user_id` ON `order_order` (`user_id`);
CREATE INDEX `order_order_channel_id` ON `order_order` (`channel_id`);
CREATE INDEX `idx_order_created_at` ON `order_order` (`created_at`);
CREATE INDEX `order_status_idx` ON `order_order` (`status`);
