#include "tokengate/redis/script.hpp"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdint>
#include <stdexcept>

#include "tokengate/core/json_writer.hpp"
#include "tokengate/core/saturate.hpp"

namespace tokengate::redis {

namespace {

// Times are microseconds (Redis TIME), kept as doubles: epoch microseconds fit a double's
// 53-bit mantissa exactly. Verdicts go back as integers (Redis truncates Lua numbers, and a
// number past int64 comes back as garbage, so durations saturate at 2^62 ns as in
// core::k_forever): durations in nanoseconds, remaining as a %.17g string (1e15 units in
// millionths would not fit). The arithmetic mirrors limiter::RateBucket (GCRA), ConcurrencyGauge
// and ShapeQueue, so a shared store admits exactly what one process would. A shaping queue is
// kept as start times handed out at admission ('s': FIFO), or, when its tenants are of several
// priority classes, as a queue of places that each waiter asks about until it is first ('p').
constexpr std::string_view k_script = R"lua(
-- Each table and closure a call makes costs Redis 2-3.5k instructions (its allocation, its upvalues
-- found, then the collector's work): they were most of the ~190k instructions a call cost besides
-- its decisions. So each op makes only what it uses; what a decision on rate buckets alone does not
-- use is made on first use (helpers()); the decisions are written out in the call's body; and
-- constants are literals, not locals (a local that a function uses is an upvalue, made each call):
-- 1e-3 the slack of a comparison; 1e18 the deepest debt and the largest quota counter (SPEC §17:
-- the state file's range, core::k_max_counter); 2^53 the first integer a double cannot step by 1;
-- 1e7 us the step of a rate bucket's expiry (below); 2^62 ns the longest duration in a verdict
-- (core::k_forever).
-- The library's functions as locals: a global is a table lookup at every use.
local tonumber, floor, max, min, ceil = tonumber, math.floor, math.max, math.min, math.ceil
local format, find, sub, byte, match = string.format, string.find, string.sub, string.byte, string.match
local unpack = unpack
-- The call's tables and redis.call as locals too: upvalues, not a lookup in the globals each use.
local ARGV, KEYS, redis_call = ARGV, KEYS, redis.call
local op = ARGV[1]
local now
if ARGV[2] ~= '' then
  now = tonumber(ARGV[2])
else
  local t = redis_call('TIME')
  now = tonumber(t[1]) * 1000000 + tonumber(t[2])
end
-- Each verdict starts with the time, whole.
local now_whole = floor(now + 0.5)
-- Numbers as the gateway spelled them, parsed once a call: the decisions of one call mostly
-- share them (one tier's limits, the same reservations), and tonumber is strtod (0.1-0.25 us).
local parsed = {}
local function parse(s)
  local x = parsed[s]
  if x == nil then
    x = tonumber(s)
    parsed[s] = x
  end
  return x
end
-- Numbers as text that reads back exactly. A whole number (most times and levels: TIME is whole
-- microseconds) as %d, which costs Redis a third of %.17g; in a reply, as the number itself,
-- which Redis sends as an integer without formatting it at all.
-- (The test for whole is written out in each: a Lua function call costs Redis more than the test.
-- So is floor: x % 1 is a VM instruction, math.floor a call into C; x - x % 1 is floor(x) for
-- every finite x, and an infinite x is not whole since inf % 1 is NaN.)
-- A number whose fraction is a quarter, a half or three quarters goes as %d and that fraction's
-- digits, which read back as the same double, instead of through %.17g: every fractional time
-- past 2^50 us (2005 on) is one, as a double's step is 0.25 there (a token bucket's tat, after a
-- cost charged at a rate that does not divide 1e6).
local function num(x)
  local fraction = x % 1
  if fraction == 0 and x > -2^53 and x < 2^53 then return format('%d', x) end
  if x > 0 and x < 2^53 then
    local quarter = fraction == 0.5 and '.5' or fraction == 0.25 and '.25' or fraction == 0.75 and '.75'
    if quarter then return format('%d', x - fraction) .. quarter end
  end
  return format('%.17g', x)
end
-- A TTL in whole milliseconds, at most ~31 years: a key that outlives that is a bucket nobody
-- has touched since. Redis writes a number argument as %.17g, so an integer up to 1e12 goes as
-- its digits, without Lua formatting it first.
local function ms(x) return max(1, min(ceil(x), 1e12)) end

-- A rate bucket's state is "tat capacity rate" (the latter two as the gateway spelled them, so an
-- unchanged limit is recognised without parsing); it expires once full again, at the end of the
-- 10-second step (1e7 us) in which its tat + 1 s falls. A write whose tat ends in the same step
-- keeps the expiry already set (SET KEEPTTL costs Redis less than half of SET PX, which Redis 7
-- rewrites for propagation). A state written so starts with '+', which older gateways read as the
-- same number; one without it (an older gateway's: its expiry not aligned) is given one with PX.
-- In a decide_many call, a bucket that more than one of its decisions touch (a tenant whose
-- requests one turn of a worker's loop brought together) is read from Redis once and written
-- once, as the call ends, not once a decision: `held_keys` names those keys; `held` has each
-- one's state as the call has left it so far (false: none), `held_kept` the step of the expiry
-- its key has in Redis, `held_step` the step its state's expiry falls in, and `held_order` the
-- keys written, in order. Every other key is read and written at once.
-- (Made by the decide_many call that has such keys.)
local held_keys, held, held_kept, held_step, held_order
-- A decision call's keys are read all at once, before anything is written: one MGET costs Redis
-- less than a GET a key (~0.5 us less a key, half a GET). `fetched[i]` is KEYS[i]'s value, false
-- if none or not a string (a quota's or a queue's key, which reads its own way); valid for a
-- key's first read in the call, as every key is read before it is written (held or touched once).
-- (unpack puts each key on Lua's stack, which holds ~8000: past 1000 keys, each is read alone.)
local fetched = nil
-- What all but a decision on rate buckets alone (nearly every call) use, made by the first use
-- in a call: a rate bucket's state read and written (settlements, leases, a key held or not
-- fetched, a reload), H.dur and H.reply_num for verdicts out of the common range, concurrency
-- (H.in_use) and the ranked queues (H.place_ticket, H.drop_place, H.purge_places,
-- H.units_before and H.keep_places).
-- A ranked queue ('p'): <key> holds the next free start; <key>:t the waiting places
-- ("<ticket>|<units>") scored by class * 2^40 + arrival; <key>:h the same places scored by when
-- their holder must next ask (5e6 us: a waiter asks at least every 0.5 s,
-- RedisStore::k_turn_poll; a replica that died stops asking and its places go); <key>:c each
-- ticket's latest start (its admission + max_wait); <key>:d the tickets displaced and not yet told.
local H = nil
local function helpers()
  if H then return H end
  H = {}
  -- (Written out where a decision reads and writes a state: a Lua call costs Redis more than it.)
  function H.expiry_step(tat)
    local step = (tat + 1000000) / 1e7
    return step - step % 1
  end
  -- `pre`: the key's value as fetched (false: none), or nil if not fetched.
  function H.read_held(key, pre)
    local v = held[key]
    if v == nil then
      if pre ~= nil then v = pre else v = redis_call('GET', key) end
      held[key] = v
      held_kept[key] = v and byte(v, 1) == 43 and H.expiry_step(tonumber(sub(v, 2, find(v, ' ', 1, true) - 1))) or nil
    end
    return v
  end
  -- Writes a rate bucket's state (false: deletes its key, full again), or holds it for the call's
  -- end; `step` is the step its expiry falls in, `kept` that of the expiry the key has (nil: not
  -- known).
  function H.write_rate(key, value, step, kept)
    if held_keys and held_keys[key] then
      if held_step[key] == nil then held_order[#held_order + 1] = key end
      held[key], held_step[key] = value, step or false
    elseif not value then
      redis_call('DEL', key)
    elseif step == kept then
      redis_call('SET', key, value, 'KEEPTTL')
    else
      redis_call('SET', key, value, 'PX', ms(((step + 1) * 1e7 - now) / 1000))
    end
  end
  function H.write_held()
    if not held_keys then return end
    held_keys = nil  -- from here on, each goes to Redis
    for _, key in ipairs(held_order) do H.write_rate(key, held[key], held_step[key], held_kept[key]) end
  end
  -- A state written under other limit sizes (a reload): its level kept in absolute units and
  -- clamped to the new capacity; returns the tat of that level under the new sizes.
  function H.resized(v, tat, cap, rate)
    local c, r = match(v, ' (%S+) (%S+)$')
    c, r = tonumber(c), tonumber(r)
    local level = min(c - max(0, tat - now) * r / 1e6, cap)
    return now + (cap - level) * 1e6 / rate
  end
  -- The tat, and the step of the expiry the key has (nil: not known). The limit comes parsed and
  -- as the gateway spelled it ("capacity rate", as a state repeats it); `initial`, the fill of a
  -- bucket not there, as spelled. (A decision, which has its states fetched, does this written out.)
  function H.load_rate(key, cap, rate, spelled, initial)
    local v
    if held_keys and held_keys[key] then v = H.read_held(key) else v = redis_call('GET', key) end
    if not v then return now + cap * (1 - parse(initial)) * 1e6 / rate, nil end
    -- The cheap check first: the limit as the gateway spells it. (Lua interns strings: a substring
    -- equal to the spelled limit is that string, found, not a new one; compared in place with
    -- find instead, Redis counted 0.9% more instructions.)
    local sp = find(v, ' ', 1, true)
    local tat = tonumber(sub(v, 1, sp - 1))
    local kept = nil
    if byte(v, 1) == 43 then  -- '+'
      kept = (tat + 1000000) / 1e7
      kept = kept - kept % 1
    end
    if sub(v, sp + 1) ~= spelled then tat = H.resized(v, tat, cap, rate) end
    return tat, kept
  end
  function H.save_rate(key, tat, spelled, kept)
    if tat <= now then
      -- Full: as if it were not there. A key that expires at this step's end anyway stays, full,
      -- until then, as memory keeps a full bucket until its sweep: the decision that follows a
      -- refund then keeps that expiry (SET KEEPTTL) instead of setting one (SET PX).
      if kept ~= H.expiry_step(now) then return H.write_rate(key, false) end
      tat = now
    end
    local step = (tat + 1000000) / 1e7
    H.write_rate(key, '+' .. num(tat) .. ' ' .. spelled, step - step % 1, kept)
  end
  -- A duration in ns from us, whole, saturated at 2^62.
  function H.dur(x)
    x = x * 1000 + 0.5
    if x ~= x or x > 2^62 then return 2^62 elseif x < -2^62 then return -2^62 end
    return x - x % 1
  end
  function H.reply_num(x)
    if x % 1 == 0 and x > -2^53 and x < 2^53 then return x end
    return format('%.17g', x)
  end
  -- Concurrency: a sorted set of leases ("<request>|<amount>") scored by expiry.
  function H.in_use(key)
    redis_call('ZREMRANGEBYSCORE', key, '-inf', now)
    local used = 0
    for _, m in ipairs(redis_call('ZRANGE', key, 0, -1)) do
      used = used + tonumber(match(m, '|([^|]+)$'))
    end
    return used
  end
  function H.place_ticket(member) return match(member, '^(.*)|') end
  function H.drop_place(key, member)
    redis_call('ZREM', key .. ':t', member)
    redis_call('ZREM', key .. ':h', member)
    redis_call('HDEL', key .. ':c', H.place_ticket(member))
  end
  function H.purge_places(key)
    for _, m in ipairs(redis_call('ZRANGEBYSCORE', key .. ':h', '-inf', now)) do H.drop_place(key, m) end
  end
  -- The units of the places ranked before `rank`, and how many they are.
  function H.units_before(key, rank)
    local sum, ids = 0, redis_call('ZRANGEBYSCORE', key .. ':t', '-inf', '(' .. format('%.17g', rank))
    for _, m in ipairs(ids) do sum = sum + tonumber(match(m, '|([^|]+)$')) end
    return sum, #ids
  end
  function H.keep_places(key, ttl)
    for _, suffix in ipairs({':t', ':h', ':c', ':d', ':n'}) do
      if redis_call('EXISTS', key .. suffix) == 1 then redis_call('PEXPIRE', key .. suffix, ttl) end
    end
  end
  return H
end
if op == 'heartbeat' then
  local ttl = tonumber(ARGV[4])
  redis_call('ZADD', KEYS[1], now + ttl * 1000, ARGV[3])
  redis_call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now)
  redis_call('PEXPIRE', KEYS[1], ms(ttl * 2))
  return redis_call('ZCARD', KEYS[1])
end

if op == 'settle' or op == 'settle_batch' then
  -- Settles one request: keys[k + 1 .. k + n]; ARGV[a] its lease, ARGV[a + 1] its marker, then
  -- four per key (kind, capacity, rate, amount). A marker is a batch's (one per hash tag, so one
  -- per batch outside a cluster): its settlements apply once, all of them or, if the marker was
  -- there already (a retried batch that did land), none. It comes before their keys: in a
  -- cluster, a key whose slot has moved fails there, before anything under that marker is written.
  local marked = {}
  local function settle(keys, k, a, n)
    local marker = ARGV[a + 1]
    if marker ~= '' then
      local first = marked[marker]
      if first == nil then
        -- Unsealed (no batch named): every settlement would share it, and all but the first be lost.
        if sub(marker, -8) == 'settled:' then error('unsealed settlement marker ' .. marker) end
        first = redis_call('SET', marker, 1, 'NX', 'PX', 120000) and true or false
        marked[marker] = first
      end
      if not first then return end
    end
    for i = 1, n do
      local key = keys[k + i]
      local b = a + 2 + (i - 1) * 4
      local kind, cap_s, rate_s = ARGV[b], ARGV[b + 1], ARGV[b + 2]
      if kind == 'c' then
        redis_call('ZREM', key, ARGV[a] .. '|' .. ARGV[b + 3])
      elseif kind == 'q' then
        -- A quota's key names its window: a window that has ended (and expired) takes nothing.
        if redis_call('EXISTS', key) == 1 then
          local used = tonumber(redis_call('HINCRBYFLOAT', key, 'u', ARGV[b + 3]))
          if used < 0 then redis_call('HSET', key, 'u', '0')
          elseif used > 1e18 then redis_call('HSET', key, 'u', num(1e18)) end
        end
      else
        local cap, rate, delta, spelled = parse(cap_s), parse(rate_s), parse(ARGV[b + 3]), cap_s .. ' ' .. rate_s
        local loaded, kept = helpers().load_rate(key, cap, rate, spelled, '1')
        local tat = max(loaded, now)
        if delta >= 0 then
          -- Debt is paid back, not forgiven: no floor at -C (SPEC §17).
          tat = min(tat + delta * 1e6 / rate, now + (cap + 1e18) * 1e6 / rate)
        else
          tat = max(tat - (-delta) * 1e6 / rate, now)
        end
        helpers().save_rate(key, tat, spelled, kept)
      end
    end
  end

  if op == 'settle' then
    settle(KEYS, 0, 3, #KEYS)
    return 1
  end
  -- Many settlements, in order: from ARGV[3], each is its key count, then settle()'s arguments.
  -- With no keys declared (a cluster shard's batch, of many slots), ARGV[3] counts the keys that
  -- follow it, and the settlements come after them.
  local keys, k, a = KEYS, 0, 3
  if #KEYS == 0 then
    local count = tonumber(ARGV[3])
    keys = {}
    for i = 1, count do keys[i] = ARGV[3 + i] end
    a = 4 + count
  end
  while a <= #ARGV do
    local n = tonumber(ARGV[a])
    settle(keys, k, a + 1, n)
    k = k + n
    a = a + 3 + 4 * n
  end
  return 1
end

-- A replica's lease of a shared rate bucket (SPEC §18): up to ARGV[5] units taken at once, none
-- unless at least ARGV[6] are there. ARGV[3], ARGV[4]: capacity and rate; ARGV[7]: the initial
-- fill. Reply {granted, the level after}.
if op == 'lease' then
  local cap_s, rate_s = ARGV[3], ARGV[4]
  local cap, rate, want, least = tonumber(cap_s), tonumber(rate_s), tonumber(ARGV[5]), tonumber(ARGV[6])
  local spelled = cap_s .. ' ' .. rate_s
  local loaded, kept = helpers().load_rate(KEYS[1], cap, rate, spelled, ARGV[7])
  local tat = max(loaded, now)
  local level = cap - (tat - now) * rate / 1e6
  local grant = min(want, level)
  if not (grant + 1e-3 >= least) or grant <= 0 then return {'0', num(level)} end
  helpers().save_rate(KEYS[1], tat + grant * 1e6 / rate, spelled, kept)
  return {num(grant), num(level - grant)}
end

-- Admin: a quota's top-up (ARGV[3], may be 0) and reset (ARGV[4] == '1'); ARGV[5]: its TTL in ms.
if op == 'quota' then
  if ARGV[4] == '1' then redis_call('DEL', KEYS[1]) end
  if tonumber(ARGV[3]) ~= 0 and tonumber(redis_call('HINCRBYFLOAT', KEYS[1], 'a', ARGV[3])) > 1e18 then
    redis_call('HSET', KEYS[1], 'a', num(1e18))
  end
  if redis_call('EXISTS', KEYS[1]) == 1 then redis_call('PEXPIRE', KEYS[1], ms(tonumber(ARGV[5]))) end
  local v = redis_call('HMGET', KEYS[1], 'u', 'a')
  return {num(tonumber(v[1] or '0')), num(tonumber(v[2] or '0'))}
end


-- A waiter asks whether its place has come: ARGV[3] its place, ARGV[4] the rate, ARGV[5] the
-- drift allowed past its latest start (us); or leaves.
-- Reply {outcome, wait_ns}: 0 wait, 1 started, 2 displaced, 3 unknown.
if op == 'turn' or op == 'leave' then
  local h = helpers()
  local key, member = KEYS[1], ARGV[3]
  local ticket = h.place_ticket(member)
  local was_displaced = redis_call('SREM', key .. ':d', ticket) == 1
  if op == 'leave' then
    h.drop_place(key, member)
    return {3, 0}
  end
  if was_displaced then return {2, 0} end
  h.purge_places(key)
  local rank = redis_call('ZSCORE', key .. ':t', member)
  if not rank then return {3, 0} end
  local rate = tonumber(ARGV[4])
  local next_free = tonumber(redis_call('GET', key) or '0')
  local ahead, n = h.units_before(key, tonumber(rank))
  local start = max(now, next_free) + ahead * 1e6 / rate
  if start > tonumber(redis_call('HGET', key .. ':c', ticket) or '0') + tonumber(ARGV[5]) then
    h.drop_place(key, member)
    return {2, 0}
  end
  if n == 0 and next_free <= now then
    h.drop_place(key, member)
    local after = now + tonumber(match(member, '|([^|]+)$')) * 1e6 / rate
    redis_call('SET', key, num(after), 'PX', ms((after - now) / 1000 + 1000))
    return {1, 0}
  end
  redis_call('ZADD', key .. ':h', now + 5e6, member)
  return {0, h.dur(start - now)}
end

-- What a decision keeps of each limit between checking it and charging it, by the limit's
-- index: shared by the decisions of a call, as a table made per limit costs a rate bucket's
-- whole arithmetic. `oks[i]`: false if refused, else the tat a rate bucket's charge leaves, or
-- true; `more[i]`: a rate bucket's step of its key's expiry (nil: not known), what a queue's or
-- a quota's charge needs. (What the limit itself is, is read again where it is charged.)
local oks, more = {}, {}

-- The decisions: one (decide, peek), or those that a worker had at once (decide_many: the
-- script's start, TIME and the call's framing paid once, SPEC §18). In decide_many, after the
-- keys they share, the limits' arguments and the shapes (below), each decision is its shape's
-- index, then each limit's amount; a decision that holds something under a lease sends its
-- shape's index negated, then its lease and the lease's ms (two strings fewer for Redis to make
-- for every other). Each is decided on its own, in order, exactly as if it were its own call;
-- the reply is their limits' verdicts one after another (one array: Redis converts a nested one
-- element by element too).
local commit = op == 'decide' or op == 'decide_many'
local out, o, k, a, args_end, shapes
if op == 'decide_many' then
  -- ARGV[3]: how many keys more than one decision touches (the gateway found them: a scan here
  -- would cost Redis ~0.5 us a decision); they follow it.
  local repeated = parse(ARGV[3])
  if repeated > 0 then
    held_keys, held, held_kept, held_step, held_order = {}, {}, {}, {}, {}
    for i = 4, 3 + repeated do held_keys[ARGV[i]] = true end
  end
  -- Then how many distinct limits' arguments the call has, and those, eight each (the amount
  -- left empty): most of a tier's decisions share them, which the gateway then sends once. Each
  -- is read once a call (read and parsed for every decision instead, a call cost Redis ~8% more):
  -- kind, capacity, rate, "capacity rate" as spelled, enforced, where its arguments start.
  local limits, at = {}, 5 + repeated
  for p = 1, parse(ARGV[4 + repeated]) do
    local cap_s, rate_s = ARGV[at + 1], ARGV[at + 2]
    limits[p] = {ARGV[at], parse(cap_s), parse(rate_s), cap_s .. ' ' .. rate_s, ARGV[at + 4] == '1', at}
    at = at + 8
  end
  -- Then how many shapes, and each: its limits' count and their places among those (1-based).
  -- A decision's shape is the list of its limits, which one tier's decisions share.
  shapes = {}
  for s = 1, parse(ARGV[at]) do
    local n, shape = parse(ARGV[at + 1]), {}
    for i = 1, n do shape[i] = limits[parse(ARGV[at + 1 + i])] end
    shapes[s] = shape
    at = at + 1 + n
  end
  out, o, k, a, args_end = {}, 0, 0, at + 1, #ARGV
else
  -- Sized by its constructor for two limits (filling an empty table one entry at a time rehashes
  -- it each time the size doubles); Redis's reply ends at the first nil.
  out, o, k, a, args_end = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0}, 0, 0, 3, 3
end
if #KEYS > 1 and #KEYS <= 1000 then fetched = redis_call('MGET', unpack(KEYS)) end

-- One decision: every limit is checked first; only if every enforced one admits is any charged
-- (`commit`). Its keys are KEYS[k + 1 .. k + n]; `lease` and `lease_ms` what it holds under;
-- its items from ARGV[a + 2], eight per key; or, given its `shape` (decide_many), its limits as
-- read above, and from ARGV[a + 1] each one's amount. Its verdict goes into out from o + 1: the
-- time and whether all admit (not in decide_many, whose gateway reads neither), then each
-- limit's. (Written out in the call's body, not as a function: a function's upvalues are made
-- each call, and each use of one is an instruction more.)
while a <= args_end do
  local shape, n, lease, lease_ms
  if shapes then
    local index = parse(ARGV[a])
    lease, lease_ms = '', ''
    if index < 0 then index, lease, lease_ms, a = -index, ARGV[a + 1], ARGV[a + 2], a + 2 end
    shape = shapes[index]
    n = #shape
  else
    n, lease, lease_ms = #KEYS, ARGV[3], ARGV[4]
  end
  local allowed = true
  local w = o
  if not shape then
    out[o + 1] = now_whole
    out[o + 2] = 1
    w = o + 2
  end
  for i = 1, n do
    local key = KEYS[k + i]
    local kind, cap, rate, spelled, enforce, b, amount_s
    if shape then
      local limit = shape[i]
      kind, cap, rate, spelled, enforce, b = limit[1], limit[2], limit[3], limit[4], limit[5], limit[6]
      amount_s = ARGV[a + i]
    else
      b = a + 2 + (i - 1) * 8
      local cap_s, rate_s = ARGV[b + 1], ARGV[b + 2]
      kind, cap, rate, spelled, enforce = ARGV[b], parse(cap_s), parse(rate_s), cap_s .. ' ' .. rate_s, ARGV[b + 4] == '1'
      amount_s = ARGV[b + 3]
    end
    local amount = parsed[amount_s] or parse(amount_s)
    local admitted, remaining, until_full, retry, wait, extra = false, 0, 0, 0, 0, 0
    local s = nil
    if kind == 'q' then
      -- A calendar quota: a hash {u = used, a = top-ups} under a key naming its window, which
      -- the gateway computed in its time zone; ARGV[b + 5] is the microseconds left in it.
      local v = redis_call('HMGET', key, 'u', 'a')
      local used, added = tonumber(v[1] or '0'), tonumber(v[2] or '0')
      local allowance = cap + added
      local slack = 1e-9 * max(1, allowance)
      local left = tonumber(ARGV[b + 5])
      until_full = left
      if not (amount <= allowance + slack) then
        retry = -1
      elseif used + amount <= allowance + slack then
        admitted = true
      else
        retry = left
      end
      remaining = allowance - used - (admitted and amount or 0)
      extra = added
      s = {left = left}
    elseif kind == 'r' then
      -- load_rate written out for a state fetched (nearly every one): a Lua call, and passing it
      -- six values, cost Redis more than its lines.
      local v = fetched and fetched[k + i]
      local tat, kept
      if v == nil then
        tat, kept = helpers().load_rate(key, cap, rate, spelled, ARGV[b + 5])
      else
        if held_keys and held_keys[key] then v = helpers().read_held(key, v) end
        if not v then
          tat = now + cap * (1 - parse(ARGV[b + 5])) * 1e6 / rate
        else
          local sp = find(v, ' ', 1, true)
          tat = tonumber(sub(v, 1, sp - 1))
          if byte(v, 1) == 43 then  -- '+'
            kept = (tat + 1000000) / 1e7
            kept = kept - kept % 1
          end
          if sub(v, sp + 1) ~= spelled then tat = helpers().resized(v, tat, cap, rate) end
        end
      end
      local tau = cap * 1e6 / rate
      local base = tat
      if base < now then base = now end
      -- Relative to now: at 1e15 units and 1e-3/s, tau is 1e24 us, where (now + tau) - now
      -- would lose the comparison to rounding.
      local after = (base - now) + amount * 1e6 / rate
      local new_tat = base + amount * 1e6 / rate
      -- More than the bucket can ever hold is refused before any time arithmetic, as in memory.
      admitted = amount <= cap and after <= tau + 1e-3
      if admitted then
        until_full = after
        remaining = cap - until_full * rate / 1e6
      else
        until_full = base - now
        remaining = cap - max(0, tat - now) * rate / 1e6
        if amount > cap then retry = -1 else retry = new_tat - tau - now end
      end
      oks[i], more[i] = admitted and new_tat, kept
    elseif kind == 'c' then
      local used = helpers().in_use(key)
      admitted = used + amount <= cap + 1e-3
      if admitted then remaining = cap - used - amount else remaining = cap - used end
      if amount > cap then retry = -1 elseif not admitted then retry = 1e6 end
    elseif kind == 'p' then
      local h = helpers()
      h.purge_places(key)
      local next_free = tonumber(redis_call('GET', key) or '0')
      local waiting = redis_call('ZCARD', key .. ':t')
      local max_wait, units, class = tonumber(ARGV[b + 5]), tonumber(ARGV[b + 6]), tonumber(ARGV[b + 7])
      local start = max(now, next_free)
      s = {next_free = start + units * 1e6 / rate, class = class, units_s = ARGV[b + 6], max_wait = max_wait}
      if units * 1e6 / rate > max_wait + 1e-3 then
        retry, remaining, until_full = -1, cap - waiting, start - now
      elseif waiting == 0 and next_free <= now then
        admitted, remaining = true, cap
      else
        -- Every place of its class or a higher one is ahead of it; a full queue gives it the
        -- newest place of the lowest class below its own.
        local ahead = h.units_before(key, (class + 1) * 2^40)
        local mine = start + ahead * 1e6 / rate
        local victim
        if waiting + 1 > cap then
          local last = redis_call('ZRANGE', key .. ':t', -1, -1, 'WITHSCORES')
          if last[1] and tonumber(last[2]) >= (class + 1) * 2^40 then victim = last[1] end
        end
        until_full = mine - now
        if waiting + 1 > cap and not victim then
          remaining = 0
          retry = max(0.001, start - now)
        elseif mine - now > max_wait + 1e-3 then
          remaining = cap - waiting
          retry = mine - now - max_wait
        else
          admitted = true
          remaining = cap - waiting - (victim and 0 or 1)
          wait, extra = mine - now, 1
          s.victim, s.queued = victim, true
        end
      end
    else
      local qkey = key .. ':q'
      local next_free = tonumber(redis_call('GET', key) or '0')
      redis_call('ZREMRANGEBYSCORE', qkey, '-inf', now)
      local waiting = redis_call('ZCARD', qkey)
      local max_wait, units = tonumber(ARGV[b + 5]), tonumber(ARGV[b + 6])
      local start = max(now, next_free)
      if units * 1e6 / rate > max_wait + 1e-3 then
        -- unit: cost, a slot longer than max_wait: it would hold everyone behind it past theirs.
        retry, remaining, until_full = -1, cap - waiting, start - now
      elseif waiting == 0 and next_free <= now then
        admitted, remaining = true, cap
      else
        until_full = start - now
        if waiting + 1 > cap then
          local head = redis_call('ZRANGE', qkey, 0, 0, 'WITHSCORES')
          remaining = 0
          retry = max(0.001, (tonumber(head[2]) or now) - now)
        elseif start - now > max_wait + 1e-3 then
          remaining = cap - waiting
          retry = start - now - max_wait
        else
          admitted = true
          remaining = cap - waiting - 1
          wait = start - now
        end
      end
      s = {qkey = qkey, start = start, next_free = start + units * 1e6 / rate}
    end
    if enforce and not admitted then allowed = false end
    if kind ~= 'r' then oks[i], more[i] = admitted, s end
    -- A limit's verdict: admitted, remaining, until full; then retry, wait and extra, which
    -- are nearly always 0 and then not sent (Redis turns each element into RESP): admitted is
    -- 0 or 1 for three elements, 2 or 3 for six.
    local a01 = admitted and 1 or 0
    if retry == 0 and wait == 0 and extra == 0 then
      -- reply_num and dur written out for their common case: two Lua calls fewer a limit.
      local r, u = remaining, until_full * 1000 + 0.5
      if r % 1 ~= 0 or r <= -2^53 or r >= 2^53 then r = helpers().reply_num(r) end
      if u > -2^62 and u < 2^62 then u = u - u % 1 else u = helpers().dur(until_full) end
      out[w + 1], out[w + 2], out[w + 3] = a01, r, u
      w = w + 3
    else
      local h = helpers()
      out[w + 1], out[w + 2], out[w + 3] = a01 + 2, h.reply_num(remaining), h.dur(until_full)
      out[w + 4] = retry == 0 and 0 or h.dur(retry)
      out[w + 5] = wait == 0 and 0 or h.dur(wait)
      out[w + 6] = extra == 0 and 0 or h.reply_num(extra)
      w = w + 6
    end
  end
  if not allowed and not shape then out[o + 2] = 0 end
  if commit and allowed then
    for i = 1, n do
      local key, ok, s = KEYS[k + i], oks[i], more[i]
      if ok then
        local kind, spelled, amount_s
        if shape then
          local limit = shape[i]
          kind, spelled, amount_s = limit[1], limit[4], ARGV[a + i]
        else
          local b = a + 2 + (i - 1) * 8
          kind, spelled, amount_s = ARGV[b], ARGV[b + 1] .. ' ' .. ARGV[b + 2], ARGV[b + 3]
        end
        if kind == 'r' then
          local tat = ok
          if tat > now and not (held_keys and held_keys[key]) then
            -- save_rate written out for a state neither full nor held (nearly every one), its time
            -- formatted into the state at once when whole.
            local step = (tat + 1000000) / 1e7
            step = step - step % 1
            local state
            if tat % 1 == 0 and tat < 2^53 then
              state = format('+%d %s', tat, spelled)
            else
              state = '+' .. num(tat) .. ' ' .. spelled
            end
            if step == s then
              redis_call('SET', key, state, 'KEEPTTL')
            else
              redis_call('SET', key, state, 'PX', ms(((step + 1) * 1e7 - now) / 1000))
            end
          else
            helpers().save_rate(key, tat, spelled, s)
          end
        elseif kind == 'q' then
          -- Kept a day past the window's end, for settlements still on their way.
          redis_call('HINCRBYFLOAT', key, 'u', amount_s)
          redis_call('PEXPIRE', key, ms(s.left / 1000 + 86400000))
        elseif kind == 'c' then
          local held_ms = tonumber(lease_ms)
          redis_call('ZADD', key, now + held_ms * 1000, lease .. '|' .. amount_s)
          redis_call('PEXPIRE', key, ms(held_ms))
        elseif kind == 'p' then
          local h = helpers()
          if s.queued then
            if s.victim then
              h.drop_place(key, s.victim)
              redis_call('SADD', key .. ':d', h.place_ticket(s.victim))
            end
            local member = lease .. ':' .. i .. '|' .. s.units_s
            redis_call('ZADD', key .. ':t', s.class * 2^40 + redis_call('INCR', key .. ':n'), member)
            redis_call('ZADD', key .. ':h', now + 5e6, member)  -- its first ask is due within that
            redis_call('HSET', key .. ':c', lease .. ':' .. i, num(now + s.max_wait))
            h.keep_places(key, ms(s.max_wait / 1000 + 60000))
          else
            redis_call('SET', key, num(s.next_free), 'PX', ms((s.next_free - now) / 1000 + 1000))
          end
        else
          local ttl = ms((s.next_free - now) / 1000 + 1000)
          redis_call('SET', key, num(s.next_free), 'PX', ttl)
          if s.start > now then
            redis_call('ZADD', s.qkey, s.start, lease .. ':' .. i)
            redis_call('PEXPIRE', s.qkey, ttl)
          end
        end
      end
    end
  end
  o = w
  k = k + n
  a = shape and a + 1 + n or args_end + 1
end
if shapes then
  if held_keys then helpers().write_held() end
  return out
end
for j = o + 1, 14 do out[j] = nil end
return out
)lua";

char kind_of(const config::LimitSpec& spec) {
    if (spec.algorithm == config::Algorithm::concurrency) return 'c';
    if (spec.algorithm == config::Algorithm::quota) return 'q';
    if (limiter::is_shaping(spec)) return spec.ranked ? 'p' : 's';
    return 'r';
}

double micros(core::Nanos ns) { return static_cast<double>(ns) / 1000.0; }

double max_wait_us(const config::LimitSpec& spec) {
    // Without max_wait, a request may wait as long as a full queue of single units takes.
    double max_wait_s = spec.max_wait > 0 ? static_cast<double>(spec.max_wait) / 1e9 : spec.capacity / spec.rate_per_s;
    return max_wait_s * 1e6;
}

/// The schedule a request holds in a shaping queue, as the script reads it.
std::string place_units(const limiter::Charge& c) {
    return number_text(c.spec->unit == config::Unit::cost ? c.amount : 1.0);
}

std::string time_arg(double now_us) { return now_us < 0 ? std::string() : number_text(now_us); }

bool is_integer(const Reply& r) { return r.type == Reply::Type::integer; }

/// How many elements the limit's verdict at the front of `rest` has: 3 (its first, admitted,
/// is 0 or 1: no retry, wait or extra) or 6 (2 or 3); 0 if it is neither or cut short.
std::size_t limit_verdict_size(std::span<const Reply> rest) {
    if (rest.empty() || !is_integer(rest[0])) return 0;
    auto first = rest[0].integer;
    std::size_t size = first == 0 || first == 1 ? 3 : first == 2 || first == 3 ? 6 : 0;
    return size <= rest.size() ? size : 0;
}

/// A number the script sent as text (%.17g) or, when whole, as an integer.
std::optional<double> number_of(const Reply& r) {
    if (r.type == Reply::Type::integer) return static_cast<double>(r.integer);
    double value = 0;
    auto [p, ec] = std::from_chars(r.str.data(), r.str.data() + r.str.size(), value);
    if (r.type != Reply::Type::string || ec != std::errc{} || p != r.str.data() + r.str.size()) return std::nullopt;
    return value;
}

}  // namespace

