-- qlwf SQLite conformance schema, version 1 (storage.md §2, "Edge/Standalone" dialect).
--
-- Applied by qlwf.impl.sqlite.migrations inside one BEGIN IMMEDIATE transaction; do not put
-- transaction statements or PRAGMAs in this file. Statements are split with
-- sqlite3.complete_statement, so trigger bodies may contain semicolons.
--
-- Conventions used by the checks below (records.md §3):
--   HEX64     length(x) = 64 AND x NOT GLOB '*[^0-9a-f]*'
--   ID36/128  IDENTIFIER alphabet: first [A-Za-z0-9], then [A-Za-z0-9._:-], 1..36 / 1..128 chars
--   RESOURCE  first [a-z], then [a-z0-9-], 1..63 chars
--   INT31     0..2147483647
--   byte limits use length(CAST(x AS BLOB)) (UTF-8 octets); character limits use length(x).
--
-- JSON mirrors: every json_extract / json_type is guarded by json_valid inside a CASE so that a
-- malformed document fails the CHECK (a constraint error, result code 19) instead of raising a
-- "malformed JSON" runtime error. json_type distinguishes 'text', 'integer', 'true'/'false' and
-- 'null' so that a mirror cannot agree with its column only through type affinity; a nullable key
-- must be present with an explicit JSON null (json_type returns SQL NULL for an absent key).
-- Every comparison inside a mirror check uses IS (null-safe): a CHECK whose expression is NULL
-- passes, so an absent key compared with '=' would silently satisfy it.
--
-- All text comparisons use the default BINARY collation (byte order = code-point order).

---------------------------------------------------------------------------------------------------
-- 2.1 Runs
---------------------------------------------------------------------------------------------------

CREATE TABLE "Runs" (
    id                      TEXT    NOT NULL PRIMARY KEY
        CONSTRAINT ql3_runs_id_ck CHECK (
            length(id) BETWEEN 1 AND 36
            AND id GLOB '[A-Za-z0-9]*' AND id NOT GLOB '*[^A-Za-z0-9._:-]*'),
    project_id              TEXT    NOT NULL CHECK (length(project_id) <= 128),
    task_id                 TEXT    NOT NULL CHECK (length(task_id) <= 255),
    task_revision           TEXT    NOT NULL CHECK (length(task_revision) <= 128),
    task_snapshot_ref       TEXT    CHECK (task_snapshot_ref IS NULL OR length(task_snapshot_ref) <= 512),
    trigger_type            TEXT    NOT NULL CHECK (length(trigger_type) <= 64),
    execution_origin        TEXT    NOT NULL
        CONSTRAINT ql3_runs_execution_origin_ck CHECK (execution_origin IN (
            'manual', 'scheduled_system', 'scheduled_node', 'once', 'boot', 'grpc',
            'subscription', 'system', 'script', 'legacy_import')),
    execution_owner         TEXT    NOT NULL
        CONSTRAINT ql3_runs_execution_owner_ck CHECK (execution_owner IN ('legacy', 'runtime')),
    request_id              TEXT    CHECK (request_id IS NULL OR length(request_id) <= 128),
    status                  TEXT    NOT NULL
        CONSTRAINT ql3_runs_status_ck CHECK (status IN (
            'created', 'queued', 'dispatching', 'running', 'waiting_approval', 'retry_wait',
            'lost', 'succeeded', 'failed', 'cancelled', 'timed_out')),
    version                 INTEGER NOT NULL DEFAULT 0 CHECK (version BETWEEN 0 AND 2147483647),
    event_sequence          INTEGER NOT NULL DEFAULT 0 CHECK (event_sequence BETWEEN 0 AND 2147483647),
    priority                INTEGER NOT NULL DEFAULT 0,
    idempotency_key         TEXT    CHECK (idempotency_key IS NULL OR length(idempotency_key) <= 255),
    created_at_ms           INTEGER NOT NULL CHECK (created_at_ms >= 0),
    started_at_ms           INTEGER CHECK (started_at_ms IS NULL OR started_at_ms >= 0),
    finished_at_ms          INTEGER CHECK (finished_at_ms IS NULL OR finished_at_ms >= 0),
    cancel_requested_at_ms  INTEGER CHECK (cancel_requested_at_ms IS NULL OR cancel_requested_at_ms >= 0),
    cancel_reason           TEXT
        CONSTRAINT ql3_runs_cancel_reason_ck CHECK (cancel_reason IS NULL OR cancel_reason IN (
            'user', 'policy', 'shutdown', 'reconcile', 'timeout')),
    error_code              TEXT    CHECK (error_code IS NULL OR length(error_code) <= 128),
    error_summary           TEXT    CHECK (error_summary IS NULL OR length(error_summary) <= 1024)
) STRICT;

CREATE UNIQUE INDEX ql3_runs_project_idempotency_uidx
    ON "Runs" (project_id, idempotency_key) WHERE idempotency_key IS NOT NULL;

-- Cancellation candidates (storage.md §8): status = 'running', keyset on (cancel_requested_at_ms, id).
CREATE INDEX ql3_local_runs_cancel_requested_idx
    ON "Runs" (status, cancel_requested_at_ms, id);

---------------------------------------------------------------------------------------------------
-- 2.4 StepRuns (created before RunAttempts / RunEvents only for readability; SQLite resolves
-- foreign keys at statement time, not at CREATE time)
---------------------------------------------------------------------------------------------------

