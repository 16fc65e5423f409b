-- The trigger behaviour of Cuebot's schema that the accounting meets, written for this
-- project from the behaviour Cuebot documents (trigger and function names are Cuebot's, so
-- a DBA reading pg_trigger sees what a site has). Tables Cuebot also fills from these
-- triggers but the accounting never reads (folder_level, job_stat, layer_stat, the usage,
-- memory and history tables) are not part of this schema, so those inserts are left out.

-- float_tier: how far a row's booked cores are into its size (tier) or its minimum (soft_tier).
CREATE FUNCTION tier(booked NUMERIC, size NUMERIC) RETURNS NUMERIC AS $$
BEGIN
    IF size = 0 THEN
        RETURN booked / 100 + 1;
    ELSIF booked = 0 THEN
        RETURN -size;
    END IF;
    RETURN booked / size;
END;
$$ LANGUAGE plpgsql IMMUTABLE;

CREATE FUNCTION soft_tier(booked NUMERIC, minimum NUMERIC) RETURNS NUMERIC AS $$
BEGIN
    IF booked IS NULL THEN
        RETURN 0;
    ELSIF minimum = 0 OR booked >= minimum THEN
        RETURN 1;
    ELSIF booked = 0 THEN
        RETURN -minimum;
    END IF;
    RETURN booked / minimum;
END;
$$ LANGUAGE plpgsql IMMUTABLE;

-- Rows that exist because their parent was inserted.
CREATE FUNCTION trigger__before_insert_folder() RETURNS TRIGGER AS $$
BEGIN
    IF NEW.pk_parent_folder IS NULL THEN
        NEW.b_default := true;
    END IF;
    RETURN NEW;
END;
$$ LANGUAGE plpgsql;
CREATE TRIGGER before_insert_folder BEFORE INSERT ON folder
    FOR EACH ROW EXECUTE FUNCTION trigger__before_insert_folder();

CREATE FUNCTION trigger__after_insert_folder() RETURNS TRIGGER AS $$
BEGIN
    INSERT INTO folder_resource (pk_folder_resource, pk_folder) VALUES (NEW.pk_folder, NEW.pk_folder);
    RETURN NULL;
END;
$$ LANGUAGE plpgsql;
CREATE TRIGGER after_insert_folder AFTER INSERT ON folder
    FOR EACH ROW EXECUTE FUNCTION trigger__after_insert_folder();

CREATE FUNCTION trigger__after_insert_job() RETURNS TRIGGER AS $$
BEGIN
    INSERT INTO job_resource (pk_job_resource, pk_job) VALUES (NEW.pk_job, NEW.pk_job);
    RETURN NULL;
END;
$$ LANGUAGE plpgsql;
CREATE TRIGGER after_insert_job AFTER INSERT ON job
    FOR EACH ROW EXECUTE FUNCTION trigger__after_insert_job();

CREATE FUNCTION trigger__after_insert_layer() RETURNS TRIGGER AS $$
BEGIN
    INSERT INTO layer_resource (pk_layer_resource, pk_layer, pk_job) VALUES (NEW.pk_layer, NEW.pk_layer, NEW.pk_job);
    RETURN NULL;
END;
$$ LANGUAGE plpgsql;
CREATE TRIGGER after_insert_layer AFTER INSERT ON layer
    FOR EACH ROW EXECUTE FUNCTION trigger__after_insert_layer();

-- Checks. Each fires only on an UPDATE that leaves the cap alone and raises the counter,
-- so lowering a cap below current use never fails; raising a counter past a cap does.
CREATE FUNCTION trigger__verify_subscription() RETURNS TRIGGER AS $$
BEGIN
    IF NEW.int_cores > NEW.int_burst THEN
        RAISE EXCEPTION 'subscription has exceeded burst size';
    END IF;
    RETURN NEW;
END;
$$ LANGUAGE plpgsql;
CREATE TRIGGER verify_subscription BEFORE UPDATE ON subscription
    FOR EACH ROW WHEN (NEW.int_burst = OLD.int_burst AND NEW.int_cores > OLD.int_cores)
    EXECUTE FUNCTION trigger__verify_subscription();

CREATE FUNCTION trigger__verify_job_resources() RETURNS TRIGGER AS $$
BEGIN
    IF NEW.int_max_cores = OLD.int_max_cores AND NEW.int_cores > OLD.int_cores
       AND NEW.int_cores > NEW.int_max_cores THEN
        RAISE EXCEPTION 'job has exceeded max cores';
    END IF;
    IF NEW.int_max_gpus = OLD.int_max_gpus AND NEW.int_gpus > OLD.int_gpus
       AND NEW.int_gpus > NEW.int_max_gpus THEN
        RAISE EXCEPTION 'job has exceeded max GPU units';
    END IF;
    RETURN NEW;
