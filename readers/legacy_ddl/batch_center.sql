-- The batch center's tables, exactly as its contract (shared/legacy/batch_center.md) gives them.
-- DATETIME columns are server-local wall-clock times in Asia/Shanghai.
-- Statements are separated by a semicolon at the end of a line; no semicolons elsewhere.

CREATE TABLE `bc_biz` (
  `biz_code` VARCHAR(64) NOT NULL,
  `biz_name` VARCHAR(128),
  `callback_base_url` VARCHAR(512),
  `access_token` VARCHAR(128) NULL COMMENT 'sent as X-BC-Token: a secret',
  `enabled` TINYINT NOT NULL DEFAULT 1 COMMENT '0: the batch center skips this business',
  PRIMARY KEY (`biz_code`)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4;

CREATE TABLE `bc_task` (
  `id` BIGINT NOT NULL AUTO_INCREMENT,
  `biz_code` VARCHAR(64) NOT NULL,
  `task_key` VARCHAR(128) NOT NULL,
  `task_name` VARCHAR(255) NOT NULL DEFAULT '',
  `task_type` TINYINT NOT NULL COMMENT '1 DELAY, 2 CRON, 3 FIXED_RATE',
  `cron_expr` VARCHAR(128) NULL COMMENT 'Quartz, required when task_type = 2',
  `interval_sec` INT NULL COMMENT 'required when task_type = 3, > 0',
  `fire_time` DATETIME NOT NULL COMMENT 'the next time the task is due',
  `end_time` DATETIME NULL,
  `callback_url` VARCHAR(512) NOT NULL,
  `http_method` VARCHAR(8) NOT NULL DEFAULT 'POST',
  `callback_timeout_ms` INT NOT NULL DEFAULT 30000,
  `payload` TEXT NULL COMMENT 'JSON object',
  `shard_total` INT NOT NULL DEFAULT 1,
  `shard_params` MEDIUMTEXT NULL COMMENT 'JSON array, overrides shard_total',
  `priority` TINYINT NOT NULL DEFAULT 5 COMMENT '1 highest .. 9',
  `max_retry` INT NOT NULL DEFAULT 0,
  `misfire_policy` TINYINT NOT NULL DEFAULT 1 COMMENT '1 FIRE_ONCE_NOW, 2 SKIP',
  `status` TINYINT NOT NULL DEFAULT 0 COMMENT '0 WAITING 1 RUNNING 2 SUCCESS 3 FAILED 4 CANCELLED 5 PAUSED',
  `migrated` TINYINT NOT NULL DEFAULT 0 COMMENT '1: migrated to the new center',
  `version` INT NOT NULL DEFAULT 0 COMMENT 'optimistic lock, +1 on every update',
  `create_time` DATETIME NOT NULL DEFAULT CURRENT_TIMESTAMP,
  `update_time` DATETIME NOT NULL DEFAULT CURRENT_TIMESTAMP ON UPDATE CURRENT_TIMESTAMP,
  PRIMARY KEY (`id`),
  UNIQUE KEY `uk_biz_task_key` (`biz_code`, `task_key`),
  KEY `idx_due` (`status`, `fire_time`),
  KEY `idx_biz` (`biz_code`, `status`)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4;

CREATE TABLE `bc_task_exec_log` (
  `id` BIGINT NOT NULL AUTO_INCREMENT,
  `task_id` BIGINT NOT NULL,
  `biz_code` VARCHAR(64) NOT NULL,
  `shard_index` INT NOT NULL DEFAULT 0,
  `attempt` INT NOT NULL DEFAULT 0 COMMENT '0 first call, 1.. retries',
  `scheduled_time` DATETIME(3) NOT NULL COMMENT 'the fire time this attempt belongs to',
  `start_time` DATETIME(3) NULL COMMENT 'callback sent, NULL: never dispatched',
  `end_time` DATETIME(3) NULL,
  `status` TINYINT NOT NULL COMMENT '0 RUNNING 1 SUCCESS 2 FAIL 3 TIMEOUT',
  `http_status` INT NULL,
  `worker_host` VARCHAR(128) NULL,
  `error_msg` TEXT NULL,
  PRIMARY KEY (`id`),
  KEY `idx_task` (`task_id`, `scheduled_time`),
  KEY `idx_biz_time` (`biz_code`, `scheduled_time`)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4;
