-- join: join a job, creating it (epoch and dedup settings) if this is its first node, and
-- optionally claim the right to run the spider's start(). Exactly one node per job runs start();
-- if that node died before start() was exhausted, a later node takes the claim over.
-- A job whose last run finished (heartbeat.lua recorded it) and that has no work queued or
-- leased is not joined: the answer says when it finished, unless ``recrawl`` asks to restart
-- it (restart_job, in prelude.lua), which one call does for all: a second node joining after
-- it finds the job running.
--
-- KEYS[1]  meta       hash  epoch, dedup settings, start_claim, start_done, finished_*
-- KEYS[2]  nodes      zset  node id -> liveness deadline (server ms)
-- KEYS[3]  queue      zset  entry id -> -priority
-- KEYS[4]  deadlines  zset  leased entry id -> lease deadline (server ms)
-- ARGV[1]  node            string  node id ("cli" for the command line)
-- ARGV[2]  new_epoch       string  the epoch to set if the job has none yet
-- ARGV[3]  ttl_ms          int     liveness duration of the joining node; 0 = not a node
-- ARGV[4]  claim           0|1     try to claim start()
-- ARGV[5]  dedup           string  "bloom" or "exact", used if the job is new
-- ARGV[6]  bloom_capacity  int     used if the job is new
-- ARGV[7]  bloom_error     string  used if the job is new
-- KEYS[5..]  with "forget-seen": the dedup record (seen, bloom, chunks; see dedup_unchanged)
-- ARGV[8]  recrawl         string  "" = a finished job stays finished; "keep-seen" or
--                                  "forget-seen" = restart it ("forget-seen" also deletes the
--                                  dedup record, in the same step); "join" = join it as it is
-- ARGV[9..]  with "forget-seen": the bloom hash as read to name its chunks
-- Returns {epoch, claimed 0|1, dedup, bloom_capacity, bloom_error, finished_ms, finished_pages,
-- finished_nodes, finished_idle_ms, restarted}: the job's settings, not the caller's; the
-- finished_* fields are "" unless the job is finished (then the node was not added and claimed
-- nothing); restarted is ARGV[8] if this call restarted the job, "retry" if it did not because
-- the bloom hash changed since it was read (nothing done), else "".
local t = redis.call('TIME')
local now_ms = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
if redis.call('HSETNX', KEYS[1], 'epoch', ARGV[2]) == 1 then
  redis.call('HSET', KEYS[1], 'created_ms', now_ms, 'dedup', ARGV[5],
             'bloom_capacity', ARGV[6], 'bloom_error', ARGV[7])
end
local job = redis.call('HMGET', KEYS[1], 'epoch', 'dedup', 'bloom_capacity', 'bloom_error')
local finished = {'', '', '', ''}
local restarted = ''
local function answer(claimed)
  return {job[1], claimed, job[2], job[3], job[4], finished[1], finished[2], finished[3],
          finished[4], restarted}
end
if tonumber(ARGV[3]) > 0 then
  local record = redis.call('HMGET', KEYS[1], FINISH_FIELDS[1], FINISH_FIELDS[2], FINISH_FIELDS[3], FINISH_FIELDS[4])
  local idle = redis.call('ZCARD', KEYS[3]) == 0 and redis.call('ZCARD', KEYS[4]) == 0
  if ARGV[8] == 'join' then
    record[1] = false
  end
  if record[1] and idle and ARGV[8] == '' then
    for i = 1, 4 do finished[i] = record[i] or '' end
    return answer(0)
  elseif record[1] and idle then
    if ARGV[8] == 'forget-seen' then
      if not dedup_unchanged(KEYS[6], 9) then
        restarted = 'retry'
        return answer(0)
      end
      forget_dedup(5)
    end
    restart_job(KEYS[1], now_ms)
    restarted = ARGV[8]
  end
  redis.call('ZADD', KEYS[2], now_ms + tonumber(ARGV[3]), ARGV[1])
end
if ARGV[4] ~= '1' or redis.call('HEXISTS', KEYS[1], 'start_done') == 1 then
  return answer(0)
end
local claim = redis.call('HGET', KEYS[1], 'start_claim')
if claim == ARGV[1] then
  return answer(1)
end
if claim then
  local alive_until = redis.call('ZSCORE', KEYS[2], claim)
  if alive_until and tonumber(alive_until) >= now_ms then
    return answer(0)
  end
  redis.call('HINCRBY', KEYS[1], 'start_takeovers', 1)
end
redis.call('HSET', KEYS[1], 'start_claim', ARGV[1])
return answer(1)