CREATE TABLE "StepRuns" (
    id                  TEXT    NOT NULL PRIMARY KEY
        CONSTRAINT ql3_step_runs_id_ck CHECK (
            length(id) BETWEEN 1 AND 128
            AND id GLOB '[A-Za-z0-9]*' AND id NOT GLOB '*[^A-Za-z0-9._:-]*'),
    run_id              TEXT    NOT NULL
        CONSTRAINT ql3_step_runs_run_id_ck CHECK (
            length(run_id) BETWEEN 1 AND 128
            AND run_id GLOB '[A-Za-z0-9]*' AND run_id NOT GLOB '*[^A-Za-z0-9._:-]*')
        REFERENCES "Runs" (id) ON DELETE CASCADE,
    parent_step_run_id  TEXT
        CONSTRAINT ql3_step_runs_parent_ck CHECK (parent_step_run_id IS NULL OR (
            length(parent_step_run_id) BETWEEN 1 AND 128
            AND parent_step_run_id GLOB '[A-Za-z0-9]*'
            AND parent_step_run_id NOT GLOB '*[^A-Za-z0-9._:-]*'
            AND parent_step_run_id <> id)),
    step_key            TEXT    NOT NULL
        CONSTRAINT ql3_step_runs_step_key_ck CHECK (
            length(step_key) BETWEEN 1 AND 128
            AND step_key GLOB '[A-Za-z0-9]*' AND step_key NOT GLOB '*[^A-Za-z0-9._:-]*'),
    kind                TEXT    NOT NULL
        CONSTRAINT ql3_step_runs_kind_ck CHECK (kind IN (
            'task', 'tool', 'model', 'agent', 'condition', 'approval', 'subworkflow')),
    definition_ref      TEXT    NOT NULL
        CHECK (length(CAST(definition_ref AS BLOB)) BETWEEN 1 AND 512),
    definition_digest   TEXT    NOT NULL
        CHECK (length(definition_digest) = 64 AND definition_digest NOT GLOB '*[^0-9a-f]*'),
    required            INTEGER NOT NULL CHECK (required IN (0, 1)),
    status              TEXT    NOT NULL
        CONSTRAINT ql3_step_runs_status_ck CHECK (status IN (
            'pending', 'ready', 'waiting_approval', 'running', 'lost',
            'succeeded', 'failed', 'skipped', 'cancelled', 'timed_out')),
    version             INTEGER NOT NULL CHECK (version BETWEEN 1 AND 2147483647),
    attempt_count       INTEGER NOT NULL CHECK (attempt_count BETWEEN 0 AND 64),
    input_ref           TEXT    CHECK (input_ref IS NULL OR length(CAST(input_ref AS BLOB)) BETWEEN 1 AND 512),
    output_ref          TEXT    CHECK (output_ref IS NULL OR length(CAST(output_ref AS BLOB)) BETWEEN 1 AND 512),
    approval_request_id TEXT
        CHECK (approval_request_id IS NULL OR (
            length(approval_request_id) BETWEEN 1 AND 128
            AND approval_request_id GLOB '[A-Za-z0-9]*'
            AND approval_request_id NOT GLOB '*[^A-Za-z0-9._:-]*')),
    ready_at_ms         INTEGER,
    started_at_ms       INTEGER,
    finished_at_ms      INTEGER,
    result_code         TEXT
        CONSTRAINT ql3_step_runs_result_code_ck CHECK (result_code IS NULL OR (
            length(result_code) BETWEEN 1 AND 64
            AND result_code GLOB '[a-z]*' AND result_code NOT GLOB '*[^a-z0-9_]*')),
    error_summary       TEXT
        CHECK (error_summary IS NULL OR length(CAST(error_summary AS BLOB)) BETWEEN 1 AND 2048),
    created_at_ms       INTEGER NOT NULL,
    updated_at_ms       INTEGER NOT NULL,
    last_mutation_id    TEXT    NOT NULL
        CHECK (length(last_mutation_id) BETWEEN 1 AND 128
            AND last_mutation_id GLOB '[A-Za-z0-9]*'
            AND last_mutation_id NOT GLOB '*[^A-Za-z0-9._:-]*'),
    step_run_digest     TEXT    NOT NULL
        CHECK (length(step_run_digest) = 64 AND step_run_digest NOT GLOB '*[^0-9a-f]*'),
    step_run_json       TEXT    NOT NULL,

    -- Time ordering (records.md §6.3).
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

    -- Timestamps by status.
    CONSTRAINT ql3_step_runs_status_times_ck CHECK (
        CASE
            WHEN status = 'pending'
                THEN ready_at_ms IS NULL AND started_at_ms IS NULL AND finished_at_ms IS NULL
            WHEN status IN ('ready', 'waiting_approval')
                THEN ready_at_ms IS NOT NULL AND started_at_ms IS NULL AND finished_at_ms IS NULL
            WHEN status IN ('running', 'lost')
                THEN ready_at_ms IS NOT NULL AND started_at_ms IS NOT NULL AND finished_at_ms IS NULL
            ELSE finished_at_ms IS NOT NULL
        END),

    -- Result, approval and attempt shape.
    CONSTRAINT ql3_step_runs_result_shape_ck CHECK (
        (status <> 'waiting_approval' OR approval_request_id IS NOT NULL)
        AND (output_ref IS NULL OR status = 'succeeded')
        AND (status <> 'succeeded' OR (result_code IS NULL AND error_summary IS NULL))
        AND (status NOT IN ('failed', 'skipped', 'cancelled', 'timed_out', 'lost')
             OR result_code IS NOT NULL)
        AND (status NOT IN ('pending', 'ready', 'waiting_approval', 'running')
             OR (result_code IS NULL AND error_summary IS NULL))
        AND (attempt_count > 0 OR started_at_ms IS NULL)),

    -- JSON mirror: the canonical record with exactly its 24 keys, each equal to its column.
    CONSTRAINT ql3_step_runs_json_mirror_ck CHECK (
        CASE WHEN json_valid(step_run_json) THEN
            json_type(step_run_json) = 'object'
            AND length(CAST(step_run_json AS BLOB)) BETWEEN 2 AND 16384
            AND json_remove(step_run_json,
                '$.schema', '$.id', '$.runId', '$.parentStepRunId', '$.stepKey', '$.kind',
                '$.definitionRef', '$.definitionDigest', '$.required', '$.status', '$.version',
                '$.attemptCount', '$.inputRef', '$.outputRef', '$.approvalRequestId',
                '$.readyAtMs', '$.startedAtMs', '$.finishedAtMs', '$.resultCode',
                '$.errorSummary', '$.createdAtMs', '$.updatedAtMs', '$.lastMutationId',
                '$.stepRunDigest') = '{}'
            AND json_type(step_run_json, '$.schema') IS 'text'
            AND json_extract(step_run_json, '$.schema') IS 'qinglong/step-run@v1'
            AND json_type(step_run_json, '$.id') IS 'text'
            AND json_extract(step_run_json, '$.id') IS id
            AND json_type(step_run_json, '$.runId') IS 'text'
            AND json_extract(step_run_json, '$.runId') IS run_id
            AND json_type(step_run_json, '$.parentStepRunId')
                IS iif(parent_step_run_id IS NULL, 'null', 'text')
            AND json_extract(step_run_json, '$.parentStepRunId') IS parent_step_run_id
            AND json_type(step_run_json, '$.stepKey') IS 'text'
            AND json_extract(step_run_json, '$.stepKey') IS step_key
            AND json_type(step_run_json, '$.kind') IS 'text'
            AND json_extract(step_run_json, '$.kind') IS kind
            AND json_type(step_run_json, '$.definitionRef') IS 'text'
            AND json_extract(step_run_json, '$.definitionRef') IS definition_ref
            AND json_type(step_run_json, '$.definitionDigest') IS 'text'
            AND json_extract(step_run_json, '$.definitionDigest') IS definition_digest
            -- JSON true/false: json_extract yields 1/0, json_type yields 'true'/'false'.
            AND json_type(step_run_json, '$.required') IS iif(required = 1, 'true', 'false')
            AND json_extract(step_run_json, '$.required') IS required
            AND json_type(step_run_json, '$.status') IS 'text'
            AND json_extract(step_run_json, '$.status') IS status
            AND json_type(step_run_json, '$.version') IS 'integer'
            AND json_extract(step_run_json, '$.version') IS version
            AND json_type(step_run_json, '$.attemptCount') IS 'integer'
            AND json_extract(step_run_json, '$.attemptCount') IS attempt_count
            AND json_type(step_run_json, '$.inputRef') IS iif(input_ref IS NULL, 'null', 'text')
            AND json_extract(step_run_json, '$.inputRef') IS input_ref
            AND json_type(step_run_json, '$.outputRef') IS iif(output_ref IS NULL, 'null', 'text')
            AND json_extract(step_run_json, '$.outputRef') IS output_ref
            AND json_type(step_run_json, '$.approvalRequestId')
                IS iif(approval_request_id IS NULL, 'null', 'text')
            AND json_extract(step_run_json, '$.approvalRequestId') IS approval_request_id
            AND json_type(step_run_json, '$.readyAtMs') IS iif(ready_at_ms IS NULL, 'null', 'integer')
            AND json_extract(step_run_json, '$.readyAtMs') IS ready_at_ms
            AND json_type(step_run_json, '$.startedAtMs') IS iif(started_at_ms IS NULL, 'null', 'integer')
            AND json_extract(step_run_json, '$.startedAtMs') IS started_at_ms
            AND json_type(step_run_json, '$.finishedAtMs') IS iif(finished_at_ms IS NULL, 'null', 'integer')
            AND json_extract(step_run_json, '$.finishedAtMs') IS finished_at_ms
            AND json_type(step_run_json, '$.resultCode') IS iif(result_code IS NULL, 'null', 'text')
            AND json_extract(step_run_json, '$.resultCode') IS result_code
            AND json_type(step_run_json, '$.errorSummary') IS iif(error_summary IS NULL, 'null', 'text')
            AND json_extract(step_run_json, '$.errorSummary') IS error_summary
            AND json_type(step_run_json, '$.createdAtMs') IS 'integer'
            AND json_extract(step_run_json, '$.createdAtMs') IS created_at_ms
            AND json_type(step_run_json, '$.updatedAtMs') IS 'integer'
            AND json_extract(step_run_json, '$.updatedAtMs') IS updated_at_ms
            AND json_type(step_run_json, '$.lastMutationId') IS 'text'
            AND json_extract(step_run_json, '$.lastMutationId') IS last_mutation_id
            AND json_type(step_run_json, '$.stepRunDigest') IS 'text'
            AND json_extract(step_run_json, '$.stepRunDigest') IS step_run_digest
        ELSE 0 END),

    CONSTRAINT ql3_step_runs_parent_fk FOREIGN KEY (run_id, parent_step_run_id)
        REFERENCES "StepRuns" (run_id, id) ON DELETE RESTRICT
) STRICT;

