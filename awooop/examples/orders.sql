-- The tables of the example service awooop/examples/orders.py, as the service's own migration
-- creates them (as the database's owner, after `awooop migrate`). Both are isolated per tenant
-- like the runtime's tables (a project_id column, row-level security forced by
-- awooop_enforce_tenant_isolation): a service login, once bound to its projects (`awooop
-- tenants grant`), sees and writes the rows of the project its transaction set
-- (producer.set_tenant) only.

-- The service's own orders, written by place_order and cancel_order in the service's
-- transaction, together with the domain events they emit. The primary key is the dedupe key:
-- placing an order again is a no-op.
CREATE TABLE example_orders (
    project_id  text NOT NULL,
    order_id    text NOT NULL,
    customer    text NOT NULL,
    amount      bigint NOT NULL CHECK (amount > 0),
    cancelled   boolean NOT NULL DEFAULT false,
    PRIMARY KEY (project_id, order_id)
);
SELECT awooop_enforce_tenant_isolation('example_orders');
GRANT SELECT, INSERT, UPDATE ON example_orders TO awooop_producer;

-- The view of the projection OrderTotals (awooop projector, awooop replay): orders and their
-- total per customer, built from the events OrderPlaced and OrderCancelled; the service reads it.
CREATE TABLE example_order_totals (
    project_id  text NOT NULL,
    customer    text NOT NULL,
    orders      integer NOT NULL,
    total       bigint NOT NULL,
    last_order  text,
    PRIMARY KEY (project_id, customer)
);
SELECT awooop_enforce_tenant_isolation('example_order_totals');
GRANT SELECT ON example_order_totals TO awooop_producer;
