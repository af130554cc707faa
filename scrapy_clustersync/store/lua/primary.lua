-- primary: record in the job's meta the address of the Redis primary a node reaches through
-- Sentinel, and count how often it changed (a failover), for `clustersync status`. A job that
-- is not there (no epoch: Redis lost it, or it was purged) is left alone: this never creates it.
--
-- (store/primary_note.py PrimaryScript builds the call and reads the answer.)
--
-- KEYS[1]  meta       hash    the job's meta: primary (host:port), primary_before (the one
--                             before it), primary_changes (how many times it changed),
--                             primary_changed_ms (server time of the last change)
-- ARGV[1]  address    string  host:port of the primary the node's connection reached
-- Returns the address before it when this call recorded a change, '' when it recorded the
-- first one or none (the same address), false when the job is not there.
local meta_key = KEYS[1]
local address = ARGV[1]
if redis.call('HEXISTS', meta_key, 'epoch') == 0 then
  return false
end
local before = redis.call('HGET', meta_key, 'primary')
if before == address then
  return ''
end
redis.call('HSET', meta_key, 'primary', address)
if not before then
  return ''
end
local now = redis.call('TIME')
redis.call('HSET', meta_key, 'primary_before', before,
           'primary_changed_ms', now[1] * 1000 + math.floor(now[2] / 1000))
redis.call('HINCRBY', meta_key, 'primary_changes', 1)
return before
