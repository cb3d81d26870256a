#!/usr/bin/env python3
"""Trunk post-build hook: moves trunk's inline module loader out of index.html into boot.js so
the page's Content-Security-Policy can forbid inline scripts (script-src 'self')."""
import os, re, sys

staging = os.environ.get("TRUNK_STAGING_DIR") or (sys.argv[1] if len(sys.argv) > 1 else "dist")
path = os.path.join(staging, "index.html")
html = open(path, encoding="utf-8").read()
m = re.search(r'<script type="module">(.*?)</script>', html, re.S)
if not m:
    sys.exit(0)  # already external
open(os.path.join(staging, "boot.js"), "w", encoding="utf-8").write(m.group(1).strip() + "\n")
html = html[: m.start()] + '<script type="module" src="./boot.js"></script>' + html[m.end():]
open(path, "w", encoding="utf-8").write(html)
