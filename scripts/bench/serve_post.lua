-- wrk script: POST one image file as the raw body to /v1/predict, count the answers by HTTP status, and print one
-- machine-readable line at the end.
--
--   IMAGE=path/to/image.jpg wrk -t2 -c8 -d30s --latency --timeout 30s -s scripts/bench/serve_post.lua \
--       http://127.0.0.1:8080/v1/predict
--
-- Environment: IMAGE (required) the file sent as the body (Content-Type: application/octet-stream);
--              WRK_TAG (optional) a JSON object merged into the line, e.g. '{"server":"ranzcr","clients":8}'.
-- done() prints, besides wrk's own report:
--   JSON {"requests":N,"duration_s":..,"rps":..,"ok_rps":..,"p50_ms":..,"p90_ms":..,"p99_ms":..,"max_ms":..,
--         "mean_ms":..,"stdev_ms":..,"errors":N,"non2xx":N,"status":{"200":N,...},"socket_errors":{...},...}
-- rps counts every answer, ok_rps only the 2xx ones. errors = connect + read + write + timeout socket errors
-- + non-2xx answers; non2xx counts every status outside 200-299 (wrk's own "Non-2xx or 3xx responses" line
-- counts status > 399 only). Latency percentiles are wrk's, over every answered request whatever its status
-- (wrk does not correct for coordinated omission).

local path = os.getenv("IMAGE")
if path == nil or path == "" then
  error("set IMAGE=path/to/image (the file POSTed as the request body)")
end
local f = io.open(path, "rb")
if f == nil then
  error("IMAGE=" .. path .. ": cannot open")
end
local body = f:read("*a")
f:close()

wrk.method = "POST"
wrk.body = body
wrk.headers["Content-Type"] = "application/octet-stream"

-- per thread (each wrk thread has its own Lua state): answers by status
statuses = {}

function response(status, headers, resp_body)
  statuses[status] = (statuses[status] or 0) + 1
end

-- main state: the threads, to read their counters in done()
local threads = {}

function setup(thread)
  table.insert(threads, thread)
end

function done(summary, latency, requests)
  local by_status, non2xx, answered = {}, 0, 0
  for _, t in ipairs(threads) do
    local s = t:get("statuses")
    if s ~= nil then
      for code, n in pairs(s) do
        by_status[code] = (by_status[code] or 0) + n
        answered = answered + n
        if code < 200 or code > 299 then
          non2xx = non2xx + n
        end
      end
    end
  end
  local e = summary.errors
  local socket_errors = e.connect + e.read + e.write + e.timeout
  local seconds = summary.duration / 1e6
  local codes = {}
  for code, _ in pairs(by_status) do
    table.insert(codes, code)
  end
  table.sort(codes)
  local parts = {}
  for _, code in ipairs(codes) do
    table.insert(parts, string.format('"%d":%d', code, by_status[code]))
  end
  if non2xx > 0 then
    io.write(string.format("non-2xx responses: %d of %d (%s)\n", non2xx, answered, table.concat(parts, ", ")))
  end
  local ms = function(us) return us / 1000.0 end
  local line = string.format(
    '{"requests":%d,"duration_s":%.3f,"rps":%.2f,"ok_rps":%.2f,"p50_ms":%.3f,"p90_ms":%.3f,"p99_ms":%.3f,"max_ms":%.3f,' ..
    '"mean_ms":%.3f,"stdev_ms":%.3f,"errors":%d,"non2xx":%d,"status":{%s},' ..
    '"socket_errors":{"connect":%d,"read":%d,"write":%d,"timeout":%d},"bytes":%d,"image":"%s","image_bytes":%d',
    summary.requests, seconds, summary.requests / seconds, (summary.requests - non2xx) / seconds,
    ms(latency:percentile(50)), ms(latency:percentile(90)), ms(latency:percentile(99)), ms(latency.max),
    ms(latency.mean), ms(latency.stdev), socket_errors + non2xx, non2xx, table.concat(parts, ","),
    e.connect, e.read, e.write, e.timeout, summary.bytes, path:gsub('[\\"]', "\\%0"), #body)
  local tag = os.getenv("WRK_TAG")
  if tag ~= nil and tag:match("^%s*{.*}%s*$") and not tag:match("^%s*{%s*}%s*$") then
    line = line .. "," .. tag:gsub("^%s*{", ""):gsub("}%s*$", "")
  end
  io.write("JSON " .. line .. "}\n")
end
