-- heartbeat: keep a node alive, renew its leases, record whether it is idle, and say whether
-- the whole job is finished. A node that leaves (ttl_ms = 0) is removed from the live set.
--
-- KEYS[1]  meta       hash   job epoch
-- KEYS[2]  nodes      zset   node id -> liveness deadline (server ms)
-- KEYS[3]  node_info  hash   node id -> JSON record written by the node
-- KEYS[4]  idle       hash   node id -> server ms since which the node is idle
-- KEYS[5]  deadlines  zset   leased entry id -> lease deadline (server ms)
-- KEYS[6]  leased     hash   leased entry id -> "<queue score>|<node>"
-- KEYS[7]  queue      zset   entry id -> -priority
-- ARGV[1]  epoch          string  the job epoch the node joined
-- ARGV[2]  node           string  node id
-- ARGV[3]  ttl_ms         int     liveness duration; 0 = the node leaves the job
-- ARGV[4]  lease_ms       int     lease duration for renewed leases
-- ARGV[5]  info           string  the node's JSON record
-- ARGV[6]  idle           0|1     the node has nothing to do and nothing buffered
-- ARGV[7]  idle_after_ms  int     how long every live node must be idle; 0 = never finish
-- ARGV[8..] lease ids this node holds, to renew
-- Returns {finished 0|1, queued, leased, live nodes, server ms}.
if redis.call('HGET', KEYS[1], 'epoch') ~= ARGV[1] then
  return redis.error_reply('CLUSTERSYNC_STATE_LOST job epoch missing or changed')
end
local node = ARGV[2]
local t = redis.call('TIME')
local now_ms = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)

redis.call('HSET', KEYS[3], node, ARGV[5])
if tonumber(ARGV[3]) == 0 then
  redis.call('ZREM', KEYS[2], node)
  redis.call('HDEL', KEYS[4], node)
else
  redis.call('ZADD', KEYS[2], now_ms + tonumber(ARGV[3]), node)
  if ARGV[6] == '1' then
    redis.call('HSETNX', KEYS[4], node, now_ms)
  else
    redis.call('HDEL', KEYS[4], node)
  end
end

local lease_deadline = now_ms + tonumber(ARGV[4])
for j = 8, #ARGV do
  local lease = redis.call('HGET', KEYS[6], ARGV[j])
  if lease and string.sub(lease, -(#node + 1)) == '|' .. node then
    redis.call('ZADD', KEYS[5], 'XX', lease_deadline, ARGV[j])
  end
end

local queued = redis.call('ZCARD', KEYS[7])
local leased = redis.call('ZCARD', KEYS[5])
local live = redis.call('ZRANGEBYSCORE', KEYS[2], now_ms, '+inf', 'LIMIT', 0, 100000)
local idle_after = tonumber(ARGV[7])
local finished = 1
if idle_after <= 0 or queued > 0 or leased > 0 then
  finished = 0
else
  for _, other in ipairs(live) do
    local since = redis.call('HGET', KEYS[4], other)
    if not since or now_ms - tonumber(since) < idle_after then
      finished = 0
      break
    end
  end
end
return {finished, queued, leased, #live, now_ms}
