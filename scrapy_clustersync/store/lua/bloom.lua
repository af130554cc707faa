-- bloom: the job's scalable Bloom filter, prepended (after prelude.lua) to the scripts that read
-- or fill it: flush.lua and dedup_migrate.lua (store/script_base.py load_lua).
--
-- The calling script describes the filter's layers in its ARGV and passes their chunk strings in
-- its KEYS, and calls bloom_setup(state key, argv, index of the first layout in argv, described
-- layers, keys, index of the first chunk in keys) before anything else here; no function here
-- reads KEYS or ARGV itself. The bloom hash (state key) holds:
-- layers (active count), count<i>, layout<i>, prepared<i> (chunks of layer i that exist, made by
-- bloom_prepare.lua). No function here allocates a layer: bloom_refusal() refuses a call that
-- may need one that is not described or not fully allocated, before the script writes anything.
local BLOOM = {layers = {}, active = 0, needed = 0}

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

local function bloom_setup(state_key, argv, layout_base, described, keys, first_chunk_key)
  BLOOM.key, BLOOM.described, BLOOM.keys = state_key, described, keys
  local key = first_chunk_key
  for l = 1, described do
    BLOOM.layers[l] = layout_from_argv(argv, layout_base + #LAYOUT * (l - 1))
    BLOOM.layers[l].first_key = key
    key = key + BLOOM.layers[l].chunks
  end
  BLOOM.active = tonumber(redis.call('HGET', state_key, 'layers') or '0')
end

local function bloom_count(l)
  return tonumber(redis.call('HGET', BLOOM.key, 'count' .. (l - 1)) or '0')
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
  local active = BLOOM.active
  redis.call('HSET', BLOOM.key, 'layers', active + 1, 'count' .. active, 0,
             'layout' .. active, layout_text(BLOOM.layers[active + 1]))
  BLOOM.active = active + 1
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
  return BLOOM.keys[layer.first_key + chunk], pos - chunk * layer.chunk_bits
end

local function in_layer(layer, h1, h2, h3)
  for i = 0, layer.hashes - 1 do
    local key, offset = bit_of(layer, h1, h2, h3, i)
    if redis.call('GETBIT', key, offset) == 0 then return false end
  end
  return true
end

-- true if the fingerprint was new to the filter (and is now recorded); bloom_refusal() ran
local function bloom_add(fp)
  local h1, h2, h3 = hash_triple(fp)
  for l = 1, BLOOM.active do
    if in_layer(BLOOM.layers[l], h1, h2, h3) then return false end
  end
  if bloom_count(BLOOM.active) >= BLOOM.layers[BLOOM.active].capacity then
    activate_layer()
  end
  local layer = BLOOM.layers[BLOOM.active]
  for i = 0, layer.hashes - 1 do
    local key, offset = bit_of(layer, h1, h2, h3, i)
    redis.call('SETBIT', key, offset, 1)
  end
  redis.call('HINCRBY', BLOOM.key, 'count' .. (BLOOM.active - 1), 1)
  return true
end

-- entries in the last layer in use (0 if none is)
local function bloom_active_entries()
  if BLOOM.active == 0 then return 0 end
  return bloom_count(BLOOM.active)
end