std::string_view limiter_script() { return k_script; }

std::string number_text(double value) {
    // A decision's limits, amounts and lease length are mostly whole: the integer path.
    char buf[32];
    return std::string(buf, core::write_shortest_number(buf, value));
}

std::string KeySpace::tag(const limiter::Charge& charge) const {
    if (!cluster) return std::string(prefix);
    std::string tag;
    if (charge.level == config::Level::tenant) {
        tag.reserve(prefix.size() + charge.tenant.size() + 4);
        tag.append("{").append(prefix).append("t:").append(charge.tenant).append("}");
    } else {
        tag.reserve(prefix.size() + charge.key.size() + 2);
        tag.append("{").append(prefix).append(charge.key.view()).append("}");
    }
    return tag;
}

std::string KeySpace::key(const limiter::Charge& charge, const core::CalendarWindow& window) const {
    auto key = tag(charge);
    // A shared limit's tag is its whole key already.
    if (!cluster || charge.level == config::Level::tenant) key += charge.key.view();
    // A quota's key also names its window (its start, in Unix seconds), so that each window is
    // its own key that expires a day after it ends.
    if (charge.spec->algorithm == config::Algorithm::quota) {
        key += ':';
        key += std::to_string(window.start / core::k_nanos_per_second);
    }
    return key;
}

