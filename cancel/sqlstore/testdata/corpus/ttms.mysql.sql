-- XianPostsandTelecommunications/TTMS, a theatre ticketing service in Go: Order
-- and Ticket of ttms-backend/internal/model/automigrate/{order,ticket}.go (commit
-- a9b890be61c9af8903444d45e19eb27ac41810ba) as GORM's AutoMigrate creates them
-- on MySQL (gorm.Model: id bigint unsigned, created_at/updated_at/deleted_at
-- datetime(3), deleted_at the soft delete; loc=Local in the DSN); trimmed.
-- The show is plan_id (an integer). Statuses are Go strings stored through
-- their json.Marshal Valuer: the column holds "未支付" (unpaid) and "已支付"
-- (paid) with their double quotes; there is no cancelled status: the order is
-- soft-deleted. The seats are one tickets row per (plan, seat), pre-created,
-- ticket_status "lock", "for_sale", "saled" (quoted the same way); a ticket
-- does not name its order. The window is the config's LockOrderTime (15m).
CREATE TABLE `orders` (
  `id` bigint unsigned AUTO_INCREMENT,
  `created_at` datetime(3) NULL,
  `updated_at` datetime(3) NULL,
  `deleted_at` datetime(3) NULL,
  `order_id` varchar(100) NOT NULL,
  `plan_id` int NOT NULL,
  `user_id` int NOT NULL,
  `movie_id` bigint unsigned,
  `user_name` varchar(20) NOT NULL,
  `cinema_name` varchar(30) NOT NULL,
  `status` varchar(20),
  `seats` varchar(1000) NOT NULL,
  `price` float,
  `seats_id` varchar(200) NOT NULL,
  PRIMARY KEY (`id`),
  INDEX `idx_orders_deleted_at` (`deleted_at`)
);

CREATE TABLE `tickets` (
  `id` bigint unsigned AUTO_INCREMENT,
  `created_at` datetime(3) NULL,
  `updated_at` datetime(3) NULL,
  `deleted_at` datetime(3) NULL,
  `plan_id` bigint unsigned,
  `user_id` bigint unsigned,
  `seat_id` bigint unsigned,
  `price` double NOT NULL,
  `ticket_status` varchar(100),
  `lock_time` datetime(3) NULL,
  PRIMARY KEY (`id`),
  INDEX `idx_tickets_deleted_at` (`deleted_at`),
  INDEX `idx_tickets_user_id` (`user_id`)
);
