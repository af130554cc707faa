-- lease: hand a batch of queued requests to one node, and first return expired leases.
-- A leased entry stays in Redis (entries + deadlines + leased) until it is acked; a lease whose
-- deadline (server time) has passed goes back to the queue with its old score, skipping dedup.
--
-- KEYS[1]  meta       hash   job epoch
-- KEYS[2]  queue      zset   entry id -> -priority
-- KEYS[3]  entries    hash   entry id -> encoded request
-- KEYS[4]  deadlines  zset   leased entry id -> lease deadline (server ms)
-- KEYS[5]  leased     hash   leased entry id -> "<queue score>|<node>"
-- KEYS[6]  stats      hash   job counters
-- KEYS[7]  last_call  hash   this node's write counter, last call id and result
-- KEYS[8]  tasks      hash   task id -> task record (tasks.lua: a pending task turns running)
-- KEYS[9]  task_of    hash   entry id -> task id
-- ARGV[1]  epoch        string  the job epoch the node joined
-- ARGV[2]  call_id      string  unique per call
-- ARGV[3]  node         string  node id
-- ARGV[4]  count        int     how many entries to lease at most
-- ARGV[5]  lease_ms     int     lease duration in milliseconds
-- ARGV[6]  reclaim_max  int     how many expired leases to return at most in this call
-- ARGV[7]  writes       int     the node's write counter as it last saw it; -1 = do not check
-- Returns a flat array: the node's write counter, then id1, blob1, score1, id2, blob2, ...
-- (the queue score is -priority: the node keeps Scrapy's order across priorities)
-- Errors (before any change): CLUSTERSYNC_STATE_LOST, CLUSTERSYNC_WRONG_TYPE,
-- CLUSTERSYNC_ROLLED_BACK <w> <e> (as flush).
if redis.call('HGET', KEYS[1], 'epoch') ~= ARGV[1] then
  return redis.error_reply('CLUSTERSYNC_STATE_LOST job epoch missing or changed')
end
local refused = wrong_type({{KEYS[2], 'zset'}, {KEYS[3], 'hash'}, {KEYS[4], 'zset'},
                            {KEYS[5], 'hash'}, {KEYS[6], 'hash'}, {KEYS[7], 'hash'},
                            {KEYS[8], 'hash'}, {KEYS[9], 'hash'}})
if refused then return refused end
local node = ARGV[3]
local writes, rolled_back = bump_writes(KEYS[7], ARGV[7])
if not writes then return rolled_back end
local out = {writes}

local function lease_one(id, score, deadline)
  local blob = redis.call('HGET', KEYS[3], id)
  redis.call('ZADD', KEYS[4], deadline, id)
  redis.call('HSET', KEYS[5], id, lease_value(score, node))
  task_leased(id)
  out[#out + 1] = id
  out[#out + 1] = blob or ''
  out[#out + 1] = tostring(score)
end

local t = redis.call('TIME')
local now_ms = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local deadline = now_ms + tonumber(ARGV[5])
task_setup(KEYS[8], KEYS[9], node, now_ms)

local last = redis.call('HMGET', KEYS[7], 'lease_id', 'lease_result')
if last[1] == ARGV[2] then
  -- the same call again: hand out the same entries if they are still leased to this node
  for id in string.gmatch(last[2] or '', '%S+') do
    local score, owner = parse_lease(redis.call('HGET', KEYS[5], id))
    if owner == node then lease_one(id, score, deadline) end
  end
  return out
end

local expired = redis.call('ZRANGEBYSCORE', KEYS[4], '-inf', now_ms, 'LIMIT', 0, tonumber(ARGV[6]))
for _, id in ipairs(expired) do
  local score = parse_lease(redis.call('HGET', KEYS[5], id)) or '0'
  redis.call('ZREM', KEYS[4], id)
  redis.call('HDEL', KEYS[5], id)
  redis.call('ZADD', KEYS[2], score, id)
end
if #expired > 0 then
  redis.call('HINCRBY', KEYS[6], 'reclaimed', #expired)
end

local popped = redis.call('ZPOPMIN', KEYS[2], tonumber(ARGV[4]))
local ids = {}
for j = 1, #popped, 2 do
  lease_one(popped[j], popped[j + 1], deadline)
  ids[#ids + 1] = popped[j]
end
if #ids > 0 then
  redis.call('HINCRBY', KEYS[6], 'leased', #ids)
end
redis.call('HSET', KEYS[7], 'lease_id', ARGV[2], 'lease_result', table.concat(ids, ' '))
redis.call('PEXPIRE', KEYS[7], 86400000)
return out