std::string KeySpace::marker(const limiter::Charge& charge) const { return tag(charge).append(k_marker); }

std::string KeySpace::replicas() const { return std::string(prefix) + "replicas"; }

QuotaWindows quota_windows(std::span<const limiter::Charge> charges, core::Nanos unix_now) {
    QuotaWindows out(charges.size());
    for (std::size_t i = 0; i < charges.size(); ++i) {
        const auto& spec = *charges[i].spec;
        if (spec.algorithm == config::Algorithm::quota)
            out[i] = core::calendar_window(*spec.zone, spec.period, unix_now);
    }
    return out;
}

bool holds_under_lease(std::span<const limiter::Charge> charges) {
    return std::any_of(charges.begin(), charges.end(), [](const limiter::Charge& c) {
        auto kind = kind_of(*c.spec);
        return kind == 'c' || kind == 's' || kind == 'p';
    });
}

ScriptCall decide_call(std::string_view sha, const KeySpace& keys, std::span<const limiter::Charge> charges,
                       std::span<const core::CalendarWindow> windows, core::Nanos unix_now, bool commit,
                       std::string_view lease, double lease_ms, double now_us) {
    ScriptCall call;
    auto& a = call.args;
    a.reserve(3 + charges.size() * 9 + 4);
    a.emplace_back("EVALSHA");
    a.emplace_back(sha);
    a.push_back(std::to_string(charges.size()));
    for (std::size_t i = 0; i < charges.size(); ++i) a.push_back(keys.key(charges[i], windows[i]));
    a.emplace_back(commit ? "decide" : "peek");
    a.push_back(time_arg(now_us));
    a.emplace_back(lease);
    // Two strings fewer for Redis to make a decision when nothing is held under the lease.
    a.push_back(lease.empty() ? std::string() : number_text(lease_ms));
    for (std::size_t i = 0; i < charges.size(); ++i) {
        const auto& c = charges[i];
        const auto& spec = *c.spec;
        char kind = kind_of(spec);
        a.emplace_back(1, kind);
        a.push_back(number_text(spec.capacity));
        a.push_back(number_text(spec.current_rate()));
        a.push_back(number_text(c.amount));
        a.emplace_back(spec.enforce ? "1" : "0");
        if (kind == 's' || kind == 'p') {
            a.push_back(number_text(max_wait_us(spec)));
            a.push_back(place_units(c));
            a.push_back(std::to_string(static_cast<int>(c.priority)));
        } else if (kind == 'q') {
            a.push_back(number_text(micros(std::max<core::Nanos>(0, windows[i].end - unix_now))));
            a.emplace_back("0");
            a.emplace_back("0");
        } else {
            a.push_back(number_text(spec.algorithm == config::Algorithm::token_bucket ? spec.initial : 1.0));
            a.emplace_back("0");
            a.emplace_back("0");
        }
    }
    return call;
}

