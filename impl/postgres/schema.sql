-- qlwf PostgreSQL conformance schema (spec/storage.md §2, value rules from records.md §2–§3, §6).
--
-- Apply into a fresh database as one script (psycopg: a single execute without parameters). Every
-- statement is IF NOT EXISTS / OR REPLACE, so re-applying it to a database that already holds this
-- schema is a no-op; it is not a migration tool for other schema versions.
--
-- Conventions:
-- * Every text column uses COLLATE "C", so ORDER BY and keyset comparisons on text are code-point
--   order (storage.md §1) without per-query COLLATE clauses. Databases are also created with C
--   collation by the harness (qlwf.conformance.provision.databases), but the schema does not rely on that.
-- * Value patterns (records.md §3) as anchored POSIX regexes (PostgreSQL's `$` matches only at
--   the very end of the string outside newline-sensitive mode):
--     ID36 (PORTABLE_ID)  ^[A-Za-z0-9][A-Za-z0-9._:-]{0,35}$
--     ID128 (IDENTIFIER)  ^[A-Za-z0-9][A-Za-z0-9._:-]{0,127}$
--     HEX64 (DIGEST)      ^[0-9a-f]{64}$
--     RESOURCE_ID         ^[a-z][a-z0-9-]{0,62}$
--     PACKAGE_NAME        ^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$
--     RESULT_CODE         ^[a-z][a-z0-9_]{0,63}$
--   char(64) columns are cast to text before matching/mirroring (bpchar would keep pad blanks).
-- * JSON size limits are on canonical JSON bytes (records.md §5.1), not on jsonb's text form,
--   which adds a blank after every ':' and ','. ql3.canonical_json_octets() computes the
--   canonical length from the jsonb value, so a record exactly at the limit is accepted.
-- * JSON mirror checks use jsonb containment of an object built from the columns: a NULL column
--   becomes an explicit JSON null, so nullable keys must be present with null (storage.md §2.4).
-- * CHECK constraints are written so that an unknown (NULL) sub-result cannot let a violating row
--   through: optional columns are tested with IS NULL / IS NOT NULL explicitly.
-- * Constraint violations surface as SQLSTATE 23514 (check), 23505 (unique), 23503 (foreign key),
--   which storage.md §6.2 maps to Conflict `constraint_violation`.
--
-- Privileges (storage.md §2.11): production revokes everything from PUBLIC and the ql3 roles and
-- grants the runtime role SELECT/INSERT/UPDATE on step_runs and only SELECT/INSERT on the append-only
-- ledgers. Conformance runs use a single owner role, so no GRANT/REVOKE statements appear here.

CREATE SCHEMA IF NOT EXISTS ql3;

-- Length in bytes of the canonical JSON text of `doc` (records.md §5.1). jsonb::text differs from
-- canonical JSON only by one blank after each key colon and after each element/member comma (string
-- escaping, numbers and literals render identically), so subtract those blanks.
CREATE OR REPLACE FUNCTION ql3.canonical_json_octets(doc jsonb) RETURNS bigint
LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE
AS $fn$
    SELECT octet_length(doc::text) - coalesce(sum(
        CASE jsonb_typeof(node)
            WHEN 'object' THEN greatest(2 * (SELECT count(*) FROM jsonb_object_keys(node)) - 1, 0)
            WHEN 'array' THEN greatest(jsonb_array_length(node) - 1, 0)
            ELSE 0
        END), 0)
    FROM jsonb_path_query(doc, 'strict $.**') AS node
$fn$;

-- A compare-and-set must change exactly one row (storage.md §5). The backend sends a CAS as
--   WITH cas AS (UPDATE … RETURNING 1) SELECT ql3.require_one_row((SELECT count(*) FROM cas), 'what')
-- ahead of COMMIT in one round trip (docs/decisions.md Q-62); a CAS that matched no row must fail on
-- the server, so that the rest of the batch, COMMIT included, never runs. SQLSTATE QL001 is used by
-- nothing else and maps to Conflict `concurrent_change` (impl/postgres/failures.py). Reads nothing,
-- writes nothing.
CREATE OR REPLACE FUNCTION ql3.require_one_row(changed bigint, what text) RETURNS void
LANGUAGE plpgsql
AS $fn$
BEGIN
    IF changed IS DISTINCT FROM 1 THEN
        RAISE EXCEPTION USING ERRCODE = 'QL001', MESSAGE = what;
    END IF;
END
$fn$;

---------------------------------------------------------------------------------------------------
-- §2.1 Runs

CREATE TABLE IF NOT EXISTS ql3.runs (
    id                      varchar(36)   COLLATE "C" NOT NULL,
    project_id              varchar(128)  COLLATE "C" NOT NULL,
    task_id                 varchar(255)  COLLATE "C" NOT NULL,
    task_revision           varchar(128)  COLLATE "C" NOT NULL,
    task_snapshot_ref       varchar(512)  COLLATE "C",
    trigger_type            varchar(64)   COLLATE "C" NOT NULL,
    execution_origin        varchar(64)   COLLATE "C" NOT NULL,
    execution_owner         varchar(16)   COLLATE "C" NOT NULL,
    request_id              varchar(128)  COLLATE "C",
    status                  varchar(32)   COLLATE "C" NOT NULL,
    version                 integer       NOT NULL DEFAULT 0,
    event_sequence          integer       NOT NULL DEFAULT 0,
    priority                integer       NOT NULL DEFAULT 0,
    idempotency_key         varchar(255)  COLLATE "C",
    created_at_ms           bigint        NOT NULL,
    started_at_ms           bigint,
    finished_at_ms          bigint,
    cancel_requested_at_ms  bigint,
    cancel_reason           varchar(16)   COLLATE "C",
    error_code              varchar(128)  COLLATE "C",
    error_summary           varchar(1024) COLLATE "C",
    CONSTRAINT ql3_runs_pkey PRIMARY KEY (id),
    CONSTRAINT ql3_runs_id_ck CHECK (id ~ '^[A-Za-z0-9][A-Za-z0-9._:-]{0,35}$'),
    CONSTRAINT ql3_runs_execution_owner_ck CHECK (execution_owner = 'runtime'),
    CONSTRAINT ql3_runs_status_ck CHECK (status IN (
        'created', 'queued', 'dispatching', 'running', 'waiting_approval', 'retry_wait', 'lost',
        'succeeded', 'failed', 'cancelled', 'timed_out')),
    CONSTRAINT ql3_runs_counters_ck CHECK (version >= 0 AND event_sequence >= 0),
    CONSTRAINT ql3_runs_times_ck CHECK (
        created_at_ms >= 0
        AND (started_at_ms IS NULL OR started_at_ms >= 0)
        AND (finished_at_ms IS NULL OR finished_at_ms >= 0)
        AND (cancel_requested_at_ms IS NULL OR cancel_requested_at_ms >= 0)),
    CONSTRAINT ql3_runs_cancel_reason_ck CHECK (
        cancel_reason IS NULL
        OR cancel_reason IN ('user', 'policy', 'shutdown', 'reconcile', 'timeout'))
);

