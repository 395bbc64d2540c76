/* SPDX-License-Identifier: Apache-2.0 */
/*
 * xml.c: host.xml_parse: an XML document (`nvidia-smi -q -x`; docs/design.md, "Reading
 * nvidia-smi's XML") parsed by libexpat into a tree of plain Lua tables, within limits.
 *
 * Why a primitive over libexpat (Debian's libexpat1) rather than Debian's lua-expat (`lxp`)
 * exposed in the sandbox: the parse runs in C alone (no Lua callback runs inside the parser, so
 * nothing needs the count hook or a sandboxed parser object), the limits are enforced here, and a
 * policy gets data, not a streaming parser (docs/design.md "Reading nvidia-smi's XML").
 *
 * How:
 *  - One XML_Parse call over the whole text (isFinal): a document that ends early (a truncated
 *    output) is an error, as is anything not well-formed.  No external entity or DTD is ever
 *    read (expat's defaults: no external entity handler, XML_PARAM_ENTITY_PARSING_NEVER), and an
 *    entity declaration stops the parse (XML_SetEntityDeclHandler): nvidia-smi declares none, and
 *    so no entity expansion (the "billion laughs") can grow a document.
 *  - Limits: the input's size (max_bytes), the nesting depth (max_depth) and the count of
 *    elements (max_elements), checked as elements open; past one the parser is stopped
 *    (XML_StopParser) and the call returns nil, msg, "limit".
 *  - Elements named in the option skip are left out of the tree with everything inside them
 *    (still parsed, counted and checked): a reader that needs a few fields of a large document
 *    (nvidia-smi's <supported_clocks> are two thirds of an HGX board's elements) does not pay
 *    for tables it never reads.
 *  - The tree is built on the Lua stack as elements open and close (the open elements are the
 *    top of the stack), its tables allocated by the Lua state (the sandbox's memory limit
 *    counts them).  The parser and the text buffer belong to a userdata whose __close and __gc
 *    free them, marked to-be-closed: a Lua error inside a handler (out of memory) unwinds through
 *    expat and still frees them; the normal path frees them before returning.
 */
#include "imexguard.h"

#include <expat.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Defaults of the limits (limits.max_bytes, max_depth, max_elements); an HGX node of 8 GPUs
 * prints about 360 KB, 6100 elements, 6 levels deep (tests/fixtures/nvidia-smi/). */
#define XML_MAX_BYTES	 (8 << 20)
#define XML_MAX_DEPTH	 32
#define XML_MAX_ELEMENTS 200000
/* The most max_bytes may be (XML_Parse takes an int length). */
#define XML_MAX_BYTES_CAP (256 << 20)

#define XML_MT "imexguard.xml_parser"

struct xml_parse {
	lua_State *L;
	XML_Parser parser; /* NULL once freed */
	const char *name;  /* the input, for messages */
	lua_Integer max_depth, max_elements;
	lua_Integer depth, elements;
	int skip_idx;	      /* stack index of the skip set (name -> true), 0: none */
	lua_Integer skipping; /* > 0: the depth of the skipped element we are inside */
	char *buf;	      /* character data of the innermost open element, not yet stored */
	size_t buf_len, buf_cap;
	const char *code; /* set when a handler stopped the parse */
	char msg[512];
};

/* Free the parser and the buffer (idempotent): the userdata's __close and __gc. */
static void xml_free(struct xml_parse *x)
{
	if (x->parser)
		XML_ParserFree(x->parser);
	x->parser = NULL;
	free(x->buf);
	x->buf = NULL;
	x->buf_len = x->buf_cap = 0;
}

static int m_free(lua_State *L)
{
	xml_free(luaL_checkudata(L, 1, XML_MT));
	return 0;
}

/* The parser's metatable: freed when closed or collected (ig_push_metatable). */
static const luaL_Reg xml_meta[] = {{"__gc", m_free}, {"__close", m_free}, {NULL, NULL}};

/* Stop the parse with code and a message (printf format) after "NAME: ", and where in the input
 * ("at line L, column C"). */
