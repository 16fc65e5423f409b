-- The Cuebot tables the accounting touches, as Cuebot's own migrations (V1 ... V45) leave
-- them: columns, types, NOT NULL and defaults in Cuebot's order, and Cuebot's constraint
-- and index names. Run only with OPENCUE_TABLES=create (see infra.db_router); on a
-- site's database these tables already exist and belong to Cuebot.
--
-- Deliberately absent, because Cuebot does not have them either: unique names on show,
-- facility, dept and job.str_name; a unique folder_resource.pk_folder; foreign keys from
-- proc to job, show or layer.

CREATE TABLE show (
    pk_show VARCHAR(36) NOT NULL,
    str_name VARCHAR(512) NOT NULL,
    b_paused BOOLEAN NOT NULL DEFAULT false,
    int_default_min_cores INTEGER NOT NULL DEFAULT 100,
    int_default_max_cores INTEGER NOT NULL DEFAULT 10000,
    b_booking_enabled BOOLEAN NOT NULL DEFAULT true,
    b_dispatch_enabled BOOLEAN NOT NULL DEFAULT true,
    b_active BOOLEAN NOT NULL DEFAULT true,
    str_comment_email VARCHAR(1024),
    int_default_min_gpus INTEGER NOT NULL DEFAULT 100,
    int_default_max_gpus INTEGER NOT NULL DEFAULT 100000,
    b_scheduler_managed BOOLEAN NOT NULL DEFAULT false,
    CONSTRAINT c_show_pk PRIMARY KEY (pk_show)
);
CREATE INDEX i_show_str_name ON show (str_name);

CREATE TABLE facility (
    pk_facility VARCHAR(36) NOT NULL,
    str_name VARCHAR(36) NOT NULL,
    b_default BOOLEAN NOT NULL DEFAULT false,
    CONSTRAINT c_facility_pk PRIMARY KEY (pk_facility)
);

CREATE TABLE alloc (
    pk_alloc VARCHAR(36) NOT NULL,
    str_name VARCHAR(36) NOT NULL,
    b_allow_edit BOOLEAN NOT NULL DEFAULT true,
    b_default BOOLEAN NOT NULL DEFAULT false,
    str_tag VARCHAR(24),
    b_billable BOOLEAN NOT NULL DEFAULT true,
    pk_facility VARCHAR(36) NOT NULL,
    b_enabled BOOLEAN DEFAULT true,
    CONSTRAINT c_alloc_pk PRIMARY KEY (pk_alloc),
    CONSTRAINT c_alloc_name_uniq UNIQUE (str_name),
    CONSTRAINT c_alloc_pk_facility FOREIGN KEY (pk_facility) REFERENCES facility (pk_facility)
);
CREATE INDEX i_alloc_pk_facility ON alloc (pk_facility);

CREATE TABLE subscription (
    pk_subscription VARCHAR(36) NOT NULL,
    pk_alloc VARCHAR(36) NOT NULL,
    pk_show VARCHAR(36) NOT NULL,
    int_size BIGINT NOT NULL DEFAULT 0,
    int_burst BIGINT NOT NULL DEFAULT 0,
    int_cores INTEGER NOT NULL DEFAULT 0,
    float_tier NUMERIC(16, 2) NOT NULL DEFAULT 0,
    int_gpus INTEGER NOT NULL DEFAULT 0,
    CONSTRAINT c_subscription_pk PRIMARY KEY (pk_subscription),
    CONSTRAINT c_subscription_uk UNIQUE (pk_show, pk_alloc),
    CONSTRAINT c_subscription_pk_alloc FOREIGN KEY (pk_alloc) REFERENCES alloc (pk_alloc),
    CONSTRAINT c_subscription_pk_show FOREIGN KEY (pk_show) REFERENCES show (pk_show)
);
CREATE INDEX i_subscription_pkalloc ON subscription (pk_alloc);
CREATE INDEX i_sub_tier ON subscription (float_tier);

CREATE TABLE dept (
    pk_dept VARCHAR(36) NOT NULL,
    str_name VARCHAR(36) NOT NULL,
    b_default BOOLEAN NOT NULL DEFAULT false,
    CONSTRAINT c_dept_pk PRIMARY KEY (pk_dept)
);

