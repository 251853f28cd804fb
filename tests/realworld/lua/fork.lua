-- fork+exec: the interpreter runs a child interpreter (os.execute is
-- system(3): fork, exec /bin/sh, exec lua), for `usrtrace record -c`.
local here = arg[0]:match("^(.*)/") or "."
local lua = arg[-1]
local ok, how, code = os.execute(string.format("%s %s/child.lua 7", lua, here))
local function fib(n) if n < 2 then return n end return fib(n - 1) + fib(n - 2) end
print("parent", fib(15), ok, how, code)
