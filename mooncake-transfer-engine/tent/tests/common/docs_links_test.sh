#!/usr/bin/env bash
# Every relative link of README.md and docs/*.md names a file that exists,
# and every #anchor one of that file's headings.
#   docs_links_test.sh <repo root>
set -euo pipefail
cd "$1"
python3 - <<'PY'
import os, re, sys
def slug(t):
    t = re.sub(r'[^a-z0-9 \-_]', '', t.lower().strip())
    return t.replace(' ', '-')
def anchors(path):
    out = set()
    for line in open(path, encoding='utf-8'):
        m = re.match(r'#+ (.*)', line)
        if m:
            out.add(slug(m.group(1)))
    return out
bad = 0
files = ['README.md'] + ['docs/' + f for f in sorted(os.listdir('docs')) if f.endswith('.md')]
for sub in ('docs/transports',):
    if os.path.isdir(sub):
        files += [sub + '/' + f for f in sorted(os.listdir(sub)) if f.endswith('.md')]
for f in files:
    text = open(f, encoding='utf-8').read()
    text = re.sub(r'```.*?```', '', text, flags=re.S)
    for m in re.finditer(r'\]\(([^)\s]+)\)', text):
        link = m.group(1)
        if re.match(r'[a-z]+:', link):
            continue
        path, _, anchor = link.partition('#')
        target = os.path.normpath(os.path.join(os.path.dirname(f), path)) if path else f
        if not os.path.exists(target):
            print(f"{f}: link to {link}: {target} does not exist"); bad = 1
        elif anchor and target.endswith('.md') and anchor not in anchors(target):
            print(f"{f}: link to {link}: no heading #{anchor} in {target}"); bad = 1
if not bad:
    print(f"{len(files)} pages: every relative link resolves")
sys.exit(bad)
PY