CREATE UNIQUE INDEX IF NOT EXISTS ql3_runs_project_idempotency_uidx
    ON ql3.runs (project_id, idempotency_key)
    WHERE idempotency_key IS NOT NULL;

-- Cancellation candidates (cancellation.md §8): workflow aggregates with intent, ordered by
-- (cancel_requested_at_ms, id) under status = 'running'.
CREATE INDEX IF NOT EXISTS ql3_runs_workflow_cancel_requested_idx
    ON ql3.runs (status, cancel_requested_at_ms, id)
    WHERE trigger_type = 'plugin_package_workflow' AND cancel_requested_at_ms IS NOT NULL;

---------------------------------------------------------------------------------------------------
-- §2.4 StepRuns (created before attempts and events, which reference (run_id, id))

CREATE TABLE IF NOT EXISTS ql3.step_runs (
    id                   varchar(128)  COLLATE "C" NOT NULL,
    run_id               varchar(36)   COLLATE "C" NOT NULL,
    parent_step_run_id   varchar(128)  COLLATE "C",
    step_key             varchar(128)  COLLATE "C" NOT NULL,
    kind                 varchar(32)   COLLATE "C" NOT NULL,
    definition_ref       varchar(512)  COLLATE "C" NOT NULL,
    definition_digest    char(64)      COLLATE "C" NOT NULL,
    required             boolean       NOT NULL,
    status               varchar(32)   COLLATE "C" NOT NULL,
    version              integer       NOT NULL,
    attempt_count        integer       NOT NULL,
    input_ref            varchar(512)  COLLATE "C",
    output_ref           varchar(512)  COLLATE "C",
    approval_request_id  varchar(128)  COLLATE "C",
    ready_at_ms          bigint,
    started_at_ms        bigint,
    finished_at_ms       bigint,
    result_code          varchar(64)   COLLATE "C",
    error_summary        varchar(2048) COLLATE "C",
    created_at_ms        bigint        NOT NULL,
    updated_at_ms        bigint        NOT NULL,
    last_mutation_id     varchar(128)  COLLATE "C" NOT NULL,
    step_run_digest      char(64)      COLLATE "C" NOT NULL,
    step_run_json        jsonb         NOT NULL,
    CONSTRAINT ql3_step_runs_pkey PRIMARY KEY (id),
    CONSTRAINT ql3_step_runs_run_id_uidx UNIQUE (run_id, id),
    CONSTRAINT ql3_step_runs_run_step_uidx UNIQUE (run_id, step_key),
    CONSTRAINT ql3_step_runs_run_fk FOREIGN KEY (run_id)
        REFERENCES ql3.runs (id) ON DELETE CASCADE,
    CONSTRAINT ql3_step_runs_parent_fk FOREIGN KEY (run_id, parent_step_run_id)
        REFERENCES ql3.step_runs (run_id, id) ON DELETE RESTRICT,
    CONSTRAINT ql3_step_runs_ids_ck CHECK (
        id ~ '^[A-Za-z0-9][A-Za-z0-9._:-]{0,127}$'
        AND run_id ~ '^[A-Za-z0-9][A-Za-z0-9._:-]{0,127}$'
        AND step_key ~ '^[A-Za-z0-9][A-Za-z0-9._:-]{0,127}$'
        AND last_mutation_id ~ '^[A-Za-z0-9][A-Za-z0-9._:-]{0,127}$'
        AND (parent_step_run_id IS NULL
             OR (parent_step_run_id ~ '^[A-Za-z0-9][A-Za-z0-9._:-]{0,127}$'
                 AND parent_step_run_id <> id))
        AND (approval_request_id IS NULL
             OR approval_request_id ~ '^[A-Za-z0-9][A-Za-z0-9._:-]{0,127}$')),
    CONSTRAINT ql3_step_runs_kind_ck CHECK (kind IN (
        'task', 'tool', 'model', 'agent', 'condition', 'approval', 'subworkflow')),
    CONSTRAINT ql3_step_runs_status_ck CHECK (status IN (
        'pending', 'ready', 'waiting_approval', 'running', 'lost',
        'succeeded', 'failed', 'skipped', 'cancelled', 'timed_out')),
    CONSTRAINT ql3_step_runs_digests_ck CHECK (
        definition_digest::text ~ '^[0-9a-f]{64}$'
        AND step_run_digest::text ~ '^[0-9a-f]{64}$'),
    CONSTRAINT ql3_step_runs_texts_ck CHECK (
        octet_length(definition_ref) BETWEEN 1 AND 512
        AND (input_ref IS NULL OR octet_length(input_ref) BETWEEN 1 AND 512)
        AND (output_ref IS NULL OR octet_length(output_ref) BETWEEN 1 AND 512)
        AND (error_summary IS NULL OR octet_length(error_summary) BETWEEN 1 AND 2048)
        AND (result_code IS NULL OR result_code ~ '^[a-z][a-z0-9_]{0,63}$')),
    CONSTRAINT ql3_step_runs_counters_ck CHECK (
        version BETWEEN 1 AND 2147483647
        AND attempt_count BETWEEN 0 AND 64),
    -- records.md §6.3 time ordering
    CONSTRAINT ql3_step_runs_time_order_ck CHECK (
        created_at_ms >= 0
        AND updated_at_ms >= created_at_ms
        AND (ready_at_ms IS NULL
             OR (ready_at_ms >= created_at_ms AND ready_at_ms <= updated_at_ms))
        AND (started_at_ms IS NULL
             OR (ready_at_ms IS NOT NULL
                 AND started_at_ms >= ready_at_ms AND started_at_ms <= updated_at_ms))
        AND (finished_at_ms IS NULL
             OR (finished_at_ms >= created_at_ms AND finished_at_ms <= updated_at_ms
                 AND (ready_at_ms IS NULL OR finished_at_ms >= ready_at_ms)
                 AND (started_at_ms IS NULL OR finished_at_ms >= started_at_ms)))),
    -- records.md §6.3 timestamps by status
    CONSTRAINT ql3_step_runs_status_times_ck CHECK (CASE
        WHEN status = 'pending' THEN
            ready_at_ms IS NULL AND started_at_ms IS NULL AND finished_at_ms IS NULL
        WHEN status IN ('ready', 'waiting_approval') THEN
            ready_at_ms IS NOT NULL AND started_at_ms IS NULL AND finished_at_ms IS NULL
        WHEN status IN ('running', 'lost') THEN
            ready_at_ms IS NOT NULL AND started_at_ms IS NOT NULL AND finished_at_ms IS NULL
        ELSE finished_at_ms IS NOT NULL
    END),
    -- records.md §6.3 result and approval shape
    CONSTRAINT ql3_step_runs_result_shape_ck CHECK (
        (status <> 'waiting_approval' OR approval_request_id IS NOT NULL)
        AND (output_ref IS NULL OR status = 'succeeded')
        AND (status NOT IN ('succeeded', 'pending', 'ready', 'waiting_approval', 'running')
             OR (result_code IS NULL AND error_summary IS NULL))
        AND (status NOT IN ('failed', 'skipped', 'cancelled', 'timed_out', 'lost')
             OR result_code IS NOT NULL)),
    -- records.md §6.3 hierarchy and attempts
    CONSTRAINT ql3_step_runs_attempts_ck CHECK (
        (attempt_count > 0 OR started_at_ms IS NULL)
        AND (attempt_count = 0 OR status NOT IN ('pending', 'ready') OR started_at_ms IS NULL)),
    -- JSON mirror: exactly the 24 record keys, canonical size 2..16384 bytes ...
    CONSTRAINT ql3_step_runs_json_shape_ck CHECK (CASE
        WHEN jsonb_typeof(step_run_json) = 'object' THEN
            ql3.canonical_json_octets(step_run_json) BETWEEN 2 AND 16384
            AND step_run_json - ARRAY[
                'schema', 'id', 'runId', 'parentStepRunId', 'stepKey', 'kind', 'definitionRef',
                'definitionDigest', 'required', 'status', 'version', 'attemptCount', 'inputRef',
                'outputRef', 'approvalRequestId', 'readyAtMs', 'startedAtMs', 'finishedAtMs',
                'resultCode', 'errorSummary', 'createdAtMs', 'updatedAtMs', 'lastMutationId',
                'stepRunDigest']::text[] = '{}'::jsonb
        ELSE false
    END),
    -- ... each of which equals its column (NULL column = explicit JSON null)
    CONSTRAINT ql3_step_runs_json_mirror_ck CHECK (step_run_json @> jsonb_build_object(
        'schema', 'qinglong/step-run@v1'::text,
        'id', id,
        'runId', run_id,
        'parentStepRunId', parent_step_run_id,
        'stepKey', step_key,
        'kind', kind,
        'definitionRef', definition_ref,
        'definitionDigest', definition_digest::text,
        'required', required,
        'status', status,
        'version', version,
        'attemptCount', attempt_count,
        'inputRef', input_ref,
        'outputRef', output_ref,
        'approvalRequestId', approval_request_id,
        'readyAtMs', ready_at_ms,
        'startedAtMs', started_at_ms,
        'finishedAtMs', finished_at_ms,
        'resultCode', result_code,
        'errorSummary', error_summary,
        'createdAtMs', created_at_ms,
        'updatedAtMs', updated_at_ms,
        'lastMutationId', last_mutation_id,
        'stepRunDigest', step_run_digest::text))
);

