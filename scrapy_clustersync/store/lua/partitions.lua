-- partitions: record the partition count of a job that is being created, or read the count of
-- one that exists. The count is the job's, fixed when it is created: it is set only while the
-- job has neither an epoch nor a count, so that of the nodes that start a job together the
-- first call wins and every other node reads the count that won (a node that follows the
-- job's count joins first and reads it after: it meets either no epoch yet or the winner).
--
-- (store/partition_count.py PartitionsScript builds the call and reads the answer.)
--
-- KEYS[1]  meta       hash    partition 0's meta: epoch, partitions (absent: 1)
-- ARGV[1]  count      int     the count to record if the job is new (2 or more: 1 is the
--                             absent field's meaning, never written)
-- Returns the job's count: the one recorded before, this call's if it recorded it, else 1 (a
-- job created without the field: one partition).
local meta_key = KEYS[1]
local count = ARGV[1]
local recorded = redis.call('HGET', meta_key, 'partitions')
if recorded then
  return tonumber(recorded)
end
if redis.call('HEXISTS', meta_key, 'epoch') == 1 then
  return 1
end
redis.call('HSET', meta_key, 'partitions', count)
return tonumber(count)
