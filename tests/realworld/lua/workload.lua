-- The Lua workload of tests/realworld: deterministic (the same calls in every
-- run: no time, no addresses, no tables as keys, no iteration over hash
-- tables), small (about 170 000 calls in the interpreter, well under a second
-- traced), and shaped to reach deep into the C interpreter:
--   recursion in Lua (fib) and deep recursion in C: a Lua function that
--   recurses through string.gsub nests the interpreter's C frames
--   hundreds deep, and the parser's recursive descent over a nested
--   expression;
--   closures and upvalues; C calling back into Lua (string.gsub with a
--   function, table.sort with a comparator); errors raised with error() and
--   caught by pcall, which the interpreter does with longjmp out of the frames
--   in between (also from the bottom of the deep recursion); coroutines
--   (their own Lua stacks, resumed and yielded from C); string.format; the
--   garbage collector, incremental steps and a full collectgarbage().
local function fib(n) if n < 2 then return n end return fib(n - 1) + fib(n - 2) end

local function counter()
  local n = 0
  return function(k) n = n + (k or 1); return n end
end

-- string.format, table.sort with a Lua comparator.
local words = {}
for i = 1, 300 do words[i] = string.format("w%03d-%s", (i * 37) % 300, string.rep("x", i % 7)) end
table.sort(words, function(a, b) return a > b end)

-- string.gsub calling a Lua function per match.
local text = table.concat(words, " ")
local upper, nsub = text:gsub("w(%d+)", function(d) return "W" .. (tonumber(d) % 13) end)

-- A coroutine resumed 51 times.
local co = coroutine.wrap(function(a)
  for i = 1, 50 do a = a + coroutine.yield(a * i) end
  return a
end)
local acc = co(1)
for i = 1, 50 do acc = co(i) end

-- A closure called 1000 times.
local c = counter()
for i = 1, 1000 do c(i % 3) end

-- error() and pcall: every third call raises (a longjmp to the pcall).
-- RW_NO_ERRORS leaves out every error (realworld_test.sh explains why).
local with_errors = not os.getenv("RW_NO_ERRORS")
local errors = 0
for i = 1, 200 do
  local ok = pcall(function(x)
    if with_errors and x % 3 == 0 then error("bad " .. x) end
    return fib(x % 10)
  end, i)
  if not ok then errors = errors + 1 end
end

-- Deep C recursion: at every level string.gsub (C) calls a Lua function
-- that goes one level deeper, about eight C frames a level (luaD_call,
-- luaV_execute, str_gsub, add_value, ...); unwound once by returns, once by
-- a single longjmp from the bottom to the pcall at the top. 30 levels
-- (about 250 C frames) for the count comparison: uftrace 0.13 stops
-- counting calls below some depth, --max-stack or not, lower in some builds
-- than others (seen, with gcc -O0: 126 levels of 150 alone, 70 of 80 under
-- pcall; with clang -O2 patchable, 40 kept, 60 not); 180 levels when
-- usrtrace records alone
-- (RW_NO_ERRORS unset; Lua's own limit of nested C calls is 200).
local function deep(n, fail)
  if n == 0 then if fail then error("bottom", 0) end return 0 end
  local s = ("x"):gsub("x", function() return tostring(deep(n - 1, fail) + 1) end)
  return tonumber(s)
end
local depth = with_errors and 180 or 30
local dsum = deep(depth, false)
local dok, dmsg = pcall(deep, depth, with_errors)

-- The parser's recursive descent over ((((...)))), about six C frames a
-- parenthesis: 20 in the compared run (gcc -O0 patchable, 60 deep, lost
-- uftrace 0.13 the calls of the innermost 14 tokens), 60 alone.
local parens = with_errors and 60 or 20
local nested = load("return " .. string.rep("(", parens) .. "1" .. string.rep(" + 1)", parens))

-- Garbage: tables made and dropped, a full collection.
local t = {}
for i = 1, 2000 do t[i] = { i, tostring(i) } end
for i = 1, 2000, 2 do t[i] = nil end
collectgarbage()

print(fib(20), #words, #upper, nsub, acc, c(0), errors, dsum, dok, dmsg, nested(), #t)
