-- claim_start: join the job (creating its epoch if this is the job's first node) and claim the
-- right to run the spider's start(). Exactly one node per job runs start(); if that node died
-- before start() was exhausted, a later node takes the claim over.
--
-- KEYS[1]  meta   hash  epoch, start_claim, start_done
-- KEYS[2]  nodes  zset  node id -> liveness deadline (server ms)
-- ARGV[1]  node       string  node id
-- ARGV[2]  new_epoch  string  the epoch to set if the job has none yet
-- ARGV[3]  ttl_ms     int     liveness duration of the joining node
-- Returns {epoch, claimed 0|1}.
local t = redis.call('TIME')
local now_ms = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
if redis.call('HSETNX', KEYS[1], 'epoch', ARGV[2]) == 1 then
  redis.call('HSET', KEYS[1], 'created_ms', now_ms)
end
local epoch = redis.call('HGET', KEYS[1], 'epoch')
redis.call('ZADD', KEYS[2], now_ms + tonumber(ARGV[3]), ARGV[1])
if redis.call('HEXISTS', KEYS[1], 'start_done') == 1 then
  return {epoch, 0}
end
local claim = redis.call('HGET', KEYS[1], 'start_claim')
if claim == ARGV[1] then
  return {epoch, 1}
end
if claim then
  local alive_until = redis.call('ZSCORE', KEYS[2], claim)
  if alive_until and tonumber(alive_until) >= now_ms then
    return {epoch, 0}
  end
  redis.call('HINCRBY', KEYS[1], 'start_takeovers', 1)
end
redis.call('HSET', KEYS[1], 'start_claim', ARGV[1])
return {epoch, 1}
