-- lease: hand a batch of queued requests to one node, and first return expired leases.
-- A leased entry stays in Redis (entries + deadlines + leased) until it is acked; a lease whose
-- deadline (server time) has passed goes back to the queue with its old score, skipping dedup.
--
-- (store/lease_script.py LeaseScript builds the call and reads the answer.)
--
-- KEYS[1]  meta         hash    job epoch
-- KEYS[2]  queue        zset    entry id -> -priority
-- KEYS[3]  entries      hash    entry id -> encoded request
-- KEYS[4]  deadlines    zset    leased entry id -> lease deadline (server ms)
-- KEYS[5]  leased       hash    leased entry id -> "<queue score>|<node>"
-- KEYS[6]  stats        hash    job counters
-- KEYS[7]  last_call    hash    this node's write counter, last call id and result
-- KEYS[8]  tasks        hash    task id -> task record (tasks.lua: a pending task turns running)
-- KEYS[9]  task_of      hash    entry id -> task id
-- ARGV[1]  epoch        string  the job epoch the node joined
-- ARGV[2]  call_id      string  unique per call
-- ARGV[3]  node         string  node id
-- ARGV[4]  count        int     how many entries to lease at most
-- ARGV[5]  lease_ms     int     lease duration in milliseconds
-- ARGV[6]  reclaim_max  int     how many expired leases to return at most in this call
-- ARGV[7]  writes_seen  int     the node's write counter as it last saw it; -1 = do not check
-- Returns a flat array: the node's write counter, then id1, blob1, score1, id2, blob2, ...
-- (the queue score is -priority: the node keeps Scrapy's order across priorities)
-- Errors (before any change): CLUSTERSYNC_STATE_LOST, CLUSTERSYNC_WRONG_TYPE,
-- CLUSTERSYNC_ROLLED_BACK <w> <e> (as flush).
local meta_key = KEYS[1]
local queue_key = KEYS[2]
local entries_key = KEYS[3]
local deadlines_key = KEYS[4]
local leased_key = KEYS[5]
local stats_key = KEYS[6]
local last_call_key = KEYS[7]
local tasks_key = KEYS[8]
local task_of_key = KEYS[9]
local epoch = ARGV[1]
local call_id = ARGV[2]
local node = ARGV[3]
local count = tonumber(ARGV[4])
local lease_ms = tonumber(ARGV[5])
local reclaim_max = tonumber(ARGV[6])
local writes_seen = ARGV[7]
if redis.call('HGET', meta_key, 'epoch') ~= epoch then
  return redis.error_reply('CLUSTERSYNC_STATE_LOST job epoch missing or changed')
end
local refused = wrong_type({{queue_key, 'zset'}, {entries_key, 'hash'}, {deadlines_key, 'zset'},
                            {leased_key, 'hash'}, {stats_key, 'hash'}, {last_call_key, 'hash'},
                            {tasks_key, 'hash'}, {task_of_key, 'hash'}})
if refused then return refused end
local writes, rolled_back = bump_writes(last_call_key, writes_seen)
if not writes then return rolled_back end
local out = {writes}

local function lease_one(id, score, deadline)
  local blob = redis.call('HGET', entries_key, id)
  redis.call('ZADD', deadlines_key, deadline, id)
  redis.call('HSET', leased_key, id, lease_value(score, node))
  task_leased(id)
  out[#out + 1] = id
  out[#out + 1] = blob or ''
  out[#out + 1] = tostring(score)
end

local t = redis.call('TIME')
local now_ms = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local deadline = now_ms + lease_ms
task_setup(tasks_key, task_of_key, node, now_ms)

local last = redis.call('HMGET', last_call_key, 'lease_id', 'lease_result')
if last[1] == call_id then
  -- the same call again: hand out the same entries if they are still leased to this node
  for id in string.gmatch(last[2] or '', '%S+') do
    local score, owner = parse_lease(redis.call('HGET', leased_key, id))
    if owner == node then lease_one(id, score, deadline) end
  end
  return out
end

local expired = redis.call('ZRANGEBYSCORE', deadlines_key, '-inf', now_ms, 'LIMIT', 0, reclaim_max)
for _, id in ipairs(expired) do
  local score = parse_lease(redis.call('HGET', leased_key, id)) or '0'
  redis.call('ZREM', deadlines_key, id)
  redis.call('HDEL', leased_key, id)
  redis.call('ZADD', queue_key, score, id)
end
if #expired > 0 then
  redis.call('HINCRBY', stats_key, 'reclaimed', #expired)
end

local popped = redis.call('ZPOPMIN', queue_key, count)
local ids = {}
for j = 1, #popped, 2 do
  lease_one(popped[j], popped[j + 1], deadline)
  ids[#ids + 1] = popped[j]
end
if #ids > 0 then
  redis.call('HINCRBY', stats_key, 'leased', #ids)
end
redis.call('HSET', last_call_key, 'lease_id', call_id, 'lease_result', table.concat(ids, ' '))
return out