END;
$$ LANGUAGE plpgsql;
CREATE TRIGGER verify_job_resources BEFORE UPDATE ON job_resource
    FOR EACH ROW WHEN ((NEW.int_max_cores = OLD.int_max_cores AND NEW.int_cores > OLD.int_cores)
                    OR (NEW.int_max_gpus = OLD.int_max_gpus AND NEW.int_gpus > OLD.int_gpus))
    EXECUTE FUNCTION trigger__verify_job_resources();

CREATE FUNCTION trigger__verify_host_resources() RETURNS TRIGGER AS $$
BEGIN
    IF NEW.int_cores_idle < 0 THEN
        RAISE EXCEPTION 'unable to allocate additional core units';
    ELSIF NEW.int_mem_idle < 0 THEN
        RAISE EXCEPTION 'unable to allocate additional memory';
    ELSIF NEW.int_gpus_idle < 0 THEN
        RAISE EXCEPTION 'unable to allocate additional GPU units';
    ELSIF NEW.int_gpu_mem_idle < 0 THEN
        RAISE EXCEPTION 'unable to allocate additional GPU memory';
    END IF;
    RETURN NEW;
END;
$$ LANGUAGE plpgsql;
CREATE TRIGGER verify_host_resources BEFORE UPDATE ON host
    FOR EACH ROW WHEN (NEW.int_cores_idle != OLD.int_cores_idle OR NEW.int_mem_idle != OLD.int_mem_idle
                    OR NEW.int_gpus_idle != OLD.int_gpus_idle OR NEW.int_gpu_mem_idle != OLD.int_gpu_mem_idle)
    EXECUTE FUNCTION trigger__verify_host_resources();

CREATE FUNCTION trigger__verify_host_local() RETURNS TRIGGER AS $$
BEGIN
    IF NEW.int_cores_idle < 0 THEN
        RAISE EXCEPTION 'host local doesnt have enough idle cores.';
    ELSIF NEW.int_mem_idle < 0 THEN
        RAISE EXCEPTION 'host local doesnt have enough idle memory';
    ELSIF NEW.int_gpus_idle < 0 THEN
        RAISE EXCEPTION 'host local doesnt have enough GPU idle cores.';
    ELSIF NEW.int_gpu_mem_idle < 0 THEN
        RAISE EXCEPTION 'host local doesnt have enough GPU idle memory.';
    END IF;
    RETURN NEW;
END;
$$ LANGUAGE plpgsql;
CREATE TRIGGER verify_host_local BEFORE UPDATE ON host_local
    FOR EACH ROW WHEN (NEW.int_cores_max = OLD.int_cores_max AND NEW.int_mem_max = OLD.int_mem_max
                   AND NEW.int_gpus_max = OLD.int_gpus_max AND NEW.int_gpu_mem_max = OLD.int_gpu_mem_max
                   AND (NEW.int_cores_idle != OLD.int_cores_idle OR NEW.int_mem_idle != OLD.int_mem_idle
                        OR NEW.int_gpus_idle != OLD.int_gpus_idle OR NEW.int_gpu_mem_idle != OLD.int_gpu_mem_idle))
    EXECUTE FUNCTION trigger__verify_host_local();

CREATE FUNCTION trigger__before_insert_proc() RETURNS TRIGGER AS $$
BEGIN
    IF NEW.int_cores_reserved <= 0 THEN
        RAISE EXCEPTION 'failed to allocate proc, tried to allocate 0 cores';
    END IF;
    RETURN NEW;
END;
$$ LANGUAGE plpgsql;
CREATE TRIGGER before_insert_proc BEFORE INSERT ON proc
    FOR EACH ROW EXECUTE FUNCTION trigger__before_insert_proc();

-- float_tier is derived on every UPDATE: writers never set it.
CREATE FUNCTION trigger__tier_subscription() RETURNS TRIGGER AS $$
BEGIN
    NEW.float_tier := tier(NEW.int_cores, NEW.int_size);
    RETURN NEW;
END;
$$ LANGUAGE plpgsql;
CREATE TRIGGER tier_subscription BEFORE UPDATE ON subscription
    FOR EACH ROW EXECUTE FUNCTION trigger__tier_subscription();

CREATE FUNCTION trigger__tier_folder() RETURNS TRIGGER AS $$
BEGIN
    NEW.float_tier := soft_tier(NEW.int_cores, NEW.int_min_cores);
    RETURN NEW;
END;
$$ LANGUAGE plpgsql;
CREATE TRIGGER tier_folder BEFORE UPDATE ON folder_resource
    FOR EACH ROW EXECUTE FUNCTION trigger__tier_folder();

CREATE FUNCTION trigger__tier_job() RETURNS TRIGGER AS $$
BEGIN
    NEW.float_tier := tier(NEW.int_cores, NEW.int_min_cores);
    RETURN NEW;
END;
$$ LANGUAGE plpgsql;
CREATE TRIGGER tier_job BEFORE UPDATE ON job_resource
    FOR EACH ROW EXECUTE FUNCTION trigger__tier_job();

