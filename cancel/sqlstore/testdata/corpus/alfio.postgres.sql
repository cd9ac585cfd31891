-- alfio-event/alf.io, an event ticketing platform on PostgreSQL (Spring):
-- tickets_reservation and ticket as the Flyway migrations of
-- src/main/resources/alfio/db/PGSQL/ leave them, at commit
-- 61ee4309768bf0b72b4ac8b8fe0786ce6e5c546c (2026-07-05; the folder last
-- changed in 70f9185c9eb4fa5c5dd69a5e45b1af44ac430bb1). Both tables are
-- created by V1__INITIAL_VERSION.sql; every migration was applied in Flyway's
-- order to an empty PostgreSQL 15 database and the two tables read back
-- (pg_dump -s): the columns added, renamed, dropped and retyped by V2, V4,
-- V5, V6, V8_1.1.0/1.1.1, V9_1.2.0, V11_1.4.0, V12_1.5.2/1.5.3/1.5.11/1.5.12,
-- V13_1.6.3/1.6.8, V15_1.8.7/1.8.8, V18_1.10.0, V19_1.11.2/1.11.7,
-- V21_1.13.2/1.13.5/1.13.6, V22_1.15.2/1.15.3, V23_2.0.0.0/2.0.0.1/2.0.0.2,
-- V201_2.0.0.2/2.0.0.3, V202_2.0.0.6/2.0.0.10/2.0.0.13,
-- V203_2.0.0.22/2.0.0.22.1/2.0.0.25/2.0.0.30/2.0.0.31/2.0.0.35,
-- V204_2.0.0.36/2.0.0.38/2.0.0.38.1/2.0.0.49.1/2.0.0.49.3 and
-- V205_2.0.0.57. Columns, types, defaults, keys, indexes and the check as the
-- migrations leave them (ticket.id is V1's serial; the statements' leading
-- keywords in capitals, as the corpus reader wants "CREATE "), with the
-- VAT_STATUS enum of V203_2.0.0.25 (and 2.0.0.49.3's value) that
-- ticket.vat_status needs. Left out: the foreign keys to tables not listed
-- here (organization, event, promo_code, ba_user, subscription,
-- ticket_category, special_price); the BEFORE INSERT triggers and their
-- plpgsql functions (organization_id_fk copied from the event's org_id when
-- the insert leaves it NULL, V201_2.0.0.3; ticket.public_uuid filled by
-- fill_public_uuid(), V205_2.0.0.57; ticket's subscription check), as they
-- read tables not listed here; and row-level security (ENABLE/FORCE ROW
-- LEVEL SECURITY and the policies of V201_2.0.0.3, which call
-- alfio_check_row_access(org) and pass every row unless the session sets
-- alfio.checkRowAccess), the afterMigrate views and the other 80 tables.
--
-- What the columns hold: a reservation is written 'PENDING' with id (a
-- random UUID as text, the id in the buyer's URLs), creation_ts, validity
-- (now + the event's reservation timeout), event_id_fk (NULL for a
-- subscription's purchase), organization_id_fk, user_id_fk (the signed-in
-- buyer; NULL for an anonymous one), currency and VAT; email and names come
-- with the buyer's form. The payment flow writes IN_PAYMENT (a card charge
-- under way), EXTERNAL_PROCESSING_PAYMENT (on the provider's page) and
-- WAITING_EXTERNAL_CONFIRMATION (the provider's webhook said pending; the
-- webhooks take a payment in either), then FINALIZING (OFFLINE_FINALIZING
-- after an offline payment) and COMPLETE; OFFLINE_PAYMENT,
-- CUSTOM_OFFLINE_PAYMENT and DEFERRED_OFFLINE_PAYMENT await a transfer (the
-- validity then is its payment deadline); STUCK is an IN_PAYMENT or
-- EXTERNAL_PROCESSING_PAYMENT one past its validity; CANCELLED and
-- CREDIT_NOTE_ISSUED an organiser's cancel. A PENDING reservation past its
-- validity is deleted (its tickets back to FREE): no status is written for a
-- lapse. ticket is the inventory: rows created FREE with the category ahead
-- of the sale, attached to a reservation by tickets_reservation_id and moved
-- to PENDING, then ACQUIRED.
CREATE TABLE tickets_reservation
(
    id                               character(36) PRIMARY KEY NOT NULL,
    validity                         timestamp with time zone NOT NULL,
    status                           varchar(255) NOT NULL,
    full_name                        varchar(255),
    email_address                    varchar(255),
    billing_address                  varchar(4096),
    confirmation_ts                  timestamp with time zone,
    payment_method                   varchar(255),
    offline_payment_reminder_sent    boolean DEFAULT false,
    promo_code_id_fk                 integer,
    latest_reminder_ts               timestamp with time zone,
    automatic                        boolean DEFAULT false NOT NULL,
    user_language                    varchar(10),
    direct_assignment                boolean DEFAULT false NOT NULL,
    first_name                       varchar(255),
    last_name                        varchar(255),
    invoice_number                   varchar(256),
    invoice_model                    text,
    event_id_fk                      integer,
    vat_status                       varchar(50),
    vat_nr                           varchar(255),
    vat_country                      varchar(2),
    invoice_requested                boolean DEFAULT false,
    used_vat_percent                 numeric(5, 2),
    vat_included                     boolean,
    creation_ts                      timestamp with time zone,
    customer_reference               varchar(512),
    billing_address_company          varchar(512),
    billing_address_line1            varchar(512),
    billing_address_line2            varchar(512),
    billing_address_zip              varchar(512),
    billing_address_city             varchar(512),
    validated_for_overview           boolean,
    skip_vat_nr                      boolean,
    invoicing_additional_information jsonb,
    registration_ts                  timestamp with time zone,
    organization_id_fk               integer NOT NULL,
    add_company_billing_details      boolean,
    src_price_cts                    integer DEFAULT 0 NOT NULL,
    final_price_cts                  integer DEFAULT 0 NOT NULL,
    vat_cts                          integer DEFAULT 0 NOT NULL,
    discount_cts                     integer DEFAULT 0 NOT NULL,
    currency_code                    varchar(3),
    billing_address_state            text,
    subscription_id_fk               uuid,
    user_id_fk                       integer,
    metadata                         jsonb DEFAULT '{}' NOT NULL
);

CREATE INDEX tickets_reservation_promo_code_id_fk_idx ON tickets_reservation (promo_code_id_fk);

CREATE INDEX idx_reservation_subscription_id_fk ON tickets_reservation (subscription_id_fk)
    WHERE tickets_reservation.subscription_id_fk IS NOT NULL;

CREATE INDEX idx_reservation_user_id ON tickets_reservation (user_id_fk)
    WHERE user_id_fk IS NOT NULL;

CREATE TYPE VAT_STATUS AS ENUM ('NONE', 'INCLUDED', 'NOT_INCLUDED', 'INCLUDED_EXEMPT', 'NOT_INCLUDED_EXEMPT',
    'CUSTOM_NOT_INCLUDED_EXEMPT', 'CUSTOM_INCLUDED_EXEMPT');

CREATE TABLE ticket
(
    id                     serial PRIMARY KEY NOT NULL,
    uuid                   character(36) NOT NULL,
    creation               timestamp with time zone NOT NULL,
    category_id            integer,
    event_id               integer NOT NULL,
    status                 varchar(255) NOT NULL,
    original_price_cts     integer NOT NULL,
    paid_price_cts         integer NOT NULL,
    tickets_reservation_id character(36),
    full_name              varchar(255),
    email_address          varchar(255),
    special_price_id_fk    integer,
    locked_assignment      boolean DEFAULT false,
    user_language          varchar(20),
    reminder_sent          boolean DEFAULT false,
    src_price_cts          integer DEFAULT 0 NOT NULL,
    final_price_cts        integer DEFAULT 0 NOT NULL,
    vat_cts                integer DEFAULT 0 NOT NULL,
    discount_cts           integer DEFAULT 0 NOT NULL,
    first_name             varchar(255),
    last_name              varchar(255),
    ext_reference          varchar(255),
    organization_id_fk     integer NOT NULL,
    currency_code          varchar(10),
    tags                   text ARRAY DEFAULT ARRAY[]::text[] NOT NULL,
    subscription_id_fk     uuid,
    metadata               jsonb DEFAULT '{}' NOT NULL,
    vat_status             VAT_STATUS,
    public_uuid            uuid NOT NULL,
    CONSTRAINT unique_ticket_uuid UNIQUE (uuid),
    CONSTRAINT unique_special_price UNIQUE (special_price_id_fk),
    CONSTRAINT t_unique_public_uuid UNIQUE (public_uuid),
    FOREIGN KEY (tickets_reservation_id) REFERENCES tickets_reservation (id),
    CONSTRAINT ticket_valid_vat_status CHECK (
        status NOT IN ('PENDING', 'TO_BE_PAID', 'ACQUIRED', 'CHECKED_IN', 'PRE_RESERVED')
        OR final_price_cts = 0
        OR (final_price_cts <> 0 AND status IN ('PENDING', 'TO_BE_PAID', 'ACQUIRED', 'CHECKED_IN', 'PRE_RESERVED') AND vat_status IS NOT NULL)
    )
);

CREATE INDEX ticket_category_id_idx ON ticket (category_id);

CREATE INDEX ticket_event_id_idx ON ticket (event_id);

CREATE INDEX ticket_tickets_reservation_id_idx ON ticket (tickets_reservation_id);

CREATE UNIQUE INDEX ticket_ref_unique ON ticket (event_id, ext_reference);

CREATE INDEX idx_ticket_subscription_id_fk ON ticket (subscription_id_fk)
    WHERE ticket.subscription_id_fk IS NOT NULL;
