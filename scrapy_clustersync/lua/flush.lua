-- flush: apply one node's buffered writes in one atomic step, in order.
-- Dedup check+add, push, acks, releases and dead letters of a batch all land together, so a
-- parent's ack is never in Redis without the children its callback yielded before it.
--
-- KEYS[1]  meta       hash   job epoch and entry sequence
-- KEYS[2]  queue      zset   entry id -> -priority
-- KEYS[3]  entries    hash   entry id -> encoded request
-- KEYS[4]  deadlines  zset   leased entry id -> lease deadline (server ms)
-- KEYS[5]  leased     hash   leased entry id -> "<queue score>|<node>"
-- KEYS[6]  seen       set    raw 20-byte request fingerprints
-- KEYS[7]  stats      hash   job counters
-- KEYS[8]  dead       list   dead letters, newest first
-- KEYS[9]  last_call  hash   this node's last call id and its result (makes a retry a no-op)
-- ARGV[1]  epoch      string the job epoch the node joined; another value = Redis lost the job
-- ARGV[2]  call_id    string unique per call; the same id again returns the stored result
-- ARGV[3]  node       string node id
-- ARGV[4]  dead_max   int    how many dead letters to keep
-- ARGV[5..] ops, each an opcode followed by its fields:
--   P fingerprint priority blob dont_filter(0|1)   push unless the fingerprint was seen
--   A id                                           ack: the request is done
--   N id                                           release this node's lease back to the queue
--   D id reason                                    dead-letter a leased entry
--   S                                              the job's start() is exhausted
-- Returns "pushed filtered acked released dead".
if redis.call('HGET', KEYS[1], 'epoch') ~= ARGV[1] then
  return redis.error_reply('CLUSTERSYNC_STATE_LOST job epoch missing or changed')
end
local last = redis.call('HMGET', KEYS[9], 'flush_id', 'flush_result')
if last[1] == ARGV[2] then
  return last[2]
end

local pushed, filtered, acked, released, dead = 0, 0, 0, 0, 0
local t = redis.call('TIME')
local now_ms = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)

local function drop_lease(id)
  local removed = redis.call('ZREM', KEYS[4], id)
  redis.call('HDEL', KEYS[5], id)
  return removed
end

local i = 5
local n = #ARGV
while i <= n do
  local op = ARGV[i]
  if op == 'P' then
    local fp, prio, blob, dont_filter = ARGV[i + 1], ARGV[i + 2], ARGV[i + 3], ARGV[i + 4]
    if dont_filter == '1' or redis.call('SADD', KEYS[6], fp) == 1 then
      local id = string.format('%016x', redis.call('HINCRBY', KEYS[1], 'seq', 1))
      redis.call('HSET', KEYS[3], id, blob)
      redis.call('ZADD', KEYS[2], -tonumber(prio), id)
      pushed = pushed + 1
    else
      filtered = filtered + 1
    end
    i = i + 5
  elseif op == 'A' then
    local id = ARGV[i + 1]
    -- a lease that was reclaimed sits in the queue again: the work is done, so drop it there too
    if drop_lease(id) + redis.call('ZREM', KEYS[2], id) > 0 then
      redis.call('HDEL', KEYS[3], id)
      acked = acked + 1
    end
    i = i + 2
  elseif op == 'N' then
    local id = ARGV[i + 1]
    local lease = redis.call('HGET', KEYS[5], id)
    if lease then
      local score, owner = string.match(lease, '^([^|]*)|(.*)$')
      if owner == ARGV[3] then
        drop_lease(id)
        redis.call('ZADD', KEYS[2], score, id)
        released = released + 1
      end
    end
    i = i + 2
  elseif op == 'D' then
    local id, reason = ARGV[i + 1], ARGV[i + 2]
    local blob = redis.call('HGET', KEYS[3], id) or ''
    local record = table.concat({id, ARGV[3], tostring(now_ms), reason}, '\t') .. '\n' .. blob
    redis.call('LPUSH', KEYS[8], record)
    redis.call('LTRIM', KEYS[8], 0, tonumber(ARGV[4]) - 1)
    drop_lease(id)
    redis.call('ZREM', KEYS[2], id)
    redis.call('HDEL', KEYS[3], id)
    dead = dead + 1
    i = i + 3
  elseif op == 'S' then
    redis.call('HSET', KEYS[1], 'start_done', ARGV[3])
    i = i + 1
  else
    return redis.error_reply('CLUSTERSYNC_BAD_OP ' .. tostring(op))
  end
end

local counters = {pushed = pushed, filtered = filtered, acked = acked, released = released, dead = dead}
for name, value in pairs(counters) do
  if value > 0 then
    redis.call('HINCRBY', KEYS[7], name, value)
  end
end
local result = table.concat({pushed, filtered, acked, released, dead}, ' ')
redis.call('HSET', KEYS[9], 'flush_id', ARGV[2], 'flush_result', result)
redis.call('PEXPIRE', KEYS[9], 86400000)
return result
