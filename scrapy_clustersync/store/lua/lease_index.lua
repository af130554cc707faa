-- lease_index: which leases each node holds, in the order it leased them, so that a dead
-- node's leases go back to the queue in bounded slices, in their original order, and no call
-- reads all the leases of the job. Loaded after prelude.lua and frontier.lua by lease.lua and
-- heartbeat.lua (flush.lua only removes entries: one ZREM per batch); the script calls
-- lease_index_setup first. The keys (store/keys.py JobKeys documents each):
--   node_leases   zset  leased entry id -> node number * LEASE_SEQ_SPAN + the node's lease
--                       sequence: a node's leases are one score range, in lease order
--   node_numbers  hash  node id -> its number * LEASE_SEQ_SPAN + the leases it indexed: the
--                       score of its last lease (one HINCRBY per lease call); the field goes
--                       when the node leaves or is declared dead (it gets a new number if it
--                       leases again, so a dead node's range holds only what it held then)
--   reclaiming    zset  "<number>:<node id>" -> number: the dead nodes whose leases are still
--                       being returned, oldest number first
--   meta fields   node_numbered (the numbers given), lease_sweep (the HSCAN cursor of the
--                 sweep of leases written before the index existed; "done" once it is over)
-- The index is a guide, not the truth: the leased hash is. An index entry whose lease ended or
-- went to another node (a late ack, check.lua's repairs) is skipped and dropped when its range
-- is read; a lease with no entry (written by an earlier version) comes back when its deadline
-- passes (lease.lua) or when the sweep finds its node gone.
local LEASE_SEQ_SPAN = 4294967296  -- 2^32 leases per node number
local NODE_NUMBERS_MAX = 2097151   -- 2^21 - 1: number * span + sequence stays an exact double
local LEASE_INDEX = {}

-- k: {node_leases=, node_numbers=, reclaiming=, meta=, leased=, deadlines=, nodes=}
local function lease_index_setup(k)
  LEASE_INDEX = k
end

local function score_text(score)
  return string.format('%.0f', score)
end

-- the score of the last of `n` new leases of `node` (the first is that less n - 1), or nil when
-- the job gave every number (its leases then come back by their deadlines only)
local function allocate_scores(node, n)
  local top = tonumber(redis.call('HINCRBY', LEASE_INDEX.node_numbers, node, n))
  local number = math.floor(top / LEASE_SEQ_SPAN)
  if number >= 1 and top - n >= number * LEASE_SEQ_SPAN then return top end
  -- a node with no number yet (HINCRBY started the field at 0), or whose range is full
  number = tonumber(redis.call('HINCRBY', LEASE_INDEX.meta, 'node_numbered', 1))
  if number > NODE_NUMBERS_MAX then
    redis.call('HDEL', LEASE_INDEX.node_numbers, node)
    return nil
  end
  top = number * LEASE_SEQ_SPAN + n
  redis.call('HSET', LEASE_INDEX.node_numbers, node, score_text(top))
  return top
end

-- Index the leases `ids` of `node`, given in the order it leased them: one ZADD per batch.
local function index_leases(node, ids)
  if #ids == 0 then return end
  local top = allocate_scores(node, #ids)
  if not top then return end
  local pairs_ = {}
  for i, id in ipairs(ids) do
    pairs_[#pairs_ + 1] = score_text(top - #ids + i)
    pairs_[#pairs_ + 1] = id
  end
  send_in_batches('ZADD', LEASE_INDEX.node_leases, pairs_)
end

local function unindex_leases(ids)
  send_in_batches('ZREM', LEASE_INDEX.node_leases, ids)
end

-- frontier_return (frontier.lua, whose helpers it uses) for many leased entries at once,
-- `returns` = {{id, score, where}, ...}, a few commands for them all: each goes to the head of
-- its list in the order given (so the last given of a list ends up first), as one
-- frontier_return each would put them.
local function frontier_return_all(returns)
  local ids, back = {}, {}
  for _, r in ipairs(returns) do
    if not r[3] or r[3] == '' then
      frontier_return(r[1], r[2], r[3])
    else
      ids[#ids + 1] = r[1]
      back[#back + 1] = r
    end
  end
  if #ids == 0 then return end
  local blobs, found, requeued = {}, {}, {}
  in_batches(#ids, function(first, last)
    local got = redis.call('HMGET', FRONTIER.entries, unpack(ids, first, last))
    for j = first, last do blobs[j] = got[j - first + 1] end
  end)
  local lists, order = {}, {}
  for j, r in ipairs(back) do
    local blob = blobs[j]
    if blob then  -- (an entry with no request left: check.lua reports it)
      found[#found + 1] = r[1]
      local prio = tostring(-tonumber(r[2] or '0'))
      if prio == '-0' then prio = '0' end
      local kind, site = string.sub(r[3], 1, 1), string.sub(r[3], 2)
      local class = class_of(kind, prio, site)
      local key = list_key(class, site)
      local group = lists[key]
      if not group then
        group = {key = key, class = class, kind = kind, prio = prio, site = site}
        lists[key] = group
        order[#order + 1] = group
      end
      local item = r[1] .. '\t' .. blob
      group[#group + 1] = item
      counted(site, 1, #item)
      requeued[#requeued + 1] = r[1]
      requeued[#requeued + 1] = 'q' .. r[3]
    end
  end
  send_in_batches('HDEL', FRONTIER.entries, found)
  for _, group in ipairs(order) do
    in_batches(#group, function(first, last)
      if redis.call('LPUSH', group.key, unpack(group, first, last)) == last - first + 1 then
        became_ready(group.class, group.kind, group.prio, group.site)
      end
    end)
  end
  if #requeued > 0 then
    send_in_batches('HSET', FRONTIER.requeued, requeued)
    FRONTIER.any_requeued = true
  end
end

-- End the leases `ids` that `owners` (the same indexes: the node each is expected to be leased
-- to; nil = whoever holds it) still hold and put them back in the queue, each first of its
-- site and class, in the order given (the last one given ends up at the head); returns how
-- many went back. One HMGET, ZREM and HDEL for them all.
local function return_leases(ids, owners)
  if #ids == 0 then return 0 end
  local values = redis.call('HMGET', LEASE_INDEX.leased, unpack(ids))
  local ended, back = {}, {}
  for i, id in ipairs(ids) do
    local score, owner, where = parse_lease(values[i])
    if owner and (not owners or owners[i] == owner) then
      ended[#ended + 1] = id
      back[#back + 1] = {id, score, where}
    end
  end
  send_in_batches('ZREM', LEASE_INDEX.deadlines, ended)
  send_in_batches('HDEL', LEASE_INDEX.leased, ended)
  frontier_return_all(back)
  return #back
end

-- Node `node` was declared dead: its leases are to be returned (reclaim_dead_leases) and it
-- loses its number. Returns how many leases its range holds.
local function lease_index_node_died(node)
  local top = redis.call('HGET', LEASE_INDEX.node_numbers, node)
  if not top then return 0 end
  redis.call('HDEL', LEASE_INDEX.node_numbers, node)
  local number = math.floor(tonumber(top) / LEASE_SEQ_SPAN)
  local low = number * LEASE_SEQ_SPAN
  local held = redis.call('ZCOUNT', LEASE_INDEX.node_leases, score_text(low),
                          '(' .. score_text(low + LEASE_SEQ_SPAN))
  if held > 0 then
    redis.call('ZADD', LEASE_INDEX.reclaiming, number, number .. ':' .. node)
  end
  return held
end

-- A node that leaves holds no more leases to index (any left come back by their deadlines).
local function lease_index_node_left(node)
  redis.call('HDEL', LEASE_INDEX.node_numbers, node)
end

-- Return at most `budget` leases of the dead nodes being reclaimed (index entries read, stale
-- ones included), the lowest number first, each node from its last lease down: each slice
-- is pushed at the head of its lists before the slice leased before it, so once a node's
-- leases are all back they stand in the order they were leased (Scrapy's FIFO or LIFO order
-- within a site holds). Returns how many leases went back, and how many index entries it read.
local function reclaim_dead_leases(budget)
  local returned, left = 0, budget
  while left > 0 do
    local first = redis.call('ZRANGE', LEASE_INDEX.reclaiming, 0, 0, 'WITHSCORES')
    if #first == 0 then break end
    local member, number = first[1], tonumber(first[2])
    local node = string.sub(member, string.find(member, ':', 1, true) + 1)
    local low = number * LEASE_SEQ_SPAN
    local ids = redis.call('ZREVRANGEBYSCORE', LEASE_INDEX.node_leases,
                           '(' .. score_text(low + LEASE_SEQ_SPAN), score_text(low),
                           'LIMIT', 0, left)
    local owners = {}
    for i = 1, #ids do owners[i] = node end
    returned = returned + return_leases(ids, owners)
    unindex_leases(ids)
    left = left - #ids
    if left > 0 then redis.call('ZREM', LEASE_INDEX.reclaiming, member) end
  end
  return returned, budget - left
end

-- Return at most `max` leases whose deadline passed by `now_ms`, the latest deadlines first
-- (each call's go to the heads of their lists before those of the call before, as
-- reclaim_dead_leases does), and in a call each node's in the order it leased them (those with
-- no index entry first, so they come after); leases of one deadline (ties sort by id) may
-- change places across calls. Returns how many went back.
local function reclaim_expired_leases(now_ms, max)
  if max <= 0 then return 0 end
  local expired = redis.call('ZREVRANGEBYSCORE', LEASE_INDEX.deadlines, now_ms, '-inf',
                             'LIMIT', 0, max)
  if #expired == 0 then return 0 end
  local scores = redis.call('ZMSCORE', LEASE_INDEX.node_leases, unpack(expired))
  local order = {}
  for i, id in ipairs(expired) do order[i] = {id, tonumber(scores[i]) or math.huge, i} end
  -- the last leased first (ties: the deadline order, kept)
  table.sort(order, function(a, b)
    if a[2] ~= b[2] then return a[2] > b[2] end
    return a[3] < b[3]
  end)
  local ids = {}
  for i, each in ipairs(order) do ids[i] = each[1] end
  local returned = return_leases(ids, nil)
  unindex_leases(ids)
  return returned
end

-- One step of the sweep of the leases written before the index existed, `count` hash fields
-- (an HSCAN hint) per step until a whole scan is done: a lease with no index entry whose node
-- is listed in `nodes` is indexed under that node (as if leased now); one whose node
-- is not (it left, or was declared dead) goes back to the queue now. Returns how many went
-- back.
local function sweep_unindexed_leases(count)
  local cursor = redis.call('HGET', LEASE_INDEX.meta, 'lease_sweep') or '0'
  if cursor == 'done' then return 0 end
  local scanned = redis.call('HSCAN', LEASE_INDEX.leased, cursor, 'COUNT', count)
  local fields = scanned[2]
  local ids, values = {}, {}
  for i = 1, #fields, 2 do
    ids[#ids + 1] = fields[i]
    values[#values + 1] = fields[i + 1]
  end
  local gone, by_owner, owners_seen = {}, {}, {}
  if #ids > 0 then
    local scores = redis.call('ZMSCORE', LEASE_INDEX.node_leases, unpack(ids))
    for i, id in ipairs(ids) do
      local _, owner = parse_lease(values[i])
      if owner and not scores[i] then
        if redis.call('ZSCORE', LEASE_INDEX.nodes, owner) then
          if not by_owner[owner] then
            by_owner[owner] = {}
            owners_seen[#owners_seen + 1] = owner
          end
          local own = by_owner[owner]
          own[#own + 1] = id
        else
          gone[#gone + 1] = id
        end
      end
    end
  end
  for _, owner in ipairs(owners_seen) do index_leases(owner, by_owner[owner]) end
  local next_cursor = scanned[1]
  if next_cursor == '0' then next_cursor = 'done' end
  redis.call('HSET', LEASE_INDEX.meta, 'lease_sweep', next_cursor)
  return return_leases(gone, nil)
end
