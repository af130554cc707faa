-- dedup_migrate: move up to `count` fingerprints of a "set-then-*" job from its exact set into
-- its Bloom filter (lua/bloom.lua), once the filter is in use (flush.lua takes its first layer
-- into use when the set is full). Each fingerprint leaves the set and enters the filter in this
-- one atomic step, so it is in exactly one of them at any moment, and flush.lua consults both
-- while the set is not empty: a fingerprint never becomes unseen. A fingerprint the filter
-- already reports as present (a false positive) is simply dropped from the set: still seen.
--
-- Bounded: at most `count` fingerprints per call (SPOP with a count), and never a layer
-- allocated here (the CLUSTERSYNC_BLOOM_* refusals of flush.lua, before any change).
-- No call id: running a call again (a retry after a lost reply) moves the next batch, which is
-- what the caller wanted anyway; no run can lose or duplicate a fingerprint.
--
-- (store/bloom_scripts.py DedupMigrateScript builds the call and reads the answer.)
--
-- KEYS[1]  meta       hash    job epoch
-- KEYS[2]  seen       set     the job's exact set of raw 20-byte fingerprints
-- KEYS[3]  bloom      hash    Bloom filter state (see bloom.lua)
-- KEYS[4..] chunk     string  bloom chunk strings of the described layers, layer by layer, chunk
--                             by chunk
-- ARGV[1]  epoch      string  the job epoch the node joined; another value = Redis lost the job
-- ARGV[2]  count      int     how many fingerprints to move at most
-- ARGV[3]  dedup_mode string  the job's dedup mode: "set-then-blocked-bloom" or "set-then-bloom"
--                             (how its layers are laid out, see bloom.lua)
-- ARGV[4]  described  int     how many Bloom layers are described next
-- ARGV[5..] layout    int     per described layer: bits, hashes, bits per chunk, chunks,
--                             capacity (bloom.lua LAYOUT)
-- Returns "moved exact_entries active_bloom_layers active_layer_entries" (after the move).
-- Errors (before any change): CLUSTERSYNC_STATE_LOST, CLUSTERSYNC_WRONG_TYPE,
-- CLUSTERSYNC_BLOOM_LAYOUT <n>, CLUSTERSYNC_BLOOM_NOT_READY <i> (as flush.lua).
local meta_key = KEYS[1]
local seen_key = KEYS[2]
local bloom_key = KEYS[3]
local chunk_from = 4
local epoch = ARGV[1]
local count = tonumber(ARGV[2])
local dedup_mode = ARGV[3]
local described = tonumber(ARGV[4])
local layout_from = 5
if redis.call('HGET', meta_key, 'epoch') ~= epoch then
  return redis.error_reply('CLUSTERSYNC_STATE_LOST job epoch missing or changed')
end
local refused = wrong_type({seen_key, 'set', bloom_key, 'hash'})
if refused then return refused end
bloom_setup(bloom_key, ARGV, layout_from, described, KEYS, chunk_from, dedup_mode)
local left = redis.call('SCARD', seen_key)
count = math.min(left, count)

local function answer(moved)
  return table.concat({moved, left - count, BLOOM.active, bloom_finish()}, ' ')
end
if BLOOM.active == 0 or count <= 0 then
  count = 0  -- the set still takes new fingerprints, or nothing is left to move
  return answer(0)
end
local unready = bloom_refusal(count)
if unready then return unready end
local moved = 0
for _, fp in ipairs(redis.call('SPOP', seen_key, count)) do
  if bloom_add(fp) then moved = moved + 1 end
end
return answer(moved)
