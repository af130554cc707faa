-- join: join a job, creating it (epoch and dedup settings) if this is its first node, and
-- optionally claim the right to run the spider's start(). Exactly one node per job runs start();
-- if that node died before start() was exhausted, a later node takes the claim over.
-- A job whose last run finished (heartbeat.lua recorded it) and that has no work queued or
-- leased is not joined: the answer says when it finished, unless ``recrawl`` asks to restart
-- it (restart_job, in prelude.lua), which one call does for all: a second node joining after
-- it finds the job running. Creating the job starts its run 1, a restart its next run (start_run).
--
-- (store/join_scripts.py JoinScript builds the call and reads the answer.)
--
-- KEYS[1]  meta            hash    epoch, dedup settings, start_claim, start_done, finished_*
-- KEYS[2]  nodes           zset    node id -> liveness deadline (server ms)
-- KEYS[3]  queue           zset    entry id -> -priority
-- KEYS[4]  deadlines       zset    leased entry id -> lease deadline (server ms)
-- KEYS[5]  stats           hash    job counters (a run starts from them: start_run, prelude)
-- KEYS[6]  scrapy_stats    hash    the nodes' Scrapy stats, summed (pages, items)
-- KEYS[7]  seen            set     the exact dedup set (its size: what the job has seen)
-- KEYS[8]  bloom           hash    the Bloom filter's state (its entries: count<i>)
-- KEYS[9..] dedup          keys    with "forget-seen" only: the dedup record (seen, bloom, the
--                                  chunks; see dedup_unchanged in prelude.lua)
-- ARGV[1]  node            string  node id ("cli" for the command line)
-- ARGV[2]  new_epoch       string  the epoch to set if the job has none yet
-- ARGV[3]  ttl_ms          int     liveness duration of the joining node; 0 = not a node
-- ARGV[4]  claim           0|1     try to claim start()
-- ARGV[5]  dedup_mode      string  "set-then-blocked-bloom" or "exact", stored if the job is new
-- ARGV[6]  bloom_capacity  int     stored if the job is new
-- ARGV[7]  bloom_error     string  stored if the job is new
-- ARGV[8]  recrawl         string  "" = a finished job stays finished; "keep-seen" or
--                                  "forget-seen" = restart it ("forget-seen" also deletes the
--                                  dedup record, in the same step); "join" = join it as it is
-- ARGV[9..] bloom_field    string  with "forget-seen" only: the bloom hash as read to name its
--                                  chunks (field, value pairs)
-- Errors (before any change): CLUSTERSYNC_WRONG_TYPE (a figure key of another type).
-- Returns {epoch, claimed 0|1, dedup, bloom_capacity, bloom_error, finished_ms, finished_pages,
-- finished_nodes, finished_idle_ms, restarted}: the job's settings, not the caller's; the
-- finished_* fields are "" unless the job is finished (then the node was not added and claimed
-- nothing); restarted is `recrawl` if this call restarted the job, "retry" if it did not because
-- the bloom hash changed since it was read (nothing done), "held" if "forget-seen" found live
-- nodes on the finished job (kept open by a DontCloseSpider: their caches of sent fingerprints
-- would outlive the forgotten record; nothing done, the finished_* fields say when it finished),
-- else "".
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
local node = ARGV[1]
local new_epoch = ARGV[2]
local ttl_ms = tonumber(ARGV[3])
local claim = ARGV[4]
local dedup_mode = ARGV[5]
local bloom_capacity = ARGV[6]
local bloom_error = ARGV[7]
local recrawl = ARGV[8]
local bloom_field_from = 9
-- the keys a run starts from (start_run) are read before the first write
local refused = wrong_type({stats_key, 'hash', scrapy_stats_key, 'hash', seen_key, 'set',
                            bloom_key, 'hash'})
if refused then return refused end
local t = redis.call('TIME')
local now_ms = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
if redis.call('HSETNX', meta_key, 'epoch', new_epoch) == 1 then
  redis.call('HSET', meta_key, 'created_ms', now_ms, 'dedup', dedup_mode,
             'bloom_capacity', bloom_capacity, 'bloom_error', bloom_error)
  start_run(meta_key, now_ms, run_keys, 1)
end
local job = redis.call('HMGET', meta_key, 'epoch', 'dedup', 'bloom_capacity', 'bloom_error')
local finished = {'', '', '', ''}
local restarted = ''
local function answer(claimed)
  return {job[1], claimed, job[2], job[3], job[4], finished[1], finished[2], finished[3],
          finished[4], restarted}
end
if ttl_ms > 0 then
  local record = redis.call('HMGET', meta_key, FINISH_FIELDS[1], FINISH_FIELDS[2], FINISH_FIELDS[3], FINISH_FIELDS[4])
  local idle = queued_count(meta_key, queue_key) == 0 and redis.call('ZCARD', deadlines_key) == 0
  if recrawl == 'join' then
    record[1] = false
  end
  if record[1] and idle and recrawl == '' then
    for i = 1, 4 do finished[i] = record[i] or '' end
    return answer(0)
  elseif record[1] and idle then
    if recrawl == 'forget-seen' then
      if redis.call('ZCOUNT', nodes_key, now_ms, '+inf') > 0 then
        -- nodes still open on the finished job (a DontCloseSpider) remember the fingerprints
        -- they sent and would drop those URLs as duplicates of a record forgotten under them:
        -- no forget-seen restart while a node is live
        for i = 1, 4 do finished[i] = record[i] or '' end
        restarted = 'held'
        return answer(0)
      end
      if not dedup_unchanged(KEYS, dedup_from, ARGV, bloom_field_from) then
        restarted = 'retry'
        return answer(0)
      end
      forget_dedup(KEYS, dedup_from)
    end
    restart_job(meta_key, now_ms, run_keys)
    restarted = recrawl
  end
  redis.call('ZADD', nodes_key, now_ms + ttl_ms, node)
end
if claim ~= '1' or redis.call('HEXISTS', meta_key, 'start_done') == 1 then
  return answer(0)
end
local holder = redis.call('HGET', meta_key, 'start_claim')
if holder == node then
  return answer(1)
end
if holder then
  local alive_until = redis.call('ZSCORE', nodes_key, holder)
  if alive_until and tonumber(alive_until) >= now_ms then
    return answer(0)
  end
  redis.call('HINCRBY', meta_key, 'start_takeovers', 1)
end
redis.call('HSET', meta_key, 'start_claim', node)
return answer(1)