CREATE INDEX IF NOT EXISTS ql3_step_runs_run_status_idx
    ON ql3.step_runs (run_id, status, id);

CREATE INDEX IF NOT EXISTS ql3_step_runs_recovery_idx
    ON ql3.step_runs (status, updated_at_ms, id)
    WHERE status IN ('waiting_approval', 'running', 'lost');

---------------------------------------------------------------------------------------------------
-- §2.2 RunAttempts

CREATE TABLE IF NOT EXISTS ql3.run_attempts (
    id                   varchar(36)   COLLATE "C" NOT NULL,
    run_id               varchar(36)   COLLATE "C" NOT NULL,
    step_run_id          varchar(128)  COLLATE "C",
    attempt              integer       NOT NULL,
    status               varchar(32)   COLLATE "C" NOT NULL,
    executor_type        varchar(64)   COLLATE "C" NOT NULL,
    worker_id            varchar(128)  COLLATE "C",
    lease_generation     integer,
    lease_version        integer,
    lease_expires_at_ms  bigint,
    deadline_at_ms       bigint,
    callback_sequence    integer       NOT NULL DEFAULT 0,
    created_at_ms        bigint        NOT NULL,
    started_at_ms        bigint,
    finished_at_ms       bigint,
    exit_code            integer,
    error_code           varchar(128)  COLLATE "C",
    error_summary        varchar(1024) COLLATE "C",
    CONSTRAINT ql3_run_attempts_pkey PRIMARY KEY (id),
    CONSTRAINT ql3_run_attempts_run_attempt_uidx UNIQUE (run_id, attempt),
    CONSTRAINT ql3_run_attempts_run_fk FOREIGN KEY (run_id) REFERENCES ql3.runs (id),
    -- §2.10: a set step_run_id must name a StepRun of the same Run (MATCH SIMPLE skips NULLs)
    CONSTRAINT ql3_run_attempts_step_run_fk FOREIGN KEY (run_id, step_run_id)
        REFERENCES ql3.step_runs (run_id, id) ON DELETE RESTRICT,
    CONSTRAINT ql3_run_attempts_id_ck CHECK (id ~ '^[A-Za-z0-9][A-Za-z0-9._:-]{0,35}$'),
    CONSTRAINT ql3_run_attempts_attempt_ck CHECK (attempt BETWEEN 1 AND 8192),
    CONSTRAINT ql3_run_attempts_status_ck CHECK (status IN (
        'claimed', 'starting', 'running', 'succeeded', 'failed', 'cancelled', 'timed_out', 'lost')),
    CONSTRAINT ql3_run_attempts_lease_values_ck CHECK (
        (lease_generation IS NULL OR lease_generation BETWEEN 1 AND 2147483647)
        AND (lease_version IS NULL OR lease_version BETWEEN 0 AND 2147483647)
        AND (lease_expires_at_ms IS NULL OR lease_expires_at_ms >= 0)
        AND (deadline_at_ms IS NULL OR deadline_at_ms >= 0)
        AND callback_sequence >= 0),
    -- worker_id, lease_generation, lease_version, lease_expires_at_ms: all NULL or all set
    CONSTRAINT ql3_run_attempts_lease_shape_ck CHECK (
        (worker_id IS NULL AND lease_generation IS NULL AND lease_version IS NULL
         AND lease_expires_at_ms IS NULL)
        OR (worker_id IS NOT NULL AND lease_generation IS NOT NULL AND lease_version IS NOT NULL
            AND lease_expires_at_ms IS NOT NULL))
);

