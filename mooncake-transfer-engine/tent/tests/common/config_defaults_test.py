#!/usr/bin/env python3
"""docs/configuration.md's default column against the code: every
tent_config_get_*(cfg, "key", default, ...) in src/ whose default is a
constant (a literal, a shift such as 1 << 20, or a #define of one) must
have a row whose default is that value.  Defaults the code computes (NULL:
derived from other settings, CPUs, ...) are left to the row's prose.
  config_defaults_test.py <repo root>"""
import glob
import os
import re
import sys

root = sys.argv[1]
doc = open(os.path.join(root, "docs", "configuration.md")).read()
src = os.path.join(root, "mooncake-transfer-engine", "tent", "src")

rows = {}
for line in doc.splitlines():
    m = re.match(r"^\| `([a-z0-9_/]+)` \| ([^|]+) \| ([^|]*) \|", line)
    if m and m.group(1) not in rows:
        rows[m.group(1)] = m.group(3).strip()

files = glob.glob(os.path.join(src, "**", "*.[ch]"), recursive=True)
texts = {f: open(f).read() for f in files}
macros = {}
for t in texts.values():
    for m in re.finditer(r"^#define ([A-Z][A-Z0-9_]*)[ \t]+([^\n/]+)", t, re.M):
        macros.setdefault(m.group(1), m.group(2).strip())

CALL = re.compile(
    r"tent_config_get_(bool|int|int_range|double_range|string)\(\s*[^,]+,"
    r"\s*((?:\"[^\"]*\"\s*)+),\s*([^,;]+?)\s*[,)]", re.S)


def value(expr, kind, depth=0):
    """The constant expr stands for, as text; None when it is not one."""
    expr = " ".join(expr.split()).strip("() ")
    if expr in macros and depth < 4:
        return value(macros[expr], kind, depth + 1)
    if kind == "string":
        m = re.fullmatch(r'"([^"]*)"', expr)
        return m.group(1) if m else None
    if expr in ("true", "false"):
        return expr
    m = re.fullmatch(r"(\d+)(?:ll|u|ull|l)?\s*<<\s*(\d+)", expr, re.I)
    if m:
        return str(int(m.group(1)) << int(m.group(2)))
    m = re.fullmatch(r"-?\d+(?:\.\d+)?(?:e\d+)?", expr)
    return expr if m else None


def same(code, doc_default):
    d = doc_default.strip("`").replace(",", "")
    if code == d:
        return True
    try:
        return float(code) == float(d)
    except ValueError:
        return code == "" and d in ('""', "none", "empty")


fail = checked = 0
for f, t in sorted(texts.items()):
    for m in CALL.finditer(t):
        key = "".join(re.findall(r'"([^"]*)"', m.group(2)))
        v = value(m.group(3), m.group(1))
        if v is None:
            continue
        where = "%s: %s" % (os.path.relpath(f, src), key)
        if key not in rows:
            print("%s: no row in docs/configuration.md" % where)
            fail = 1
        elif not same(v, rows[key]):
            print("%s: the code's default is %s, docs/configuration.md says %s"
                  % (where, v, rows[key]))
            fail = 1
        checked += 1
if checked < 40:
    print("only %d defaults found: has tent_config_get_* changed shape?"
          % checked)
    fail = 1
if not fail:
    print("docs/configuration.md gives the code's default for %d keys"
          % checked)
sys.exit(fail)
