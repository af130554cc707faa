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
-- KEYS[9]  last_call  hash   this node's write counter, last call id and result (see below)
-- KEYS[10] bloom      hash   Bloom filter state: layers (active count), count<i>, layout<i>,
--                           prepared<i> (chunks of layer i allocated by bloom_prepare.lua)
-- KEYS[11..] bloom chunk strings of the described layers, layer by layer, chunk by chunk
-- ARGV[1]  epoch      string the job epoch the node joined; another value = Redis lost the job
-- ARGV[2]  call_id    string unique per call; the same id again returns the stored result
-- ARGV[3]  node       string node id
-- ARGV[4]  dead_max   int    how many dead letters to keep
-- ARGV[5]  dedup      string "exact" (set of fingerprints) or "bloom"
-- ARGV[6]  writes     int    the node's write counter as it last saw it; -1 = do not check
-- ARGV[7]  described  int    how many Bloom layers are described next (0 for exact)
-- ARGV[8..] per described layer: bits, hashes, bits per chunk, chunks, capacity (LAYOUT below)
-- ARGV[8 + 5*described ..] ops, each an opcode followed by its fields (OP_FIELDS below counts
--                         them; store/ops.py has a record for each opcode):
--   P fingerprint priority blob flags(0..7)        push unless the fingerprint was seen (flags:
--                                                  1 no dedup, 2 start request, 4 LIFO)
--   A id                                           ack: the request is done
--   N id                                           release this node's lease back to the queue
--   D id reason                                    dead-letter a leased entry
--   X reason record                                dead-letter a write no script could apply
--   S                                              the job's start() is exhausted
-- Returns "pushed filtered acked released dead active_bloom_layers active_layer_entries writes".
-- Every check runs before the first write, so an error never leaves a batch half applied:
--   CLUSTERSYNC_STATE_LOST          the job's epoch is gone or changed (Redis lost the job)
--   CLUSTERSYNC_WRONG_TYPE <why>    a key of the job holds another type (see prelude.lua)
--   CLUSTERSYNC_ROLLED_BACK <w> <e> the node's write counter is behind what the node saw: Redis
--                                   came back older than it was
--   CLUSTERSYNC_BAD_OP <n> <why>    op number n is malformed; nothing was applied
--   CLUSTERSYNC_BLOOM_LAYOUT <n>    fewer layers are described than the batch may need: the
--                                   caller describes <n> layers and calls again
--   CLUSTERSYNC_BLOOM_NOT_READY <i> the batch may need layer <i> (0 = the first) and not all its
--                                   chunks exist: this script never allocates a layer (that
--                                   would block Redis for the whole layer and escape maxmemory);
--                                   the caller allocates it with bloom_prepare.lua, calls again
-- Entry ids are "<kind><order, 16 hex digits><first 8 characters of the call id>". Equal queue
-- scores (priorities) sort by id, so the id is Scrapy's order within a priority: kind 0 (other
-- requests) before kind 1 (start requests, flag 2), as Scrapy's start queues; then the order,
-- the job's sequence for FIFO or LIFO_BASE minus it for LIFO (flag 4), so the newest comes
-- first. The call id keeps ids unique even when Redis came back older and the sequence runs
-- again.
if redis.call('HGET', KEYS[1], 'epoch') ~= ARGV[1] then
  return redis.error_reply('CLUSTERSYNC_STATE_LOST job epoch missing or changed')
end
local refused = wrong_type({{KEYS[2], 'zset'}, {KEYS[3], 'hash'}, {KEYS[4], 'zset'},
                            {KEYS[5], 'hash'}, {KEYS[6], 'set'}, {KEYS[7], 'hash'},
                            {KEYS[8], 'list'}, {KEYS[9], 'hash'}, {KEYS[10], 'hash'}})
if refused then return refused end
local last = redis.call('HMGET', KEYS[9], 'writes', 'flush_id', 'flush_result')
local writes = tonumber(last[1] or '0')
if writes < tonumber(ARGV[6]) then
  return redis.error_reply('CLUSTERSYNC_ROLLED_BACK ' .. writes .. ' ' .. ARGV[6])
end
if last[2] == ARGV[2] then
  return last[3] .. ' ' .. writes
end

local pushed, filtered, acked, released, dead = 0, 0, 0, 0, 0
local bloom = ARGV[5] == 'bloom'
local described = tonumber(ARGV[7])
local t = redis.call('TIME')
local now_ms = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)

-- ---- stored formats: the one place each is written ---------------------------------------------
-- A Bloom layer's layout, in the field order of store/formats.py BloomLayout: as ARGV describes
-- each layer, and as bloom field layout<i> stores it (the numbers, space-separated).
local LAYOUT = {'bits', 'hashes', 'chunk_bits', 'chunks', 'capacity'}
local function layout_from_argv(base)
  local layer = {}
  for j, name in ipairs(LAYOUT) do layer[name] = tonumber(ARGV[base + j - 1]) end
  return layer
end
local function layout_text(layer)
  local values = {}
  for j, name in ipairs(LAYOUT) do values[j] = layer[name] end
  return table.concat(values, ' ')
end

