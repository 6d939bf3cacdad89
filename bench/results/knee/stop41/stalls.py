"""Each run's stalled calls as (turn tokens, context before, cause, ms), sorted: the records that
`compactd bench load` keeps (`stalls`). Usage: python3 stalls.py DIR."""

import glob
import json
import sys


def find(o, key):
    if isinstance(o, dict):
        if key in o:
            return o[key]
        for v in o.values():
            r = find(v, key)
            if r is not None:
                return r
    if isinstance(o, list):
        for v in o:
            r = find(v, key)
            if r is not None:
                return r
    return None


for f in sorted(glob.glob(f"{sys.argv[1]}/*.json")):
    with open(f) as fh:
        s = find(json.load(fh), "stalls") or []
    rows = sorted((x["turn_tokens"], x["before_tokens"], x["cause"], x["ms"]) for x in s)
    print(f.split("/")[-1], len(s), rows)