CREATE UNIQUE INDEX ql3_step_runs_run_id_uidx ON "StepRuns" (run_id, id);
CREATE UNIQUE INDEX ql3_step_runs_run_step_uidx ON "StepRuns" (run_id, step_key);
CREATE INDEX ql3_step_runs_run_status_idx ON "StepRuns" (run_id, status, id);
CREATE INDEX ql3_step_runs_recovery_idx ON "StepRuns" (status, updated_at_ms, id)
    WHERE status IN ('waiting_approval', 'running', 'lost');
-- Task candidates (storage.md §8): status = 'ready', keyset on (ready_at_ms, id). Not partial, so
-- that the planner can use it whether the status is written as a literal or bound as a parameter.
CREATE INDEX ql3_step_runs_task_candidate_idx ON "StepRuns" (status, ready_at_ms, id);

---------------------------------------------------------------------------------------------------
-- 2.2 RunAttempts
---------------------------------------------------------------------------------------------------

CREATE TABLE "RunAttempts" (
    id                  TEXT    NOT NULL PRIMARY KEY
        CONSTRAINT ql3_run_attempts_id_ck CHECK (
            length(id) BETWEEN 1 AND 36
            AND id GLOB '[A-Za-z0-9]*' AND id NOT GLOB '*[^A-Za-z0-9._:-]*'),
    run_id              TEXT    NOT NULL CHECK (length(run_id) BETWEEN 1 AND 36)
        REFERENCES "Runs" (id) ON DELETE CASCADE,
    step_run_id         TEXT    CHECK (step_run_id IS NULL OR length(step_run_id) BETWEEN 1 AND 128),
    attempt             INTEGER NOT NULL CHECK (attempt BETWEEN 1 AND 8192),
    status              TEXT    NOT NULL
        CONSTRAINT ql3_run_attempts_status_ck CHECK (status IN (
            'claimed', 'starting', 'running', 'succeeded', 'failed', 'cancelled', 'timed_out', 'lost')),
    executor_type       TEXT    NOT NULL CHECK (length(executor_type) <= 64),
    worker_id           TEXT    CHECK (worker_id IS NULL OR length(worker_id) BETWEEN 1 AND 128),
    lease_generation    INTEGER CHECK (lease_generation IS NULL OR lease_generation BETWEEN 1 AND 2147483647),
    lease_version       INTEGER CHECK (lease_version IS NULL OR lease_version BETWEEN 0 AND 2147483647),
    lease_expires_at_ms INTEGER CHECK (lease_expires_at_ms IS NULL OR lease_expires_at_ms >= 0),
    deadline_at_ms      INTEGER CHECK (deadline_at_ms IS NULL OR deadline_at_ms >= 0),
    callback_sequence   INTEGER NOT NULL DEFAULT 0 CHECK (callback_sequence BETWEEN 0 AND 2147483647),
    created_at_ms       INTEGER NOT NULL CHECK (created_at_ms >= 0),
    started_at_ms       INTEGER CHECK (started_at_ms IS NULL OR started_at_ms >= 0),
    finished_at_ms      INTEGER CHECK (finished_at_ms IS NULL OR finished_at_ms >= 0),
    exit_code           INTEGER CHECK (exit_code IS NULL OR exit_code BETWEEN -2147483648 AND 2147483647),
    error_code          TEXT    CHECK (error_code IS NULL OR length(error_code) <= 128),
    error_summary       TEXT    CHECK (error_summary IS NULL OR length(error_summary) <= 1024),

    -- Lease keys are all-or-nothing (records.md §6.7).
    CONSTRAINT ql3_run_attempts_lease_shape_ck CHECK (
        (worker_id IS NULL) = (lease_generation IS NULL)
        AND (worker_id IS NULL) = (lease_version IS NULL)
        AND (worker_id IS NULL) = (lease_expires_at_ms IS NULL))
) STRICT;

CREATE UNIQUE INDEX ql3_run_attempts_run_attempt_uidx ON "RunAttempts" (run_id, attempt);
CREATE INDEX ql3_run_attempts_run_status_idx ON "RunAttempts" (run_id, status, id);
CREATE INDEX ql3_run_attempts_lease_idx ON "RunAttempts" (lease_expires_at_ms, id)
    WHERE lease_expires_at_ms IS NOT NULL;
CREATE INDEX ql3_run_attempts_deadline_idx ON "RunAttempts" (status, deadline_at_ms, id);
CREATE INDEX ql3_run_attempts_step_run_idx ON "RunAttempts" (run_id, step_run_id);

---------------------------------------------------------------------------------------------------
-- 2.3 RunEvents
---------------------------------------------------------------------------------------------------

