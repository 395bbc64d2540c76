-- SPDX-License-Identifier: Apache-2.0
--- The fake host's files (src/file.c's primitives): read, read_tail, stat, write_atomic,
-- write_in_place, remove_temps, mkdir, dir_exists, mknod_char over an in-memory file table, with
-- scripted failures and missing directories.
-- Test infrastructure of imexguard.testing.
local base = require("imexguard.testing.base")

local M = {}

--- Add the file primitives to a fake host.
-- @param h table the fake host (gets read, stat, write_atomic, mkdir, dir_exists, mknod_char, and
--   the helpers file, set_file)
-- @param w table the host's shared world (gets files, put, failing, missing_parent; needs rec,
--   wall_us, spend)
-- @param opts table testing.host options (files, fail, absent_dirs, fresh_boot)
function M.install(h, w, opts)
  local files, ino = {}, 100
  w.files = files
  --- Create or replace a file (a new inode each time, as a rename does).
  function w.put(path, data, mtime_us)
    ino = ino + 1
    files[path] = { data = data, mtime_us = mtime_us or w.wall_us(), ino = ino }
  end
  local old = w.wall_us() - 3600e6
  w.put(base.CONFIG, base.CONFIG_TEXT, old)
  w.put(base.NODES, "10.0.0.1\n10.0.0.2\n", old)
  w.put(base.BOOT_ID_FILE, base.BOOT_ID .. "\n", old)
  w.put(base.IF_INET6, base.IF_INET6_TEXT, old)
  for path, v in pairs(opts.files or {}) do
    if v == false then files[path] = nil
    elseif type(v) == "table" then w.put(path, v.data, v.mtime_us or old)
    else w.put(path, v, old) end
  end
  local fail = opts.fail or {}
  --- The errno name an operation on path is scripted to fail with, or nil.
  function w.failing(path, op)
    local f = fail[path]
    return f and f[op]
  end
  -- directories that do not exist (everything else is taken to exist)
  local absent = {}
  for _, d in ipairs(opts.absent_dirs or (opts.fresh_boot and { "/run/imexguard" }) or {}) do
    absent[(d:gsub("/+$", ""))] = true
  end
  --- The missing directory above path (nil when every parent exists).
  function w.missing_parent(path)
    local dir = path:match("^(.*)/[^/]*$")
    while dir and dir ~= "" do
      if absent[dir] then return dir end
      dir = dir:match("^(.*)/[^/]*$")
    end
    return nil
  end
  w.absent = absent
  M.install_read(h, w)
  M.install_write(h, w)
  M.install_dirs(h, w)
end

--- Add the reading file primitives to a fake host: read, read_tail, stat, and the helpers file,
-- set_file.
-- @param h table the fake host (gets read, read_tail, stat, file, set_file)
-- @param w table the host's shared world (gets append; needs files, rec, failing, put)
function M.install_read(h, w)
  local files = w.files
  function h.read(path, max_bytes)
    w.rec("read", path)
    local f = w.failing(path, "read")
    if f then return nil, path .. ": " .. f, f end
    local e = files[path]
    if not e then return nil, path .. ": No such file or directory", "ENOENT" end
    if max_bytes and #e.data > max_bytes then return nil, path .. ": larger than " .. max_bytes, "EFBIG" end
    return e.data
  end
  function h.stat(path)
    w.rec("stat", path)
    local f = w.failing(path, "stat")
    if f then return nil, path .. ": " .. f, f end
    local e = files[path]
    if not e then return nil, path .. ": No such file or directory", "ENOENT" end
    return { type = e.type or "file", size = #e.data, mode = e.mode or tonumber("644", 8), uid = 0, gid = 0,
      ino = e.ino, dev = 1, mtime_us = e.mtime_us, rdev_major = e.rdev_major, rdev_minor = e.rdev_minor }
  end
  function h.read_tail(path, max_bytes, from)
    w.rec("read_tail", path, max_bytes, from)
    local f = w.failing(path, "read")
    if f then return nil, path .. ": " .. f, f end
    local e = files[path]
    if not e then return nil, "read " .. path .. ": No such file or directory", "ENOENT" end
    local size = #e.data
    local start = math.max(0, size - max_bytes)
    if from and from <= size and from > start then start = from end
    return e.data:sub(start + 1), size, start
  end
  function h.file(path) return files[path] and files[path].data end
  function h.set_file(path, data, mtime_us) w.put(path, data, mtime_us) end
  --- Append to a file (creating it), as a daemon writes its log.
  function w.append(path, data)
    local e = files[path]
    w.put(path, (e and e.data or "") .. data)
  end
end