namespace {
/// A call's key count (EVALSHA sha n key...), which this file wrote itself.
std::size_t key_count(const std::vector<std::string>& call) {
    std::size_t n = 0;
    std::from_chars(call[2].data(), call[2].data() + call[2].size(), n);
    return n;
}
// For calls that several calls' arguments (EVALSHA sha n key... argv...) make one.
std::size_t all_keys(std::span<const std::vector<std::string>> calls) {
    std::size_t keys = 0;
    for (const auto& c : calls) keys += key_count(c);
    return keys;
}
void append_keys(std::vector<std::string>& a, std::span<const std::vector<std::string>> calls) {
    for (const auto& c : calls)
        a.insert(a.end(), c.begin() + 3, c.begin() + 3 + static_cast<std::ptrdiff_t>(key_count(c)));
}
/// Moves `from`'s elements [first, last) onto the end of `a`.
void move_onto(std::vector<std::string>& a, std::vector<std::string>& from, std::size_t first, std::size_t last) {
    a.insert(a.end(), std::make_move_iterator(from.begin() + static_cast<std::ptrdiff_t>(first)),
             std::make_move_iterator(from.begin() + static_cast<std::ptrdiff_t>(last)));
}
/// The keys that more than one of `decisions` touches, each once.
std::vector<std::string_view> repeated_keys(std::span<const std::vector<std::string>> decisions) {
    std::vector<std::string_view> keys;
    for (const auto& d : decisions)
        keys.insert(keys.end(), d.begin() + 3, d.begin() + 3 + static_cast<std::ptrdiff_t>(key_count(d)));
    std::sort(keys.begin(), keys.end());
    std::vector<std::string_view> repeated;
    for (std::size_t i = 1; i < keys.size(); ++i)
        if (keys[i] == keys[i - 1] && (repeated.empty() || repeated.back() != keys[i])) repeated.push_back(keys[i]);
    return repeated;
}
std::size_t marker_index(const std::vector<std::string>& settlement) {
    return 3 + key_count(settlement) + 3;  // EVALSHA sha n key... 'settle' time lease marker
}
}  // namespace