CREATE TABLE folder (
    pk_folder VARCHAR(36) NOT NULL,
    pk_parent_folder VARCHAR(36),
    pk_show VARCHAR(36) NOT NULL,
    str_name VARCHAR(36) NOT NULL,
    int_priority BIGINT NOT NULL DEFAULT 1,
    b_default BOOLEAN NOT NULL DEFAULT false,
    pk_dept VARCHAR(36) NOT NULL,
    int_job_min_cores INTEGER NOT NULL DEFAULT -1,
    int_job_max_cores INTEGER NOT NULL DEFAULT -1,
    int_job_priority INTEGER NOT NULL DEFAULT -1,
    int_min_cores INTEGER NOT NULL DEFAULT 0,
    int_max_cores INTEGER NOT NULL DEFAULT -1,
    b_exclude_managed BOOLEAN NOT NULL DEFAULT false,
    f_order INTEGER NOT NULL DEFAULT 0,
    int_job_min_gpus INTEGER NOT NULL DEFAULT -1,
    int_job_max_gpus INTEGER NOT NULL DEFAULT -1,
    int_min_gpus INTEGER NOT NULL DEFAULT 0,
    int_max_gpus INTEGER NOT NULL DEFAULT -1,
    CONSTRAINT c_folder_pk PRIMARY KEY (pk_folder),
    CONSTRAINT c_folder_uk UNIQUE (pk_parent_folder, str_name),
    CONSTRAINT c_folder_pk_show FOREIGN KEY (pk_show) REFERENCES show (pk_show),
    CONSTRAINT c_folder_pk_dept FOREIGN KEY (pk_dept) REFERENCES dept (pk_dept)
);
CREATE INDEX i_folder_pkshow ON folder (pk_show);
CREATE INDEX i_folder_pkparentfolder ON folder (pk_parent_folder);

CREATE TABLE folder_resource (
    pk_folder_resource VARCHAR(36) NOT NULL,
    pk_folder VARCHAR(36) NOT NULL,
    int_cores INTEGER NOT NULL DEFAULT 0,
    int_max_cores INTEGER NOT NULL DEFAULT -1,
    int_min_cores INTEGER NOT NULL DEFAULT 0,
    float_tier NUMERIC(16, 2) NOT NULL DEFAULT 0,
    int_gpus INTEGER NOT NULL DEFAULT 0,
    int_max_gpus INTEGER NOT NULL DEFAULT -1,
    int_min_gpus INTEGER NOT NULL DEFAULT 0,
    CONSTRAINT c_folder_resource_pk PRIMARY KEY (pk_folder_resource),
    CONSTRAINT c_folder_resource_pk_folder FOREIGN KEY (pk_folder) REFERENCES folder (pk_folder)
);
CREATE INDEX i_folderresource_pkfolder ON folder_resource (pk_folder);

CREATE TABLE job (
    pk_job VARCHAR(36) NOT NULL,
    pk_folder VARCHAR(36) NOT NULL,
    pk_show VARCHAR(36) NOT NULL,
    str_name VARCHAR(255) NOT NULL,
    str_visible_name VARCHAR(255),
    str_shot VARCHAR(64) NOT NULL,
    str_user VARCHAR(32) NOT NULL,
    str_state VARCHAR(16) NOT NULL,
    str_log_dir VARCHAR(4000) NOT NULL DEFAULT '',
    int_uid BIGINT,
    b_paused BOOLEAN NOT NULL DEFAULT false,
    b_autoeat BOOLEAN NOT NULL DEFAULT false,
    int_frame_count INTEGER NOT NULL DEFAULT 0,
    int_layer_count INTEGER NOT NULL DEFAULT 0,
    int_max_retries SMALLINT NOT NULL DEFAULT 3,
    b_auto_book BOOLEAN NOT NULL DEFAULT true,
    b_auto_unbook BOOLEAN NOT NULL DEFAULT true,
    b_comment BOOLEAN NOT NULL DEFAULT false,
    str_email VARCHAR(256),
    pk_facility VARCHAR(36) NOT NULL,
    pk_dept VARCHAR(36) NOT NULL,
    ts_started TIMESTAMP WITH TIME ZONE NOT NULL DEFAULT CURRENT_TIMESTAMP,
    ts_stopped TIMESTAMP WITH TIME ZONE,
    int_min_cores INTEGER NOT NULL DEFAULT 100,
    int_max_cores INTEGER NOT NULL DEFAULT 20000,
    str_show VARCHAR(512) NOT NULL DEFAULT 'none',
    ts_updated TIMESTAMP WITH TIME ZONE NOT NULL DEFAULT CURRENT_TIMESTAMP,
    str_os VARCHAR(12),
    int_min_gpus INTEGER NOT NULL DEFAULT 0,
    int_max_gpus INTEGER NOT NULL DEFAULT 100000,
    str_loki_url VARCHAR(256),
    ts_eligible TIMESTAMP WITH TIME ZONE NOT NULL DEFAULT CURRENT_TIMESTAMP,
    CONSTRAINT c_job_pk PRIMARY KEY (pk_job),
    CONSTRAINT c_job_uk UNIQUE (str_visible_name),
    CONSTRAINT c_job_pk_folder FOREIGN KEY (pk_folder) REFERENCES folder (pk_folder),
    CONSTRAINT c_job_pk_show FOREIGN KEY (pk_show) REFERENCES show (pk_show),
    CONSTRAINT c_job_pk_facility FOREIGN KEY (pk_facility) REFERENCES facility (pk_facility),
    CONSTRAINT c_job_pk_dept FOREIGN KEY (pk_dept) REFERENCES dept (pk_dept)
);
CREATE INDEX i_job_pkshow ON job (pk_show);
CREATE INDEX i_job_pkgroup ON job (pk_folder);
CREATE INDEX i_job_pk_dept ON job (pk_dept);
CREATE INDEX i_job_str_name ON job (str_name);
CREATE INDEX i_job_str_state ON job (str_state);

