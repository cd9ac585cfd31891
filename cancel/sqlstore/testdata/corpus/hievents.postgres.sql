-- HiEventsDev/hi.events, an event ticketing platform on PostgreSQL (Laravel):
-- orders and order_items of backend/database/migrations/schema.sql (the
-- initial migration 2020_01_25_113926_initial_db.php runs it), with the later
-- migrations on orders, 2024_06_16_192151_add_locale_to_orders.php (locale,
-- string(20) defaulting to config app.locale 'en', folded into the CREATE
-- TABLE as its last column) and 2024_07_19_033929_add_missing_indexes.php
-- (Laravel's index name), at commit 11310bfd221849fe2243dc3cb0b0f196d0c9e2b2
-- (2024-08-07; schema.sql last changed in aea151683ed1590e78c47eb216c4215848d93a77).
-- Columns, types, defaults and keys as the dump has them; the statements'
-- leading keywords in capitals (the corpus reader wants "CREATE "); left
-- out: the foreign keys to tables not listed here (events, promo_codes,
-- tickets, ticket_prices) and the four gin trigram search indexes (they need
-- extensions.sql's pg_trgm), trimmed to these two tables.
-- status 'RESERVED' (the reservation: pending), 'COMPLETED' (paid),
-- 'CANCELLED' (an organiser's cancel); at this commit nothing writes a status
-- when a reservation lapses: it stays RESERVED past reserved_until, which the
-- availability queries compare with now(). A payment step keeps RESERVED and
-- writes payment_status 'AWAITING_PAYMENT' (NO_PAYMENT_REQUIRED,
-- PAYMENT_FAILED, PAYMENT_RECEIVED), a column of its own. reserved_until is
-- now + event_settings.order_timeout_in_minutes (default 15), written in the
-- app's time zone, UTC. A new order is written with short_id ('o' and 13
-- random characters, the id in the public URLs and the checkout session),
-- public_id (7 random capitals, the unique order reference), session_id (the
-- buyer's checkout session, verified on every public read of a RESERVED
-- order), event_id, currency, locale; Eloquent adds created_at and
-- updated_at, and soft-deletes (deleted_at). Order items name their order by
-- its integer key and a ticket type with a quantity: no seat.
CREATE TABLE IF NOT EXISTS orders
(
    id                     bigint generated always as identity,
    short_id               varchar(20)                  not null,
    event_id               integer                      not null,
    total_before_additions numeric(14, 2) default 0.00  not null,
    total_refunded         numeric(14, 2) default 0.00  not null,
    total_gross            numeric(14, 2) default 0.00  not null,
    currency               varchar(3)                   not null,
    first_name             varchar(50),
    last_name              varchar(50),
    email                  varchar(255),
    status                 varchar                      not null,
    payment_status         varchar,
    refund_status          varchar,
    reserved_until         timestamp(0),
    is_manually_created    boolean        default false not null,
    session_id             varchar(40),
    public_id              varchar                      not null,
    point_in_time_data     jsonb,
    payment_gateway        varchar,
    promo_code_id          integer,
    promo_code             varchar,
    address                jsonb,
    created_at             timestamp                    not null,
    updated_at             timestamp,
    deleted_at             timestamp,
    taxes_and_fees_rollup  jsonb,
    total_tax              numeric(14, 2) default 0.00  not null,
    total_fee              numeric(14, 2) default 0.00  not null,
    locale                 varchar(20)    default 'en'  not null,
    primary key (id),
    constraint orders_pk
        unique (public_id)
);

CREATE INDEX IF NOT EXISTS orders_promo_code_id_index
    on orders (promo_code_id);

CREATE INDEX IF NOT EXISTS orders_event_id_status_reserved_until_deleted_at_index
    on orders (event_id, status, reserved_until, deleted_at);

CREATE TABLE IF NOT EXISTS order_items
(
    id                     bigint generated always as identity,
    total_before_additions numeric(14, 2)              not null,
    quantity               integer                     not null,
    order_id               integer                     not null,
    ticket_id              integer                     not null,
    item_name              varchar,
    price                  numeric(14, 2)              not null,
    price_before_discount  numeric(14, 2),
    deleted_at             timestamp,
    total_tax              numeric(14, 2) default 0.00 not null,
    total_gross            numeric(14, 2),
    total_service_fee      numeric(14, 2) default 0.00,
    taxes_and_fees_rollup  jsonb,
    ticket_price_id        integer                     not null,
    primary key (id),
    constraint fk_order_items_order_id
        foreign key (order_id) references orders
            on delete cascade
);

CREATE INDEX IF NOT EXISTS order_items_order_id_index
    on order_items (order_id);

CREATE INDEX IF NOT EXISTS order_items_ticket_id_index
    on order_items (ticket_id);

CREATE INDEX IF NOT EXISTS order_items_ticket_price_id_index
    on order_items (ticket_price_id);
