-- bloom: the job's scalable Bloom filter, prepended (after prelude.lua) to the scripts that read
-- or fill it: flush.lua and dedup_migrate.lua (store/script_base.py load_lua).
--
-- The calling script describes the filter's layers in its ARGV and passes their chunk strings in
-- its KEYS, and calls bloom_setup(state key, argv, index of the first layout in argv, described
-- layers, keys, index of the first chunk in keys, job's dedup mode) before anything else here,
-- and bloom_finish() once after its last bloom_add(); no function here reads KEYS or ARGV. The job's dedup mode says how its layers are laid
-- out (store/bloom_layout.py): "set-then-blocked-bloom", a fingerprint's bits in one 512-bit
-- block of each layer; "set-then-bloom" (jobs made before), its bits over the whole layer.
-- The bloom hash (state key) holds:
-- layers (active count), count<i>, layout<i>, prepared<i> (chunks of layer i that exist, made by
-- bloom_prepare.lua). No function here allocates a layer: bloom_refusal() refuses a call that
-- may need one that is not described or not fully allocated, before the script writes anything.
local BLOOM = {layers = {}, active = 0, needed = 0, blocked = false}
local BLOCKED_MODE = 'set-then-blocked-bloom'
local BLOCK_BITS, BLOCK_BYTES = 512, 64

-- A Bloom layer's layout, in the field order of store/records.py BloomLayout: as ARGV describes
-- each layer, and as bloom field layout<i> stores it (the numbers, space-separated).
local LAYOUT = {'bits', 'hashes', 'chunk_bits', 'chunks', 'capacity'}
local function layout_from_argv(argv, base)
  local layer = {}
  for j, name in ipairs(LAYOUT) do layer[name] = tonumber(argv[base + j - 1]) end
  return layer
end
local function layout_text(layer)
  local values = {}
  for j, name in ipairs(LAYOUT) do values[j] = layer[name] end
  return table.concat(values, ' ')
end

local function bloom_setup(state_key, argv, layout_base, described, keys, first_chunk_key,
                           dedup_mode)
  BLOOM.key, BLOOM.described, BLOOM.keys = state_key, described, keys
  BLOOM.blocked = dedup_mode == BLOCKED_MODE
  local key = first_chunk_key
  for l = 1, described do
    local layer = layout_from_argv(argv, layout_base + #LAYOUT * (l - 1))
    layer.first_key = key
    layer.blocks, layer.chunk_blocks = layer.bits / BLOCK_BITS, layer.chunk_bits / BLOCK_BITS
    key = key + layer.chunks
    BLOOM.layers[l] = layer
  end
  BLOOM.active = tonumber(redis.call('HGET', state_key, 'layers') or '0')
end

local function bloom_count(l)
  return tonumber(redis.call('HGET', BLOOM.key, 'count' .. (l - 1)) or '0')
end

-- entries in the last layer in use, read once per call and then kept (BLOOM.count); what the
-- call adds to them (BLOOM.added) goes into the bloom hash once, when the layer is no longer
-- the last (activate_layer) or the call ends (bloom_finish)
local function active_count()
  if not BLOOM.count then BLOOM.count, BLOOM.added = bloom_count(BLOOM.active), 0 end
  return BLOOM.count
end

local function save_added()
  if (BLOOM.added or 0) > 0 then
    redis.call('HINCRBY', BLOOM.key, 'count' .. (BLOOM.active - 1), BLOOM.added)
    BLOOM.added = 0
  end
end

-- how many layers up to `adds` new entries may need (every one of them must be described)
local function layers_needed(adds)
  local layers, active = BLOOM.layers, BLOOM.active
  local room, needed = 0, math.max(active, 1)
  for l = 1, needed do
    room = room + (layers[l] and layers[l].capacity or 0) - bloom_count(l)
  end
  while room < adds do
    needed = needed + 1
    room = room + (layers[needed] and layers[needed].capacity or math.huge)
  end
  return needed
end

-- the first layer (0 = the first) the call may need whose chunks are not all allocated, or nil
local function unprepared_layer()
  for l = BLOOM.active + 1, BLOOM.needed do
    local prepared = tonumber(redis.call('HGET', BLOOM.key, 'prepared' .. (l - 1)) or '0')
    if prepared < BLOOM.layers[l].chunks then return l - 1 end
  end
  return nil
end

-- the next layer's chunks exist (unprepared_layer() said so): taking it into use writes no bits
local function activate_layer()
  save_added()
  local active = BLOOM.active
  redis.call('HSET', BLOOM.key, 'layers', active + 1, 'count' .. active, 0,
             'layout' .. active, layout_text(BLOOM.layers[active + 1]))
  BLOOM.active, BLOOM.count, BLOOM.added = active + 1, 0, 0
end

-- An error reply if up to `adds` new entries may need a layer that is not described
-- (CLUSTERSYNC_BLOOM_LAYOUT <layers to describe>) or not allocated (CLUSTERSYNC_BLOOM_NOT_READY
-- <layer>), else nil; then the first layer is in use.
local function bloom_refusal(adds)
  BLOOM.needed = layers_needed(adds)
  if BLOOM.described < BLOOM.needed then
    return redis.error_reply('CLUSTERSYNC_BLOOM_LAYOUT ' .. BLOOM.needed)
  end
  local unready = unprepared_layer()
  if unready then
    return redis.error_reply('CLUSTERSYNC_BLOOM_NOT_READY ' .. unready)
  end
  if BLOOM.active == 0 then activate_layer() end
  return nil
end

-- ---- classic layers: a fingerprint's bits over the whole layer, one GETBIT/SETBIT each --------
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
  return {h1 = h1, h2 = h2, h3 = h3}
end

local function bit_of(layer, probe, i)
  local pos = math.fmod(probe.h1 + i * probe.h2 + i * i * probe.h3, layer.bits)
  local chunk = math.floor(pos / layer.chunk_bits)
  return BLOOM.keys[layer.first_key + chunk], pos - chunk * layer.chunk_bits
end

local function classic_contains(layer, probe)
  for i = 0, layer.hashes - 1 do
    local key, offset = bit_of(layer, probe, i)
    if redis.call('GETBIT', key, offset) == 0 then return false end
  end
  return true
end

local function classic_insert(layer, probe)
  for i = 0, layer.hashes - 1 do
    local key, offset = bit_of(layer, probe, i)
    redis.call('SETBIT', key, offset, 1)
  end
end

-- ---- blocked layers: a fingerprint's bits in one 512-bit block, one GETRANGE/SETRANGE each ----
-- The block: 48 bits of the fingerprint modulo the layer's blocks. The bits in the block: the
-- top 9 bits of the states of a Park-Miller generator (x -> 48271x mod 2^31-1, exact in
-- doubles) seeded with the next 48 bits, a bit already taken moving to the next one, so that a
-- fingerprint's bits are distinct. A generator rather than an arithmetic sequence: sequences
-- (x + j*y + j*j*z mod 512) put fingerprints that share y and z on shifted copies of one
-- pattern, which measurably raised the false-positive rate below 1e-4. Bits count from the
-- high bit of each byte, as SETBIT's do. The bits are made as a check needs them: a new URL's
-- check of a layer stops at its first bit that is 0, after two or so.
local byte, char = string.byte, string.char
local unpack = unpack or table.unpack  -- Lua 5.1 (Redis) or later (fakeredis)
local BIT_WEIGHT = {128, 64, 32, 16, 8, 4, 2, 1}
local MINSTD_MODULUS, MINSTD_MULTIPLIER, TOP_9_OF_31 = 2147483647, 48271, 4194304
-- The fingerprint being checked (one at a time, number `serial`): its block number, the
-- generator's state and how many of its bits are made (PROBE); each bit made, as the byte it is
-- in (1-based) and its weight in that byte (BIT_AT, BIT_W); the bits taken (bit -> serial of the
-- fingerprint that took it); and the block read of each layer (BLOCK_KEY, BLOCK_OFFSET,
-- BLOCK_READ, valid while BLOCK_SERIAL[l] is the fingerprint's serial). Reused from one
-- fingerprint to the next, in flat tables kept in locals: a seed's flush checks thousands, and
-- a Lua script spends most of its time making tables and looking up fields. (Hot paths use %
-- rather than math.floor: an operator, not a function call.)
local PROBE = {serial = 0, h = 0, state = 0, n = 0}
local BIT_AT, BIT_W, TAKEN = {}, {}, {}
local BLOCK_KEY, BLOCK_OFFSET, BLOCK_READ, BLOCK_SERIAL = {}, {}, {}, {}

local function block_probe(fp)
  local b1, b2, b3, b4, b5, b6, b7, b8, b9, b10, b11, b12 = byte(fp, 1, 12)
  local probe = PROBE
  probe.serial, probe.n = probe.serial + 1, 0
  probe.h = ((((b1 * 256 + b2) * 256 + b3) * 256 + b4) * 256 + b5) * 256 + b6
  probe.state = (((((b7 * 256 + b8) * 256 + b9) * 256 + b10) * 256 + b11) * 256 + b12)
    % (MINSTD_MODULUS - 1) + 1
  return probe
end

-- makes the fingerprint's bits up to its `upto`th
local function make_bits(probe, upto)
  local n, state, serial = probe.n, probe.state, probe.serial
  local taken, at, weights = TAKEN, BIT_AT, BIT_W
  while n < upto do
    state = (state * MINSTD_MULTIPLIER) % MINSTD_MODULUS
    local bit = (state - state % TOP_9_OF_31) / TOP_9_OF_31
    while taken[bit] == serial do bit = (bit + 1) % BLOCK_BITS end
    taken[bit] = serial
    n = n + 1
    local within = bit % 8
    at[n], weights[n] = (bit - within) / 8 + 1, BIT_WEIGHT[within + 1]
  end
  probe.n, probe.state = n, state
end

-- the bytes of the block of layer l the fingerprint falls in (read once per fingerprint)
local function block_of(l, probe)
  if BLOCK_SERIAL[l] == probe.serial then return BLOCK_READ[l] end
  local layer = BLOOM.layers[l]
  local block, per_chunk = probe.h % layer.blocks, layer.chunk_blocks
  local within = block % per_chunk
  local key = BLOOM.keys[layer.first_key + (block - within) / per_chunk]
  local offset = within * BLOCK_BYTES
  local bytes = redis.call('GETRANGE', key, offset, offset + BLOCK_BYTES - 1)
  BLOCK_KEY[l], BLOCK_OFFSET[l], BLOCK_READ[l], BLOCK_SERIAL[l] = key, offset, bytes,
    probe.serial
  return bytes
end

local function blocked_contains(l, probe)
  local bytes, at, weights = block_of(l, probe), BIT_AT, BIT_W
  local hashes = BLOOM.layers[l].hashes
  for j = 1, hashes do
    if j > probe.n then make_bits(probe, j) end
    local weight = weights[j]
    if byte(bytes, at[j]) % (weight + weight) < weight then return false end
  end
  return true
end

-- writes the block back with the fingerprint's bits set (one SETRANGE of the whole block)
local function blocked_insert(l, probe)
  local hashes = BLOOM.layers[l].hashes
  make_bits(probe, hashes)
  local values, at, weights, changed = {byte(block_of(l, probe), 1, BLOCK_BYTES)}, BIT_AT, BIT_W,
    false
  for j = 1, hashes do
    local i, weight = at[j], weights[j]
    local value = values[i]
    if value % (weight + weight) < weight then
      values[i], changed = value + weight, true
    end
  end
  if changed then  -- else every bit was set already (by other fingerprints)
    redis.call('SETRANGE', BLOCK_KEY[l], BLOCK_OFFSET[l], char(unpack(values)))
  end
end

-- ---- both layouts --------------------------------------------------------------------------
local function contains(l, probe)
  if BLOOM.blocked then return blocked_contains(l, probe) end
  return classic_contains(BLOOM.layers[l], probe)
end

-- true if the fingerprint was new to the filter (and is now recorded); bloom_refusal() ran.
-- Every layer is checked, the newest (the largest) first, before the newest takes the bits.
local function bloom_add(fp)
  local probe = BLOOM.blocked and block_probe(fp) or hash_triple(fp)
  for l = BLOOM.active, 1, -1 do
    if contains(l, probe) then return false end
  end
  if active_count() >= BLOOM.layers[BLOOM.active].capacity then
    activate_layer()
  end
  if BLOOM.blocked then
    blocked_insert(BLOOM.active, probe)
  else
    classic_insert(BLOOM.layers[BLOOM.active], probe)
  end
  BLOOM.count, BLOOM.added = BLOOM.count + 1, BLOOM.added + 1
  return true
end

-- entries in the last layer in use (0 if none is), once what the call added is counted in the
-- bloom hash: a script that adds calls it once, after its last bloom_add
local function bloom_finish()
  if BLOOM.active == 0 then return 0 end
  local entries = active_count()
  save_added()
  return entries
end