CREATE TABLE "RunEvents" (
    id              TEXT    NOT NULL PRIMARY KEY
        CONSTRAINT ql3_run_events_id_ck CHECK (
            length(id) BETWEEN 1 AND 36
            AND id GLOB '[A-Za-z0-9]*' AND id NOT GLOB '*[^A-Za-z0-9._:-]*'),
    run_id          TEXT    NOT NULL CHECK (length(run_id) BETWEEN 1 AND 36)
        REFERENCES "Runs" (id) ON DELETE CASCADE,
    sequence        INTEGER NOT NULL CHECK (sequence BETWEEN 1 AND 2147483647),
    type            TEXT    NOT NULL CHECK (length(type) BETWEEN 1 AND 128),
    dedupe_key      TEXT    CHECK (dedupe_key IS NULL OR length(dedupe_key) BETWEEN 1 AND 255),
    actor_type      TEXT    NOT NULL
        CONSTRAINT ql3_run_events_actor_type_ck CHECK (actor_type IN (
            'user', 'api_app', 'trigger', 'agent', 'mcp_client', 'worker', 'executor', 'system',
            'legacy_shell', 'scheduler', 'reconciler', 'compatibility')),
    actor_id        TEXT    CHECK (actor_id IS NULL OR length(actor_id) BETWEEN 1 AND 255),
    attempt_id      TEXT    REFERENCES "RunAttempts" (id) ON DELETE SET NULL,
    step_run_id     TEXT    CHECK (step_run_id IS NULL OR length(step_run_id) BETWEEN 1 AND 128),
    payload         TEXT    NOT NULL
        CONSTRAINT ql3_run_events_payload_ck CHECK (
            CASE WHEN json_valid(payload) THEN
                json_type(payload) = 'object'
                AND length(CAST(payload AS BLOB)) BETWEEN 2 AND 16384
            ELSE 0 END),
    created_at_ms   INTEGER NOT NULL CHECK (created_at_ms >= 0)
) STRICT;

CREATE UNIQUE INDEX ql3_run_events_run_sequence_uidx ON "RunEvents" (run_id, sequence);
CREATE UNIQUE INDEX ql3_run_events_run_dedupe_uidx
    ON "RunEvents" (run_id, dedupe_key) WHERE dedupe_key IS NOT NULL;
CREATE INDEX ql3_run_events_run_created_idx ON "RunEvents" (run_id, created_at_ms, id);
CREATE INDEX ql3_run_events_attempt_idx ON "RunEvents" (attempt_id) WHERE attempt_id IS NOT NULL;

---------------------------------------------------------------------------------------------------
-- 2.10 StepRun references of attempts and events (SQLite: BEFORE triggers instead of composite
-- foreign keys). RAISE(ABORT) is SQLITE_CONSTRAINT_TRIGGER (primary code 19 → Conflict).
---------------------------------------------------------------------------------------------------

CREATE TRIGGER ql3_run_attempts_step_run_ref_insert_trg
BEFORE INSERT ON "RunAttempts"
FOR EACH ROW
WHEN NEW.step_run_id IS NOT NULL
 AND NOT EXISTS (SELECT 1 FROM "StepRuns" AS s WHERE s.run_id = NEW.run_id AND s.id = NEW.step_run_id)
BEGIN
    SELECT RAISE(ABORT, 'ql3 StepRun reference mismatch');
END;

CREATE TRIGGER ql3_run_attempts_step_run_ref_update_trg
BEFORE UPDATE OF run_id, step_run_id ON "RunAttempts"
FOR EACH ROW
WHEN NEW.step_run_id IS NOT NULL
 AND NOT EXISTS (SELECT 1 FROM "StepRuns" AS s WHERE s.run_id = NEW.run_id AND s.id = NEW.step_run_id)
BEGIN
    SELECT RAISE(ABORT, 'ql3 StepRun reference mismatch');
END;

CREATE TRIGGER ql3_run_events_step_run_ref_insert_trg
BEFORE INSERT ON "RunEvents"
FOR EACH ROW
WHEN NEW.step_run_id IS NOT NULL
 AND NOT EXISTS (SELECT 1 FROM "StepRuns" AS s WHERE s.run_id = NEW.run_id AND s.id = NEW.step_run_id)
BEGIN
    SELECT RAISE(ABORT, 'ql3 StepRun reference mismatch');
END;

CREATE TRIGGER ql3_run_events_step_run_ref_update_trg
BEFORE UPDATE OF run_id, step_run_id ON "RunEvents"
FOR EACH ROW
WHEN NEW.step_run_id IS NOT NULL
 AND NOT EXISTS (SELECT 1 FROM "StepRuns" AS s WHERE s.run_id = NEW.run_id AND s.id = NEW.step_run_id)
BEGIN
    SELECT RAISE(ABORT, 'ql3 StepRun reference mismatch');
END;

---------------------------------------------------------------------------------------------------
-- 2.5 StepRunMutations (append-only ledger)
---------------------------------------------------------------------------------------------------

CREATE TABLE "StepRunMutations" (
    mutation_id     TEXT    NOT NULL PRIMARY KEY
        CONSTRAINT ql3_step_run_mutations_id_ck CHECK (
            length(mutation_id) BETWEEN 1 AND 128
            AND mutation_id GLOB '[A-Za-z0-9]*' AND mutation_id NOT GLOB '*[^A-Za-z0-9._:-]*'),
    mutation_digest TEXT    NOT NULL
        CHECK (length(mutation_digest) = 64 AND mutation_digest NOT GLOB '*[^0-9a-f]*'),
    run_id          TEXT    NOT NULL CHECK (length(run_id) BETWEEN 1 AND 36),
    step_run_id     TEXT    NOT NULL CHECK (length(step_run_id) BETWEEN 1 AND 128),
    step_run_digest TEXT    NOT NULL
        CHECK (length(step_run_digest) = 64 AND step_run_digest NOT GLOB '*[^0-9a-f]*'),
    event_id        TEXT    NOT NULL CHECK (length(event_id) BETWEEN 1 AND 36)
        REFERENCES "RunEvents" (id) ON DELETE CASCADE,
    event_sequence  INTEGER NOT NULL CHECK (event_sequence BETWEEN 1 AND 2147483647),
    run_version     INTEGER NOT NULL CHECK (run_version BETWEEN 1 AND 2147483647),
    step_run_json   TEXT    NOT NULL,
    committed_at_ms INTEGER NOT NULL CHECK (committed_at_ms >= 0),

    -- The post-image agrees with the ledger columns.
    CONSTRAINT ql3_step_run_mutations_post_image_ck CHECK (
        CASE WHEN json_valid(step_run_json) THEN
            json_type(step_run_json) = 'object'
            AND length(CAST(step_run_json AS BLOB)) BETWEEN 2 AND 16384
            AND json_type(step_run_json, '$.schema') IS 'text'
            AND json_extract(step_run_json, '$.schema') IS 'qinglong/step-run@v1'
            AND json_type(step_run_json, '$.id') IS 'text'
            AND json_extract(step_run_json, '$.id') IS step_run_id
            AND json_type(step_run_json, '$.runId') IS 'text'
            AND json_extract(step_run_json, '$.runId') IS run_id
            AND json_type(step_run_json, '$.lastMutationId') IS 'text'
            AND json_extract(step_run_json, '$.lastMutationId') IS mutation_id
            AND json_type(step_run_json, '$.stepRunDigest') IS 'text'
            AND json_extract(step_run_json, '$.stepRunDigest') IS step_run_digest
        ELSE 0 END),

    CONSTRAINT ql3_step_run_mutations_step_run_fk FOREIGN KEY (run_id, step_run_id)
        REFERENCES "StepRuns" (run_id, id) ON DELETE CASCADE
) STRICT;