namespace {
// A decide_call's limit: its eight items from 3 + n + 4 + 8i (n its key count); the fourth is
// its amount, which differs between requests where the rest of a tier's limit does not.
constexpr std::size_t k_amount = 3;
// Only the first distinct ones are looked through: a tier's shared limits come first (in its
// first decision), and a limit that differs in each (a quota's time left) does not make a call
// quadratic.
constexpr std::size_t k_limits_looked_through = 32;
bool same_limit(const std::vector<std::string>& x, std::size_t at_x, const std::vector<std::string>& y,
                std::size_t at_y) {
    for (std::size_t j = 0; j < 8; ++j)
        if (j != k_amount && x[at_x + j] != y[at_y + j]) return false;
    return true;
}

/// What a decide_many call sends once: its distinct limits (where each one's items are), and
/// its shapes (each a decision's limits, by their places among those, 1-based), with each
/// decision's shape.
struct Layout {
    struct Limit {
        std::size_t decision, at;
    };
    struct Shape {
        std::size_t first, size;  // its places in `places`
    };
    std::size_t limits_in_all = 0;
    std::vector<Limit> limits;
    std::vector<std::uint32_t> places;  // each shape's limits' places, in order
    std::vector<Shape> shapes;
    std::vector<std::uint32_t> shape_of;  // each decision's shape (1-based)
};

Layout lay_out(std::span<const std::vector<std::string>> decisions) {
    Layout out;
    for (const auto& d : decisions) out.limits_in_all += key_count(d);
    out.limits.reserve(out.limits_in_all);
    out.places.reserve(out.limits_in_all);
    out.shape_of.reserve(decisions.size());
    auto& places = out.places;
    for (std::size_t di = 0; di < decisions.size(); ++di) {
        const auto& d = decisions[di];
        auto n = key_count(d);
        Layout::Shape mine{places.size(), n};
        for (std::size_t i = 0, at = 3 + n + 4; i < n; ++i, at += 8) {
            std::size_t p = 0;
            auto looked = std::min(out.limits.size(), k_limits_looked_through);
            while (p < looked && !same_limit(decisions[out.limits[p].decision], out.limits[p].at, d, at)) ++p;
            if (p == looked) {
                p = out.limits.size();
                out.limits.push_back({di, at});
            }
            places.push_back(static_cast<std::uint32_t>(p + 1));
        }
        // A shape seen before drops the places just added; as with limits, only the first
        // few are looked through.
        auto mine_places = std::span(places).subspan(mine.first, n);
        std::size_t s = 0;
        auto looked = std::min(out.shapes.size(), k_limits_looked_through);
        while (s < looked &&
               !std::ranges::equal(std::span(places).subspan(out.shapes[s].first, out.shapes[s].size), mine_places))
            ++s;
        if (s == looked) {
            s = out.shapes.size();
            out.shapes.push_back(mine);
        } else {
            places.resize(mine.first);
        }
        out.shape_of.push_back(static_cast<std::uint32_t>(s + 1));
    }
    return out;
}
}  // namespace