CREATE INDEX IF NOT EXISTS ql3_run_attempts_run_status_idx
    ON ql3.run_attempts (run_id, status, id);

CREATE INDEX IF NOT EXISTS ql3_run_attempts_lease_idx
    ON ql3.run_attempts (lease_expires_at_ms, id)
    WHERE lease_expires_at_ms IS NOT NULL;

CREATE INDEX IF NOT EXISTS ql3_run_attempts_deadline_idx
    ON ql3.run_attempts (status, deadline_at_ms, id);

CREATE INDEX IF NOT EXISTS ql3_run_attempts_status_run_idx
    ON ql3.run_attempts (status, run_id, created_at_ms, id);

CREATE INDEX IF NOT EXISTS ql3_run_attempts_recovery_idx
    ON ql3.run_attempts (lease_expires_at_ms, created_at_ms, id)
    WHERE status IN ('claimed', 'starting', 'running');

---------------------------------------------------------------------------------------------------
-- §2.3 RunEvents

CREATE TABLE IF NOT EXISTS ql3.run_events (
    id             varchar(36)  COLLATE "C" NOT NULL,
    run_id         varchar(36)  COLLATE "C" NOT NULL,
    sequence       integer      NOT NULL,
    type           varchar(128) COLLATE "C" NOT NULL,
    dedupe_key     varchar(255) COLLATE "C",
    actor_type     varchar(32)  COLLATE "C" NOT NULL,
    actor_id       varchar(255) COLLATE "C",
    attempt_id     varchar(36)  COLLATE "C",
    step_run_id    varchar(128) COLLATE "C",
    payload        jsonb        NOT NULL,
    created_at_ms  bigint       NOT NULL,
    CONSTRAINT ql3_run_events_pkey PRIMARY KEY (id),
    -- concurrent appends to one Run collide here
    CONSTRAINT ql3_run_events_run_sequence_uidx UNIQUE (run_id, sequence),
    CONSTRAINT ql3_run_events_run_fk FOREIGN KEY (run_id) REFERENCES ql3.runs (id),
    CONSTRAINT ql3_run_events_attempt_fk FOREIGN KEY (attempt_id)
        REFERENCES ql3.run_attempts (id),
    CONSTRAINT ql3_run_events_step_run_fk FOREIGN KEY (run_id, step_run_id)
        REFERENCES ql3.step_runs (run_id, id) ON DELETE RESTRICT,
    CONSTRAINT ql3_run_events_id_ck CHECK (id ~ '^[A-Za-z0-9][A-Za-z0-9._:-]{0,35}$'),
    CONSTRAINT ql3_run_events_sequence_ck CHECK (sequence >= 1),
    CONSTRAINT ql3_run_events_actor_type_ck CHECK (actor_type IN (
        'user', 'api_app', 'trigger', 'agent', 'mcp_client', 'worker', 'executor', 'system',
        'legacy_shell', 'scheduler', 'reconciler', 'compatibility')),
    CONSTRAINT ql3_run_events_payload_ck CHECK (
        jsonb_typeof(payload) = 'object'
        AND ql3.canonical_json_octets(payload) <= 16384),
    CONSTRAINT ql3_run_events_created_ck CHECK (created_at_ms >= 0)
);

CREATE UNIQUE INDEX IF NOT EXISTS ql3_run_events_run_dedupe_uidx
    ON ql3.run_events (run_id, dedupe_key)
    WHERE dedupe_key IS NOT NULL;

CREATE INDEX IF NOT EXISTS ql3_run_events_run_created_idx
    ON ql3.run_events (run_id, created_at_ms, id);

---------------------------------------------------------------------------------------------------
-- §2.5 StepRunMutations (append-only ledger)