CREATE TABLE job_resource (
    pk_job_resource VARCHAR(36) NOT NULL,
    pk_job VARCHAR(36) NOT NULL,
    int_cores BIGINT NOT NULL DEFAULT 0,
    int_max_rss BIGINT NOT NULL DEFAULT 0,
    int_max_vss BIGINT NOT NULL DEFAULT 0,
    int_min_cores INTEGER NOT NULL DEFAULT 100,
    int_max_cores INTEGER NOT NULL DEFAULT 10000,
    float_tier NUMERIC(16, 2) NOT NULL DEFAULT 0,
    int_priority INTEGER NOT NULL DEFAULT 1,
    int_local_cores INTEGER NOT NULL DEFAULT 0,
    int_gpus INTEGER NOT NULL DEFAULT 0,
    int_min_gpus INTEGER NOT NULL DEFAULT 0,
    int_max_gpus INTEGER NOT NULL DEFAULT 100,
    int_local_gpus INTEGER NOT NULL DEFAULT 0,
    int_gpu_mem_max BIGINT NOT NULL DEFAULT 0,
    int_max_pss BIGINT DEFAULT 0,
    CONSTRAINT c_job_resource_pk PRIMARY KEY (pk_job_resource),
    CONSTRAINT c_job_resource_uk UNIQUE (pk_job),
    CONSTRAINT c_job_resource_pk_job FOREIGN KEY (pk_job) REFERENCES job (pk_job)
);

CREATE TABLE layer (
    pk_layer VARCHAR(36) NOT NULL,
    pk_job VARCHAR(36) NOT NULL,
    str_name VARCHAR(256) NOT NULL,
    str_cmd VARCHAR(4000) NOT NULL,
    str_range VARCHAR(4000) NOT NULL,
    int_chunk_size BIGINT NOT NULL DEFAULT 1,
    int_dispatch_order BIGINT NOT NULL DEFAULT 1,
    int_cores_min BIGINT NOT NULL DEFAULT 100,
    int_mem_min BIGINT NOT NULL DEFAULT 4194304,
    str_tags VARCHAR(4000) NOT NULL DEFAULT '',
    str_type VARCHAR(16) NOT NULL,
    b_threadable BOOLEAN NOT NULL DEFAULT true,
    str_services VARCHAR(128) NOT NULL DEFAULT 'default',
    b_optimize BOOLEAN NOT NULL DEFAULT true,
    int_cores_max INTEGER NOT NULL DEFAULT 0,
    int_gpu_mem_min BIGINT NOT NULL DEFAULT 0,
    int_timeout INTEGER NOT NULL DEFAULT 0,
    int_timeout_llu INTEGER NOT NULL DEFAULT 0,
    int_gpus_min BIGINT NOT NULL DEFAULT 0,
    int_gpus_max BIGINT NOT NULL DEFAULT 0,
    ts_eligible TIMESTAMP WITH TIME ZONE NOT NULL DEFAULT CURRENT_TIMESTAMP,
    CONSTRAINT c_layer_pk PRIMARY KEY (pk_layer),
    CONSTRAINT c_layer_str_name_unq UNIQUE (str_name, pk_job),
    CONSTRAINT c_layer_pk_job FOREIGN KEY (pk_job) REFERENCES job (pk_job)
);
CREATE INDEX i_layer_pkjob ON layer (pk_job);

