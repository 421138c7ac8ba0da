#!/usr/bin/env python3
"""Interleaved A/B runs of one bench program under several environments.

    tools/ab_env.py [--rounds N] [--lib build/liblocus.so] [--json OUT] -- PROGRAM [ARGS...] -- ENV1 ENV2 ...

Each ENV is a comma-separated list of NAME=VALUE set for that configuration
(e.g. LOCUS_PROFILE=uma,LOCUS_THP=off); liblocus is preloaded in every one.
The configurations' order rotates from round to round. Prints each run's
RESULT fields, then the medians of every numeric field per configuration and
the ratio of each configuration's medians to the first one's.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys


def main():
    argv = sys.argv[1:]
    if argv.count("--") < 2:
        sys.exit(__doc__)
    i = argv.index("--")
    j = argv.index("--", i + 1)
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--lib", default=os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                                                  "build", "liblocus.so"))
    ap.add_argument("--json")
    args = ap.parse_args(argv[:i])
    prog, cfgs = argv[i + 1:j], argv[j + 1:]
    recs = []
    for r in range(args.rounds):
        for c in cfgs[r % len(cfgs):] + cfgs[:r % len(cfgs)]:
            env = dict(os.environ, LD_PRELOAD=os.path.abspath(args.lib))
            for kv in filter(None, c.split(",")):
                k, v = kv.split("=", 1)
                env[k] = v
            out = subprocess.run(prog, env=env, stdout=subprocess.PIPE, text=True).stdout
            rec = {"cfg": c, "round": r}
            for line in out.splitlines():
                if line.startswith("RESULT"):
                    for kv in line.split()[1:]:
                        if "=" in kv:
                            k, v = kv.split("=", 1)
                            try:
                                rec[k] = float(v)
                            except ValueError:
                                rec[k] = v
            recs.append(rec)
            print(json.dumps(rec), flush=True)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(recs, f, indent=1)
    keys = [k for k in recs[0] if isinstance(recs[0][k], float)]
    med = {c: {k: statistics.median(x[k] for x in recs if x["cfg"] == c and k in x) for k in keys} for c in cfgs}
    for c in cfgs:
        print("%s (medians of %d): %s" % (c, args.rounds, " ".join("%s=%.4g" % (k, med[c][k]) for k in keys)))
    for c in cfgs[1:]:
        print("%s / %s: %s" % (c, cfgs[0], " ".join("%s=%.3f" % (k, med[c][k] / med[cfgs[0]][k])
                                                   for k in keys if med[cfgs[0]][k])))


if __name__ == "__main__":
    main()