CREATE TABLE IF NOT EXISTS ql3.step_run_mutations (
    mutation_id      varchar(128) COLLATE "C" NOT NULL,
    mutation_digest  char(64)     COLLATE "C" NOT NULL,
    run_id           varchar(36)  COLLATE "C" NOT NULL,
    step_run_id      varchar(128) COLLATE "C" NOT NULL,
    step_run_digest  char(64)     COLLATE "C" NOT NULL,
    event_id         varchar(36)  COLLATE "C" NOT NULL,
    event_sequence   integer      NOT NULL,
    run_version      integer      NOT NULL,
    step_run_json    jsonb        NOT NULL,
    committed_at_ms  bigint       NOT NULL,
    CONSTRAINT ql3_step_run_mutations_pkey PRIMARY KEY (mutation_id),
    -- one mutation per event
    CONSTRAINT ql3_step_run_mutations_event_uidx UNIQUE (event_id),
    CONSTRAINT ql3_step_run_mutations_step_run_fk FOREIGN KEY (run_id, step_run_id)
        REFERENCES ql3.step_runs (run_id, id) ON DELETE CASCADE,
    CONSTRAINT ql3_step_run_mutations_event_fk FOREIGN KEY (event_id)
        REFERENCES ql3.run_events (id) ON DELETE CASCADE,
    CONSTRAINT ql3_step_run_mutations_ids_ck CHECK (
        mutation_id ~ '^[A-Za-z0-9][A-Za-z0-9._:-]{0,127}$'),
    CONSTRAINT ql3_step_run_mutations_digests_ck CHECK (
        mutation_digest::text ~ '^[0-9a-f]{64}$'
        AND step_run_digest::text ~ '^[0-9a-f]{64}$'),
    CONSTRAINT ql3_step_run_mutations_counters_ck CHECK (
        event_sequence BETWEEN 1 AND 2147483647
        AND run_version BETWEEN 1 AND 2147483647
        AND committed_at_ms >= 0),
    -- the post-image agrees with the ledger columns
    CONSTRAINT ql3_step_run_mutations_json_ck CHECK (
        jsonb_typeof(step_run_json) = 'object'
        AND ql3.canonical_json_octets(step_run_json) BETWEEN 2 AND 16384
        AND step_run_json @> jsonb_build_object(
            'schema', 'qinglong/step-run@v1'::text,
            'id', step_run_id,
            'runId', run_id,
            'lastMutationId', mutation_id,
            'stepRunDigest', step_run_digest::text))
);

CREATE INDEX IF NOT EXISTS ql3_step_run_mutations_step_idx
    ON ql3.step_run_mutations (run_id, step_run_id, event_sequence, mutation_id);

---------------------------------------------------------------------------------------------------
-- §2.6 Workflow admissions (immutable)

CREATE TABLE IF NOT EXISTS ql3.plugin_package_workflow_admissions (
    plan_digest                   char(64)     COLLATE "C" NOT NULL,
    plan_id                       varchar(128) COLLATE "C" NOT NULL,
    run_id                        varchar(36)  COLLATE "C" NOT NULL,
    project_id                    varchar(128) COLLATE "C" NOT NULL,
    package_name                  varchar(63)  COLLATE "C" NOT NULL,
    installation_id               varchar(128) COLLATE "C" NOT NULL,
    lock_digest                   char(64)     COLLATE "C" NOT NULL,
    generation                    integer      NOT NULL,
    generation_digest             char(64)     COLLATE "C" NOT NULL,
    materialized_revision_digest  char(64)     COLLATE "C" NOT NULL,
    publication_digest            char(64)     COLLATE "C" NOT NULL,
    workflow_id                   varchar(63)  COLLATE "C" NOT NULL,
    workflow_definition_digest    char(64)     COLLATE "C" NOT NULL,
    step_count                    integer      NOT NULL,
    admitted_at_ms                bigint       NOT NULL,
    final_run_version             integer      NOT NULL,
    final_run_event_sequence      integer      NOT NULL,
    receipt_digest                char(64)     COLLATE "C" NOT NULL,
    plan_json                     jsonb        NOT NULL,
    receipt_json                  jsonb        NOT NULL,
    CONSTRAINT ql3_pp_wf_admissions_pkey PRIMARY KEY (plan_digest),
    CONSTRAINT ql3_pp_wf_admissions_plan_id_uidx UNIQUE (plan_id),
    CONSTRAINT ql3_pp_wf_admissions_run_id_uidx UNIQUE (run_id),
    CONSTRAINT ql3_pp_wf_admissions_receipt_digest_uidx UNIQUE (receipt_digest),
    -- target of the child foreign keys
    CONSTRAINT ql3_pp_wf_admissions_plan_run_uidx UNIQUE (plan_digest, run_id),
    CONSTRAINT ql3_pp_wf_admissions_run_fk FOREIGN KEY (run_id)
        REFERENCES ql3.runs (id) ON DELETE RESTRICT,
    CONSTRAINT ql3_pp_wf_admissions_ids_ck CHECK (
        plan_id ~ '^[A-Za-z0-9][A-Za-z0-9._:-]{0,127}$'
        AND run_id ~ '^[A-Za-z0-9][A-Za-z0-9._:-]{0,35}$'
        AND package_name ~ '^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$'
        AND workflow_id ~ '^[a-z][a-z0-9-]{0,62}$'),
    CONSTRAINT ql3_pp_wf_admissions_digests_ck CHECK (
        plan_digest::text ~ '^[0-9a-f]{64}$'
        AND lock_digest::text ~ '^[0-9a-f]{64}$'
        AND generation_digest::text ~ '^[0-9a-f]{64}$'
        AND materialized_revision_digest::text ~ '^[0-9a-f]{64}$'
        AND publication_digest::text ~ '^[0-9a-f]{64}$'
        AND workflow_definition_digest::text ~ '^[0-9a-f]{64}$'
        AND receipt_digest::text ~ '^[0-9a-f]{64}$'),
    CONSTRAINT ql3_pp_wf_admissions_counters_ck CHECK (
        generation BETWEEN 1 AND 2147483647
        AND step_count BETWEEN 1 AND 128
        AND admitted_at_ms >= 0
        AND final_run_version = step_count + 1
        AND final_run_event_sequence = step_count + 1),
    CONSTRAINT ql3_pp_wf_admissions_plan_json_ck CHECK (CASE
        WHEN jsonb_typeof(plan_json) = 'object' AND jsonb_typeof(plan_json -> 'steps') = 'array' THEN
            ql3.canonical_json_octets(plan_json) BETWEEN 2 AND 262144
            AND jsonb_array_length(plan_json -> 'steps') = step_count
            AND plan_json @> jsonb_build_object(
                'schema', 'qinglong/plugin-package-workflow-execution-plan@v1'::text,
                'planId', plan_id,
                'planDigest', plan_digest::text,
                'runId', run_id,
                'plannedAtMs', admitted_at_ms,
                'target', jsonb_build_object(
                    'projectId', project_id,
                    'packageName', package_name,
                    'installationId', installation_id,
                    'lockDigest', lock_digest::text,
                    'generation', generation,
                    'generationDigest', generation_digest::text,
                    'materializedRevisionDigest', materialized_revision_digest::text,
                    'publicationDigest', publication_digest::text,
                    'workflowId', workflow_id,
                    'workflowDefinitionDigest', workflow_definition_digest::text))
        ELSE false
    END),
    CONSTRAINT ql3_pp_wf_admissions_receipt_json_ck CHECK (CASE
        WHEN jsonb_typeof(receipt_json) = 'object'
             AND jsonb_typeof(receipt_json -> 'steps') = 'array' THEN
            ql3.canonical_json_octets(receipt_json) BETWEEN 2 AND 262144
            AND jsonb_array_length(receipt_json -> 'steps') = step_count
            AND receipt_json @> jsonb_build_object(
                'schema', 'qinglong/plugin-package-workflow-admission-receipt@v1'::text,
                'planId', plan_id,
                'planDigest', plan_digest::text,
                'runId', run_id,
                'publicationDigest', publication_digest::text,
                'workflowId', workflow_id,
                'admittedAtMs', admitted_at_ms,
                'finalRunVersion', final_run_version,
                'finalRunEventSequence', final_run_event_sequence,
                'receiptDigest', receipt_digest::text)
        ELSE false
    END)
);

