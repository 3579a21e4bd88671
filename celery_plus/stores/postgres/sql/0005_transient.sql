-- celery-plus durable store on PostgreSQL, migration 0005: bindings that lapse, transient marks.
--
-- binding_deadlines  when a transient queue's binding lapses unless bound again (Redis
--                    P:bindttl:{exchange}); a binding without a row here is permanent.
-- transient_marks    queues declared transient (not durable, auto-delete or exclusive), so a
--                    publisher that never declared one (a worker answering an rpc:// client)
--                    does not store its messages as jobs (Redis P:tmark:{queue}).
-- Lapsed rows are skipped by reads and deleted by the next bind on the exchange / next mark.
-- (Numbered 0005: 0004 is the fenced-continuation migration; they touch different objects.)
--
-- (Schema only: the functions named above are in ../functions/, in their current version.)

CREATE TABLE binding_deadlines (
    exchange   text NOT NULL,
    binding    text NOT NULL,
    expires_ms bigint NOT NULL,
    PRIMARY KEY (exchange, binding)
);

CREATE TABLE transient_marks (
    queue      text PRIMARY KEY,
    expires_ms bigint NOT NULL
);