CREATE UNIQUE INDEX ql3_step_run_mutations_event_uidx ON "StepRunMutations" (event_id);
CREATE INDEX ql3_step_run_mutations_step_idx
    ON "StepRunMutations" (run_id, step_run_id, event_sequence, mutation_id);

---------------------------------------------------------------------------------------------------
-- 2.6 Workflow admissions (append-only)
---------------------------------------------------------------------------------------------------

CREATE TABLE "QingLong3PluginPackageWorkflowAdmissions" (
    plan_digest                  TEXT    NOT NULL PRIMARY KEY
        CHECK (length(plan_digest) = 64 AND plan_digest NOT GLOB '*[^0-9a-f]*'),
    plan_id                      TEXT    NOT NULL
        CHECK (length(plan_id) BETWEEN 1 AND 128
            AND plan_id GLOB '[A-Za-z0-9]*' AND plan_id NOT GLOB '*[^A-Za-z0-9._:-]*'),
    run_id                       TEXT    NOT NULL
        CHECK (length(run_id) BETWEEN 1 AND 36
            AND run_id GLOB '[A-Za-z0-9]*' AND run_id NOT GLOB '*[^A-Za-z0-9._:-]*')
        REFERENCES "Runs" (id) ON DELETE RESTRICT,
    project_id                   TEXT    NOT NULL
        CHECK (length(project_id) BETWEEN 1 AND 128
            AND project_id GLOB '[A-Za-z0-9]*' AND project_id NOT GLOB '*[^A-Za-z0-9._:-]*'),
    package_name                 TEXT    NOT NULL
        CONSTRAINT ql3_ppw_admissions_package_name_ck CHECK (
            length(package_name) BETWEEN 1 AND 63
            AND package_name GLOB '[a-z0-9]*'
            AND package_name NOT GLOB '*[^a-z0-9-]*'
            AND package_name NOT GLOB '*-'),
    installation_id              TEXT    NOT NULL
        CHECK (length(installation_id) BETWEEN 1 AND 128
            AND installation_id GLOB '[A-Za-z0-9]*'
            AND installation_id NOT GLOB '*[^A-Za-z0-9._:-]*'),
    lock_digest                  TEXT    NOT NULL
        CHECK (length(lock_digest) = 64 AND lock_digest NOT GLOB '*[^0-9a-f]*'),
    generation                   INTEGER NOT NULL CHECK (generation BETWEEN 1 AND 2147483647),
    generation_digest            TEXT    NOT NULL
        CHECK (length(generation_digest) = 64 AND generation_digest NOT GLOB '*[^0-9a-f]*'),
    materialized_revision_digest TEXT    NOT NULL
        CHECK (length(materialized_revision_digest) = 64
            AND materialized_revision_digest NOT GLOB '*[^0-9a-f]*'),
    publication_digest           TEXT    NOT NULL
        CHECK (length(publication_digest) = 64 AND publication_digest NOT GLOB '*[^0-9a-f]*'),
    workflow_id                  TEXT    NOT NULL
        CHECK (length(workflow_id) BETWEEN 1 AND 63
            AND workflow_id GLOB '[a-z]*' AND workflow_id NOT GLOB '*[^a-z0-9-]*'),
    workflow_definition_digest   TEXT    NOT NULL
        CHECK (length(workflow_definition_digest) = 64
            AND workflow_definition_digest NOT GLOB '*[^0-9a-f]*'),
    step_count                   INTEGER NOT NULL CHECK (step_count BETWEEN 1 AND 128),
    admitted_at_ms               INTEGER NOT NULL CHECK (admitted_at_ms >= 0),
    final_run_version            INTEGER NOT NULL,
    final_run_event_sequence     INTEGER NOT NULL,
    receipt_digest               TEXT    NOT NULL
        CHECK (length(receipt_digest) = 64 AND receipt_digest NOT GLOB '*[^0-9a-f]*'),
    plan_json                    TEXT    NOT NULL,
    receipt_json                 TEXT    NOT NULL,

    CONSTRAINT ql3_ppw_admissions_counters_ck CHECK (
        final_run_version = step_count + 1 AND final_run_event_sequence = step_count + 1),

    CONSTRAINT ql3_ppw_admissions_plan_json_ck CHECK (
        CASE WHEN json_valid(plan_json) THEN
            json_type(plan_json) = 'object'
            AND length(CAST(plan_json AS BLOB)) BETWEEN 2 AND 262144
            AND json_type(plan_json, '$.schema') IS 'text'
            AND json_extract(plan_json, '$.schema')
                IS 'qinglong/plugin-package-workflow-execution-plan@v1'
            AND json_type(plan_json, '$.planId') IS 'text'
            AND json_extract(plan_json, '$.planId') IS plan_id
            AND json_type(plan_json, '$.planDigest') IS 'text'
            AND json_extract(plan_json, '$.planDigest') IS plan_digest
            AND json_type(plan_json, '$.runId') IS 'text'
            AND json_extract(plan_json, '$.runId') IS run_id
            AND json_type(plan_json, '$.plannedAtMs') IS 'integer'
            AND json_extract(plan_json, '$.plannedAtMs') IS admitted_at_ms
            AND json_type(plan_json, '$.target') IS 'object'
            AND json_type(plan_json, '$.target.projectId') IS 'text'
            AND json_extract(plan_json, '$.target.projectId') IS project_id
            AND json_type(plan_json, '$.target.packageName') IS 'text'
            AND json_extract(plan_json, '$.target.packageName') IS package_name
            AND json_type(plan_json, '$.target.installationId') IS 'text'
            AND json_extract(plan_json, '$.target.installationId') IS installation_id
            AND json_type(plan_json, '$.target.lockDigest') IS 'text'
            AND json_extract(plan_json, '$.target.lockDigest') IS lock_digest
            AND json_type(plan_json, '$.target.generation') IS 'integer'
            AND json_extract(plan_json, '$.target.generation') IS generation
            AND json_type(plan_json, '$.target.generationDigest') IS 'text'
            AND json_extract(plan_json, '$.target.generationDigest') IS generation_digest
            AND json_type(plan_json, '$.target.materializedRevisionDigest') IS 'text'
            AND json_extract(plan_json, '$.target.materializedRevisionDigest')
                IS materialized_revision_digest
            AND json_type(plan_json, '$.target.publicationDigest') IS 'text'
            AND json_extract(plan_json, '$.target.publicationDigest') IS publication_digest
            AND json_type(plan_json, '$.target.workflowId') IS 'text'
            AND json_extract(plan_json, '$.target.workflowId') IS workflow_id
            AND json_type(plan_json, '$.target.workflowDefinitionDigest') IS 'text'
            AND json_extract(plan_json, '$.target.workflowDefinitionDigest')
                IS workflow_definition_digest
            AND json_type(plan_json, '$.steps') IS 'array'
            AND json_array_length(plan_json, '$.steps') IS step_count
        ELSE 0 END),

    CONSTRAINT ql3_ppw_admissions_receipt_json_ck CHECK (
        CASE WHEN json_valid(receipt_json) THEN
            json_type(receipt_json) = 'object'
            AND length(CAST(receipt_json AS BLOB)) BETWEEN 2 AND 262144
            AND json_type(receipt_json, '$.schema') IS 'text'
            AND json_extract(receipt_json, '$.schema')
                IS 'qinglong/plugin-package-workflow-admission-receipt@v1'
            AND json_type(receipt_json, '$.planId') IS 'text'
            AND json_extract(receipt_json, '$.planId') IS plan_id
            AND json_type(receipt_json, '$.planDigest') IS 'text'
            AND json_extract(receipt_json, '$.planDigest') IS plan_digest
            AND json_type(receipt_json, '$.runId') IS 'text'
            AND json_extract(receipt_json, '$.runId') IS run_id
            AND json_type(receipt_json, '$.publicationDigest') IS 'text'
            AND json_extract(receipt_json, '$.publicationDigest') IS publication_digest
            AND json_type(receipt_json, '$.workflowId') IS 'text'
            AND json_extract(receipt_json, '$.workflowId') IS workflow_id
            AND json_type(receipt_json, '$.admittedAtMs') IS 'integer'
            AND json_extract(receipt_json, '$.admittedAtMs') IS admitted_at_ms
            AND json_type(receipt_json, '$.finalRunVersion') IS 'integer'
            AND json_extract(receipt_json, '$.finalRunVersion') IS final_run_version
            AND json_type(receipt_json, '$.finalRunEventSequence') IS 'integer'
            AND json_extract(receipt_json, '$.finalRunEventSequence') IS final_run_event_sequence
            AND json_type(receipt_json, '$.receiptDigest') IS 'text'
            AND json_extract(receipt_json, '$.receiptDigest') IS receipt_digest
            AND json_type(receipt_json, '$.steps') IS 'array'
            AND json_array_length(receipt_json, '$.steps') IS step_count
        ELSE 0 END)
) STRICT;