CREATE INDEX IF NOT EXISTS ql3_pp_wf_admissions_package_idx
    ON ql3.plugin_package_workflow_admissions (project_id, package_name, admitted_at_ms, plan_digest);

CREATE INDEX IF NOT EXISTS ql3_pp_wf_admissions_workflow_idx
    ON ql3.plugin_package_workflow_admissions
       (project_id, package_name, workflow_id, admitted_at_ms, run_id);

-- frontier candidate order (storage.md §8)
CREATE INDEX IF NOT EXISTS ql3_pp_wf_admissions_frontier_idx
    ON ql3.plugin_package_workflow_admissions (admitted_at_ms, plan_digest);

---------------------------------------------------------------------------------------------------
-- §2.7 Workflow admission steps (immutable)

CREATE TABLE IF NOT EXISTS ql3.plugin_package_workflow_admission_steps (
    plan_digest             char(64)     COLLATE "C" NOT NULL,
    run_id                  varchar(36)  COLLATE "C" NOT NULL,
    step_key                varchar(63)  COLLATE "C" NOT NULL,
    step_run_id             varchar(128) COLLATE "C" NOT NULL,
    task_id                 varchar(63)  COLLATE "C" NOT NULL,
    task_definition_ref     varchar(512) COLLATE "C" NOT NULL,
    task_definition_digest  char(64)     COLLATE "C" NOT NULL,
    needs_json              jsonb        NOT NULL,
    initial_status          varchar(16)  COLLATE "C" NOT NULL,
    mutation_id             varchar(128) COLLATE "C" NOT NULL,
    event_id                varchar(36)  COLLATE "C" NOT NULL,
    CONSTRAINT ql3_pp_wf_admission_steps_pkey PRIMARY KEY (plan_digest, step_key),
    CONSTRAINT ql3_pp_wf_admission_steps_step_run_uidx UNIQUE (step_run_id),
    CONSTRAINT ql3_pp_wf_admission_steps_mutation_uidx UNIQUE (mutation_id),
    CONSTRAINT ql3_pp_wf_admission_steps_event_uidx UNIQUE (event_id),
    CONSTRAINT ql3_pp_wf_admission_steps_admission_fk FOREIGN KEY (plan_digest, run_id)
        REFERENCES ql3.plugin_package_workflow_admissions (plan_digest, run_id) ON DELETE RESTRICT,
    CONSTRAINT ql3_pp_wf_admission_steps_step_run_fk FOREIGN KEY (run_id, step_run_id)
        REFERENCES ql3.step_runs (run_id, id) ON DELETE RESTRICT,
    CONSTRAINT ql3_pp_wf_admission_steps_mutation_fk FOREIGN KEY (mutation_id)
        REFERENCES ql3.step_run_mutations (mutation_id) ON DELETE RESTRICT,
    CONSTRAINT ql3_pp_wf_admission_steps_event_fk FOREIGN KEY (event_id)
        REFERENCES ql3.run_events (id) ON DELETE RESTRICT,
    CONSTRAINT ql3_pp_wf_admission_steps_values_ck CHECK (
        step_key ~ '^[a-z][a-z0-9-]{0,62}$'
        AND task_id ~ '^[a-z][a-z0-9-]{0,62}$'
        AND octet_length(task_definition_ref) BETWEEN 1 AND 512
        AND task_definition_digest::text ~ '^[0-9a-f]{64}$'
        AND initial_status IN ('pending', 'ready')),
    -- 0..127 RESOURCE_ID strings (a step never needs itself); ready exactly when nothing is needed
    CONSTRAINT ql3_pp_wf_admission_steps_needs_ck CHECK (CASE
        WHEN jsonb_typeof(needs_json) = 'array' THEN
            jsonb_array_length(needs_json) <= 127
            AND NOT jsonb_path_exists(needs_json,
                'strict $[*] ? (@.type() != "string" || !(@ like_regex "^[a-z][a-z0-9-]{0,62}$"))')
            AND (initial_status = 'ready') = (jsonb_array_length(needs_json) = 0)
        ELSE false
    END)
);