--- Add host.write_in_place to a fake host (see M.install_write).
local function install_in_place(h, w)
  local files = w.files
  --- host.write_in_place(path, data) -> true, as src/file.c: the same inode (a bind mount sees it),
  -- only a regular file that holds exactly #data bytes (else EINVAL, nothing written); recorded in
  -- h.writes with in_place = true.
  function h.write_in_place(path, data)
    w.rec("write_in_place", path)
    local f = w.failing(path, "write")
    if f then return nil, string.format("write_in_place %s: write: %s", path, f), f end
    local e = files[path]
    if not e then return nil, "write_in_place " .. path .. ": open: No such file or directory", "ENOENT" end
    if (e.type or "file") ~= "file" then
      return nil, "write_in_place " .. path .. ": not a regular file", "EINVAL"
    end
    if #e.data ~= #data then
      return nil, string.format("write_in_place %s: holds %d bytes, not %d: nothing written", path, #e.data,
        #data), "EINVAL"
    end
    w.spend(0.0005)
    e.data, e.mtime_us = data, w.wall_us()
    h.writes[#h.writes + 1] = { path = path, data = data, in_place = true }
    return true
  end
end

--- Add the writing file primitives to a fake host: write_atomic, write_in_place, remove_temps,
-- mknod_char.
-- @param h table the fake host (gets write_atomic, write_in_place, remove_temps, mknod_char)
-- @param w table the host's shared world (needs files, rec, failing, put, spend, missing_parent)
function M.install_write(h, w)
  local files = w.files
  function h.write_atomic(path, data, mode)
    w.rec("write_atomic", path)
    local f = w.failing(path, "write")
    if f then return nil, string.format("write %s: write: %s (old file intact)", path, f), f end
    local gone = w.missing_parent(path)
    if gone then return nil, path .. ": directory " .. gone .. " does not exist", "ENOENT" end
    w.spend(0.001)
    w.put(path, data)
    files[path].mode = mode
    h.writes[#h.writes + 1] = { path = path, data = data }
    return true
  end
  install_in_place(h, w)
  --- host.remove_temps(path) -> list of removed names, as src/file.c: in path's directory, the
  -- files named `.<basename>.` and 6 alphanumerics (write_atomic's temp names); nothing else.
  function h.remove_temps(path)
    w.rec("remove_temps", path)
    local dir, b = path:match("^(.*)/([^/]+)$")
    if not dir then return nil, "remove_temps " .. path .. ": no file name", "EINVAL" end
    local gone = w.missing_parent(path)
    if gone then return nil, "remove_temps " .. path .. ": No such file or directory", "ENOENT" end
    local removed = {}
    for p in pairs(files) do
      local d, n = p:match("^(.*)/([^/]+)$")
      local head = "." .. b .. ".imexguard." -- write_atomic's own temp names (src/file.c, C39)
      if d == dir and n:sub(1, #head) == head and n:sub(#head + 1):match("^%w%w%w%w%w%w$") then
        removed[#removed + 1] = n
      end
    end
    table.sort(removed)
    for _, n in ipairs(removed) do files[dir .. "/" .. n] = nil end
    return removed
  end
  function h.mknod_char(path, major, minor, mode)
    w.rec("mknod_char", path, major, minor)
    w.put(path, "")
    files[path].type, files[path].mode = "char", mode
    files[path].rdev_major, files[path].rdev_minor = major, minor
    return true
  end
end

--- Add the directory primitives to a fake host: mkdir, dir_exists (over w.absent, the directories
-- that do not exist).
-- @param h table the fake host (gets mkdir, dir_exists; needs mkdirs)
-- @param w table the host's shared world (needs files, absent, rec, failing, missing_parent)
function M.install_dirs(h, w)
  local files, absent = w.files, w.absent
  --- host.mkdir(path [, mode]) -> true | nil, msg, code, as src/file.c: an existing directory is
  -- success; a missing parent is ENOENT; an existing file is ENOTDIR; mode defaults to 0755.
  function h.mkdir(path, mode)
    mode = mode == nil and 493 or mode
    assert(type(path) == "string" and math.type(mode) == "integer", "mkdir(path [, integer mode])")
    w.rec("mkdir", path, mode)
    path = path:gsub("/+$", "")
    local f = w.failing(path, "mkdir")
    if f then return nil, "mkdir " .. path .. ": " .. f, f end
    local entry = { path = path, mode = mode, created = false }
    h.mkdirs[#h.mkdirs + 1] = entry
    if files[path] then return nil, "mkdir " .. path .. ": exists and is not a directory", "ENOTDIR" end
    local gone = w.missing_parent(path)
    if gone then
      return nil, "mkdir " .. path .. ": No such file or directory (" .. gone .. ")", "ENOENT"
    end
    if absent[path] then
      absent[path] = nil
      entry.created = true
    end
    return true
  end
  function h.dir_exists(path)
    path = path:gsub("/+$", "")
    return not absent[path] and not w.missing_parent(path .. "/x")
  end
end

return M