CREATE UNIQUE INDEX ql3_ppw_admissions_plan_id_uidx
    ON "QingLong3PluginPackageWorkflowAdmissions" (plan_id);
CREATE UNIQUE INDEX ql3_ppw_admissions_run_id_uidx
    ON "QingLong3PluginPackageWorkflowAdmissions" (run_id);
CREATE UNIQUE INDEX ql3_ppw_admissions_receipt_digest_uidx
    ON "QingLong3PluginPackageWorkflowAdmissions" (receipt_digest);
-- Target of the (plan_digest, run_id) foreign keys of the two child tables.
CREATE UNIQUE INDEX ql3_ppw_admissions_plan_run_uidx
    ON "QingLong3PluginPackageWorkflowAdmissions" (plan_digest, run_id);
CREATE INDEX ql3_ppw_admissions_package_idx
    ON "QingLong3PluginPackageWorkflowAdmissions" (project_id, package_name, admitted_at_ms, plan_digest);
CREATE INDEX ql3_ppw_admissions_workflow_idx
    ON "QingLong3PluginPackageWorkflowAdmissions"
       (project_id, package_name, workflow_id, admitted_at_ms, run_id);
-- Frontier candidates (storage.md §8): keyset on (admitted_at_ms, plan_digest).
CREATE INDEX ql3_ppw_admissions_frontier_idx
    ON "QingLong3PluginPackageWorkflowAdmissions" (admitted_at_ms, plan_digest);

---------------------------------------------------------------------------------------------------
-- 2.7 Workflow admission steps (append-only)
---------------------------------------------------------------------------------------------------

CREATE TABLE "QingLong3PluginPackageWorkflowAdmissionSteps" (
    plan_digest            TEXT NOT NULL
        CHECK (length(plan_digest) = 64 AND plan_digest NOT GLOB '*[^0-9a-f]*'),
    run_id                 TEXT NOT NULL CHECK (length(run_id) BETWEEN 1 AND 36),
    step_key               TEXT NOT NULL
        CHECK (length(step_key) BETWEEN 1 AND 63
            AND step_key GLOB '[a-z]*' AND step_key NOT GLOB '*[^a-z0-9-]*'),
    step_run_id            TEXT NOT NULL CHECK (length(step_run_id) BETWEEN 1 AND 128),
    task_id                TEXT NOT NULL
        CHECK (length(task_id) BETWEEN 1 AND 63
            AND task_id GLOB '[a-z]*' AND task_id NOT GLOB '*[^a-z0-9-]*'),
    task_definition_ref    TEXT NOT NULL
        CHECK (length(CAST(task_definition_ref AS BLOB)) BETWEEN 1 AND 512),
    task_definition_digest TEXT NOT NULL
        CHECK (length(task_definition_digest) = 64 AND task_definition_digest NOT GLOB '*[^0-9a-f]*'),
    needs_json             TEXT NOT NULL,
    initial_status         TEXT NOT NULL CHECK (initial_status IN ('pending', 'ready')),
    mutation_id            TEXT NOT NULL CHECK (length(mutation_id) BETWEEN 1 AND 128),
    event_id               TEXT NOT NULL CHECK (length(event_id) BETWEEN 1 AND 36),

    -- needs_json: a JSON array of 0..127 step keys; ready iff no needs (records.md §6.1).
    CONSTRAINT ql3_ppw_admission_steps_needs_ck CHECK (
        CASE WHEN json_valid(needs_json) THEN
            json_type(needs_json) = 'array'
            AND length(CAST(needs_json AS BLOB)) BETWEEN 2 AND 16384
            AND json_array_length(needs_json) <= 127
            AND (initial_status = 'ready') = (json_array_length(needs_json) = 0)
        ELSE 0 END),

    PRIMARY KEY (plan_digest, step_key),
    CONSTRAINT ql3_ppw_admission_steps_admission_fk FOREIGN KEY (plan_digest, run_id)
        REFERENCES "QingLong3PluginPackageWorkflowAdmissions" (plan_digest, run_id) ON DELETE RESTRICT,
    CONSTRAINT ql3_ppw_admission_steps_step_run_fk FOREIGN KEY (run_id, step_run_id)
        REFERENCES "StepRuns" (run_id, id) ON DELETE RESTRICT,
    CONSTRAINT ql3_ppw_admission_steps_mutation_fk FOREIGN KEY (mutation_id)
        REFERENCES "StepRunMutations" (mutation_id) ON DELETE RESTRICT,
    CONSTRAINT ql3_ppw_admission_steps_event_fk FOREIGN KEY (event_id)
        REFERENCES "RunEvents" (id) ON DELETE RESTRICT
) STRICT;

CREATE UNIQUE INDEX ql3_ppw_admission_steps_step_run_uidx
    ON "QingLong3PluginPackageWorkflowAdmissionSteps" (step_run_id);
CREATE UNIQUE INDEX ql3_ppw_admission_steps_mutation_uidx
    ON "QingLong3PluginPackageWorkflowAdmissionSteps" (mutation_id);
CREATE UNIQUE INDEX ql3_ppw_admission_steps_event_uidx
    ON "QingLong3PluginPackageWorkflowAdmissionSteps" (event_id);
CREATE INDEX ql3_ppw_admission_steps_task_idx
    ON "QingLong3PluginPackageWorkflowAdmissionSteps" (task_id, task_definition_digest, plan_digest);
