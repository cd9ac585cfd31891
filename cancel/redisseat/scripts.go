package redisseat

import (
	"github.com/redis/go-redis/v9"

	"github.com/seatflow/orderexpiry/internal/seatlua"
)

// Seat values in the show's hash (field = seat id):
//
//	absent                        free
//	"L|<order>|<user>|<lockedMs>|<gen>" locked by <order> for <user> since <lockedMs>
//	"S|<order>|<user>"            sold to <order>
//
// <lockedMs> is the Redis server's clock (TIME, epoch milliseconds), read
// inside the script that writes the value: no host's clock is ever stored
// or compared (invariant I11). <gen> numbers the show's locks (INCR of the
// show's generation key, one per script call that locks): "<lockedMs>.<gen>"
// is the lock's id (cancel.SeatLock.LockID), which no later lock of the same
// seat and order number shares, so a release or sale that names it acts on
// that very lock and never on a newer one (a late payment's reinstatement,
// a rebuild). A value written before the generation existed has no "|<gen>"
// and its id is "<lockedMs>".
//
// Beside the hash, the show's set of locked seats (the lock index, field =
// seat id) holds exactly the seats whose value starts with "L|": every
// script that writes a value keeps it so in the same atomic step, so the
// reconciler's scan reads live locks only and never the sold seats.
//
// Ids never contain '|' (expiry.ValidateID), so the fields split cleanly.
// Every script touches only the keys of one show, which share the hash tag
// {<show>}, so the scripts run unchanged on Redis Cluster.
//
// TIME is non-deterministic: scripts that read it before writing need effects
// replication, the default since Redis 5 and the only mode since Redis 7. The
// guarded redis.replicate_commands() call turns it on for Redis 3.2 to 4.

// timeLua reads the server clock as epoch milliseconds (integral, 13 digits,
// so Lua's number formatting prints it exactly).
const timeLua = `
if redis.replicate_commands then redis.replicate_commands() end
local function nowms()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end
`

// lockIDLua reads the id of a lock value (empty for anything but a lock).
const lockIDLua = seatlua.LockID

// lockScript claims seats for an order, all or nothing, at the server's time.
//
// KEYS[1] seats hash of the show; KEYS[2] purchase-limit hash of the show
// (field = user id, value = seats the user holds in pending and paid orders);
// KEYS[3] lock index of the show (set of locked seat ids); KEYS[4] the
// show's lock generation (a counter).
// ARGV[1] order number; ARGV[2] user id; ARGV[3] the user's limit (0: none);
// ARGV[4..] seat ids.
// Every listed seat must be free: one locked by anything (this order number
// included, for any user) or sold refuses the whole hold. A seat listed twice
// is refused too (Hold.Validate refuses it before the script runs; the script
// checks again so that a caller bypassing Validate cannot count one seat
// twice against the limit).
// Returns {1, first, id}: every seat is now "L|<order>|<user>|<now>|<gen>" and in the
// index, and the user's counter went up by their number; first is 1 when the
// index was empty before (the caller then lists the show again, see
// Seats.ScanLocks); id is the lock's id, "<now>.<gen>". {0, seat}: that seat is not free. {-1, held}: the user
// holds held seats and the new ones would pass the limit. {-2, seat}: that
// seat is listed twice. On every reply but {1, …} nothing changed.
var lockScript = redis.NewScript(timeLua + `
local seen = {}
for i = 4, #ARGV do
  local seat = ARGV[i]
  if seen[seat] then return {-2, seat} end
  seen[seat] = true
  if redis.call('HEXISTS', KEYS[1], seat) == 1 then return {0, seat} end
end
local n = #ARGV - 3
local held = tonumber(redis.call('HGET', KEYS[2], ARGV[2]) or '0')
local limit = tonumber(ARGV[3])
if limit > 0 and held + n > limit then return {-1, held} end
local first = 0
if redis.call('SCARD', KEYS[3]) == 0 then first = 1 end
local ms, gen = nowms(), redis.call('INCR', KEYS[4])
local value = 'L|' .. ARGV[1] .. '|' .. ARGV[2] .. '|' .. ms .. '|' .. gen
for i = 4, #ARGV do
  redis.call('HSET', KEYS[1], ARGV[i], value)
  redis.call('SADD', KEYS[3], ARGV[i])
end
redis.call('HINCRBY', KEYS[2], ARGV[2], n)
return {1, first, ms .. '.' .. gen}
`)

