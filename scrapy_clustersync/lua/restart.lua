-- restart: make a finished (or stopped) job crawlable again (`clustersync restart`): start()
-- runs again on the next node that joins (restart_job, in prelude.lua). The queue, the stats
-- and the dead letters are kept; the caller forgets the seen record if asked to.
--
-- KEYS[1]  meta       hash  epoch, start_claim, start_done, finished_*
-- KEYS[2]  nodes      zset  node id -> liveness deadline (server ms)
-- KEYS[3]  queue      zset  entry id -> -priority
-- KEYS[4]  deadlines  zset  leased entry id -> lease deadline (server ms)
-- ARGV[1]  force  0|1  restart even with live nodes or work queued or leased
-- Returns {restarted 0|1, live nodes, queued, leased}; restarted is 0 when the job does not
-- exist, or when it is not idle (live nodes, work queued or leased) and force is 0.
if redis.call('HEXISTS', KEYS[1], 'epoch') == 0 then
  return {0, 0, 0, 0}
end
local t = redis.call('TIME')
local now_ms = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local live = redis.call('ZCOUNT', KEYS[2], now_ms, '+inf')
local queued = redis.call('ZCARD', KEYS[3])
local leased = redis.call('ZCARD', KEYS[4])
if ARGV[1] ~= '1' and (live > 0 or queued > 0 or leased > 0) then
  return {0, live, queued, leased}
end
restart_job(KEYS[1], now_ms)
return {1, live, queued, leased}
