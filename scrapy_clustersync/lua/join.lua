-- join: join a job, creating it (epoch and dedup settings) if this is its first node, and
-- optionally claim the right to run the spider's start(). Exactly one node per job runs start();
-- if that node died before start() was exhausted, a later node takes the claim over.
--
-- KEYS[1]  meta   hash  epoch, dedup settings, start_claim, start_done
-- KEYS[2]  nodes  zset  node id -> liveness deadline (server ms)
-- ARGV[1]  node            string  node id ("cli" for the command line)
-- ARGV[2]  new_epoch       string  the epoch to set if the job has none yet
-- ARGV[3]  ttl_ms          int     liveness duration of the joining node; 0 = not a node
-- ARGV[4]  claim           0|1     try to claim start()
-- ARGV[5]  dedup           string  "bloom" or "exact", used if the job is new
-- ARGV[6]  bloom_capacity  int     used if the job is new
-- ARGV[7]  bloom_error     string  used if the job is new
-- Returns {epoch, claimed 0|1, dedup, bloom_capacity, bloom_error} (the job's, not the caller's).
local t = redis.call('TIME')
local now_ms = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
if redis.call('HSETNX', KEYS[1], 'epoch', ARGV[2]) == 1 then
  redis.call('HSET', KEYS[1], 'created_ms', now_ms, 'dedup', ARGV[5],
             'bloom_capacity', ARGV[6], 'bloom_error', ARGV[7])
end
local job = redis.call('HMGET', KEYS[1], 'epoch', 'dedup', 'bloom_capacity', 'bloom_error')
local function answer(claimed)
  return {job[1], claimed, job[2], job[3], job[4]}
end
if tonumber(ARGV[3]) > 0 then
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