// releaseScript frees the seats still locked by one order. Its text is in
// internal/seatlua, so that the bench's raw baseline runs this very script.
//
// KEYS[1] seats hash of the show; KEYS[2] purchase-limit hash of the show;
// KEYS[3] lock index of the show.
// ARGV[1] order number; ARGV[2] a lock id (” any lock of the order);
// ARGV[3..] seat ids.
// Frees each listed seat whose value is "L|<order>|…" (for whichever user)
// and, when ARGV[2] is set, whose lock id is ARGV[2]; it leaves every other
// seat alone (free, sold, locked by another order, or by a newer lock of
// the same order).
// The counter of each user recorded in the freed values goes down by exactly
// the number of that user's seats freed, never below zero (the field is
// deleted at zero). A seat listed twice is freed once.
// Returns the number of seats freed.
var releaseScript = redis.NewScript(lockIDLua + seatlua.Release)

// releaseAllScript is releaseScript for many holds of one show in one call
// (SeatStore.ReleaseAll): a batch of cancels releases per show in one round
// trip.
//
// KEYS as releaseScript's.
// ARGV is a list of holds, each as ARGV[i] order number, ARGV[i+1] a lock
// id (” any lock of the order), ARGV[i+2] n, then its n seat ids; the
// next hold starts after them.
// Each hold is released exactly as releaseScript releases it (its own order
// number and lock id guard each of its seats), in the order given, and each
// user's counter goes down by exactly that user's seats freed, never below
// zero. Returns the number of seats each hold freed, in the order of the
// holds ({} for none). A malformed list is an error before anything changed.
var releaseAllScript = redis.NewScript(lockIDLua + `
local i, holds = 1, {}
while i <= #ARGV do
  local n = tonumber(ARGV[i + 2])
  if not n or n < 0 or i + 2 + n > #ARGV then return redis.error_reply('malformed hold at ' .. i) end
  holds[#holds + 1] = {ARGV[i], ARGV[i + 1], i + 3, i + 2 + n}
  i = i + 3 + n
end
local out, per = {}, {}
for h = 1, #holds do
  local no, lock, from, to = holds[h][1], holds[h][2], holds[h][3], holds[h][4]
  local mine = 'L|' .. no .. '|'
  local freed = 0
  for k = from, to do
    local v = redis.call('HGET', KEYS[1], ARGV[k])
    if v and string.sub(v, 1, #mine) == mine and (lock == '' or lockid(v) == lock) then
      redis.call('HDEL', KEYS[1], ARGV[k])
      redis.call('SREM', KEYS[3], ARGV[k])
      freed = freed + 1
      local user = string.match(string.sub(v, #mine + 1), '^[^|]+')
      if user then per[user] = (per[user] or 0) + 1 end
    end
  end
  out[h] = freed
end
for user, n in pairs(per) do
  local left = tonumber(redis.call('HGET', KEYS[2], user) or '0') - n
  if left > 0 then redis.call('HSET', KEYS[2], user, left) else redis.call('HDEL', KEYS[2], user) end
end
return out
`)