ScriptCall decide_many_call(std::string_view sha, std::span<std::vector<std::string>> decisions) {
    // Each is decide_call's: EVALSHA sha n key... 'decide' time lease lease_ms item...
    // A limit's items but its amount go once a call, and so does each shape: the list of a
    // decision's limits, by their places (1-based). A tier's limits are the same for all its
    // tenants, so its decisions share one shape, and Redis reads one argument a limit a
    // decision (its amount) and one a decision (its shape) instead of 8 a limit.
    auto [limits_in_all, limits, places, shapes, shape_of] = lay_out(decisions);

    ScriptCall call;
    auto& a = call.args;
    // The script reads and writes these once for the call (copied: their decisions' keys move).
    auto views = repeated_keys(decisions);
    std::vector<std::string> repeated(views.begin(), views.end());
    a.reserve(9 + 2 * limits_in_all + repeated.size() + 8 * limits.size() + shapes.size() + places.size() +
              3 * decisions.size());
    a.emplace_back("EVALSHA");
    a.emplace_back(sha);
    a.push_back(std::to_string(all_keys(decisions)));
    for (auto& d : decisions) move_onto(a, d, 3, 3 + key_count(d));
    a.emplace_back("decide_many");
    // One time for all, as in one call (Redis TIME, unless a test's clock gave one): the first's.
    a.push_back(decisions.empty() ? std::string() : decisions.front()[3 + key_count(decisions.front()) + 1]);
    a.push_back(std::to_string(repeated.size()));
    move_onto(a, repeated, 0, repeated.size());
    a.push_back(std::to_string(limits.size()));
    for (const auto& l : limits) {
        auto& d = decisions[l.decision];
        for (std::size_t j = 0; j < 8; ++j) a.push_back(j == k_amount ? std::string() : std::move(d[l.at + j]));
    }
    a.push_back(std::to_string(shapes.size()));
    for (const auto& shape : shapes) {
        a.push_back(std::to_string(shape.size));
        for (std::size_t i = 0; i < shape.size; ++i) a.push_back(std::to_string(places[shape.first + i]));
    }
    auto next_shape = shape_of.begin();
    for (auto& d : decisions) {
        auto n = key_count(d);
        // Its shape (its key count stays in d: split_decisions reads it), negated when a lease
        // and its length follow: most decisions hold nothing under a lease and send neither.
        if (d[3 + n + 2].empty()) {
            a.push_back(std::to_string(*next_shape++));
        } else {
            a.push_back("-" + std::to_string(*next_shape++));
            move_onto(a, d, 3 + n + 2, 3 + n + 4);
        }
        for (std::size_t i = 0, at = 3 + n + 4; i < n; ++i, at += 8) a.push_back(std::move(d[at + k_amount]));
    }
    return call;
}

