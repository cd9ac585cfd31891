-- alfio-event/alf.io: tickets_reservation and ticket as the Flyway
-- migrations of src/main/resources/alfio/db/PGSQL/ leave them at commit
-- 61ee4309768bf0b72b4ac8b8fe0786ce6e5c546c, translated to MariaDB: alf.io
-- ships only PostgreSQL. Translated: timestamp with time zone to datetime(6)
-- holding UTC, boolean to bool, jsonb to json, serial to integer
-- AUTO_INCREMENT, the text array ticket.tags (default empty) to json
-- defaulting to '[]', the VAT_STATUS enum type to an inline ENUM of the same
-- values, the check's NOT IN / IN lists as they are, and the two partial
-- indexes (WHERE … IS NOT NULL) to plain ones: MariaDB has no partial index.
-- uuid stays uuid (MariaDB 10.7 has the type). The same columns, defaults,
-- keys, indexes and foreign key as alfio.postgres.sql otherwise, with the
-- same left out (the foreign keys to tables not listed, the triggers, row
-- security); see that file for what the columns hold.
CREATE TABLE `tickets_reservation` (
  `id` char(36) NOT NULL,
  `validity` datetime(6) NOT NULL,
  `status` varchar(255) NOT NULL,
  `full_name` varchar(255) NULL,
  `email_address` varchar(255) NULL,
  `billing_address` varchar(4096) NULL,
  `confirmation_ts` datetime(6) NULL,
  `payment_method` varchar(255) NULL,
  `offline_payment_reminder_sent` bool DEFAULT false NULL,
  `promo_code_id_fk` integer NULL,
  `latest_reminder_ts` datetime(6) NULL,
  `automatic` bool DEFAULT false NOT NULL,
  `user_language` varchar(10) NULL,
  `direct_assignment` bool DEFAULT false NOT NULL,
  `first_name` varchar(255) NULL,
  `last_name` varchar(255) NULL,
  `invoice_number` varchar(256) NULL,
  `invoice_model` text NULL,
  `event_id_fk` integer NULL,
  `vat_status` varchar(50) NULL,
  `vat_nr` varchar(255) NULL,
  `vat_country` varchar(2) NULL,
  `invoice_requested` bool DEFAULT false NULL,
  `used_vat_percent` numeric(5, 2) NULL,
  `vat_included` bool NULL,
  `creation_ts` datetime(6) NULL,
  `customer_reference` varchar(512) NULL,
  `billing_address_company` varchar(512) NULL,
  `billing_address_line1` varchar(512) NULL,
  `billing_address_line2` varchar(512) NULL,
  `billing_address_zip` varchar(512) NULL,
  `billing_address_city` varchar(512) NULL,
  `validated_for_overview` bool NULL,
  `skip_vat_nr` bool NULL,
  `invoicing_additional_information` json NULL,
  `registration_ts` datetime(6) NULL,
  `organization_id_fk` integer NOT NULL,
  `add_company_billing_details` bool NULL,
  `src_price_cts` integer DEFAULT 0 NOT NULL,
  `final_price_cts` integer DEFAULT 0 NOT NULL,
  `vat_cts` integer DEFAULT 0 NOT NULL,
  `discount_cts` integer DEFAULT 0 NOT NULL,
  `currency_code` varchar(3) NULL,
  `billing_address_state` text NULL,
  `subscription_id_fk` uuid NULL,
  `user_id_fk` integer NULL,
  `metadata` json DEFAULT '{}' NOT NULL,
  PRIMARY KEY (`id`)
) DEFAULT CHARSET=utf8mb4;
CREATE INDEX `tickets_reservation_promo_code_id_fk_idx` ON `tickets_reservation` (`promo_code_id_fk`);
CREATE INDEX `idx_reservation_subscription_id_fk` ON `tickets_reservation` (`subscription_id_fk`);
CREATE INDEX `idx_reservation_user_id` ON `tickets_reservation` (`user_id_fk`);

CREATE TABLE `ticket` (
  `id` integer AUTO_INCREMENT NOT NULL,
  `uuid` char(36) NOT NULL,
  `creation` datetime(6) NOT NULL,
  `category_id` integer NULL,
  `event_id` integer NOT NULL,
  `status` varchar(255) NOT NULL,
  `original_price_cts` integer NOT NULL,
  `paid_price_cts` integer NOT NULL,
  `tickets_reservation_id` char(36) NULL,
  `full_name` varchar(255) NULL,
  `email_address` varchar(255) NULL,
  `special_price_id_fk` integer NULL,
  `locked_assignment` bool DEFAULT false NULL,
  `user_language` varchar(20) NULL,
  `reminder_sent` bool DEFAULT false NULL,
  `src_price_cts` integer DEFAULT 0 NOT NULL,
  `final_price_cts` integer DEFAULT 0 NOT NULL,
  `vat_cts` integer DEFAULT 0 NOT NULL,
  `discount_cts` integer DEFAULT 0 NOT NULL,
  `first_name` varchar(255) NULL,
  `last_name` varchar(255) NULL,
  `ext_reference` varchar(255) NULL,
  `organization_id_fk` integer NOT NULL,
  `currency_code` varchar(10) NULL,
  `tags` json DEFAULT '[]' NOT NULL,
  `subscription_id_fk` uuid NULL,
  `metadata` json DEFAULT '{}' NOT NULL,
  `vat_status` ENUM('NONE', 'INCLUDED', 'NOT_INCLUDED', 'INCLUDED_EXEMPT', 'NOT_INCLUDED_EXEMPT',
    'CUSTOM_NOT_INCLUDED_EXEMPT', 'CUSTOM_INCLUDED_EXEMPT') NULL,
  `public_uuid` uuid NOT NULL,
  PRIMARY KEY (`id`),
  CONSTRAINT `unique_ticket_uuid` UNIQUE (`uuid`),
  CONSTRAINT `unique_special_price` UNIQUE (`special_price_id_fk`),
  CONSTRAINT `t_unique_public_uuid` UNIQUE (`public_uuid`),
  FOREIGN KEY (`tickets_reservation_id`) REFERENCES `tickets_reservation` (`id`),
  CONSTRAINT `ticket_valid_vat_status` CHECK (
    `status` NOT IN ('PENDING', 'TO_BE_PAID', 'ACQUIRED', 'CHECKED_IN', 'PRE_RESERVED')
    OR `final_price_cts` = 0
    OR (`final_price_cts` <> 0 AND `status` IN ('PENDING', 'TO_BE_PAID', 'ACQUIRED', 'CHECKED_IN', 'PRE_RESERVED') AND `vat_status` IS NOT NULL)
  )
) DEFAULT CHARSET=utf8mb4;
CREATE INDEX `ticket_category_id_idx` ON `ticket` (`category_id`);
CREATE INDEX `ticket_event_id_idx` ON `ticket` (`event_id`);
CREATE INDEX `ticket_tickets_reservation_id_idx` ON `ticket` (`tickets_reservation_id`);
CREATE UNIQUE INDEX `ticket_ref_unique` ON `ticket` (`event_id`, `ext_reference`);
CREATE INDEX `idx_ticket_subscription_id_fk` ON `ticket` (`subscription_id_fk`);