// sellScript marks seats sold to one order after its payment committed.
//
// KEYS[1] seats hash of the show; KEYS[2] purchase-limit hash of the show;
// KEYS[3] lock index of the show.
// ARGV[1] order number; ARGV[2] user id; ARGV[3] a lock id (” any);
// ARGV[4..] seat ids.
// Each listed seat locked by the order for that user ("L|<order>|<user>|…")
// becomes "S|<order>|<user>" and leaves the index; a free one too (its lock
// was lost, say by a Redis restart: SQL, where the order is paid, is the
// truth), and then the user's counter goes up by one so it still counts the
// seat. With a lock id, only seats of that very lock are sold (free ones are
// left to the caller that judged no lock). Seats sold, locked by another order, or locked by the same order
// number for another user are left alone. A seat listed twice is sold once.
// Returns the number of seats marked sold.
var sellScript = redis.NewScript(lockIDLua + `
local mine = 'L|' .. ARGV[1] .. '|' .. ARGV[2] .. '|'
local value = 'S|' .. ARGV[1] .. '|' .. ARGV[2]
local sold, revived = 0, 0
for i = 4, #ARGV do
  local v = redis.call('HGET', KEYS[1], ARGV[i])
  if (not v and ARGV[3] == '') or (v and string.sub(v, 1, #mine) == mine and (ARGV[3] == '' or lockid(v) == ARGV[3])) then
    redis.call('HSET', KEYS[1], ARGV[i], value)
    sold = sold + 1
    if v then redis.call('SREM', KEYS[3], ARGV[i]) else revived = revived + 1 end
  end
end
if revived > 0 then redis.call('HINCRBY', KEYS[2], ARGV[2], revived) end
return sold
`)

// restoreScript rebuilds seat state from SQL claims after Redis lost it.
//
// KEYS[1] seats hash of the show; KEYS[2] purchase-limit hash of the show;
// KEYS[3] lock index of the show; KEYS[4] the show's lock generation.
// ARGV, per claim, five values: seat id, order number, user id, "L" (the
// order is pending) or "S" (paid), and the lock's tail as SQL kept its id
// ("<ms>|<gen>" or "<ms>", the id's dot a bar; "" when SQL kept none).
// A free seat gets the claim's state ("L|<order>|<user>|<tail>", or
// "L|<order>|<user>|<now>|<gen>" without a tail, added to the
// index, or "S|<order>|<user>") and the user's counter goes up by one; a seat
// locked by the claim's order and user becomes sold on a paid claim (it
// leaves the index, the counter is unchanged); anything else (the same state
// already, another order's seat, or the same order number's lock for another
// user) is left alone.
// Returns {changed, added}: the number of seats changed, and how many of them
// are locks added to the index (the caller then lists the show, as after a
// Lock).
var restoreScript = redis.NewScript(timeLua + `
local changed, added = 0, 0
local now = nowms()
local gen = nil
for i = 1, #ARGV, 5 do
  local seat, order, user, kind, tail = ARGV[i], ARGV[i + 1], ARGV[i + 2], ARGV[i + 3], ARGV[i + 4]
  local v = redis.call('HGET', KEYS[1], seat)
  local mine = 'L|' .. order .. '|' .. user .. '|'
  if not v then
    if kind == 'S' then
      redis.call('HSET', KEYS[1], seat, 'S|' .. order .. '|' .. user)
    else
      if tail == '' then
        if not gen then gen = redis.call('INCR', KEYS[4]) end
        tail = now .. '|' .. gen
      end
      redis.call('HSET', KEYS[1], seat, mine .. tail)
      redis.call('SADD', KEYS[3], seat)
      added = added + 1
    end
    redis.call('HINCRBY', KEYS[2], user, 1)
    changed = changed + 1
  elseif kind == 'S' and string.sub(v, 1, #mine) == mine then
    redis.call('HSET', KEYS[1], seat, 'S|' .. order .. '|' .. user)
    redis.call('SREM', KEYS[3], seat)
    changed = changed + 1
  end
end
return {changed, added}
`)