std::optional<std::vector<std::span<const Reply>>> split_decisions(
    const Reply& reply, std::span<const std::vector<std::string>> decisions) {
    if (reply.type != Reply::Type::array) return std::nullopt;
    std::vector<std::span<const Reply>> each;
    each.reserve(decisions.size());
    std::span<const Reply> all(reply.elements);
    std::size_t at = 0;
    for (const auto& d : decisions) {
        auto start = at;
        for (std::size_t i = key_count(d); i > 0; --i) {
            auto size = limit_verdict_size(all.subspan(at));
            if (size == 0) return std::nullopt;
            at += size;
        }
        each.push_back(all.subspan(start, at - start));
    }
    if (at != all.size()) return std::nullopt;
    return each;
}

ScriptCall settle_call(std::string_view sha, const KeySpace& keys, std::span<const limiter::Charge> charged,
                       const config::Amounts& actual, std::string_view lease, double now_us) {
    ScriptCall call;
    std::vector<const limiter::Charge*> due;
    for (const auto& c : charged)
        if (limiter::settles(c, actual)) due.push_back(&c);
    if (due.empty()) return call;
    auto& a = call.args;
    a.emplace_back("EVALSHA");
    a.emplace_back(sha);
    a.push_back(std::to_string(due.size()));
    for (const auto* c : due) a.push_back(keys.key(*c, c->window));
    a.emplace_back("settle");
    a.push_back(time_arg(now_us));
    a.emplace_back(lease);
    bool adjusts = std::any_of(due.begin(), due.end(), [](const limiter::Charge* c) {
        return c->spec->algorithm != config::Algorithm::concurrency;
    });
    a.push_back(adjusts ? keys.marker(*due.front()) : std::string());  // releases repeat harmlessly
    for (const auto* c : due) {
        char kind = kind_of(*c->spec);
        a.emplace_back(1, kind);
        a.push_back(number_text(c->spec->capacity));
        a.push_back(number_text(c->spec->current_rate()));
        // A lease is named by the amount it took, exactly as decide_call wrote it.
        a.push_back(number_text(kind == 'c' ? c->amount : actual.in(c->spec->unit) - c->amount));
    }
    return call;
}

void seal_markers(std::vector<std::vector<std::string>>& settlements, std::string_view batch, bool group) {
    for (auto& s : settlements) {
        auto& marker = s[marker_index(s)];
        if (marker.ends_with(k_marker)) marker += batch;
    }
    if (group)
        std::stable_sort(settlements.begin(), settlements.end(),
                         [](const auto& a, const auto& b) { return a[marker_index(a)] < b[marker_index(b)]; });
}

ScriptCall settle_batch_call(std::string_view sha, std::span<const std::vector<std::string>> settlements,
                             bool declared) {
    // Each is settle_call's: EVALSHA sha n key... 'settle' time lease marker item...
    ScriptCall call;
    auto& a = call.args;
    a.emplace_back("EVALSHA");
    a.emplace_back(sha);
    auto keys = all_keys(settlements);
    a.push_back(declared ? std::to_string(keys) : "0");
    if (declared) append_keys(a, settlements);
    a.emplace_back("settle_batch");
    // One time for all: the latest (Redis TIME, unless a test's clock gave one).
    std::string now;
    double latest = 0;
    for (const auto& s : settlements) {
        const auto& t = s[marker_index(s) - 2];
        double value = 0;
        auto [p, ec] = std::from_chars(t.data(), t.data() + t.size(), value);
        if (ec == std::errc{} && p == t.data() + t.size() && (now.empty() || value > latest)) now = t, latest = value;
    }
    a.push_back(now);
    if (!declared) {
        a.push_back(std::to_string(keys));
        append_keys(a, settlements);
    }
    for (const auto& s : settlements) {
        auto n = key_count(s);
        a.push_back(s[2]);
        // lease, marker, then four per key
        a.insert(a.end(), s.begin() + 3 + static_cast<std::ptrdiff_t>(n) + 2, s.end());
    }
    return call;
}

