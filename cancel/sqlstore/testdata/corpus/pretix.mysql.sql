-- pretix/pretix: Order, OrderPosition and Seat of src/pretix/base/models/orders.py
-- and seating.py (orders.py at commit 000b66d1e2873880753c215950a45cc5e9a8fa99)
-- as Django's MySQL backend creates them (pretix ran on MySQL/MariaDB until
-- it dropped that backend): int AUTO_INCREMENT, tinyint(1) for booleans,
-- datetime(6) holding UTC (USE_TZ), longtext for TextField; trimmed, the
-- same columns and indexes as pretix.postgres.sql.
CREATE TABLE `pretixbase_order` (
  `id` integer AUTO_INCREMENT NOT NULL PRIMARY KEY,
  `code` varchar(16) NOT NULL,
  `status` varchar(3) NOT NULL,
  `testmode` bool NOT NULL,
  `organizer_id` integer NULL,
  `event_id` integer NOT NULL,
  `customer_id` integer NULL,
  `email` varchar(254) NULL,
  `locale` varchar(32) NULL,
  `secret` varchar(32) NOT NULL,
  `datetime` datetime(6) NOT NULL,
  `expires` datetime(6) NOT NULL,
  `total` numeric(13, 2) NOT NULL,
  `comment` longtext NOT NULL,
  `last_modified` datetime(6) NOT NULL,
  `require_approval` bool NOT NULL,
  `sales_channel_id` integer NOT NULL,
  CONSTRAINT `order_organizer_code_uniq` UNIQUE (`organizer_id`, `code`)
) DEFAULT CHARSET=utf8mb4;
CREATE INDEX `pretixbase_order_code` ON `pretixbase_order` (`code`);
CREATE INDEX `pretixbase_order_status` ON `pretixbase_order` (`status`);
CREATE INDEX `pretixbase_order_event_id` ON `pretixbase_order` (`event_id`);
CREATE INDEX `pretixbase_order_datetime_id_idx` ON `pretixbase_order` (`datetime`, `id`);
CREATE INDEX `pretixbase_order_last_modified_id_idx` ON `pretixbase_order` (`last_modified`, `id`);

CREATE TABLE `pretixbase_orderposition` (
  `id` integer AUTO_INCREMENT NOT NULL PRIMARY KEY,
  `positionid` integer UNSIGNED NOT NULL,
  `order_id` integer NOT NULL,
  `item_id` integer NOT NULL,
  `subevent_id` integer NULL,
  `seat_id` integer NULL,
  `price` numeric(13, 2) NOT NULL,
  `secret` varchar(255) NOT NULL,
  `canceled` bool NOT NULL,
  `organizer_id` integer NULL,
  CONSTRAINT `orderposition_organizer_secret_uniq` UNIQUE (`organizer_id`, `secret`)
) DEFAULT CHARSET=utf8mb4;
CREATE INDEX `pretixbase_orderposition_order_id` ON `pretixbase_orderposition` (`order_id`);
CREATE INDEX `pretixbase_orderposition_subevent_id` ON `pretixbase_orderposition` (`subevent_id`);
CREATE INDEX `pretixbase_orderposition_seat_id` ON `pretixbase_orderposition` (`seat_id`);

CREATE TABLE `pretixbase_seat` (
  `id` integer AUTO_INCREMENT NOT NULL PRIMARY KEY,
  `event_id` integer NOT NULL,
  `subevent_id` integer NULL,
  `name` varchar(255) NOT NULL,
  `seat_guid` varchar(190) NOT NULL,
  `blocked` bool NOT NULL
) DEFAULT CHARSET=utf8mb4;
CREATE INDEX `pretixbase_seat_seat_guid` ON `pretixbase_seat` (`seat_guid`);