CREATE INDEX IF NOT EXISTS ql3_pp_wf_admission_steps_task_idx
    ON ql3.plugin_package_workflow_admission_steps (task_id, task_definition_digest, plan_digest);

---------------------------------------------------------------------------------------------------
-- §2.8 Task attempt admissions (immutable receipts)

CREATE TABLE IF NOT EXISTS ql3.plugin_package_workflow_task_attempt_admissions (
    receipt_digest                      char(64)     COLLATE "C" NOT NULL,
    attempt_id                          varchar(36)  COLLATE "C" NOT NULL,
    plan_digest                         char(64)     COLLATE "C" NOT NULL,
    run_id                              varchar(36)  COLLATE "C" NOT NULL,
    step_run_id                         varchar(128) COLLATE "C" NOT NULL,
    step_run_version                    integer      NOT NULL,
    step_run_digest                     char(64)     COLLATE "C" NOT NULL,
    generation_digest                   char(64)     COLLATE "C" NOT NULL,
    resource_task_id                    varchar(63)  COLLATE "C" NOT NULL,
    task_reconciliation_receipt_digest  char(64)     COLLATE "C" NOT NULL,
    project_id                          varchar(128) COLLATE "C" NOT NULL,
    task_id                             varchar(128) COLLATE "C" NOT NULL,
    task_revision                       varchar(96)  COLLATE "C" NOT NULL,
    source_revision                     integer      NOT NULL,
    task_definition_digest              char(64)     COLLATE "C" NOT NULL,
    executor_type                       varchar(32)  COLLATE "C" NOT NULL,
    execution_digest                    char(64)     COLLATE "C" NOT NULL,
    attempt_number                      integer      NOT NULL,
    event_id                            varchar(36)  COLLATE "C" NOT NULL,
    run_version                         integer      NOT NULL,
    run_event_sequence                  integer      NOT NULL,
    admitted_at_ms                      bigint       NOT NULL,
    receipt_json                        jsonb        NOT NULL,
    CONSTRAINT ql3_pp_wf_task_attempt_admissions_pkey PRIMARY KEY (receipt_digest),
    CONSTRAINT ql3_pp_wf_task_attempt_admissions_attempt_uidx UNIQUE (attempt_id),
    CONSTRAINT ql3_pp_wf_task_attempt_admissions_event_uidx UNIQUE (event_id),
    -- one admission per ready epoch
    CONSTRAINT ql3_pp_wf_task_attempt_admissions_epoch_uidx
        UNIQUE (run_id, step_run_id, step_run_version),
    CONSTRAINT ql3_pp_wf_task_attempt_admissions_number_uidx UNIQUE (run_id, attempt_number),
    CONSTRAINT ql3_pp_wf_task_attempt_admissions_admission_fk FOREIGN KEY (plan_digest, run_id)
        REFERENCES ql3.plugin_package_workflow_admissions (plan_digest, run_id) ON DELETE RESTRICT,
    CONSTRAINT ql3_pp_wf_task_attempt_admissions_step_run_fk FOREIGN KEY (run_id, step_run_id)
        REFERENCES ql3.step_runs (run_id, id) ON DELETE RESTRICT,
    CONSTRAINT ql3_pp_wf_task_attempt_admissions_attempt_fk FOREIGN KEY (attempt_id)
        REFERENCES ql3.run_attempts (id) ON DELETE RESTRICT,
    CONSTRAINT ql3_pp_wf_task_attempt_admissions_event_fk FOREIGN KEY (event_id)
        REFERENCES ql3.run_events (id) ON DELETE RESTRICT,
    CONSTRAINT ql3_pp_wf_task_attempt_admissions_ids_ck CHECK (
        attempt_id ~ '^[A-Za-z0-9][A-Za-z0-9._:-]{0,35}$'
        AND run_id ~ '^[A-Za-z0-9][A-Za-z0-9._:-]{0,35}$'
        AND event_id ~ '^[A-Za-z0-9][A-Za-z0-9._:-]{0,35}$'
        AND step_run_id ~ '^[A-Za-z0-9][A-Za-z0-9._:-]{0,127}$'
        AND resource_task_id ~ '^[a-z][a-z0-9-]{0,62}$'
        -- RUNTIME_TASK_ID: pkg:<PACKAGE_NAME>:<resource task id>
        AND task_id ~ '^pkg:[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?:[a-z][a-z0-9-]{0,62}$'
        AND right(task_id, length(resource_task_id) + 1) = ':' || resource_task_id),
    CONSTRAINT ql3_pp_wf_task_attempt_admissions_digests_ck CHECK (
        receipt_digest::text ~ '^[0-9a-f]{64}$'
        AND plan_digest::text ~ '^[0-9a-f]{64}$'
        AND step_run_digest::text ~ '^[0-9a-f]{64}$'
        AND generation_digest::text ~ '^[0-9a-f]{64}$'
        AND task_reconciliation_receipt_digest::text ~ '^[0-9a-f]{64}$'
        AND task_definition_digest::text ~ '^[0-9a-f]{64}$'
        AND execution_digest::text ~ '^[0-9a-f]{64}$'),
    CONSTRAINT ql3_pp_wf_task_attempt_admissions_counters_ck CHECK (
        step_run_version BETWEEN 1 AND 2147483647
        AND attempt_number BETWEEN 1 AND 8192
        AND run_version BETWEEN 1 AND 2147483647
        AND run_event_sequence = run_version
        AND admitted_at_ms >= 0),
    CONSTRAINT ql3_pp_wf_task_attempt_admissions_executor_ck CHECK (
        executor_type IN ('local_process', 'remote_worker')),
    -- TASK_REVISION = qltd:v1:<source_revision>:<task_definition_digest>
    CONSTRAINT ql3_pp_wf_task_attempt_admissions_revision_ck CHECK (
        source_revision BETWEEN 1 AND 2147483647
        AND task_revision ~ '^qltd:v1:[1-9][0-9]{0,9}:[0-9a-f]{64}$'
        AND task_revision = 'qltd:v1:' || source_revision::text || ':'
                            || task_definition_digest::text),
    -- receipt: exactly the 20 receipt keys, mirroring every column except generation_digest,
    -- project_id and source_revision
    CONSTRAINT ql3_pp_wf_task_attempt_admissions_receipt_ck CHECK (CASE
        WHEN jsonb_typeof(receipt_json) = 'object' THEN
            ql3.canonical_json_octets(receipt_json) BETWEEN 2 AND 16384
            AND receipt_json - ARRAY[
                'schema', 'attemptId', 'planDigest', 'runId', 'stepRunId', 'stepRunVersion',
                'stepRunDigest', 'resourceTaskId', 'taskReconciliationReceiptDigest', 'taskId',
                'taskRevision', 'taskDefinitionDigest', 'executorType', 'executionDigest',
                'attemptNumber', 'eventId', 'runVersion', 'runEventSequence', 'admittedAtMs',
                'receiptDigest']::text[] = '{}'::jsonb
            AND receipt_json @> jsonb_build_object(
                'schema', 'qinglong/plugin-package-workflow-task-attempt-admission@v1'::text,
                'attemptId', attempt_id,
                'planDigest', plan_digest::text,
                'runId', run_id,
                'stepRunId', step_run_id,
                'stepRunVersion', step_run_version,
                'stepRunDigest', step_run_digest::text,
                'resourceTaskId', resource_task_id,
                'taskReconciliationReceiptDigest', task_reconciliation_receipt_digest::text,
                'taskId', task_id,
                'taskRevision', task_revision,
                'taskDefinitionDigest', task_definition_digest::text,
                'executorType', executor_type,
                'executionDigest', execution_digest::text,
                'attemptNumber', attempt_number,
                'eventId', event_id,
                'runVersion', run_version,
                'runEventSequence', run_event_sequence,
                'admittedAtMs', admitted_at_ms,
                'receiptDigest', receipt_digest::text)
        ELSE false
    END)
);

