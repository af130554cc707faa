-- bloom_prepare: allocate one chunk of a Bloom filter layer before the flush script needs it.
-- A layer is allocated chunk by chunk, one call each, in chunk order: Redis is never blocked for
-- a whole layer, and it checks maxmemory before each chunk (it checks a script only before the
-- script's first write, so a layer allocated inside one flush could overshoot maxmemory by the
-- whole layer). bloom field prepared<layer> counts the chunks that exist, so nodes preparing the
-- same layer at once cooperate: a call for any chunk but the next one changes nothing and
-- returns the count, and a retried call is a no-op.
--
-- KEYS[1]  meta   hash    job epoch
-- KEYS[2]  bloom  hash    Bloom filter state: layers (active count), prepared<i> (chunks made)
-- KEYS[3]  chunk  string  chunk ARGV[3] of layer ARGV[2]
-- ARGV[1]  epoch        string  the job epoch the node joined; another value = Redis lost the job
-- ARGV[2]  layer        int     index of the layer being prepared (0 = the first)
-- ARGV[3]  chunk        int     which chunk KEYS[3] is: the caller's belief of prepared<layer>
-- ARGV[4]  chunk_bytes  int     size of each chunk of the layer
-- ARGV[5]  chunks       int     chunks in the layer
-- Returns how many chunks of the layer exist now; ARGV[5] means the layer is ready.
if redis.call('HGET', KEYS[1], 'epoch') ~= ARGV[1] then
  return redis.error_reply('CLUSTERSYNC_STATE_LOST job epoch missing or changed')
end
local layer, chunk, chunks = tonumber(ARGV[2]), tonumber(ARGV[3]), tonumber(ARGV[5])
if tonumber(redis.call('HGET', KEYS[2], 'layers') or '0') > layer then
  return chunks  -- active already, so allocated long ago
end
local field = 'prepared' .. layer
local prepared = tonumber(redis.call('HGET', KEYS[2], field) or '0')
if prepared ~= chunk or prepared >= chunks then
  return prepared
end
-- a string that exists is never written: it may hold bits, and SETRANGE would zero a byte.
-- Otherwise one zero string of the exact size: no allocator rounding, no later growth.
if redis.call('STRLEN', KEYS[3]) == 0 then
  redis.call('SETRANGE', KEYS[3], tonumber(ARGV[4]) - 1, '\0')
end
redis.call('HSET', KEYS[2], field, prepared + 1)
return prepared + 1
