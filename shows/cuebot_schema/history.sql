-- Cuebot's history tables and the trigger that writes a frame's runs, as Cuebot's migrations
-- leave them (V1, the GPU columns of V11, the DISABLE_HISTORY switch of V13): columns in
-- Cuebot's order, its constraint and index names. Kept apart from tables.sql because the
-- migration shows/0002 adds them to databases that shows/0001 built before they existed; run
-- only with OPENCUE_TABLES=create, as tables.sql is.
--
-- Deliberately absent: layer_history (and frame_history's key to it), job_usage and the job
-- triggers that copy it into job_history when a job finishes. The farms this project builds
-- write job_history's rows themselves, as those triggers would; nothing here reads the rest.

CREATE TABLE config (
    pk_config VARCHAR(36) NOT NULL,
    str_key VARCHAR(36) NOT NULL,
    int_value BIGINT DEFAULT 0,
    long_value BIGINT DEFAULT 0,
    str_value VARCHAR(255) DEFAULT '',
    b_value BOOLEAN DEFAULT false,
    CONSTRAINT c_pk_pkconfig PRIMARY KEY (pk_config),
    CONSTRAINT c_show_uk UNIQUE (str_key)
);

CREATE TABLE job_history (
    pk_job VARCHAR(36) NOT NULL,
    pk_show VARCHAR(36) NOT NULL,
    str_name VARCHAR(512) NOT NULL,
    str_shot VARCHAR(64) NOT NULL,
    str_user VARCHAR(36) NOT NULL,
    int_core_time_success BIGINT NOT NULL DEFAULT 0,
    int_core_time_fail BIGINT NOT NULL DEFAULT 0,
    int_frame_count BIGINT NOT NULL DEFAULT 0,
    int_layer_count BIGINT NOT NULL DEFAULT 0,
    int_waiting_count BIGINT NOT NULL DEFAULT 0,
    int_dead_count BIGINT NOT NULL DEFAULT 0,
    int_depend_count BIGINT NOT NULL DEFAULT 0,
    int_eaten_count BIGINT NOT NULL DEFAULT 0,
    int_succeeded_count BIGINT NOT NULL DEFAULT 0,
    int_running_count BIGINT NOT NULL DEFAULT 0,
    int_max_rss BIGINT NOT NULL DEFAULT 0,
    b_archived BOOLEAN NOT NULL DEFAULT false,
    pk_facility VARCHAR(36) NOT NULL,
    pk_dept VARCHAR(36) NOT NULL,
    int_ts_started INTEGER NOT NULL,
    int_ts_stopped INTEGER NOT NULL DEFAULT 0,
    dt_last_modified DATE NOT NULL,
    int_gpu_time_success BIGINT NOT NULL DEFAULT 0,
    int_gpu_time_fail BIGINT NOT NULL DEFAULT 0,
    int_gpu_mem_max BIGINT NOT NULL DEFAULT 0,
    CONSTRAINT c_job_history_pk PRIMARY KEY (pk_job),
    CONSTRAINT c_job_history_pk_facility FOREIGN KEY (pk_facility) REFERENCES facility (pk_facility),
    CONSTRAINT c_job_history_pk_dept FOREIGN KEY (pk_dept) REFERENCES dept (pk_dept),
    CONSTRAINT c_job_history_pk_show FOREIGN KEY (pk_show) REFERENCES show (pk_show)
);
CREATE INDEX i_job_history_pk_show ON job_history (pk_show);
CREATE INDEX i_job_history_b_archived ON job_history (b_archived);
CREATE INDEX i_job_history_ts_start_stop ON job_history (int_ts_started, int_ts_stopped);
CREATE INDEX i_job_history_str_name ON job_history (str_name);
CREATE INDEX i_job_history_str_shot ON job_history (str_shot);
CREATE INDEX i_job_history_str_user ON job_history (str_user);
CREATE INDEX i_job_history_pk_dept ON job_history (pk_dept);
CREATE INDEX i_job_history_pk_facility ON job_history (pk_facility);

CREATE TABLE frame_history (
    pk_frame_history VARCHAR(36) NOT NULL DEFAULT gen_random_uuid(),
    pk_frame VARCHAR(36) NOT NULL,
    pk_layer VARCHAR(36) NOT NULL,
    pk_job VARCHAR(36) NOT NULL,
    str_name VARCHAR(256) NOT NULL,
    str_state VARCHAR(24) NOT NULL,
    int_mem_reserved BIGINT NOT NULL DEFAULT 0,
    int_mem_max_used BIGINT NOT NULL DEFAULT 0,
    int_cores INTEGER NOT NULL DEFAULT 100,
    str_host VARCHAR(64),
    int_exit_status SMALLINT NOT NULL DEFAULT -1,
    pk_alloc VARCHAR(36),
    int_ts_started INTEGER NOT NULL,
    int_ts_stopped INTEGER NOT NULL DEFAULT 0,
    int_checkpoint_count INTEGER NOT NULL DEFAULT 0,
    dt_last_modified DATE NOT NULL,
    int_gpus INTEGER NOT NULL DEFAULT 0,
    int_gpu_mem_reserved BIGINT NOT NULL DEFAULT 0,
    int_gpu_mem_max_used BIGINT NOT NULL DEFAULT 0,
    CONSTRAINT c_frame_history_pk PRIMARY KEY (pk_frame_history),
    CONSTRAINT c_frame_history_pk_job FOREIGN KEY (pk_job) REFERENCES job_history (pk_job) ON DELETE CASCADE,
    CONSTRAINT c_frame_history_pk_alloc FOREIGN KEY (pk_alloc) REFERENCES alloc (pk_alloc)
);
CREATE INDEX i_frame_history_ts_start_stop ON frame_history (int_ts_started, int_ts_stopped);
CREATE INDEX i_frame_history_int_exit_stat ON frame_history (int_exit_status);
CREATE INDEX i_frame_history_int_ts_stopped ON frame_history (int_ts_stopped);
CREATE INDEX i_frame_history_pk_alloc ON frame_history (pk_alloc);
CREATE INDEX i_frame_history_pk_frame ON frame_history (pk_frame);
CREATE INDEX i_frame_history_pk_job ON frame_history (pk_job);
CREATE INDEX i_frame_history_pk_layer ON frame_history (pk_layer);
CREATE INDEX i_frame_history_str_state ON frame_history (str_state);

-- Both history tables stamp the day a row was last written.
CREATE FUNCTION trigger__tbiu_job_history() RETURNS TRIGGER AS $$
BEGIN
    NEW.dt_last_modified := current_date;
    RETURN NEW;
END;
$$ LANGUAGE plpgsql;
CREATE TRIGGER tbiu_job_history BEFORE INSERT OR UPDATE ON job_history
    FOR EACH ROW EXECUTE FUNCTION trigger__tbiu_job_history();

CREATE FUNCTION trigger__tbiu_frame_history() RETURNS TRIGGER AS $$
BEGIN
    NEW.dt_last_modified := current_date;
    RETURN NEW;
END;
$$ LANGUAGE plpgsql;
CREATE TRIGGER tbiu_frame_history BEFORE INSERT OR UPDATE ON frame_history
    FOR EACH ROW EXECUTE FUNCTION trigger__tbiu_frame_history();

-- One frame_history row per run. Leaving RUNNING closes the frame's open row (stopped at the
-- transaction's time, with the exit status and peak memory), except exit status 299, Cuebot's
-- "discard this run", which deletes it; entering RUNNING opens a row on the allocation of the
-- host named by str_host. str_state stays 'RUNNING'. A DISABLE_HISTORY key in config stops
-- all of it. Times are whole epoch seconds, as Cuebot's epoch() gives them.
CREATE FUNCTION trigger__frame_history_open() RETURNS TRIGGER AS $$
DECLARE
    stamp INTEGER := extract(epoch FROM current_timestamp)::INTEGER;
BEGIN
    IF EXISTS (SELECT 1 FROM config WHERE str_key = 'DISABLE_HISTORY') THEN
        RETURN NULL;
    END IF;
    IF OLD.str_state = 'RUNNING' AND NEW.int_exit_status = 299 THEN
        DELETE FROM frame_history WHERE pk_frame = NEW.pk_frame AND int_ts_stopped = 0;
    ELSIF OLD.str_state = 'RUNNING' THEN
        UPDATE frame_history
           SET int_ts_stopped = stamp, int_exit_status = NEW.int_exit_status,
               int_mem_max_used = NEW.int_mem_max_used, int_gpu_mem_max_used = NEW.int_gpu_mem_max_used,
               int_checkpoint_count = CASE WHEN NEW.str_state = 'CHECKPOINT' THEN 1 ELSE 0 END
         WHERE pk_frame = NEW.pk_frame AND int_ts_stopped = 0;
    END IF;
    IF NEW.str_state = 'RUNNING' THEN
        INSERT INTO frame_history (pk_frame, pk_layer, pk_job, str_name, str_state, int_cores, int_mem_reserved,
                                   int_gpus, int_gpu_mem_reserved, str_host, int_ts_started, pk_alloc)
        VALUES (NEW.pk_frame, NEW.pk_layer, NEW.pk_job, NEW.str_name, 'RUNNING', NEW.int_cores, NEW.int_mem_reserved,
                NEW.int_gpus, NEW.int_gpu_mem_reserved, NEW.str_host, stamp,
                (SELECT pk_alloc FROM host WHERE str_name = NEW.str_host));
    END IF;
    RETURN NULL;
END;
$$ LANGUAGE plpgsql;
CREATE TRIGGER frame_history_open AFTER UPDATE ON frame
    FOR EACH ROW WHEN (NEW.str_state != OLD.str_state)
    EXECUTE FUNCTION trigger__frame_history_open();
