-- restart: make a finished (or stopped) job crawlable again (`clustersync restart`): start()
-- runs again on the next node that joins (restart_job, in prelude.lua), in the job's next
-- run, and a job that was stopped, stopping or paused is running again (its control state,
-- which nodes re-read within a fraction of a second: no node of a stopped job is live to be
-- told). The queue, the stats
-- and the dead letters are kept; the seen record too unless `forget` asks to forget it, which
-- happens in the same step (no node can join in between and crawl with the old record).
--
-- (store/join_scripts.py RestartScript builds the call and reads the answer.)
--
-- KEYS[1]  meta         hash  epoch, start_claim, start_done, finished_*
-- KEYS[2]  nodes        zset  node id -> liveness deadline (server ms)
-- KEYS[3]  queue        zset  entry id -> -priority
-- KEYS[4]  deadlines    zset  leased entry id -> lease deadline (server ms)
-- KEYS[5]  stats        hash  job counters (the next run starts from them: start_run)
-- KEYS[6]  scrapy_stats hash  the nodes' Scrapy stats, summed (pages, items)
-- KEYS[7]  seen         set   the exact dedup set (its size: what the job has seen)
-- KEYS[8]  bloom        hash  the Bloom filter's state (its entries: count<i>)
-- KEYS[9..] dedup       keys  the dedup record: seen, bloom, the bloom chunks (see
--                             dedup_unchanged in prelude.lua)
-- ARGV[1]  force        0|1   restart even with live nodes or work queued or leased
-- ARGV[2]  forget       0|1   also delete the dedup record (KEYS[9..])
-- ARGV[3..] bloom_field string the bloom hash as read to name its chunks (field, value pairs)
-- Errors (before any change): CLUSTERSYNC_WRONG_TYPE (a figure key of another type).
-- Returns {restarted, live nodes, queued, leased, resumed}; restarted is 1 if done, 0 when the
-- job does not exist, or when it is not idle (live nodes, work queued or leased) and force is 0,
-- -1 when the bloom hash changed since it was read (nothing done: read it again and retry);
-- resumed is the control state the restart ended (stopped, stopping, paused), else "".
local meta_key = KEYS[1]
local nodes_key = KEYS[2]
local queue_key = KEYS[3]
local deadlines_key = KEYS[4]
local stats_key = KEYS[5]
local scrapy_stats_key = KEYS[6]
local seen_key = KEYS[7]
local bloom_key = KEYS[8]
local run_keys = {stats = stats_key, scrapy_stats = scrapy_stats_key, seen = seen_key,
                  bloom = bloom_key}
local dedup_from = 9
local force = ARGV[1]
local forget = ARGV[2]
local bloom_field_from = 3
-- the keys a run starts from (start_run) are read before the first write
local refused = wrong_type({stats_key, 'hash', scrapy_stats_key, 'hash', seen_key, 'set',
                            bloom_key, 'hash'})
if refused then return refused end
if redis.call('HEXISTS', meta_key, 'epoch') == 0 then
  return {0, 0, 0, 0, ''}
end
local t = redis.call('TIME')
local now_ms = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local live = redis.call('ZCOUNT', nodes_key, now_ms, '+inf')
local queued = queued_count(meta_key, queue_key)
local leased = redis.call('ZCARD', deadlines_key)
if force ~= '1' and (live > 0 or queued > 0 or leased > 0) then
  return {0, live, queued, leased, ''}
end
if forget == '1' then
  if not dedup_unchanged(KEYS, dedup_from, ARGV, bloom_field_from) then
    return {-1, live, queued, leased, ''}
  end
  forget_dedup(KEYS, dedup_from)
end
restart_job(meta_key, now_ms, run_keys)
local control = redis.call('HGET', meta_key, 'control')
local resumed = ''
if control == 'stopped' or control == 'stopping' or control == 'paused' then
  redis.call('HSET', meta_key, 'control', 'running', 'control_ms', now_ms)
  resumed = control
end
return {1, live, queued, leased, resumed}