// scanScript reads one batch of a show's live locks, with the server's clock.
//
// KEYS[1] seats hash of the show; KEYS[2] lock index of the show.
// ARGV[1] SSCAN cursor of the index ("0" starts); ARGV[2] SSCAN COUNT hint.
// Returns {next, seconds, microseconds, card, seat1, value1, seat2, …}: the
// cursor to continue from ("0": the index is done), the server's TIME taken
// in the same atomic step as the values (so a lock's age is measured on the
// clock that stamped it), the size of the index after the batch, and each
// indexed seat with its value. An indexed seat whose value is not a lock (the
// index drifted, say the hash was deleted by hand) is removed from the index
// and not returned.
var scanScript = redis.NewScript(`
if redis.replicate_commands then redis.replicate_commands() end
local r = redis.call('SSCAN', KEYS[2], ARGV[1], 'COUNT', ARGV[2])
local t = redis.call('TIME')
local out = {r[1], t[1], t[2], 0}
for _, seat in ipairs(r[2]) do
  local v = redis.call('HGET', KEYS[1], seat)
  if v and string.sub(v, 1, 2) == 'L|' then
    out[#out + 1] = seat
    out[#out + 1] = v
  else
    redis.call('SREM', KEYS[2], seat)
  end
end
out[4] = redis.call('SCARD', KEYS[2])
return out
`)

// reindexScript adds the given seats to the lock index when they are locked:
// the upgrade path for seat state written before the index existed.
//
// KEYS[1] seats hash of the show; KEYS[2] lock index of the show.
// ARGV[1..] seat ids (candidates found by HSCAN).
// Returns {added, 0}: how many seats joined the index (the caller then lists
// the show, as after a Lock).
var reindexScript = redis.NewScript(`
local added = 0
for i = 1, #ARGV do
  local v = redis.call('HGET', KEYS[1], ARGV[i])
  if v and string.sub(v, 1, 2) == 'L|' then
    added = added + redis.call('SADD', KEYS[2], ARGV[i])
  end
end
return {added, 0}
`)

// retireScript deletes a finished show's keys, unless it still holds locks.
//
// KEYS[1] seats hash; KEYS[2] purchase-limit hash; KEYS[3] lock index;
// KEYS[4] lock generation.
// Returns the number of locks the show holds: 0 means its four keys were
// deleted; more means nothing changed.
var retireScript = redis.NewScript(`
local n = redis.call('SCARD', KEYS[3])
if n > 0 then return n end
redis.call('DEL', KEYS[1], KEYS[2], KEYS[3], KEYS[4])
return 0
`)

// The restored marker <ns>:restored, one key, holds the rebuild's state:
//
//	absent       Redis lost its data (or the namespace was never rebuilt)
//	"R|<token>"  a rebuild named <token> is under way
//	"D|<token>"  the rebuild <token> completed; anything else not starting
//	             with "R|" (an older version wrote a number) counts as done
//
// A loss deletes the marker with everything else, so a rebuild that started
// before the loss can no longer mark the store restored.

// lostScript reports whether the store must be rebuilt, and names the rebuild.
//
// KEYS[1] the marker. ARGV[1] a fresh random token.
// Returns {1, token}: lost; token is the current rebuild's (ARGV[1] if this
// call started it, by setting the marker to "R|<ARGV[1]>"). {0, ""}: not
// lost.
var lostScript = redis.NewScript(`
local v = redis.call('GET', KEYS[1])
if not v then
  redis.call('SET', KEYS[1], 'R|' .. ARGV[1])
  return {1, ARGV[1]}
end
if string.sub(v, 1, 2) == 'R|' then return {1, string.sub(v, 3)} end
return {0, ''}
`)

// markScript completes the rebuild named by a token, if it is still current.
//
// KEYS[1] the marker. ARGV[1] the token Lost returned.
// Returns 1 when the marker is now "D|<token>" (set by this call, or already
// by another caller of the same rebuild); 0 when the token is not current
// (the data was lost again: marker absent or another rebuild's), and nothing
// changed.
var markScript = redis.NewScript(`
local v = redis.call('GET', KEYS[1])
if v == 'R|' .. ARGV[1] then
  redis.call('SET', KEYS[1], 'D|' .. ARGV[1])
  return 1
end
if v == 'D|' .. ARGV[1] then return 1 end
return 0
`)