static void stop(struct xml_parse *x, const char *code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static void stop(struct xml_parse *x, const char *code, const char *fmt, ...)
{
	char what[256];
	va_list ap;

	if (x->code)
		return;
	va_start(ap, fmt);
	vsnprintf(what, sizeof what, fmt, ap);
	va_end(ap);
	snprintf(x->msg, sizeof x->msg, "%s: %s at line %lu, column %lu", x->name, what,
		 (unsigned long)XML_GetCurrentLineNumber(x->parser),
		 (unsigned long)XML_GetCurrentColumnNumber(x->parser) + 1);
	x->code = code;
	XML_StopParser(x->parser, XML_FALSE);
}

static int is_space(char c)
{
	return c == ' ' || c == '\t' || c == '\r' || c == '\n'; /* XML's S production */
}

/* Append the pending character data to the text of the element on top of the stack.  Data that
 * is white space alone before any other text is dropped (the indentation between elements). */
static void flush_text(struct xml_parse *x)
{
	lua_State *L = x->L;
	size_t have = 0;

	if (x->buf_len == 0 || x->depth == 0)
		return;
	lua_getfield(L, -1, "text");
	lua_tolstring(L, -1, &have);
	int blank = 1;
	for (size_t i = 0; i < x->buf_len && blank; i++)
		blank = is_space(x->buf[i]);
	if (have == 0 && blank) {
		lua_pop(L, 1);
	} else {
		lua_pushlstring(L, x->buf, x->buf_len);
		lua_concat(L, 2);
		lua_setfield(L, -2, "text");
	}
	x->buf_len = 0;
}

/* Is an element named tag in the skip set (a table name -> true, below the tree on the stack)? */
static int is_skipped(struct xml_parse *x, const XML_Char *tag)
{
	if (x->skip_idx == 0)
		return 0;
	int skipped = lua_getfield(x->L, x->skip_idx, tag) != LUA_TNIL;
	lua_pop(x->L, 1);
	return skipped;
}

static void XMLCALL on_start(void *ud, const XML_Char *tag, const XML_Char **atts)
{
	struct xml_parse *x = ud;
	lua_State *L = x->L;

	if (x->code)
		return;
	if (x->depth >= x->max_depth) {
		stop(x, "limit", "elements nested deeper than %lld", (long long)x->max_depth);
		return;
	}
	if (x->elements >= x->max_elements) {
		stop(x, "limit", "more than %lld elements", (long long)x->max_elements);
		return;
	}
	x->elements++;
	if (x->skipping > 0 || is_skipped(x, tag)) {
		if (x->skipping == 0) {
			flush_text(x);
			x->skipping = x->depth + 1;
		}
		x->depth++;
		return;
	}
	flush_text(x);
	luaL_checkstack(L, 4, "XML elements nested too deep");
	lua_createtable(L, 0, 3);
	lua_pushstring(L, tag);
	lua_setfield(L, -2, "tag");
	lua_newtable(L);
	for (size_t i = 0; atts[i] && atts[i + 1]; i += 2) {
		lua_pushstring(L, atts[i + 1]);
		lua_setfield(L, -2, atts[i]);
	}
	lua_setfield(L, -2, "attr");
	lua_pushliteral(L, "");
	lua_setfield(L, -2, "text");
	x->depth++;
}

static void XMLCALL on_end(void *ud, const XML_Char *tag)
{
	struct xml_parse *x = ud;
	lua_State *L = x->L;
	size_t len = 0;

	(void)tag; /* expat has checked that it matches the start tag */
	if (x->code)
		return;
	if (x->skipping > 0) {
		if (x->depth == x->skipping)
			x->skipping = 0;
		x->depth--;
		x->buf_len = 0; /* character data inside a skipped element */
		return;
	}
	flush_text(x);
	lua_getfield(L, -1, "text");
	const char *s = lua_tolstring(L, -1, &len);
	size_t a = 0, b = len;
	while (a < b && is_space(s[a]))
		a++;
	while (b > a && is_space(s[b - 1]))
		b--;
	if (a > 0 || b < len) {
		lua_pushlstring(L, s + a, b - a);
		lua_setfield(L, -3, "text");
	}
	lua_pop(L, 1);
	x->depth--;
	if (x->depth > 0)
		lua_rawseti(L, -2, (lua_Integer)lua_rawlen(L, -2) + 1); /* a child of its parent */
	/* else: the root stays on the stack, the result */
}

static void XMLCALL on_text(void *ud, const XML_Char *s, int len)
{
	struct xml_parse *x = ud;

	if (x->code || x->depth == 0 || len <= 0 || x->skipping > 0)
		return;
	if ((size_t)len > x->buf_cap - x->buf_len) {
		size_t cap = x->buf_cap ? x->buf_cap * 2 : 256;
		while (cap - x->buf_len < (size_t)len)
			cap *= 2;
		char *p = realloc(x->buf, cap);
		if (!p) {
			stop(x, "ENOMEM", "out of memory for the text of an element");
			return;
		}
		x->buf = p;
		x->buf_cap = cap;
	}
	memcpy(x->buf + x->buf_len, s, (size_t)len);
	x->buf_len += (size_t)len;
}

static void XMLCALL on_entity(void *ud, const XML_Char *entity, int is_parameter,
			      const XML_Char *value, int value_length, const XML_Char *base,
			      const XML_Char *system_id, const XML_Char *public_id,
			      const XML_Char *notation)
{
	(void)is_parameter, (void)value, (void)value_length, (void)base, (void)system_id;
	(void)public_id, (void)notation;
	stop(ud, "xml", "an entity declaration (%s) is refused", entity);
}

/* An integer limit from the options table at index 3 (absent: def), within 1..cap. */
static lua_Integer opt_limit(lua_State *L, const char *key, lua_Integer def, lua_Integer cap)
{
	if (lua_isnoneornil(L, 3))
		return def;
	lua_getfield(L, 3, key);
	if (lua_isnil(L, -1)) {
		lua_pop(L, 1);
		return def;
	}
	int ok = 0;
	lua_Integer v = lua_tointegerx(L, -1, &ok);
	lua_pop(L, 1);
	if (!ok || v < 1 || v > cap)
		luaL_error(L, "bad argument #3 to 'xml_parse' (%s must be an integer in 1..%I)",
			   key, cap);
	return v;
}

/* host.xml_parse(text, name [, limits]) -> element, or nil, msg, code.
 *  text: string, a whole XML document (UTF-8 unless its declaration names another encoding);
 *  name: string, what the text is ("nvidia-smi -q -x"), the start of every message;
 *  limits: table, optional: max_bytes (integer, the most bytes of text, default 8 MiB),
 *    max_depth (integer, the most nested elements, default 32), max_elements (integer, default
 *    200000), skip (list of element names: such elements, wherever they are, are left out of the
 *    tree with everything inside them; they are still parsed, and count for max_depth and
 *    max_elements).
 * The result is the document element as a table: tag (string, the element's name), attr (table:
 * attribute name -> value, {} when none), text (string: the element's own character data, entities
 * and CDATA resolved, with the white space at both ends removed; "" when none, so `<a></a>` and
 * `<a/>` have text "" while an absent element is no table at all), and the child elements in
 * document order as its list part (element[1], ...).  Comments and processing instructions are
 * dropped.
 * Errors: "EFBIG" (text longer than max_bytes), "xml" (not well-formed, ends before the document
 * does, or declares an entity: the message gives expat's reason, line and column), "limit"
 * (deeper or more elements than allowed), "ENOMEM".  Misuse (not a string, a bad limit, a skip
 * that is not a list of strings) raises.
 * libexpat: https://libexpat.github.io/doc/api/ */
int ig_host_xml_parse(lua_State *L)
{
	size_t len = 0;
	const char *text = luaL_checklstring(L, 1, &len);
	const char *name = luaL_checkstring(L, 2);
	if (!lua_isnoneornil(L, 3))
		luaL_checktype(L, 3, LUA_TTABLE);
	lua_Integer max_bytes = opt_limit(L, "max_bytes", XML_MAX_BYTES, XML_MAX_BYTES_CAP);
	lua_Integer max_depth = opt_limit(L, "max_depth", XML_MAX_DEPTH, 10000);
	lua_Integer max_elements = opt_limit(L, "max_elements", XML_MAX_ELEMENTS, 100000000);
	if (len > (size_t)max_bytes)
		return ig_push_error(L, "EFBIG", "%s: larger than %lld bytes (%zu)", name,
				     (long long)max_bytes, len);
	lua_settop(L, 3); /* text, name, limits or nil */

	struct xml_parse *x = lua_newuserdatauv(L, sizeof *x, 0);
	memset(x, 0, sizeof *x);
	ig_push_metatable(L, XML_MT, xml_meta, NULL);
	lua_setmetatable(L, -2);
	lua_toclose(L, -1);
	x->L = L;
	x->name = name;
	x->max_depth = max_depth;
	x->max_elements = max_elements;
	if (!lua_isnil(L, 3)) {
		/* limits.skip: a list of element names, made a set below the tree */
		if (lua_getfield(L, 3, "skip") == LUA_TNIL) {
			lua_pop(L, 1);
		} else {
			if (!lua_istable(L, -1))
				luaL_error(L,
					   "bad argument #3 to 'xml_parse' (skip must be a list of "
					   "element names)");
			lua_Integer n = (lua_Integer)lua_rawlen(L, -1);
			lua_createtable(L, 0, n > 64 ? 64 : (int)n);
			for (lua_Integer i = 1; i <= n; i++) {
				if (lua_rawgeti(L, -2, i) != LUA_TSTRING)
					luaL_error(L,
						   "bad argument #3 to 'xml_parse' (skip must be a "
						   "list of element names)");
				lua_pushboolean(L, 1);
				lua_rawset(L, -3);
			}
			x->skip_idx = lua_gettop(L);
		}
	}
	x->parser = XML_ParserCreate(NULL);
	if (!x->parser)
		return ig_push_error(L, "ENOMEM", "%s: cannot create an XML parser", name);
	XML_SetUserData(x->parser, x);
	XML_SetElementHandler(x->parser, on_start, on_end);
	XML_SetCharacterDataHandler(x->parser, on_text);
	XML_SetEntityDeclHandler(x->parser, on_entity);

	int top = lua_gettop(L);
	enum XML_Status st = XML_Parse(x->parser, text, (int)len, XML_TRUE);
	if (st != XML_STATUS_OK && !x->code) {
		enum XML_Error e = XML_GetErrorCode(x->parser);
		unsigned long line = XML_GetCurrentLineNumber(x->parser);
		unsigned long col = XML_GetCurrentColumnNumber(x->parser) + 1;
		/* what expat reports when the input stops inside the document */
		int early = e == XML_ERROR_UNCLOSED_TOKEN || e == XML_ERROR_PARTIAL_CHAR ||
			    e == XML_ERROR_UNCLOSED_CDATA_SECTION ||
			    (e == XML_ERROR_NO_ELEMENTS && x->elements > 0);
		snprintf(x->msg, sizeof x->msg, "%s: %s at line %lu, column %lu: %s", name,
			 early ? "the document ends early (truncated?)" : "not well-formed XML",
			 line, col, XML_ErrorString(e));
		x->code = "xml";
	}
	if (x->code) {
		char msg[sizeof x->msg];
		const char *code = x->code;
		memcpy(msg, x->msg, sizeof msg);
		xml_free(x);
		return ig_push_error(L, code, "%s", msg);
	}
	xml_free(x);
	if (lua_gettop(L) != top + 1) /* cannot happen after XML_STATUS_OK: one root, closed */
		return ig_push_error(L, "xml", "%s: no document element", name);
	return 1;
}