CREATE TABLE layer_resource (
    pk_layer_resource VARCHAR(36) NOT NULL,
    pk_layer VARCHAR(36) NOT NULL,
    pk_job VARCHAR(36) NOT NULL,
    int_cores BIGINT NOT NULL DEFAULT 0,
    int_max_rss BIGINT NOT NULL DEFAULT 0,
    int_max_vss BIGINT NOT NULL DEFAULT 0,
    int_gpus INTEGER NOT NULL DEFAULT 0,
    int_gpu_mem_max BIGINT NOT NULL DEFAULT 0,
    int_max_pss BIGINT DEFAULT 0,
    CONSTRAINT c_layerresource_pk PRIMARY KEY (pk_layer_resource),
    CONSTRAINT c_layerresource_uk UNIQUE (pk_layer),
    CONSTRAINT c_layer_resource_pk_layer FOREIGN KEY (pk_layer) REFERENCES layer (pk_layer),
    CONSTRAINT c_layer_resource_pk_job FOREIGN KEY (pk_job) REFERENCES job (pk_job)
);
CREATE INDEX i_layer_resource_pk_job ON layer_resource (pk_job);

CREATE TABLE point (
    pk_point VARCHAR(36) NOT NULL,
    pk_dept VARCHAR(36) NOT NULL,
    pk_show VARCHAR(36) NOT NULL,
    str_ti_task VARCHAR(36),
    int_cores INTEGER NOT NULL DEFAULT 0,
    b_managed BOOLEAN NOT NULL DEFAULT false,
    int_min_cores INTEGER NOT NULL DEFAULT 0,
    float_tier NUMERIC(16, 2) NOT NULL DEFAULT 0,
    ts_updated TIMESTAMP WITH TIME ZONE NOT NULL DEFAULT CURRENT_TIMESTAMP,
    int_gpus INTEGER NOT NULL DEFAULT 0,
    int_min_gpus INTEGER NOT NULL DEFAULT 0,
    CONSTRAINT c_point_pk PRIMARY KEY (pk_point),
    CONSTRAINT c_point_pk_show_dept UNIQUE (pk_show, pk_dept),
    CONSTRAINT c_point_pk_dept FOREIGN KEY (pk_dept) REFERENCES dept (pk_dept),
    CONSTRAINT c_point_pk_show FOREIGN KEY (pk_show) REFERENCES show (pk_show)
);
CREATE INDEX i_point_pk_show ON point (pk_show);

CREATE TABLE host (
    pk_host VARCHAR(36) NOT NULL,
    pk_alloc VARCHAR(36) NOT NULL,
    str_name VARCHAR(45) NOT NULL,
    str_lock_state VARCHAR(36) NOT NULL,
    b_nimby BOOLEAN NOT NULL DEFAULT false,
    ts_created TIMESTAMP WITHOUT TIME ZONE NOT NULL DEFAULT CURRENT_TIMESTAMP,
    int_cores BIGINT NOT NULL DEFAULT 0,
    int_procs BIGINT NOT NULL DEFAULT 0,
    int_cores_idle BIGINT NOT NULL DEFAULT 0,
    int_mem BIGINT NOT NULL DEFAULT 0,
    int_mem_idle BIGINT NOT NULL DEFAULT 0,
    b_unlock_boot BOOLEAN NOT NULL DEFAULT false,
    b_unlock_idle BOOLEAN NOT NULL DEFAULT false,
    b_reboot_idle BOOLEAN NOT NULL DEFAULT false,
    str_tags VARCHAR(128),
    str_fqdn VARCHAR(128),
    b_comment BOOLEAN NOT NULL DEFAULT false,
    int_thread_mode INTEGER NOT NULL DEFAULT 0,
    str_lock_source VARCHAR(128),
    int_gpu_mem BIGINT NOT NULL DEFAULT 0,
    int_gpu_mem_idle BIGINT NOT NULL DEFAULT 0,
    int_gpus BIGINT NOT NULL DEFAULT 0,
    int_gpus_idle BIGINT NOT NULL DEFAULT 0,
    CONSTRAINT c_host_pk PRIMARY KEY (pk_host),
    CONSTRAINT c_host_uk UNIQUE (str_name),
    CONSTRAINT c_str_host_fqdn_uk UNIQUE (str_fqdn),
    CONSTRAINT c_host_pk_alloc FOREIGN KEY (pk_alloc) REFERENCES alloc (pk_alloc)
);
CREATE INDEX i_host_pkalloc ON host (pk_alloc);

