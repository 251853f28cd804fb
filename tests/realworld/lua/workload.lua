-- The Lua workload of tests/realworld: deterministic, small, and shaped to
-- reach deep into the interpreter: recursion, closures, C callbacks into
-- Lua (string.gsub, table.sort), coroutines, string formatting, the
-- garbage collector, and (unless RW_NO_ERRORS is set) errors raised and
-- caught with pcall, which the C interpreter implements with longjmp.
local function fib(n) if n < 2 then return n end return fib(n - 1) + fib(n - 2) end

local function counter()
  local n = 0
  return function(k) n = n + (k or 1); return n end
end

local words = {}
for i = 1, 300 do words[i] = string.format("w%03d-%s", (i * 37) % 300, string.rep("x", i % 7)) end
table.sort(words, function(a, b) return a > b end)

local text = table.concat(words, " ")
local upper = text:gsub("w(%d+)", function(d) return "W" .. (tonumber(d) % 13) end)

local co = coroutine.wrap(function(a)
  for i = 1, 50 do a = a + coroutine.yield(a * i) end
  return a
end)
local acc = co(1)
for i = 1, 50 do acc = co(i) end

local c = counter()
for i = 1, 1000 do c(i % 3) end

local errors = 0
if not os.getenv("RW_NO_ERRORS") then
  for i = 1, 200 do
    local ok, msg = pcall(function(x)
      if x % 3 == 0 then error("bad " .. x) end
      return fib(x % 10)
    end, i)
    if not ok then errors = errors + 1 end
  end
end

local t = {}
for i = 1, 2000 do t[i] = { i, tostring(i) } end
for i = 1, 2000, 2 do t[i] = nil end
collectgarbage()

print(fib(20), #words, #upper, acc, c(0), errors, #t)
