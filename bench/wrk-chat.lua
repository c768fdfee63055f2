-- POSTs a ~1 KB chat completion with a rotating Bearer key (100 tenants), and prints one
-- machine-readable line at the end: RESULT <req/s> <p50 ms> <p99 ms> <non-2xx> <requests>.
local keys = {}
-- BENCH_KEYS_FILE: one Bearer value a line (the jwt rows' tokens) instead of bench-key-1..100.
local keys_file = os.getenv("BENCH_KEYS_FILE")
if keys_file and keys_file ~= "" then
  for line in io.lines(keys_file) do if line ~= "" then keys[#keys + 1] = line end end
else
  for i = 1, 100 do keys[i] = "bench-key-" .. i end
end
local stream = os.getenv("BENCH_STREAM") == "1"
-- BENCH_CLOSE=1: a new connection (over TLS: a new handshake) for every request.
local close = os.getenv("BENCH_CLOSE") == "1"
local content = string.rep("Explain token buckets versus leaky buckets for GPU serving. ", 14)
local body = '{"model":"llama3-8b","max_tokens":64,' .. (stream and '"stream":true,' or '') ..
             '"messages":[{"role":"user","content":"' .. content .. '"}]}'
local counter = 0

request = function()
  counter = counter + 1
  local headers = {
    ["Authorization"] = "Bearer " .. keys[(counter % #keys) + 1],
    ["Content-Type"] = "application/json",
  }
  if close then headers["Connection"] = "close" end
  return wrk.format("POST", "/v1/chat/completions", headers, body)
end

done = function(summary, latency, requests)
  local seconds = summary.duration / 1e6
  local non2xx = summary.errors.status
  io.write(string.format("RESULT %.0f %.3f %.3f %d %d %d\n", summary.requests / seconds,
    latency:percentile(50) / 1000, latency:percentile(99) / 1000, non2xx, summary.requests,
    summary.errors.connect + summary.errors.read + summary.errors.write + summary.errors.timeout))
end
