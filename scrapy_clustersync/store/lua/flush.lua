-- flush: apply one node's buffered writes in one atomic step, in order.
-- Dedup check+add, push, acks, releases and dead letters of a batch all land together, so a
-- parent's ack is never in Redis without the children its callback yielded before it.
-- (store/flush_script.py FlushScript builds the call and reads the answer.)
--
-- KEYS[1]  meta          hash   job epoch and entry sequence
-- KEYS[2]  queue         zset   the legacy queue: entry id -> -priority (frontier.lua)
-- KEYS[3]  entries       hash   entry id -> encoded request (leased entries, the legacy queue's)
-- KEYS[4]  deadlines     zset   leased entry id -> lease deadline (server ms)
-- KEYS[5]  leased        hash   leased entry id -> "<queue score>|<node>"
-- KEYS[6]  seen          set    raw 20-byte request fingerprints: the exact set (see "dedup")
-- KEYS[7]  stats         hash   job counters
-- KEYS[8]  dead          list   dead letters, newest first
-- KEYS[9]  last_call     hash   this node's write counter, last call id and result (see below)
-- KEYS[10] bloom         hash   Bloom filter state: layers (active count), count<i>, layout<i>,
--                               prepared<i> (chunks of layer i allocated by bloom_prepare.lua)
-- KEYS[11] failed        list   the newest failed requests (tasks.lua)
-- KEYS[12] tasks         hash   task id -> task record (tasks.lua)
-- KEYS[13] task_of       hash   entry id -> task id, for entries of a task (tasks.lua)
-- KEYS[14] scrapy_stats  hash   the Scrapy stats of every node, summed (C ops)
-- KEYS[15] node_stats    hash   "<node>\t<stat>" -> the same, per node
-- KEYS[16] frontier      prefix the frontier's key names start with this (frontier.lua)
-- KEYS[17] results       stream the job's results (results/record_format.py), XADD with auto ids
-- KEYS[18] results_meta  hash   cap, written, refused_full, full_since_ms (server ms)
-- KEYS[19] results_ids   set    "<run>\t<result id>" of the results written with no lease (W)
-- KEYS[20] node_leases   zset   leased entry id -> its node's number and lease sequence
--                               (lease_index.lua): a lease that ends here leaves it
-- KEYS[21..] chunk       string bloom chunk strings of the described layers, layer by layer,
--                               chunk by chunk
-- ARGV[1]  epoch         string the job epoch the node joined; another value = Redis lost the job
-- ARGV[2]  call_id       string unique per call; the same id again returns the stored result
-- ARGV[3]  node          string node id
-- ARGV[4]  dead_max      int    how many dead letters to keep
-- ARGV[5]  dedup_mode    string the job's dedup mode: "exact" (the set only),
--                               "set-then-blocked-bloom" or "set-then-bloom" (the set, then the
--                               Bloom filter, blocked or classic: see "dedup" below, bloom.lua)
-- ARGV[6]  writes_seen   int    the node's write counter as it last saw it; -1 = do not check
-- ARGV[7]  set_limit     int    "set-then-*": the set takes new fingerprints until it holds
--                               this many; then the filter does
-- ARGV[8]  described     int    how many Bloom layers are described next (0 for exact)
-- ARGV[9]  failed_max    int    how many failed requests to keep (0: none)
-- ARGV[10] results_max   int    the most entries the results stream may hold: a batch carrying
--                               results is refused while it holds that many (RESULTS_FULL)
-- ARGV[11..] layout      int    per described layer: bits, hashes, bits per chunk, chunks,
--                               capacity (bloom.lua LAYOUT); then the ops
-- ARGV[11 + 5 * described] ops msgpack every op of the batch in one array, each an opcode followed
--                               by its fields, every value a string (OP_FIELDS below counts the
--                               fields; store/write_ops.py has a record for each opcode):
--   P fingerprint priority blob flags(0..15) site  push unless the fingerprint was seen (flags:
--                                                  1 no dedup, 2 start request, 4 LIFO, 8
--                                                  replaces: followed by the ack (A, R, F) of
--                                                  the lease it replaces, it is queued only if
--                                                  that ack takes effect), into
--                                                  the frontier list of `site` (its download
--                                                  slot key); "" for the legacy queue
--   T fingerprint priority blob flags site task    a push of a request of task `task`
--   A id                                           ack: the request is done
--   F id url status error attempts errback(0|1) results
--                                                  ack of a request that failed, recorded in
--                                                  the failed list and in its task; results as
--                                                  R's ("" for none)
--   R id results                                   ack carrying results: appended to the results
--                                                  stream only if the ack takes effect (the
--                                                  entry is still in the job), so never twice
--   W results                                      results no lease produced (start() items):
--                                                  each appended unless results_ids holds its
--                                                  id for this run (then added there)
--   N id                                           release this node's lease back to the queue
--   D id reason                                    dead-letter a leased entry
--   X reason record                                dead-letter a write no script could apply
--   S                                              the job's start() is exhausted
--   C counts                                       add Scrapy stats: "<name>\t<int>" lines
--   K task                                         a request of task `task` the node filtered
--                                                  (counted filtered in the task's record)
-- results: msgpack (raw strings) of a flat list id, kind, d, id, kind, d, ...: the fields of one
-- results stream entry each (v is "1"); store/write_ops.py results_blob
-- Returns "pushed filtered acked released dead active_bloom_layers active_layer_entries
-- exact_entries writes" (exact_entries: fingerprints in the set).
-- Every check runs before the first write, so an error never leaves a batch half applied:
--   CLUSTERSYNC_STATE_LOST          the job's epoch is gone or changed (Redis lost the job)
--   CLUSTERSYNC_WRONG_TYPE <why>    a key of the job holds another type (see prelude.lua)
--   CLUSTERSYNC_ROLLED_BACK <w> <e> the node's write counter is behind what the node saw: Redis
--                                   came back older than it was
--   CLUSTERSYNC_BAD_OP <n> <why>    op number n is malformed; nothing was applied
--   CLUSTERSYNC_RESULTS_FULL <len> <cap> <since_ms>  the batch carries results and the results
--                                   stream holds results_max entries or more (full since
--                                   since_ms): nothing was applied; the node retries later
--   CLUSTERSYNC_BLOOM_LAYOUT <n>    fewer layers are described than the batch may need: the
--                                   caller describes <n> layers and calls again
--   CLUSTERSYNC_BLOOM_NOT_READY <i> the batch may need layer <i> (0 = the first) and not all its
--                                   chunks exist: this script never allocates a layer (that
--                                   would block Redis for the whole layer and escape maxmemory);
--                                   the caller allocates it with bloom_prepare.lua, calls again
-- Entry ids of the frontier are "<kind><the job's sequence, hex><first 8 characters of the call
-- id>": the list keeps their order, and the kind (0, or 1 for a start request, as below) tells
-- the node what its queue serves first (node/prefetch.py served_before). In the legacy queue (a push with no site), equal queue scores
-- (priorities) sort by id, so there the id is "<kind><order, 16 hex digits><the same 8>": kind 0
-- (other requests) before kind 1 (start requests, flag 2), as Scrapy's start queues; then the
-- order, the sequence for FIFO or LIFO_BASE minus it for LIFO (flag 4), so the newest comes
-- first. The call id keeps ids unique even when Redis came back older and the sequence runs
-- again.
local meta_key = KEYS[1]
local queue_key = KEYS[2]
local entries_key = KEYS[3]
local deadlines_key = KEYS[4]
local leased_key = KEYS[5]
local seen_key = KEYS[6]
local stats_key = KEYS[7]
local dead_key = KEYS[8]
local last_call_key = KEYS[9]
local bloom_key = KEYS[10]
local failed_key = KEYS[11]
local tasks_key = KEYS[12]
local task_of_key = KEYS[13]
local scrapy_stats_key = KEYS[14]
local node_stats_key = KEYS[15]
local frontier_key = KEYS[16]
local results_key = KEYS[17]
local results_meta_key = KEYS[18]
local results_ids_key = KEYS[19]
local node_leases_key = KEYS[20]
local chunk_from = 21
local epoch = ARGV[1]
local call_id = ARGV[2]
local node = ARGV[3]
local dead_max = tonumber(ARGV[4])
local dedup_mode = ARGV[5]
local writes_seen = ARGV[6]
local set_limit = tonumber(ARGV[7])
local described = tonumber(ARGV[8])
local failed_max = tonumber(ARGV[9])
local results_max = tonumber(ARGV[10])
local layout_from = 11

if redis.call('HGET', meta_key, 'epoch') ~= epoch then
  return redis.error_reply('CLUSTERSYNC_STATE_LOST job epoch missing or changed')
end
-- (the keys only some ops write are checked once the ops are read: op_keys_refusal)
local refused = wrong_type({queue_key, 'zset', entries_key, 'hash', deadlines_key, 'zset',
                            leased_key, 'hash', seen_key, 'set', stats_key, 'hash',
                            last_call_key, 'hash', bloom_key, 'hash',
                            tasks_key, 'hash', task_of_key, 'hash',
                            frontier_key .. 'classes', 'zset',
                            frontier_key .. 'sites', 'zset',
                            frontier_key .. 'requeued', 'hash', node_leases_key, 'zset'})
if refused then return refused end
local last = redis.call('HMGET', last_call_key, 'writes', 'flush_id', 'flush_result')
local writes = tonumber(last[1] or '0')
if writes < tonumber(writes_seen) then
  return redis.error_reply('CLUSTERSYNC_ROLLED_BACK ' .. writes .. ' ' .. writes_seen)
end
if last[2] == call_id then
  return last[3] .. ' ' .. writes
end

local pushed, filtered, acked, released, dead, failed = 0, 0, 0, 0, 0, 0
local t = redis.call('TIME')
local now_ms = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
task_setup(tasks_key, task_of_key, node, now_ms)
frontier_setup(frontier_key, meta_key, queue_key, entries_key)

-- ---- stored formats: the one place each is written ---------------------------------------------
-- A dead letter, newest first, dead_max of them kept (store/records.py DeadLetter parses it):
-- "<entry id>\t<node>\t<server ms>\t<reason>\n<blob>"; the id is "-" for a refused write, and a
-- newline in the reason is stored as a space, so the head stays one line.
local function dead_letter(id, reason, blob)
  local head = table.concat({id, node, tostring(now_ms), (string.gsub(reason, '\n', ' '))},
                            '\t')
  redis.call('LPUSH', dead_key, head .. '\n' .. blob)
  redis.call('LTRIM', dead_key, 0, dead_max - 1)
  dead = dead + 1
end

-- ---- the op table: opcode -> how many fields follow it (store/write_ops.py: the same counts) --
local OP_FIELDS = {P = 5, T = 6, A = 1, F = 7, R = 2, W = 1, N = 1, D = 2, X = 2, S = 0, C = 1,
                   K = 1}
-- the ops, one msgpack array after the layouts: opcode, fields, opcode, ... (every value a
-- string, as redis-py would send it: flush_script.py packed_ops). Redis reads it with its
-- cmsgpack; a server without one (fakeredis, the embedded demo's) with strings_of below.
-- The array of strings packed_ops makes, read without cmsgpack: its header, then each string
-- (msgpack's raw strings: fixstr, str 8, str 16, str 32); an error for anything else.
local function strings_of(packed)
  local byte, sub = string.byte, string.sub
  local function number_at(at, size)
    local value = 0
    for i = at, at + size - 1 do value = value * 256 + byte(packed, i) end
    return value
  end
  local head, at, count = byte(packed, 1), 2, 0
  if head and head >= 0x90 and head <= 0x9f then count = head - 0x90
  elseif head == 0xdc then count, at = number_at(2, 2), 4
  elseif head == 0xdd then count, at = number_at(2, 4), 6
  else error('not a msgpack array') end
  local sizes = {[0xd9] = 1, [0xda] = 2, [0xdb] = 4}
  local values = {}
  for i = 1, count do
    local kind, length = byte(packed, at), nil
    if kind and kind >= 0xa0 and kind <= 0xbf then length, at = kind - 0xa0, at + 1
    elseif sizes[kind] then length, at = number_at(at + 1, sizes[kind]), at + 1 + sizes[kind]
    else error('not a msgpack string') end
    values[i] = sub(packed, at, at + length - 1)
    at = at + length
  end
  return values
end
-- a msgpack array of strings (the ops; a results field) as a table; an error if it is not one
local unpack_strings = cmsgpack and cmsgpack.unpack or strings_of
local unpacked, OPS = pcall(unpack_strings, ARGV[layout_from + #LAYOUT * described] or '')
if not unpacked or type(OPS) ~= 'table' then
  return redis.error_reply('CLUSTERSYNC_BAD_OP 0 the ops are not a msgpack array of strings')
end

-- Calls visit(opcode, OPS index of the op's first field, op number) for each op of the batch,
-- in order, and returns the first value visit returns (nil if none does). An op's opcode must
-- be in OP_FIELDS unless visit returns for it: validation walks the batch first.
local function each_op(visit)
  local index, number = 1, 0
  while index <= #OPS do
    number = number + 1
    local answer = visit(OPS[index], index + 1, number)
    if answer ~= nil then return answer end
    index = index + 1 + OP_FIELDS[OPS[index]]
  end
  return nil
end

-- the leases this batch ends (acks, releases, dead letters): they leave the lease index, in one
-- ZREM per batch after the ops (the index's only writes here: lease_index.lua)
local ended_leases = {}
local function drop_lease(id)
  local removed = redis.call('ZREM', deadlines_key, id)
  redis.call('HDEL', leased_key, id)
  if removed == 1 then ended_leases[#ended_leases + 1] = id end
  return removed
end

-- ---- dedup: an exact set, a Bloom filter (lua/bloom.lua), or the set and then the filter ------
-- "set-then-*": new fingerprints go to the set until it holds set_limit (the node allocates the
-- filter's first layer ahead of that; a batch that comes first is refused as below); then to
-- the filter, while dedup_migrate.lua moves the set's fingerprints into the
-- filter a bounded batch per call. A fingerprint is in one of the two at any moment (each move
-- is one script), and while the set is not empty every check consults both.
local set_entries = 0  -- fingerprints in the exact set when the batch starts
local adding_to_set = dedup_mode == 'exact'  -- new fingerprints go to the set in this batch
-- while the filter takes the new fingerprints and the set is not empty: the fingerprints of the
-- batch's pushes the set holds (the batch does not change the set then), read in one SMISMEMBER
-- per ARG_BATCH pushes before the first push (set_members)
local in_set = {}

local function is_new(fp)
  if adding_to_set then return redis.call('SADD', seen_key, fp) == 1 end
  if in_set[fp] then return false end
  return bloom_add(fp)
end

local function set_members()
  if adding_to_set or set_entries == 0 then return end
  local fps = {}
  each_op(function(op, f)
    if (op == 'P' or op == 'T') and tonumber(OPS[f + 3]) % 2 == 0 then fps[#fps + 1] = OPS[f] end
  end)
  in_batches(#fps, function(first, last)
    local found = redis.call('SMISMEMBER', seen_key, unpack(fps, first, last))
    for j = first, last do
      if found[j - first + 1] == 1 then in_set[fps[j]] = true end
    end
  end)
end

-- an error reply if the batch needs a Bloom layer not described or allocated; else nil
local function prepare_dedup()
  if dedup_mode == 'exact' then return nil end
  bloom_setup(bloom_key, ARGV, layout_from, described, KEYS, chunk_from, dedup_mode)
  set_entries = redis.call('SCARD', seen_key)
  adding_to_set = BLOOM.active == 0 and set_entries < set_limit
  if adding_to_set then return nil end
  local pushes = 0
  each_op(function(op) if op == 'P' or op == 'T' then pushes = pushes + 1 end end)
  return bloom_refusal(pushes)
end

-- ---- results: the stream of items, error records and pages ------------------------------------
-- ops that carry results, and where among their fields (0 = the first)
local RESULTS_FIELD = {F = 6, R = 1, W = 0}
local RESULT_KINDS = {item = true, error = true, page = true}
local results_of = {}  -- OPS index of a results field -> its decoded list (validation fills it)
local results_carried = 0
local written = 0

-- nil if OPS[at] is a results list (kept in results_of), else why not
local function read_results(at)
  if OPS[at] == '' then return nil end
  local ok, list = pcall(unpack_strings, OPS[at])
  if not ok or type(list) ~= 'table' or #list % 3 ~= 0 then
    return 'results must be a msgpack list of id, kind, d triples'
  end
  for i = 1, #list, 3 do
    if type(list[i]) ~= 'string' or list[i] == '' or not RESULT_KINDS[list[i + 1]]
        or type(list[i + 2]) ~= 'string' then
      return 'result ' .. ((i + 2) / 3) .. ' needs an id, a kind (item, error, page) and d'
    end
  end
  results_of[at] = list
  results_carried = results_carried + #list / 3
  return nil
end

local function append_result(list, i)
  redis.call('XADD', results_key, '*', 'v', '1', 'k', list[i + 1], 'id', list[i], 'd',
             list[i + 2])
  written = written + 1
end

-- appends the results at OPS[at] (if any), each once per run when `once`
local function append_results(at, once)
  local list = results_of[at]
  if not list then return end
  local run = once and (redis.call('HGET', meta_key, 'run') or '0')
  for i = 1, #list, 3 do
    if not once or redis.call('SADD', results_ids_key, run .. '\t' .. list[i]) == 1 then
      append_result(list, i)
    end
  end
end

-- an error reply if the batch carries results and the stream is full (or a results key holds
-- another type); else nil
local function results_refusal()
  if results_carried == 0 then return nil end
  local refused = wrong_type({results_key, 'stream', results_meta_key, 'hash',
                              results_ids_key, 'set'})
  if refused then return refused end
  local length = redis.call('XLEN', results_key)
  if length < results_max then return nil end
  redis.call('HSETNX', results_meta_key, 'full_since_ms', now_ms)
  redis.call('HINCRBY', results_meta_key, 'refused_full', 1)
  redis.call('HSET', results_meta_key, 'cap', results_max)
  local since = redis.call('HGET', results_meta_key, 'full_since_ms')
  return redis.error_reply('CLUSTERSYNC_RESULTS_FULL ' .. length .. ' ' .. results_max .. ' '
                           .. since)
end

-- after the ops: what the batch wrote, and the stream is not full (it took a batch)
local function results_finish()
  if results_carried == 0 then return end
  redis.call('HSET', results_meta_key, 'cap', results_max)
  redis.call('HDEL', results_meta_key, 'full_since_ms')
  if written > 0 then redis.call('HINCRBY', results_meta_key, 'written', written) end
end

-- ---- validation: every op, before anything is written -----------------------------------------
local function bad_op(number, why)
  return redis.error_reply('CLUSTERSYNC_BAD_OP ' .. number .. ' ' .. why)
end
-- the flags, priorities and sites of the batch's pushes found good, each checked once per call
-- (a batch's pushes mostly share them): value -> true
local good_flags, good_prios, good_sites = {}, {}, {}
local function check_push(op, f, number)
  local flags_text, prio_text, site = OPS[f + 3], OPS[f + 1], OPS[f + 4]
  if not good_flags[flags_text] then
    local flags = tonumber(flags_text)
    if not flags or flags ~= math.floor(flags) or flags < 0 or flags > 15 then
      return bad_op(number, 'flags must be an integer from 0 to 15')
    end
    good_flags[flags_text] = true
  end
  if #OPS[f] ~= 20 and tonumber(flags_text) % 2 == 0 then
    return bad_op(number, 'fingerprint of ' .. #OPS[f] .. ' bytes, not 20')
  end
  if not good_prios[prio_text] then
    local prio = tonumber(prio_text)
    if not prio or prio ~= prio or prio == math.huge or prio == -math.huge then
      return bad_op(number, 'priority is not a finite number')
    end
    good_prios[prio_text] = true
  end
  if op == 'T' and OPS[f + 5] == '' then return bad_op(number, 'empty task id') end
  if not good_sites[site] then
    if string.find(site, '[\t\n]') then
      return bad_op(number, 'a site holds no tab and no newline')
    end
    good_sites[site] = true
  end
  return nil
end
local ops_present = {}  -- opcode -> true for each opcode of the batch (validation fills it)
local function check_op(op, f, number)
  local count = OP_FIELDS[op]
  if not count then return bad_op(number, 'unknown opcode ' .. tostring(op)) end
  ops_present[op] = true
  if f + count - 1 > #OPS then return bad_op(number, 'missing fields') end
  if op == 'P' or op == 'T' then
    local bad = check_push(op, f, number)
    if bad then return bad end
  elseif op == 'K' and OPS[f] == '' then
    return bad_op(number, 'empty task id')
  elseif (op == 'A' or op == 'F' or op == 'R' or op == 'N' or op == 'D') and OPS[f] == '' then
    return bad_op(number, 'empty entry id')
  end
  local results_at = RESULTS_FIELD[op]
  if results_at then
    local why = read_results(f + results_at)
    if why then return bad_op(number, why) end
  end
  if op == 'F' and not (tonumber(OPS[f + 2]) and tonumber(OPS[f + 4])) then
    return bad_op(number, 'status and attempts must be numbers')
  end
  if op == 'C' then
    -- every line checked here: HINCRBY failing half way would leave the batch half applied
    for line in string.gmatch(OPS[f], '[^\n]+') do
      if not string.match(line, '^[^\t]+\t%-?%d%d?%d?%d?%d?%d?%d?%d?%d?%d?%d?%d?%d?%d?%d?$') then
        return bad_op(number, 'counts must be "<name><tab><integer of at most 15 digits>" lines')
      end
    end
  end
  return nil
end
local invalid = each_op(check_op)
if invalid then return invalid end

-- an error reply if a key that only some ops write, and the batch has such an op, holds another
-- type (as the check above, still before the first write); else nil
local function op_keys_refusal()
  local expected = {}
  local function expect(key, kind)
    expected[#expected + 1] = key
    expected[#expected + 1] = kind
  end
  if ops_present.D or ops_present.X then expect(dead_key, 'list') end
  if ops_present.F then expect(failed_key, 'list') end
  if ops_present.C then
    expect(scrapy_stats_key, 'hash')
    expect(node_stats_key, 'hash')
  end
  return wrong_type(expected)
end
local refused_by_ops = op_keys_refusal()
if refused_by_ops then return refused_by_ops end

local unready = prepare_dedup()
if unready then return unready end
set_members()
local full = results_refusal()
if full then return full end

-- ---- ops --------------------------------------------------------------------------------------
local id_tail = string.sub(call_id, 1, 8)
-- the job's entry sequence, read once and written back once per call
local seq_next = nil
local function next_seq()
  seq_next = (seq_next or tonumber(redis.call('HGET', meta_key, 'seq') or '0')) + 1
  return seq_next
end
local LIFO_BASE = 9007199254740992  -- 2^53: every sequence number below it is exact
local function legacy_id(flags, seq)
  local kind = math.floor(flags / 2) % 2
  local order = seq
  if math.floor(flags / 4) % 2 == 1 then order = LIFO_BASE - seq end
  return kind .. string.format('%016x', order) .. id_tail
end
-- The entry `id` is done (acked; `failure`: what failed, or nil), if it still is in the job:
-- a lease that was reclaimed sits in the queue again; the work is done, so it goes there too.
-- A repeated or late ack finds nothing and changes nothing.
-- The acks of the batch whose entries are leased end their leases first, a few commands for
-- them all (settle_leased_acks): `held` marks those, each until its ack op comes.
local held = {}
local function settle(id, failure)
  if held[id] then
    held[id] = nil
  elseif drop_lease(id) == 0 and redis.call('ZREM', queue_key, id) == 0
      and not frontier_settle_queued(id) then
    return false
  else
    redis.call('HDEL', entries_key, id)
  end
  acked = acked + 1
  local task = task_settled(id, failure)
  if failure then
    failed = failed + 1
    failed_record(failed_key, failed_max, id, task, failure)
  end
  return true
end

-- what a push's flags and priority, as sent, mean: read once per distinct value of the call
-- (a batch's pushes mostly share them), not once per push
local push_forms = {}  -- flags -> {flags = number, kind = 0 or 1, lifo = bool, replaces = bool}
local function push_form(text)
  local form = push_forms[text]
  if not form then
    local flags = tonumber(text)
    form = {flags = flags, kind = math.floor(flags / 2) % 2, lifo = math.floor(flags / 4) % 2 == 1,
            replaces = math.floor(flags / 8) % 2 == 1}
    push_forms[text] = form
  end
  return form
end
local class_priorities = {}  -- priority -> its text in the frontier's class names
local function class_priority(text)
  local prio = class_priorities[text]
  if not prio then
    prio = tostring(tonumber(text))
    class_priorities[text] = prio
  end
  return prio
end

-- push op `op` (P or T) whose fields start at OPS[f]; `dropped`: counted filtered, not queued
local function push(op, f, dropped)
  local fp, prio, blob, form = OPS[f], OPS[f + 1], OPS[f + 2], push_form(OPS[f + 3])
  local site, flags = OPS[f + 4], form.flags
  local id = nil
  if not dropped and (flags % 2 == 1 or is_new(fp)) then
    local seq = next_seq()
    if site == '' then
      id = legacy_id(flags, seq)
      redis.call('HSET', entries_key, id, blob)
      redis.call('ZADD', queue_key, -tonumber(prio), id)
    else
      local kind = form.kind
      id = kind .. string.format('%x', seq) .. id_tail
      frontier_queue(id, blob, kind, class_priority(prio), site, form.lifo)
    end
    pushed = pushed + 1
  else
    filtered = filtered + 1
  end
  if op == 'T' then task_pushed(OPS[f + 5], id) end
end
-- A replacement (flag 8: a redirect or retry of a leased request) waits for the ack right after
-- it, and is pushed only if that ack takes effect: a node whose lease ended and whose request
-- another node crawled and acked meanwhile must not have the request crawled again (its results
-- would be written twice). With no ack after it (a batch cut there) it is pushed as any push.
local ACKS = {A = true, R = true, F = true}
local replacement = nil  -- OPS index of the first field of the replacement waiting, or nil
local function acked_with_replacement(took)
  if replacement then
    push(OPS[replacement - 1], replacement, not took)
    replacement = nil
  end
  return took
end
local function apply_op(op, f)
  if op == 'P' or op == 'T' then
    if push_form(OPS[f + 3]).replaces and ACKS[OPS[f + OP_FIELDS[op]]] then
      replacement = f
    else
      push(op, f, false)
    end
  elseif op == 'A' then
    acked_with_replacement(settle(OPS[f], nil))
  elseif op == 'R' then
    if acked_with_replacement(settle(OPS[f], nil)) then append_results(f + 1, false) end
  elseif op == 'F' then
    local failure = failure_of(OPS[f + 1], OPS[f + 2], OPS[f + 3], OPS[f + 4], OPS[f + 5])
    if acked_with_replacement(settle(OPS[f], failure)) then
      append_results(f + 6, false)
    end
  elseif op == 'W' then
    append_results(f, true)
  elseif op == 'N' then
    local id = OPS[f]
    local score, owner, where = parse_lease(redis.call('HGET', leased_key, id))
    if owner == node then
      drop_lease(id)
      frontier_return(id, score, where, true)
      released = released + 1
    end
  elseif op == 'D' then
    local id = OPS[f]
    local blob = redis.call('HGET', entries_key, id)
    -- an entry queued again in the frontier (its lease ended) is left there: who leases it next
    -- crawls it or dead-letters it with its request
    if blob then dead_letter(id, OPS[f + 1], blob) end
    if drop_lease(id) + redis.call('ZREM', queue_key, id) > 0 then
      task_settled(id, {node = node, at_ms = now_ms, error = 'dead letter: ' .. OPS[f + 1]})
    end
    redis.call('HDEL', entries_key, id)
  elseif op == 'X' then
    dead_letter('-', OPS[f], OPS[f + 1])
  elseif op == 'S' then
    redis.call('HSET', meta_key, 'start_done', node)
  elseif op == 'K' then
    task_pushed(OPS[f], nil)  -- filtered on the node: counted as a push dedup dropped
  elseif op == 'C' then
    for name, value in string.gmatch(OPS[f], '([^\t\n]+)\t(%-?%d+)') do
      redis.call('HINCRBY', scrapy_stats_key, name, value)
      redis.call('HINCRBY', node_stats_key, node .. '\t' .. name, value)
    end
  end
end
-- The entries the batch acks (A, F, R) that are leased, unless another op of the batch names them
-- too (N, D: those go one by one, in order), lose their lease and request in three commands.
local function settle_leased_acks()
  local acks, named = {}, {}
  each_op(function(op, f)
    if op == 'A' or op == 'F' or op == 'R' then acks[#acks + 1] = OPS[f]
    elseif op == 'N' or op == 'D' then named[OPS[f]] = true end
  end)
  if #acks < 2 then return end
  local ids = {}
  in_batches(#acks, function(first, last)
    local scores = redis.call('ZMSCORE', deadlines_key, unpack(acks, first, last))
    for j = first, last do
      local id = acks[j]
      if scores[j - first + 1] and not named[id] and not held[id] then
        held[id] = true
        ids[#ids + 1] = id
      end
    end
  end)
  send_in_batches('ZREM', deadlines_key, ids)
  send_in_batches('HDEL', leased_key, ids)
  send_in_batches('HDEL', entries_key, ids)
  for _, id in ipairs(ids) do ended_leases[#ended_leases + 1] = id end
end
settle_leased_acks()
each_op(apply_op)
send_in_batches('ZREM', node_leases_key, ended_leases)
if seq_next then redis.call('HSET', meta_key, 'seq', seq_next) end
frontier_finish()
results_finish()

local counters = {pushed = pushed, filtered = filtered, acked = acked, released = released,
                  dead = dead, failed = failed}
for name, value in pairs(counters) do
  if value > 0 then
    redis.call('HINCRBY', stats_key, name, value)
  end
end
local exact_entries = redis.call('SCARD', seen_key)
local result = table.concat({pushed, filtered, acked, released, dead, BLOOM.active,
                             bloom_finish(), exact_entries}, ' ')
redis.call('HSET', last_call_key, 'writes', writes + 1, 'flush_id', call_id, 'flush_result', result)
return result .. ' ' .. (writes + 1)