CREATE INDEX ql3_ppw_admission_steps_run_step_run_idx
    ON "QingLong3PluginPackageWorkflowAdmissionSteps" (run_id, step_run_id);

---------------------------------------------------------------------------------------------------
-- 2.8 Task attempt admissions (append-only)
---------------------------------------------------------------------------------------------------

CREATE TABLE "QingLong3PluginPackageWorkflowTaskAttemptAdmissions" (
    receipt_digest                     TEXT    NOT NULL PRIMARY KEY
        CHECK (length(receipt_digest) = 64 AND receipt_digest NOT GLOB '*[^0-9a-f]*'),
    attempt_id                         TEXT    NOT NULL
        CHECK (length(attempt_id) BETWEEN 1 AND 36
            AND attempt_id GLOB '[A-Za-z0-9]*' AND attempt_id NOT GLOB '*[^A-Za-z0-9._:-]*'),
    plan_digest                        TEXT    NOT NULL
        CHECK (length(plan_digest) = 64 AND plan_digest NOT GLOB '*[^0-9a-f]*'),
    run_id                             TEXT    NOT NULL
        CHECK (length(run_id) BETWEEN 1 AND 36
            AND run_id GLOB '[A-Za-z0-9]*' AND run_id NOT GLOB '*[^A-Za-z0-9._:-]*'),
    step_run_id                        TEXT    NOT NULL CHECK (length(step_run_id) BETWEEN 1 AND 128),
    step_run_version                   INTEGER NOT NULL CHECK (step_run_version BETWEEN 1 AND 2147483647),
    step_run_digest                    TEXT    NOT NULL
        CHECK (length(step_run_digest) = 64 AND step_run_digest NOT GLOB '*[^0-9a-f]*'),
    generation_digest                  TEXT    NOT NULL
        CHECK (length(generation_digest) = 64 AND generation_digest NOT GLOB '*[^0-9a-f]*'),
    resource_task_id                   TEXT    NOT NULL
        CHECK (length(resource_task_id) BETWEEN 1 AND 63
            AND resource_task_id GLOB '[a-z]*' AND resource_task_id NOT GLOB '*[^a-z0-9-]*'),
    task_reconciliation_receipt_digest TEXT    NOT NULL
        CHECK (length(task_reconciliation_receipt_digest) = 64
            AND task_reconciliation_receipt_digest NOT GLOB '*[^0-9a-f]*'),
    project_id                         TEXT    NOT NULL CHECK (length(project_id) BETWEEN 1 AND 128),
    task_id                            TEXT    NOT NULL CHECK (length(task_id) BETWEEN 1 AND 128),
    task_revision                      TEXT    NOT NULL CHECK (length(task_revision) BETWEEN 1 AND 96),
    task_definition_digest             TEXT    NOT NULL
        CHECK (length(task_definition_digest) = 64 AND task_definition_digest NOT GLOB '*[^0-9a-f]*'),
    executor_type                      TEXT    NOT NULL
        CHECK (executor_type IN ('local_process', 'remote_worker')),
    execution_digest                   TEXT    NOT NULL
        CHECK (length(execution_digest) = 64 AND execution_digest NOT GLOB '*[^0-9a-f]*'),
    attempt_number                     INTEGER NOT NULL CHECK (attempt_number BETWEEN 1 AND 8192),
    event_id                           TEXT    NOT NULL
        CHECK (length(event_id) BETWEEN 1 AND 36
            AND event_id GLOB '[A-Za-z0-9]*' AND event_id NOT GLOB '*[^A-Za-z0-9._:-]*'),
    run_version                        INTEGER NOT NULL CHECK (run_version BETWEEN 1 AND 2147483647),
    run_event_sequence                 INTEGER NOT NULL,
    admitted_at_ms                     INTEGER NOT NULL CHECK (admitted_at_ms >= 0),
    receipt_json                       TEXT    NOT NULL,

    CONSTRAINT ql3_ppw_task_attempt_admissions_sequence_ck CHECK (run_event_sequence = run_version),

    -- TASK_REVISION: 'qltd:v1:' ‖ R (1..10 digits, no leading zero, 1..INT31) ‖ ':' ‖
    -- task_definition_digest (records.md §3, §6.10). Length 74..83.
    CONSTRAINT ql3_ppw_task_attempt_admissions_revision_ck CHECK (
        length(task_revision) BETWEEN 74 AND 83
        AND substr(task_revision, 1, 8) = 'qltd:v1:'
        AND substr(task_revision, -65) = ':' || task_definition_digest
        AND substr(task_revision, 9, length(task_revision) - 73) GLOB '[1-9]*'
        AND substr(task_revision, 9, length(task_revision) - 73) NOT GLOB '*[^0-9]*'
        AND CAST(substr(task_revision, 9, length(task_revision) - 73) AS INTEGER)
            BETWEEN 1 AND 2147483647),

    -- The receipt mirrors every column except generation_digest and project_id, and has exactly
    -- the 20 keys of records.md §6.10.
    CONSTRAINT ql3_ppw_task_attempt_admissions_receipt_json_ck CHECK (
        CASE WHEN json_valid(receipt_json) THEN
            json_type(receipt_json) = 'object'
            AND length(CAST(receipt_json AS BLOB)) BETWEEN 2 AND 16384
            AND json_remove(receipt_json,
                '$.schema', '$.attemptId', '$.planDigest', '$.runId', '$.stepRunId',
                '$.stepRunVersion', '$.stepRunDigest', '$.resourceTaskId',
                '$.taskReconciliationReceiptDigest', '$.taskId', '$.taskRevision',
                '$.taskDefinitionDigest', '$.executorType', '$.executionDigest',
                '$.attemptNumber', '$.eventId', '$.runVersion', '$.runEventSequence',
                '$.admittedAtMs', '$.receiptDigest') = '{}'
            AND json_type(receipt_json, '$.schema') IS 'text'
            AND json_extract(receipt_json, '$.schema')
                IS 'qinglong/plugin-package-workflow-task-attempt-admission@v1'
            AND json_type(receipt_json, '$.attemptId') IS 'text'
            AND json_extract(receipt_json, '$.attemptId') IS attempt_id
            AND json_type(receipt_json, '$.planDigest') IS 'text'
            AND json_extract(receipt_json, '$.planDigest') IS plan_digest
            AND json_type(receipt_json, '$.runId') IS 'text'
            AND json_extract(receipt_json, '$.runId') IS run_id
            AND json_type(receipt_json, '$.stepRunId') IS 'text'
            AND json_extract(receipt_json, '$.stepRunId') IS step_run_id
            AND json_type(receipt_json, '$.stepRunVersion') IS 'integer'
            AND json_extract(receipt_json, '$.stepRunVersion') IS step_run_version
            AND json_type(receipt_json, '$.stepRunDigest') IS 'text'
            AND json_extract(receipt_json, '$.stepRunDigest') IS step_run_digest
            AND json_type(receipt_json, '$.resourceTaskId') IS 'text'
            AND json_extract(receipt_json, '$.resourceTaskId') IS resource_task_id
            AND json_type(receipt_json, '$.taskReconciliationReceiptDigest') IS 'text'
            AND json_extract(receipt_json, '$.taskReconciliationReceiptDigest')
                IS task_reconciliation_receipt_digest
            AND json_type(receipt_json, '$.taskId') IS 'text'
            AND json_extract(receipt_json, '$.taskId') IS task_id
            AND json_type(receipt_json, '$.taskRevision') IS 'text'
            AND json_extract(receipt_json, '$.taskRevision') IS task_revision
            AND json_type(receipt_json, '$.taskDefinitionDigest') IS 'text'
            AND json_extract(receipt_json, '$.taskDefinitionDigest') IS task_definition_digest
            AND json_type(receipt_json, '$.executorType') IS 'text'
            AND json_extract(receipt_json, '$.executorType') IS executor_type
            AND json_type(receipt_json, '$.executionDigest') IS 'text'
            AND json_extract(receipt_json, '$.executionDigest') IS execution_digest
            AND json_type(receipt_json, '$.attemptNumber') IS 'integer'
            AND json_extract(receipt_json, '$.attemptNumber') IS attempt_number
            AND json_type(receipt_json, '$.eventId') IS 'text'
            AND json_extract(receipt_json, '$.eventId') IS event_id
            AND json_type(receipt_json, '$.runVersion') IS 'integer'
            AND json_extract(receipt_json, '$.runVersion') IS run_version
            AND json_type(receipt_json, '$.runEventSequence') IS 'integer'
            AND json_extract(receipt_json, '$.runEventSequence') IS run_event_sequence
            AND json_type(receipt_json, '$.admittedAtMs') IS 'integer'
            AND json_extract(receipt_json, '$.admittedAtMs') IS admitted_at_ms
            AND json_type(receipt_json, '$.receiptDigest') IS 'text'
            AND json_extract(receipt_json, '$.receiptDigest') IS receipt_digest
        ELSE 0 END),

    CONSTRAINT ql3_ppw_task_attempt_admissions_admission_fk FOREIGN KEY (plan_digest, run_id)
        REFERENCES "QingLong3PluginPackageWorkflowAdmissions" (plan_digest, run_id) ON DELETE RESTRICT,
    CONSTRAINT ql3_ppw_task_attempt_admissions_step_run_fk FOREIGN KEY (run_id, step_run_id)
        REFERENCES "StepRuns" (run_id, id) ON DELETE RESTRICT,
    CONSTRAINT ql3_ppw_task_attempt_admissions_attempt_fk FOREIGN KEY (attempt_id)
        REFERENCES "RunAttempts" (id) ON DELETE RESTRICT,
    CONSTRAINT ql3_ppw_task_attempt_admissions_event_fk FOREIGN KEY (event_id)
        REFERENCES "RunEvents" (id) ON DELETE RESTRICT
) STRICT;

