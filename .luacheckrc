-- SPDX-License-Identifier: Apache-2.0
std = "lua54"
max_line_length = 110
exclude_files = { "build/**" }
files["**/*_spec.lua"] = { std = "+busted" }
files["tests/**"] = { std = "+busted" }
