package redisseat

import "github.com/redis/go-redis/v9"

// Seat values in the show's hash (field = seat id):
//
//	absent                        free
//	"L|<order>|<user>|<lockedMs>" locked by <order> for <user> since <lockedMs>
//	"S|<order>|<user>"            sold to <order>
//
// Ids never contain '|' (expiry.ValidateID), so the fields split cleanly.
// Every script touches only the two keys of one show, which share the hash
// tag {<show>}, so the scripts run unchanged on Redis Cluster.

// lockScript claims seats for an order, all or nothing.
//
// KEYS[1] seats hash of the show; KEYS[2] purchase-limit hash of the show
// (field = user id, value = seats the user holds in pending and paid orders).
// ARGV[1] order number; ARGV[2] user id; ARGV[3] the user's limit (0: none);
// ARGV[4] now in epoch ms; ARGV[5..] seat ids.
// Returns {1, n}: n seats newly locked (seats already locked by this order
// count as done, so a retried lock is harmless); {0, seat}: that seat is
// locked or sold by another order, nothing changed; {-1, held}: the user
// already holds held seats and the new ones would pass the limit, nothing
// changed.
var lockScript = redis.NewScript(`
local mine = 'L|' .. ARGV[1] .. '|'
local fresh = {}
for i = 5, #ARGV do
  local v = redis.call('HGET', KEYS[1], ARGV[i])
  if v then
    if string.sub(v, 1, #mine) ~= mine then return {0, ARGV[i]} end
  else
    fresh[#fresh + 1] = ARGV[i]
  end
end
local held = tonumber(redis.call('HGET', KEYS[2], ARGV[2]) or '0')
local limit = tonumber(ARGV[3])
if limit > 0 and held + #fresh > limit then return {-1, held} end
local value = mine .. ARGV[2] .. '|' .. ARGV[4]
for _, seat in ipairs(fresh) do redis.call('HSET', KEYS[1], seat, value) end
if #fresh > 0 then redis.call('HINCRBY', KEYS[2], ARGV[2], #fresh) end
return {1, #fresh}
`)

// releaseScript frees the seats still locked by one order.
//
// KEYS[1] seats hash of the show; KEYS[2] purchase-limit hash of the show.
// ARGV[1] order number; ARGV[2..] seat ids.
// Frees each listed seat whose value is "L|<order>|…" and leaves every other
// seat alone (free, sold, or locked by another order). The limit counter of
// the user recorded in the freed values goes down by exactly the number freed,
// never below zero (the field is deleted at zero).
// Returns the number of seats freed.
var releaseScript = redis.NewScript(`
local mine = 'L|' .. ARGV[1] .. '|'
local freed, user = 0, nil
for i = 2, #ARGV do
  local v = redis.call('HGET', KEYS[1], ARGV[i])
  if v and string.sub(v, 1, #mine) == mine then
    redis.call('HDEL', KEYS[1], ARGV[i])
    freed = freed + 1
    user = string.match(string.sub(v, #mine + 1), '^[^|]+')
  end
end
if freed > 0 and user then
  local left = tonumber(redis.call('HGET', KEYS[2], user) or '0') - freed
  if left > 0 then redis.call('HSET', KEYS[2], user, left) else redis.call('HDEL', KEYS[2], user) end
end
return freed
`)

// sellScript marks seats sold to one order after its payment committed.
//
// KEYS[1] seats hash of the show; KEYS[2] purchase-limit hash of the show.
// ARGV[1] order number; ARGV[2] user id; ARGV[3..] seat ids.
// Each listed seat locked by the order becomes "S|<order>|<user>"; a free one
// too (its lock was lost, say by a Redis restart: SQL, where the order is
// paid, is the truth), and then the user's limit counter goes up by one so it
// still counts the seat. Seats sold or locked by another order are left alone.
// Returns the number of seats marked sold.
var sellScript = redis.NewScript(`
local mine = 'L|' .. ARGV[1] .. '|'
local sold, revived = 0, 0
for i = 3, #ARGV do
  local v = redis.call('HGET', KEYS[1], ARGV[i])
  if not v or string.sub(v, 1, #mine) == mine then
    redis.call('HSET', KEYS[1], ARGV[i], 'S|' .. ARGV[1] .. '|' .. ARGV[2])
    sold = sold + 1
    if not v then revived = revived + 1 end
  end
end
if revived > 0 then redis.call('HINCRBY', KEYS[2], ARGV[2], revived) end
return sold
`)

// restoreScript rebuilds seat state from SQL claims after Redis lost it.
//
// KEYS[1] seats hash of the show; KEYS[2] purchase-limit hash of the show.
// ARGV[1] now in epoch ms; then, per claim, four values: seat id, order
// number, user id, and "L" (the order is pending) or "S" (paid).
// A free seat gets the claim's state and the user's counter goes up by one;
// a seat locked by the claim's order of a paid claim becomes sold (counter
// unchanged); anything else (the same state already, or another order's
// seat) is left alone. Returns the number of seats changed.
var restoreScript = redis.NewScript(`
local changed = 0
for i = 2, #ARGV, 4 do
  local seat, order, user, kind = ARGV[i], ARGV[i + 1], ARGV[i + 2], ARGV[i + 3]
  local v = redis.call('HGET', KEYS[1], seat)
  local mine = 'L|' .. order .. '|'
  if not v then
    if kind == 'S' then
      redis.call('HSET', KEYS[1], seat, 'S|' .. order .. '|' .. user)
    else
      redis.call('HSET', KEYS[1], seat, mine .. user .. '|' .. ARGV[1])
    end
    redis.call('HINCRBY', KEYS[2], user, 1)
    changed = changed + 1
  elseif kind == 'S' and string.sub(v, 1, #mine) == mine then
    redis.call('HSET', KEYS[1], seat, 'S|' .. order .. '|' .. user)
    changed = changed + 1
  end
end
return changed
`)