-- A dead letter, newest first, ARGV[4] of them kept (store/formats.py DeadLetter parses it):
-- "<entry id>\t<node>\t<server ms>\t<reason>\n<blob>"; the id is "-" for a refused write, and a
-- newline in the reason is stored as a space, so the head stays one line.
local function dead_letter(id, reason, blob)
  local head = table.concat({id, ARGV[3], tostring(now_ms), (string.gsub(reason, '\n', ' '))},
                            '\t')
  redis.call('LPUSH', KEYS[8], head .. '\n' .. blob)
  redis.call('LTRIM', KEYS[8], 0, tonumber(ARGV[4]) - 1)
  dead = dead + 1
end

-- ---- the op table: opcode -> how many fields follow it (store/ops.py: the same counts) --------
local OP_FIELDS = {P = 4, A = 1, N = 1, D = 2, X = 2, S = 0}
local first_op = 8 + #LAYOUT * described

-- Calls visit(opcode, ARGV index of the op's first field, op number) for each op of the batch,
-- in order, and returns the first value visit returns (nil if none does). An op's opcode must
-- be in OP_FIELDS unless visit returns for it: validation walks the batch first.
local function each_op(visit)
  local index, number = first_op, 0
  while index <= #ARGV do
    number = number + 1
    local answer = visit(ARGV[index], index + 1, number)
    if answer ~= nil then return answer end
    index = index + 1 + OP_FIELDS[ARGV[index]]
  end
  return nil
end

local function drop_lease(id)
  local removed = redis.call('ZREM', KEYS[4], id)
  redis.call('HDEL', KEYS[5], id)
  return removed
end

-- ---- Bloom filter ----------------------------------------------------------------------------
local layers = {}
local active, needed = 0, 0
local function load_layers()
  local key = 11
  for l = 1, described do
    layers[l] = layout_from_argv(8 + #LAYOUT * (l - 1))
    layers[l].first_key = key
    key = key + layers[l].chunks
  end
  active = tonumber(redis.call('HGET', KEYS[10], 'layers') or '0')
  -- every layer this batch may fill must be described (pushes <= room left in the layers)
  local pushes = 0
  each_op(function(op) if op == 'P' then pushes = pushes + 1 end end)
  local room = 0
  needed = math.max(active, 1)
  for l = 1, math.max(active, 1) do
    room = room + (layers[l] and layers[l].capacity or 0)
       - tonumber(redis.call('HGET', KEYS[10], 'count' .. (l - 1)) or '0')
  end
  while room < pushes do
    needed = needed + 1
    room = room + (layers[needed] and layers[needed].capacity or math.huge)
  end
  if described < needed then
    return needed
  end
  return 0
end

-- the first layer the batch may need whose chunks are not all allocated yet, or nil
local function unprepared_layer()
  for l = active + 1, needed do
    if tonumber(redis.call('HGET', KEYS[10], 'prepared' .. (l - 1)) or '0') < layers[l].chunks then
      return l - 1
    end
  end
  return nil
end

-- the next layer's chunks exist (unprepared_layer() said so): taking it into use writes no bits
local function activate_layer()
  local layer = layers[active + 1]
  redis.call('HSET', KEYS[10], 'layers', active + 1, 'count' .. active, 0,
             'layout' .. active, layout_text(layer))
  active = active + 1
end

-- triple hashing (h1 + i*h2 + i*i*h3): with only two hashes, two fingerprints that agree on
-- h1 and h2 modulo a small layer's size agree on every bit, which puts a floor of about
-- entries/bits^2 under the false-positive rate. 40, 40 and 32 bits of the fingerprint; every
-- sum stays below 2^53 for up to 90 hash functions, so doubles compute it exactly.
local function hash_triple(fp)
  local b = {string.byte(fp, 1, 14)}
  local h1 = (((b[1] * 256 + b[2]) * 256 + b[3]) * 256 + b[4]) * 256 + b[5]
  local h2 = (((b[6] * 256 + b[7]) * 256 + b[8]) * 256 + b[9]) * 256 + b[10]
  local h3 = ((b[11] * 256 + b[12]) * 256 + b[13]) * 256 + b[14]
  if h2 % 2 == 0 then h2 = h2 + 1 end
  return h1, h2, h3
end

local function bit_of(layer, h1, h2, h3, i)
  local pos = math.fmod(h1 + i * h2 + i * i * h3, layer.bits)
  local chunk = math.floor(pos / layer.chunk_bits)
  return KEYS[layer.first_key + chunk], pos - chunk * layer.chunk_bits
end

local function in_layer(layer, h1, h2, h3)
  for i = 0, layer.hashes - 1 do
    local key, offset = bit_of(layer, h1, h2, h3, i)
    if redis.call('GETBIT', key, offset) == 0 then return false end
  end
  return true
end

-- true if the fingerprint was new (and is now recorded)
local function bloom_add(fp)
  local h1, h2, h3 = hash_triple(fp)
  for l = 1, active do
    if in_layer(layers[l], h1, h2, h3) then return false end
  end
  local count_field = 'count' .. (active - 1)
  if tonumber(redis.call('HGET', KEYS[10], count_field)) >= layers[active].capacity then
    activate_layer()
    count_field = 'count' .. (active - 1)
  end
  local layer = layers[active]
  for i = 0, layer.hashes - 1 do
    local key, offset = bit_of(layer, h1, h2, h3, i)
    redis.call('SETBIT', key, offset, 1)
  end
  redis.call('HINCRBY', KEYS[10], count_field, 1)
  return true
end

local function is_new(fp)
  if bloom then return bloom_add(fp) end
  return redis.call('SADD', KEYS[6], fp) == 1
end

-- ---- validation: every op, before anything is written -----------------------------------------
local function bad_op(number, why)
  return redis.error_reply('CLUSTERSYNC_BAD_OP ' .. number .. ' ' .. why)
end
local function check_op(op, f, number)
  local count = OP_FIELDS[op]
  if not count then return bad_op(number, 'unknown opcode ' .. tostring(op)) end
  if f + count - 1 > #ARGV then return bad_op(number, 'missing fields') end
  if op == 'P' then
    local prio = tonumber(ARGV[f + 1])
    local flags = tonumber(ARGV[f + 3])
    if not flags or flags ~= math.floor(flags) or flags < 0 or flags > 7 then
      return bad_op(number, 'flags must be an integer from 0 to 7')
    end
    if flags % 2 == 0 and #ARGV[f] ~= 20 then
      return bad_op(number, 'fingerprint of ' .. #ARGV[f] .. ' bytes, not 20')
    end
    if not prio or prio ~= prio or prio == math.huge or prio == -math.huge then
      return bad_op(number, 'priority is not a finite number')
    end
  elseif (op == 'A' or op == 'N' or op == 'D') and ARGV[f] == '' then
    return bad_op(number, 'empty entry id')
  end
  return nil
end
local invalid = each_op(check_op)
if invalid then return invalid end

if bloom then
  local wanted = load_layers()
  if wanted > 0 then
    return redis.error_reply('CLUSTERSYNC_BLOOM_LAYOUT ' .. wanted)
  end
  local unready = unprepared_layer()
  if unready then
    return redis.error_reply('CLUSTERSYNC_BLOOM_NOT_READY ' .. unready)
  end
  if active == 0 then activate_layer() end
end

local function active_layer_entries()
  if not bloom then return 0 end
  return tonumber(redis.call('HGET', KEYS[10], 'count' .. (active - 1)) or '0')
end

-- ---- ops --------------------------------------------------------------------------------------
local id_tail = string.sub(ARGV[2], 1, 8)
local LIFO_BASE = 9007199254740992  -- 2^53: every sequence number below it is exact
local function entry_id(flags, seq)
  local kind = math.floor(flags / 2) % 2
  local order = seq
  if math.floor(flags / 4) % 2 == 1 then order = LIFO_BASE - seq end
  return kind .. string.format('%016x', order) .. id_tail
end
local function apply_op(op, f)
  if op == 'P' then
    local fp, prio, blob, flags = ARGV[f], ARGV[f + 1], ARGV[f + 2], tonumber(ARGV[f + 3])
    if flags % 2 == 1 or is_new(fp) then
      local id = entry_id(flags, redis.call('HINCRBY', KEYS[1], 'seq', 1))
      redis.call('HSET', KEYS[3], id, blob)
      redis.call('ZADD', KEYS[2], -tonumber(prio), id)
      pushed = pushed + 1
    else
      filtered = filtered + 1
    end
  elseif op == 'A' then
    local id = ARGV[f]
    -- a lease that was reclaimed sits in the queue again: the work is done, so drop it there too
    if drop_lease(id) + redis.call('ZREM', KEYS[2], id) > 0 then
      redis.call('HDEL', KEYS[3], id)
      acked = acked + 1
    end
  elseif op == 'N' then
    local id = ARGV[f]
    local score, owner = parse_lease(redis.call('HGET', KEYS[5], id))
    if owner == ARGV[3] then
      drop_lease(id)
      redis.call('ZADD', KEYS[2], score, id)
      released = released + 1
    end
  elseif op == 'D' then
    local id = ARGV[f]
    dead_letter(id, ARGV[f + 1], redis.call('HGET', KEYS[3], id) or '')
    drop_lease(id)
    redis.call('ZREM', KEYS[2], id)
    redis.call('HDEL', KEYS[3], id)
  elseif op == 'X' then
    dead_letter('-', ARGV[f], ARGV[f + 1])
  elseif op == 'S' then
    redis.call('HSET', KEYS[1], 'start_done', ARGV[3])
  end
end
each_op(apply_op)

local counters = {pushed = pushed, filtered = filtered, acked = acked, released = released, dead = dead}
for name, value in pairs(counters) do
  if value > 0 then
    redis.call('HINCRBY', KEYS[7], name, value)
  end
end
local result = table.concat({pushed, filtered, acked, released, dead, active,
                             active_layer_entries()}, ' ')
redis.call('HSET', KEYS[9], 'writes', writes + 1, 'flush_id', ARGV[2], 'flush_result', result)
redis.call('PEXPIRE', KEYS[9], 86400000)
return result .. ' ' .. (writes + 1)