CREATE INDEX IF NOT EXISTS ql3_pp_wf_task_attempt_admissions_step_idx
    ON ql3.plugin_package_workflow_task_attempt_admissions (run_id, step_run_id, admitted_at_ms);

---------------------------------------------------------------------------------------------------
-- §2.9 Dispatch leases

CREATE TABLE IF NOT EXISTS ql3.run_dispatch_leases (
    attempt_id        varchar(36)  COLLATE "C" NOT NULL,
    run_id            varchar(36)  COLLATE "C" NOT NULL,
    status            varchar(16)  COLLATE "C" NOT NULL,
    version           integer      NOT NULL,
    lease_generation  integer      NOT NULL,
    worker_id         varchar(128) COLLATE "C" NOT NULL,
    acquired_at_ms    bigint       NOT NULL,
    renewed_at_ms     bigint       NOT NULL,
    expires_at_ms     bigint       NOT NULL,
    updated_at_ms     bigint       NOT NULL,
    released_at_ms    bigint,
    release_reason    varchar(32)  COLLATE "C",
    completed_at_ms   bigint,
    CONSTRAINT ql3_run_dispatch_leases_pkey PRIMARY KEY (attempt_id),
    CONSTRAINT ql3_run_dispatch_leases_attempt_fk FOREIGN KEY (attempt_id)
        REFERENCES ql3.run_attempts (id) ON DELETE CASCADE,
    CONSTRAINT ql3_run_dispatch_leases_run_fk FOREIGN KEY (run_id)
        REFERENCES ql3.runs (id) ON DELETE CASCADE,
    CONSTRAINT ql3_run_dispatch_leases_status_ck CHECK (
        status IN ('leased', 'released', 'completed')),
    CONSTRAINT ql3_run_dispatch_leases_values_ck CHECK (
        version BETWEEN 0 AND 2147483647
        AND lease_generation BETWEEN 1 AND 2147483647
        AND length(worker_id) BETWEEN 1 AND 128
        AND (release_reason IS NULL OR release_reason IN (
            'declined', 'shutdown', 'start_failed', 'capacity_changed', 'lease_expired'))),
    CONSTRAINT ql3_run_dispatch_leases_times_ck CHECK (
        acquired_at_ms >= 0
        AND renewed_at_ms >= acquired_at_ms
        AND expires_at_ms > renewed_at_ms
        AND updated_at_ms >= acquired_at_ms),
    CONSTRAINT ql3_run_dispatch_leases_shape_ck CHECK (CASE status
        WHEN 'leased' THEN
            released_at_ms IS NULL AND release_reason IS NULL AND completed_at_ms IS NULL
        WHEN 'released' THEN
            released_at_ms IS NOT NULL AND release_reason IS NOT NULL AND completed_at_ms IS NULL
        WHEN 'completed' THEN
            completed_at_ms IS NOT NULL AND released_at_ms IS NULL AND release_reason IS NULL
        ELSE false
    END)
);

-- recovery candidates and per-worker lookups consider only live (leased) rows
CREATE INDEX IF NOT EXISTS ql3_run_dispatch_leases_worker_idx
    ON ql3.run_dispatch_leases (worker_id, expires_at_ms, attempt_id)
    WHERE status = 'leased';

CREATE INDEX IF NOT EXISTS ql3_run_dispatch_leases_expiry_idx
    ON ql3.run_dispatch_leases (expires_at_ms, attempt_id)
    WHERE status = 'leased';
