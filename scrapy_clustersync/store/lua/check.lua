-- check: confirm, and with mode 'repair' mend, what `clustersync check` suspects of the
-- job's entries (store/consistency.py finds the suspects from reads that are not one snapshot, so each
-- is confirmed here, atomically, before it is reported or mended: a crawl running meanwhile
-- never turns a suspect into a wrong repair).
--
-- (store/check_script.py CheckScript builds the call and reads the answer.)
--
-- KEYS[1]  queue      zset    entry id -> queue score (-priority)
-- KEYS[2]  entries    hash    entry id -> encoded request
-- KEYS[3]  deadlines  zset    leased entry id -> lease deadline (server ms)
-- KEYS[4]  leased     hash    leased entry id -> "<queue score>|<node>"
-- KEYS[5]  nodes      zset    node id -> liveness deadline (server ms)
-- KEYS[6]  node_leases zset   leased entry id -> its node's number and lease sequence (the
--                             index of each node's leases, lease_index.lua): a lease dropped
--                             here leaves it
-- KEYS[7]  reclaiming zset    the dead nodes whose leases heartbeats and leases are returning
--                             ("<number>:<node id>", lease_index.lua): theirs are not suspects
-- ARGV[1]  mode       string  'check' | 'repair'
-- ARGV[2..] suspect   string  triples: kind, entry id, queue score ('' unless the caller read it
--                             from the entry's request: what an entry that is in no structure
--                             goes back to the queue with)
-- Returns, for each suspect that holds: kind, id, what was done ('' in check mode).
local queue_key = KEYS[1]
local entries_key = KEYS[2]
local deadlines_key = KEYS[3]
local leased_key = KEYS[4]
local nodes_key = KEYS[5]
local node_leases_key = KEYS[6]
local reclaiming_key = KEYS[7]
local mode = ARGV[1]
local suspect_from = 2
local t = redis.call('TIME')
local now_ms = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local repair = mode == 'repair'
local out = {}

local function queued(id) return redis.call('ZSCORE', queue_key, id) end
local function has_entry(id) return redis.call('HEXISTS', entries_key, id) == 1 end
local function deadline(id) return redis.call('ZSCORE', deadlines_key, id) end
local function lease(id) return parse_lease(redis.call('HGET', leased_key, id)) end
local function live(node)
  local until_ms = redis.call('ZSCORE', nodes_key, node)
  return until_ms and tonumber(until_ms) >= now_ms
end
-- the lease `id` of dead node `owner` is one the heartbeats and leases are returning in order
local function being_returned(id, owner)
  local score = redis.call('ZSCORE', node_leases_key, id)
  if not score then return false end
  local number = math.floor(tonumber(score) / 4294967296)  -- lease_index.lua LEASE_SEQ_SPAN
  return redis.call('ZSCORE', reclaiming_key, number .. ':' .. owner) ~= false
end
local function drop_lease(id)
  redis.call('ZREM', deadlines_key, id)
  redis.call('HDEL', leased_key, id)
  redis.call('ZREM', node_leases_key, id)
end
local function requeue(id, score)
  drop_lease(id)
  redis.call('ZADD', queue_key, score, id)
end

-- each kind: does it hold now, and how it is mended (returns what was done)
local KINDS = {
  lease_of_dead_node = {
    holds = function(id)
      local score, owner = lease(id)
      local until_ms = deadline(id)
      return owner and not live(owner) and until_ms and tonumber(until_ms) >= now_ms
        and not being_returned(id, owner)
    end,
    -- a node still listed in `nodes` is declared dead by the next heartbeat of a live node
    -- (none after a gap no heartbeat crossed: heartbeat.lua's outage guard), which records it
    -- so that the node, if it comes back, drops what it prefetched; returning its leases here
    -- would not tell it, and it would crawl them while another node does
    mend = function(id)
      local _, owner = lease(id)
      if redis.call('ZSCORE', nodes_key, owner) then
        return 'left alone: node ' .. owner .. ' is still listed; a live node\'s heartbeat ' ..
               'declares it dead'
      end
      requeue(id, (lease(id)))
      return 'returned to the queue'
    end,
  },
  queued_and_leased = {
    holds = function(id) return queued(id) and (lease(id) or deadline(id)) end,
    mend = function(id)
      local _, owner = lease(id)
      if owner and live(owner) then
        redis.call('ZREM', queue_key, id)
        return 'removed from the queue: leased to live node ' .. owner
      end
      drop_lease(id)
      return 'lease dropped: it stays queued'
    end,
  },
  queued_without_entry = {
    holds = function(id) return queued(id) and not has_entry(id) end,
    mend = function(id)
      redis.call('ZREM', queue_key, id)
      return 'removed from the queue'
    end,
  },
  leased_without_entry = {
    holds = function(id) return (lease(id) or deadline(id)) and not has_entry(id) end,
    mend = function(id)
      drop_lease(id)
      return 'lease dropped'
    end,
  },
  lease_without_deadline = {
    holds = function(id) return lease(id) and not deadline(id) and has_entry(id) end,
    mend = function(id)
      requeue(id, (lease(id)))
      return 'returned to the queue'
    end,
  },
  deadline_without_lease = {
    holds = function(id) return deadline(id) and not lease(id) and has_entry(id) end,
    mend = function(id, score)
      drop_lease(id)
      if queued(id) then return 'deadline dropped: it stays queued' end
      redis.call('ZADD', queue_key, score ~= '' and score or '0', id)
      return 'returned to the queue'
    end,
  },
  entry_unqueued = {
    holds = function(id)
      return has_entry(id) and not queued(id) and not lease(id) and not deadline(id)
    end,
    mend = function(id, score)
      redis.call('ZADD', queue_key, score ~= '' and score or '0', id)
      return 'returned to the queue'
    end,
  },
}

for i = suspect_from, #ARGV - 2, 3 do
  local kind, id, score = ARGV[i], ARGV[i + 1], ARGV[i + 2]
  local rule = KINDS[kind]
  if not rule then
    return redis.error_reply('CLUSTERSYNC_BAD_CHECK unknown kind ' .. kind)
  end
  if rule.holds(id) then
    local done = ''
    if repair then done = rule.mend(id, score) end
    out[#out + 1] = kind
    out[#out + 1] = id
    out[#out + 1] = done
  end
end
return out