CREATE TABLE host_stat (
    pk_host_stat VARCHAR(36) NOT NULL,
    pk_host VARCHAR(36) NOT NULL,
    int_mem_total BIGINT NOT NULL DEFAULT 0,
    int_mem_free BIGINT NOT NULL DEFAULT 0,
    int_swap_total BIGINT NOT NULL DEFAULT 0,
    int_swap_free BIGINT NOT NULL DEFAULT 0,
    int_mcp_total BIGINT NOT NULL DEFAULT 0,
    int_mcp_free BIGINT NOT NULL DEFAULT 0,
    int_load BIGINT NOT NULL DEFAULT 0,
    ts_ping TIMESTAMP WITH TIME ZONE NOT NULL DEFAULT CURRENT_TIMESTAMP,
    ts_booted TIMESTAMP WITH TIME ZONE NOT NULL DEFAULT CURRENT_TIMESTAMP,
    str_state VARCHAR(32) NOT NULL DEFAULT 'UP',
    str_os VARCHAR(32) NOT NULL DEFAULT 'rhel40',
    int_gpu_mem_total BIGINT NOT NULL DEFAULT 0,
    int_gpu_mem_free BIGINT NOT NULL DEFAULT 0,
    CONSTRAINT c_hoststat_pk PRIMARY KEY (pk_host_stat),
    CONSTRAINT c_host_stat_pk_host_uk UNIQUE (pk_host),
    CONSTRAINT c_host_stat_pk_host FOREIGN KEY (pk_host) REFERENCES host (pk_host)
);

CREATE TABLE host_local (
    pk_host_local VARCHAR(36) NOT NULL,
    pk_job VARCHAR(36) NOT NULL,
    pk_layer VARCHAR(36),
    pk_frame VARCHAR(36),
    pk_host VARCHAR(36) NOT NULL,
    ts_created TIMESTAMP WITH TIME ZONE NOT NULL DEFAULT CURRENT_TIMESTAMP,
    ts_updated TIMESTAMP WITH TIME ZONE,
    int_mem_max BIGINT NOT NULL DEFAULT 0,
    int_mem_idle BIGINT NOT NULL DEFAULT 0,
    int_cores_max INTEGER NOT NULL DEFAULT 100,
    int_cores_idle INTEGER NOT NULL DEFAULT 100,
    int_threads INTEGER NOT NULL DEFAULT 1,
    float_tier NUMERIC(16, 2) NOT NULL DEFAULT 0,
    b_active BOOLEAN NOT NULL DEFAULT true,
    str_type VARCHAR(36) NOT NULL,
    int_gpu_mem_idle BIGINT NOT NULL DEFAULT 0,
    int_gpu_mem_max BIGINT NOT NULL DEFAULT 0,
    int_gpus_idle INTEGER NOT NULL DEFAULT 0,
    int_gpus_max INTEGER NOT NULL DEFAULT 0,
    CONSTRAINT c_pk_host_local PRIMARY KEY (pk_host_local),
    CONSTRAINT i_host_local_unique UNIQUE (pk_host, pk_job),
    CONSTRAINT c_host_local_pk_job FOREIGN KEY (pk_job) REFERENCES job (pk_job),
    CONSTRAINT c_host_local_pk_host FOREIGN KEY (pk_host) REFERENCES host (pk_host)
);
CREATE INDEX i_host_local_pk_job ON host_local (pk_job);

