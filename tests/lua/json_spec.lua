-- SPDX-License-Identifier: Apache-2.0
-- The JSON interface (docs/json.md): imexguard.json's writer (key order, arrays, null, ISO 8601
-- times) and the shape of every command's --json report, pinned: keys in order and their types.
-- A change of a shape here is a change of the interface: docs/json.md and, when a key is removed
-- or renamed or a type changes, json.SCHEMA change with it.
local json = require("imexguard.json")
local testing = require("imexguard.testing")
local P = require("default")

-- A small ordered JSON reader (the spec's own: cjson.decode forgets the order of the keys).
-- Returns {t = "object", keys = {...}, v = {key = value}} | {t = "array", ...} | scalars, and
-- cjson's null as the string "<null>".
local function read(text)
  local pos = 1
  local function ws() pos = text:find("[^ \t\r\n]", pos) or #text + 1 end
  local value
  local function str()
    local s, i = {}, pos + 1
    while true do
      local c = text:sub(i, i)
      if c == '"' then break end
      if c == "\\" then c = text:sub(i, i + 1); i = i + 1 end
      s[#s + 1] = c
      i = i + 1
    end
    pos = i + 1
    return table.concat(s)
  end
  function value()
    ws()
    local c = text:sub(pos, pos)
    if c == "{" then
      local o = { t = "object", keys = {}, v = {} }
      pos = pos + 1
      ws()
      if text:sub(pos, pos) == "}" then pos = pos + 1; return o end
      while true do
        ws()
        local k = str()
        ws()
        assert(text:sub(pos, pos) == ":")
        pos = pos + 1
        o.keys[#o.keys + 1] = k
        o.v[k] = value()
        ws()
        local d = text:sub(pos, pos)
        pos = pos + 1
        if d == "}" then return o end
        assert(d == ",", "bad JSON at " .. pos)
      end
    elseif c == "[" then
      local a = { t = "array" }
      pos = pos + 1
      ws()
      if text:sub(pos, pos) == "]" then pos = pos + 1; return a end
      while true do
        a[#a + 1] = value()
        ws()
        local d = text:sub(pos, pos)
        pos = pos + 1
        if d == "]" then return a end
        assert(d == ",")
      end
    elseif c == '"' then
      return str()
    end
    local lit = text:match("^[%w%.%-+]+", pos)
    pos = pos + #lit
    if lit == "null" then return "<null>" end
    if lit == "true" or lit == "false" then return lit == "true" end
    return assert(tonumber(lit), lit)
  end
  local v = value()
  ws()
  assert(pos > #text, "trailing bytes after the JSON value")
  return v
end

-- The shape of a value: "string", "integer", "number", "boolean", "null", "{k:shape,...}",
-- "[shape]" (the first element's; "[]" when empty).
local function shape(v)
  if v == "<null>" then return "null" end
  local t = type(v)
  if t == "number" then return math.type(v) == "integer" and "integer" or "number" end
  if t ~= "table" then return t end
  if v.t == "array" then return "[" .. (v[1] ~= nil and shape(v[1]) or "") .. "]" end
  local parts = {}
  for i, k in ipairs(v.keys) do parts[i] = k .. ":" .. shape(v.v[k]) end
  return "{" .. table.concat(parts, ",") .. "}"
end

describe("imexguard.json", function()
  it("keeps the order keys were set in, writes nil as null and empty arrays as []", function()
    local o = json.object():set("b", 1):set("a", json.array()):set("c", nil):set("b", 2)
    assert.equal('{"b":2,"a":[],"c":null}\n', json.encode(o))
    assert.equal('[1,"x",true,null]\n', json.encode(json.array({ 1, "x", true })
      and setmetatable({ 1, "x", true, n = 4 }, getmetatable(json.array()))))
    assert.equal('{"x":0.5,"y":2.0,"z":null}\n', json.encode(json.object():set("x", 0.5):set("y", 2.0)
      :set("z", 0 / 0)))
    assert.equal('[0.41,0.1,0.30000000000000004]\n', json.encode(json.array({ 0.41, 0.1, 0.1 + 0.2 })))
  end)

  it("refuses a plain table, naming where it is", function()
    local ok, err = pcall(json.encode, json.object():set("nodes", { 1, 2 }))
    assert.is_false(ok)
    assert.matches("%$%.nodes is a table", err)
  end)

  it("writes times as ISO 8601 in UTC; the ctl's M/D/YYYY as YYYY-MM-DD", function()
    assert.equal("2023-11-14T22:13:20Z", json.time(1700000000))
    assert.equal("2024-02-29T12:00:00Z", json.time(1709208000))
    assert.equal("2000-01-01T00:00:00Z", json.time(946684800.9))
    assert.equal("1970-01-01T00:00:01Z", json.time(1))
    assert.is_nil(json.time(0))
    assert.is_nil(json.time(nil))
    assert.equal("2023-11-14T22:13:20Z", json.time_us(1700000000123456))
    assert.equal("2026-12-01T23:41:07.112", json.ctl_time("12/1/2026 23:41:07.112"))
    assert.equal("2025-08-08T07:38:02", json.ctl_time("8/8/2025 07:38:02"))
    assert.equal("yesterday", json.ctl_time("yesterday"))
  end)

  it("the outcome object of a run that ended without a report", function()
    local text = json.error_report("plan", "bad-input", 2, "bad hostlist")
    assert.equal('{"schema":1,"command":"plan","ok":false,"outcome":"bad-input","exit_code":2,'
      .. '"message":"bad hostlist"}\n', text)
  end)
end)

-- The shapes, as docs/json.md lists them.
local SHAPES = {
  status = "{schema:integer,command:string,ok:boolean,outcome:string,exit_code:integer,message:string,"
    .. "time:string,node:string,unit:{name:string,load_state:string,active_state:string,sub_state:string,"
    .. "result:string,unit_file_state:string,since:string,invocation_id:string,main_pid:integer,error:null},"
    .. "last_prolog:{outcome:string,exit_code:integer,job:string,time:string,duration:number,message:string,"
    .. "error:null},last_epilog:null,registrations:[{id:string,hosts:string,nodes:[string],registered:string,"
    .. "invocation_id:string}],registrations_error:null,lock:{path:string,held:boolean,pid:null,owner:null,"
    .. "since:null,error:null},domain:null,fabric:{state:string,message:string,partition:string,degraded:[]},"
    .. "restarts:{flapping:boolean,restarts:integer,window:integer,threshold:integer,"
    .. "total:integer},"
    .. "membership:{mode:string,slot_hosts:null,in_force:null,error:null},"
    .. "status:string,timestamp:string,self:string,"
    .. "self_id:integer,verdict:string,node_list:string,config:string,config_findings:[],"
    .. "config_warnings:[],order:{kind:string,summary:string},nodes:[{id:integer,host:string,name:string,"
    .. "self:boolean,"
    .. "status:string,version:string,connected:integer,links:integer,down:[],map:string,"
    .. "diagnosis:string}],channel:string}",
  registrations = "{schema:integer,command:string,ok:boolean,outcome:string,exit_code:integer,"
    .. "message:string,time:string,node:string,state_file:string,registrations:[{id:string,hosts:string,"
    .. "nodes:[string],registered:string,invocation_id:string}]}",
  plan = "{schema:integer,command:string,ok:boolean,outcome:string,message:string,job:string,node:string,"
    .. "source:string,hostlist:string,hosts:string,nodes:[{name:string,address:string,self:boolean}],"
    .. "nodes_file:string,changed:boolean,removed:[],added:[],unreadable:null,unit_state:string,"
    .. "action:string,reason:string,domain_status:string,healthy:boolean,order:string,"
    .. "config:string,config_source:string,config_findings:[],config_fault:boolean,config_warnings:[],"
    .. "conflict:null,"
    .. "registrations:[],imex_domain:null,membership:{mode:string,slot_hosts:null,slots:null,signal:null},"
    .. "channel:string,"
    .. "fabric:{state:string,message:string,partition:string,degraded:[]}}",
}

describe("the --json reports of the built-in policy (their shapes, pinned)", function()
  local STATE = "/run/imexguard/state.json"
  local ONE = '{"jobs": [{"id": "101", "nodes": "10.0.0.1\\n10.0.0.2\\n", "hosts": "n[1-2]", '
    .. '"registered_us": "1699999400000000", "invocation_id": "abc"}]}'
  local LAST = '{"command": "prolog", "outcome": "ok", "exit_code": 0, "job": "101", '
    .. '"ended_us": "1699999400000000", "duration": 0.5, "message": "done"}'

  local function report(command, o)
    local h = testing.host{ files = { [STATE] = ONE, ["/run/imexguard/last-prolog.json"] = LAST },
      unit = { state_change_us = 1699990000000000, invocation_id = "0123456789abcdef0123456789abcdef" } }
    local ctx = testing.ctx{ host = h, command = command, json = true, env = (o or {}).env }
    local _, _, out = P[command](ctx)
    return out
  end

  it("status", function()
    local out = report("status")
    assert.equal(SHAPES.status, shape(read(out)))
    local j = read(out)
    assert.equal(json.SCHEMA, j.v.schema)
    assert.equal("2023-11-14T22:13:20Z", j.v.time)
    assert.equal("2023-11-14T19:26:40Z", j.v.unit.v.since)
    assert.equal("2025-08-08T17:38:02.641", j.v.timestamp)
  end)

  it("status without a domain: the same head, null for the domain's keys, [] for its lists", function()
    local h = testing.host{ ctl = { "garbage" } }
    local _, _, out = P.status(testing.ctx{ host = h, command = "status", json = true })
    local j = read(out)
    assert.equal("ctl-unusable", j.v.outcome)
    local head = SHAPES.status:match("^(.-),lock:")
    assert.equal(head:gsub("last_prolog:{[^}]*}", "last_prolog:null"):gsub("registrations:%[{[^}]*}%]",
      "registrations:[]"), shape(read(out)):match("^(.-),lock:"))
    assert.equal("null", shape(j.v.status))
    assert.equal("[]", shape(j.v.nodes))
    -- the same keys as with a domain, in the same order
    local top = { "schema", "command", "ok", "outcome", "exit_code", "message", "time", "node", "unit",
      "last_prolog", "last_epilog", "registrations", "registrations_error", "lock", "domain", "fabric",
      "restarts", "membership", "status", "timestamp", "self", "self_id", "verdict", "node_list",
      "config", "config_findings", "config_warnings", "order", "nodes", "channel" }
    assert.same(top, j.keys)
    assert.same(top, read(report("status")).keys)
  end)

  it("registrations", function()
    assert.equal(SHAPES.registrations, shape(read(report("registrations"))))
  end)

  it("plan", function()
    local out = report("plan", { env = { SLURM_JOB_ID = "102", SLURM_JOB_NODELIST = "n[1-2]",
      SLURMD_NODENAME = "n1" } })
    assert.equal(SHAPES.plan:gsub("registrations:%[%]", "registrations:[{id:string,hosts:string,"
      .. "nodes:[string],registered:string,invocation_id:string}]"), shape(read(out)))
  end)

  it("the same keys in the same order in every run", function()
    local a, b = report("status"), report("status")
    assert.equal(shape(read(a)), shape(read(b)))
    assert.equal(a, b)
  end)
end)