CREATE UNIQUE INDEX ql3_ppw_task_attempt_admissions_attempt_uidx
    ON "QingLong3PluginPackageWorkflowTaskAttemptAdmissions" (attempt_id);
CREATE UNIQUE INDEX ql3_ppw_task_attempt_admissions_event_uidx
    ON "QingLong3PluginPackageWorkflowTaskAttemptAdmissions" (event_id);
-- One admission per ready epoch; also answers the task-candidate anti-join (storage.md §8).
CREATE UNIQUE INDEX ql3_ppw_task_attempt_admissions_epoch_uidx
    ON "QingLong3PluginPackageWorkflowTaskAttemptAdmissions" (run_id, step_run_id, step_run_version);
CREATE UNIQUE INDEX ql3_ppw_task_attempt_admissions_attempt_number_uidx
    ON "QingLong3PluginPackageWorkflowTaskAttemptAdmissions" (run_id, attempt_number);
CREATE INDEX ql3_ppw_task_attempt_admissions_step_idx
    ON "QingLong3PluginPackageWorkflowTaskAttemptAdmissions" (run_id, step_run_id, admitted_at_ms);
CREATE INDEX ql3_ppw_task_attempt_admissions_plan_idx
    ON "QingLong3PluginPackageWorkflowTaskAttemptAdmissions" (plan_digest, run_id);

---------------------------------------------------------------------------------------------------
-- 2.9 RunDispatchLeases (D-10: SQLite gains the lease table)
---------------------------------------------------------------------------------------------------

CREATE TABLE "RunDispatchLeases" (
    attempt_id       TEXT    NOT NULL PRIMARY KEY CHECK (length(attempt_id) BETWEEN 1 AND 36)
        REFERENCES "RunAttempts" (id) ON DELETE CASCADE,
    run_id           TEXT    NOT NULL CHECK (length(run_id) BETWEEN 1 AND 36)
        REFERENCES "Runs" (id) ON DELETE CASCADE,
    status           TEXT    NOT NULL
        CONSTRAINT ql3_run_dispatch_leases_status_ck CHECK (status IN ('leased', 'released', 'completed')),
    version          INTEGER NOT NULL CHECK (version BETWEEN 0 AND 2147483647),
    lease_generation INTEGER NOT NULL CHECK (lease_generation BETWEEN 1 AND 2147483647),
    worker_id        TEXT    NOT NULL CHECK (length(worker_id) BETWEEN 1 AND 128),
    acquired_at_ms   INTEGER NOT NULL,
    renewed_at_ms    INTEGER NOT NULL,
    expires_at_ms    INTEGER NOT NULL,
    released_at_ms   INTEGER CHECK (released_at_ms IS NULL OR released_at_ms >= 0),
    release_reason   TEXT
        CONSTRAINT ql3_run_dispatch_leases_release_reason_ck CHECK (release_reason IS NULL OR release_reason IN (
            'declined', 'shutdown', 'start_failed', 'capacity_changed', 'lease_expired')),
    completed_at_ms  INTEGER CHECK (completed_at_ms IS NULL OR completed_at_ms >= 0),
    updated_at_ms    INTEGER NOT NULL,

    CONSTRAINT ql3_run_dispatch_leases_time_ck CHECK (
        acquired_at_ms >= 0
        AND renewed_at_ms >= acquired_at_ms
        AND expires_at_ms > renewed_at_ms
        AND updated_at_ms >= acquired_at_ms),

    CONSTRAINT ql3_run_dispatch_leases_shape_ck CHECK (
        CASE status
            WHEN 'leased'
                THEN released_at_ms IS NULL AND release_reason IS NULL AND completed_at_ms IS NULL
            WHEN 'released'
                THEN released_at_ms IS NOT NULL AND release_reason IS NOT NULL AND completed_at_ms IS NULL
            WHEN 'completed'
                THEN completed_at_ms IS NOT NULL AND released_at_ms IS NULL AND release_reason IS NULL
            ELSE 0
        END)
) STRICT;

CREATE INDEX ql3_run_dispatch_leases_worker_idx
    ON "RunDispatchLeases" (worker_id, expires_at_ms, attempt_id) WHERE status = 'leased';
-- Recovery candidates (storage.md §8): leased rows with expires_at_ms <= now, keyset on
-- (expires_at_ms, attempt_id).
CREATE INDEX ql3_run_dispatch_leases_expiry_idx
    ON "RunDispatchLeases" (expires_at_ms, attempt_id) WHERE status = 'leased';
CREATE INDEX ql3_run_dispatch_leases_run_idx ON "RunDispatchLeases" (run_id);