CREATE TABLE frame (
    pk_frame VARCHAR(36) NOT NULL,
    pk_layer VARCHAR(36) NOT NULL,
    pk_job VARCHAR(36) NOT NULL,
    str_name VARCHAR(256) NOT NULL,
    str_state VARCHAR(24) NOT NULL,
    int_number BIGINT NOT NULL,
    int_depend_count BIGINT NOT NULL DEFAULT 0,
    int_exit_status BIGINT NOT NULL DEFAULT -1,
    int_retries BIGINT NOT NULL DEFAULT 0,
    int_mem_reserved BIGINT NOT NULL DEFAULT 0,
    int_mem_max_used BIGINT NOT NULL DEFAULT 0,
    int_mem_used BIGINT NOT NULL DEFAULT 0,
    int_dispatch_order BIGINT NOT NULL DEFAULT 0,
    str_host VARCHAR(256),
    int_cores INTEGER NOT NULL DEFAULT 0,
    int_layer_order INTEGER NOT NULL,
    ts_started TIMESTAMP WITH TIME ZONE,
    ts_stopped TIMESTAMP WITH TIME ZONE,
    ts_last_run TIMESTAMP WITH TIME ZONE,
    ts_updated TIMESTAMP WITH TIME ZONE,
    int_version INTEGER DEFAULT 0,
    str_checkpoint_state VARCHAR(12) NOT NULL DEFAULT 'DISABLED',
    int_checkpoint_count SMALLINT NOT NULL DEFAULT 0,
    int_gpu_mem_reserved BIGINT NOT NULL DEFAULT 0,
    int_total_past_core_time INTEGER NOT NULL DEFAULT 0,
    ts_llu TIMESTAMP WITH TIME ZONE,
    int_gpu_mem_used BIGINT NOT NULL DEFAULT 0,
    int_gpu_mem_max_used BIGINT NOT NULL DEFAULT 0,
    int_gpus INTEGER NOT NULL DEFAULT 0,
    int_total_past_gpu_time INTEGER NOT NULL DEFAULT 0,
    int_pss_max_used BIGINT DEFAULT 0,
    int_pss_used BIGINT DEFAULT 0,
    ts_eligible TIMESTAMP WITH TIME ZONE DEFAULT NULL,
    CONSTRAINT c_frame_pk PRIMARY KEY (pk_frame),
    CONSTRAINT c_frame_str_name_unq UNIQUE (str_name, pk_job),
    CONSTRAINT c_frame_pk_job FOREIGN KEY (pk_job) REFERENCES job (pk_job),
    CONSTRAINT c_frame_pk_layer FOREIGN KEY (pk_layer) REFERENCES layer (pk_layer)
);
CREATE INDEX i_frame_pk_job ON frame (pk_job);
CREATE INDEX i_frame_pkjoblayer ON frame (pk_layer);

CREATE TABLE proc (
    pk_proc VARCHAR(36) NOT NULL,
    pk_host VARCHAR(36) NOT NULL,
    pk_job VARCHAR(36),
    pk_show VARCHAR(36),
    pk_layer VARCHAR(36),
    pk_frame VARCHAR(36),
    int_cores_reserved BIGINT NOT NULL,
    int_mem_reserved BIGINT NOT NULL,
    int_mem_used BIGINT NOT NULL DEFAULT 0,
    int_mem_max_used BIGINT NOT NULL DEFAULT 0,
    b_unbooked BOOLEAN NOT NULL DEFAULT false,
    int_mem_pre_reserved BIGINT NOT NULL DEFAULT 0,
    int_virt_used BIGINT NOT NULL DEFAULT 0,
    int_virt_max_used BIGINT NOT NULL DEFAULT 0,
    str_redirect VARCHAR(265),
    b_local BOOLEAN NOT NULL DEFAULT false,
    ts_ping TIMESTAMP WITH TIME ZONE NOT NULL DEFAULT CURRENT_TIMESTAMP,
    ts_booked TIMESTAMP WITH TIME ZONE NOT NULL DEFAULT CURRENT_TIMESTAMP,
    ts_dispatched TIMESTAMP WITH TIME ZONE NOT NULL DEFAULT CURRENT_TIMESTAMP,
    int_gpu_mem_reserved BIGINT NOT NULL DEFAULT 0,
    int_gpus_reserved INTEGER NOT NULL DEFAULT 0,
    int_gpu_mem_used BIGINT NOT NULL DEFAULT 0,
    int_gpu_mem_max_used BIGINT NOT NULL DEFAULT 0,
    int_gpu_mem_pre_reserved BIGINT NOT NULL DEFAULT 0,
    bytea_children BYTEA,
    int_swap_used BIGINT NOT NULL DEFAULT 0,
    int_pss_max_used BIGINT DEFAULT 0,
    int_pss_used BIGINT DEFAULT 0,
    CONSTRAINT c_proc_pk PRIMARY KEY (pk_proc),
    CONSTRAINT c_proc_uk UNIQUE (pk_frame),
    CONSTRAINT c_proc_pk_host FOREIGN KEY (pk_host) REFERENCES host (pk_host),
    CONSTRAINT c_proc_pk_frame FOREIGN KEY (pk_frame) REFERENCES frame (pk_frame)
);
CREATE INDEX i_proc_pkhost ON proc (pk_host);
CREATE INDEX i_proc_pkjob ON proc (pk_job);
CREATE INDEX i_proc_pklayer ON proc (pk_layer);
CREATE INDEX i_proc_pkshow ON proc (pk_show);
