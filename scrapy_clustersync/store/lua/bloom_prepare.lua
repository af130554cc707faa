-- bloom_prepare: allocate one chunk of a Bloom filter layer before the flush script needs it.
-- A layer is allocated chunk by chunk, one call each, in chunk order: Redis is never blocked for
-- a whole layer, and it checks maxmemory before each chunk (it checks a script only before the
-- script's first write, so a layer allocated inside one flush could overshoot maxmemory by the
-- whole layer). bloom field prepared<layer> counts the chunks that exist, so nodes preparing the
-- same layer at once cooperate: a call for any chunk but the next one changes nothing and
-- returns the count, and a retried call is a no-op.
--
-- (store/bloom_scripts.py BloomPrepareScript builds the call and reads the answer.)
--
-- KEYS[1]  meta         hash    job epoch
-- KEYS[2]  bloom        hash    Bloom filter state: layers (active count), prepared<i> (chunks made)
-- KEYS[3]  chunk        string  chunk `chunk` of layer `layer`
-- ARGV[1]  epoch        string  the job epoch the node joined; another value = Redis lost the job
-- ARGV[2]  layer        int     index of the layer being prepared (0 = the first)
-- ARGV[3]  chunk        int     which chunk KEYS[3] is: the caller's belief of prepared<layer>
-- ARGV[4]  chunk_bytes  int     size of each chunk of the layer
-- ARGV[5]  chunks       int     chunks in the layer
-- Returns how many chunks of the layer exist now; `chunks` means the layer is ready.
local meta_key = KEYS[1]
local bloom_key = KEYS[2]
local chunk_key = KEYS[3]
local epoch = ARGV[1]
local layer = tonumber(ARGV[2])
local chunk = tonumber(ARGV[3])
local chunk_bytes = tonumber(ARGV[4])
local chunks = tonumber(ARGV[5])
if redis.call('HGET', meta_key, 'epoch') ~= epoch then
  return redis.error_reply('CLUSTERSYNC_STATE_LOST job epoch missing or changed')
end
if tonumber(redis.call('HGET', bloom_key, 'layers') or '0') > layer then
  return chunks  -- active already, so allocated long ago
end
local field = 'prepared' .. layer
local prepared = tonumber(redis.call('HGET', bloom_key, field) or '0')
if prepared ~= chunk or prepared >= chunks then
  return prepared
end
-- a string that exists is never written: it may hold bits, and SETRANGE would zero a byte.
-- Otherwise one zero string of the exact size: no allocator rounding, no later growth.
if redis.call('STRLEN', chunk_key) == 0 then
  redis.call('SETRANGE', chunk_key, chunk_bytes - 1, '\0')
end
redis.call('HSET', bloom_key, field, prepared + 1)
return prepared + 1