CREATE FUNCTION trigger__point_tier() RETURNS TRIGGER AS $$
BEGIN
    NEW.float_tier := soft_tier(NEW.int_cores, NEW.int_min_cores);
    RETURN NEW;
END;
$$ LANGUAGE plpgsql;
CREATE TRIGGER point_tier BEFORE UPDATE ON point
    FOR EACH ROW EXECUTE FUNCTION trigger__point_tier();

CREATE FUNCTION trigger__tier_host_local() RETURNS TRIGGER AS $$
BEGIN
    NEW.float_tier := tier(NEW.int_cores_max - NEW.int_cores_idle, NEW.int_cores_max);
    RETURN NEW;
END;
$$ LANGUAGE plpgsql;
CREATE TRIGGER tier_host_local BEFORE UPDATE ON host_local
    FOR EACH ROW EXECUTE FUNCTION trigger__tier_host_local();

-- Amounts that follow a row when it moves.
CREATE FUNCTION trigger__update_proc_update_layer() RETURNS TRIGGER AS $$
BEGIN
    UPDATE layer_resource SET int_cores = int_cores - OLD.int_cores_reserved WHERE pk_layer = OLD.pk_layer;
    UPDATE layer_resource SET int_cores = int_cores + NEW.int_cores_reserved WHERE pk_layer = NEW.pk_layer;
    RETURN NULL;
END;
$$ LANGUAGE plpgsql;
CREATE TRIGGER update_proc_update_layer AFTER UPDATE ON proc
    FOR EACH ROW WHEN (NEW.pk_layer != OLD.pk_layer)
    EXECUTE FUNCTION trigger__update_proc_update_layer();

CREATE FUNCTION trigger__upgrade_proc_memory_usage() RETURNS TRIGGER AS $$
BEGIN
    UPDATE host SET int_mem_idle = int_mem_idle - (NEW.int_mem_reserved - OLD.int_mem_reserved)
     WHERE pk_host = NEW.pk_host;
    RETURN NULL;
END;
$$ LANGUAGE plpgsql;
CREATE TRIGGER upgrade_proc_memory_usage AFTER UPDATE ON proc
    FOR EACH ROW WHEN (NEW.int_mem_reserved != OLD.int_mem_reserved)
    EXECUTE FUNCTION trigger__upgrade_proc_memory_usage();

CREATE FUNCTION trigger__after_job_moved() RETURNS TRIGGER AS $$
DECLARE
    booked job_resource%ROWTYPE;
BEGIN
    SELECT * INTO booked FROM job_resource WHERE pk_job = NEW.pk_job;
    IF booked.int_cores > 0 OR booked.int_gpus > 0 THEN
        UPDATE folder_resource SET int_cores = int_cores + booked.int_cores, int_gpus = int_gpus + booked.int_gpus
         WHERE pk_folder = NEW.pk_folder;
        UPDATE folder_resource SET int_cores = int_cores - booked.int_cores, int_gpus = int_gpus - booked.int_gpus
         WHERE pk_folder = OLD.pk_folder;
    END IF;
    RETURN NULL;
END;
$$ LANGUAGE plpgsql;
CREATE TRIGGER after_job_moved AFTER UPDATE ON job
    FOR EACH ROW WHEN (NEW.pk_folder != OLD.pk_folder)
    EXECUTE FUNCTION trigger__after_job_moved();

CREATE FUNCTION trigger__after_job_dept_update() RETURNS TRIGGER AS $$
DECLARE
    booked job_resource%ROWTYPE;
BEGIN
    SELECT * INTO booked FROM job_resource WHERE pk_job = NEW.pk_job;
    IF booked.int_cores > 0 OR booked.int_gpus > 0 THEN
        UPDATE point SET int_cores = int_cores + booked.int_cores, int_gpus = int_gpus + booked.int_gpus
         WHERE pk_dept = NEW.pk_dept AND pk_show = NEW.pk_show;
        UPDATE point SET int_cores = int_cores - booked.int_cores, int_gpus = int_gpus - booked.int_gpus
         WHERE pk_dept = OLD.pk_dept AND pk_show = OLD.pk_show;
    END IF;
    RETURN NULL;
END;
$$ LANGUAGE plpgsql;
CREATE TRIGGER after_job_dept_update AFTER UPDATE ON job
    FOR EACH ROW WHEN (NEW.pk_dept != OLD.pk_dept AND NEW.str_state = 'PENDING')
    EXECUTE FUNCTION trigger__after_job_dept_update();

CREATE FUNCTION trigger__before_delete_host() RETURNS TRIGGER AS $$
BEGIN
    DELETE FROM host_stat WHERE pk_host = OLD.pk_host;
    RETURN OLD;
END;
$$ LANGUAGE plpgsql;
CREATE TRIGGER before_delete_host BEFORE DELETE ON host
    FOR EACH ROW EXECUTE FUNCTION trigger__before_delete_host();