ScriptCall lease_call(std::string_view sha, const KeySpace& keys, const limiter::Charge& charge, double least,
                      double now_us) {
    const auto& spec = *charge.spec;
    ScriptCall call;
    call.args = {"EVALSHA",
                 std::string(sha),
                 "1",
                 keys.key(charge),
                 "lease",
                 time_arg(now_us),
                 number_text(spec.capacity),
                 number_text(spec.current_rate()),
                 number_text(charge.amount),
                 number_text(least),
                 number_text(spec.algorithm == config::Algorithm::token_bucket ? spec.initial : 1.0)};
    return call;
}

std::optional<std::pair<double, double>> parse_lease(const Reply& reply) {
    if (reply.type != Reply::Type::array || reply.elements.size() != 2) return std::nullopt;
    double granted = 0, level = 0;
    const auto& g = reply.elements[0].str;
    const auto& l = reply.elements[1].str;
    auto [p1, e1] = std::from_chars(g.data(), g.data() + g.size(), granted);
    auto [p2, e2] = std::from_chars(l.data(), l.data() + l.size(), level);
    if (e1 != std::errc{} || e2 != std::errc{} || !std::isfinite(granted) || !std::isfinite(level)) return std::nullopt;
    return std::pair{granted, level};
}

ScriptCall lease_return_call(std::string_view sha, const KeySpace& keys, const limiter::Charge& unused,
                             std::string_view marker, double now_us) {
    const auto& spec = *unused.spec;
    ScriptCall call;
    // A settlement of one rate bucket by -amount: settle_batch_call takes it with the others.
    call.args = {"EVALSHA",
                 std::string(sha),
                 "1",
                 keys.key(unused),
                 "settle",
                 time_arg(now_us),
                 "",
                 std::string(marker),
                 "r",
                 number_text(spec.capacity),
                 number_text(spec.current_rate()),
                 number_text(-unused.amount)};
    return call;
}

ScriptCall quota_call(std::string_view sha, const KeySpace& keys, const limiter::Charge& charge,
                      const core::CalendarWindow& window, core::Nanos unix_now, double add, bool reset) {
    auto ttl_ms = static_cast<double>(std::max<core::Nanos>(0, window.end - unix_now)) / 1e6 + 86'400'000;
    ScriptCall call;
    call.args = {"EVALSHA",         std::string(sha),   "1", keys.key(charge, window), "quota", "", number_text(add),
                 reset ? "1" : "0", number_text(ttl_ms)};
    return call;
}

std::optional<limiter::QuotaState> parse_quota(const Reply& reply) {
    if (reply.type != Reply::Type::array || reply.elements.size() != 2) return std::nullopt;
    auto used = number_of(reply.elements[0]);
    auto added = number_of(reply.elements[1]);
    if (!used || !added) return std::nullopt;
    return limiter::QuotaState{*used, *added, {}};
}

ScriptCall heartbeat_call(std::string_view sha, const KeySpace& keys, std::string_view replica, double ttl_ms,
                          double now_us) {
    ScriptCall call;
    call.args = {
        "EVALSHA",          std::string(sha), "1", keys.replicas(), "heartbeat", time_arg(now_us), std::string(replica),
        number_text(ttl_ms)};
    return call;
}

std::optional<limiter::Decision> parse_decision(const Reply& reply, std::span<const limiter::Charge> charges,
                                                std::string& error) {
    // The time, whether all admit, then the limits' verdicts.
    if (reply.type != Reply::Type::array || reply.elements.size() < 2 || !is_integer(reply.elements[1])) {
        error = "redis script: unexpected decision reply";
        return std::nullopt;
    }
    auto d = parse_decision(std::span<const Reply>(reply.elements).subspan(2), charges, error);
    if (d && d->allowed != (reply.elements[1].integer != 0)) {
        error = "redis script: its verdict disagrees with the limits' verdicts";
        return std::nullopt;
    }
    return d;
}

std::optional<limiter::Decision> parse_decision(std::span<const Reply> verdict,
                                                std::span<const limiter::Charge> charges, std::string& error) {
    limiter::Decision d;
    d.statuses.resize(charges.size());
    std::size_t at = 0;
    static const Reply k_zero{Reply::Type::integer, 0, {}, {}};
    for (std::size_t i = 0; i < charges.size(); ++i) {
        auto size = limit_verdict_size(verdict.subspan(at));
        if (size == 0) {
            error = "redis script: unexpected decision reply";
            return std::nullopt;
        }
        // A three-element verdict's retry, wait and extra are 0.
        const Reply* e = &verdict[at];
        const Reply& retry = size == 6 ? e[3] : k_zero;
        const Reply& wait = size == 6 ? e[4] : k_zero;
        auto remaining = number_of(e[1]);
        auto added = number_of(size == 6 ? e[5] : k_zero);
        at += size;
        if (!remaining || !is_integer(e[2]) || !is_integer(retry) || !is_integer(wait) || !added) {
            error = "redis script: malformed verdict for limit '" + charges[i].spec->name + "'";
            return std::nullopt;
        }
        auto& s = d.statuses[i];
        s.spec = charges[i].spec;
        s.level = charges[i].level;
        auto& v = s.verdict;
        v.admitted = (e[0].integer & 1) != 0;
        v.remaining = *remaining;
        v.until_full = e[2].integer;
        v.retry_after = retry.integer < 0 ? -1 : retry.integer;
        v.never = v.retry_after < 0;
        s.wait = wait.integer;
        // A ranked queue's waiter holds a place to ask about (its index + 1); s.wait estimates its turn.
        if (kind_of(*charges[i].spec) == 'p') s.ticket = *added > 0 && v.admitted ? i + 1 : 0;
        else s.quota_added = *added;
    }
    if (at != verdict.size()) {
        error = "redis script: unexpected decision reply";
        return std::nullopt;
    }
    limiter::resolve(d);
    return d;
}

ScriptCall turn_call(std::string_view sha, const KeySpace& keys, const limiter::Charge& charge, std::string_view lease,
                     std::uint64_t ticket, bool leave, double now_us) {
    const auto& spec = *charge.spec;
    // The drift a waiter may run behind its latest start, as ShapeQueue allows.
    double drift_us = max_wait_us(spec) / 10 + 50'000;
    ScriptCall call;
    call.args = {"EVALSHA",
                 std::string(sha),
                 "1",
                 keys.key(charge),
                 leave ? "leave" : "turn",
                 time_arg(now_us),
                 std::string(lease) + ":" + std::to_string(ticket) + "|" + place_units(charge),
                 number_text(spec.current_rate()),
                 number_text(drift_us)};
    return call;
}

std::optional<limiter::ShapeQueue::StartCheck> parse_turn(const Reply& reply, core::Nanos now) {
    if (reply.type != Reply::Type::array || reply.elements.size() != 2 || !is_integer(reply.elements[0]) ||
        !is_integer(reply.elements[1]))
        return std::nullopt;
    limiter::ShapeQueue::StartCheck check;
    switch (reply.elements[0].integer) {
        case 0: check.wait_until = now + std::clamp<std::int64_t>(reply.elements[1].integer, 0, core::k_forever); break;
        case 1: check.started = true; break;
        case 2: check.displaced = true; break;
        case 3: check.unknown = true; break;
        default: return std::nullopt;
    }
    return check;
}

void as_eval(std::vector<std::string>& args) {
    args[0] = "EVAL";
    args[1] = std::string(limiter_script());
}

}  // namespace tokengate::redis
