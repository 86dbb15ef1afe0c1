"""Merges results.json files of several `evofuse bench` runs on one GPU into one table and chart.

python3 benchmarks/merge_results.py OUT_FOLDER RUN1/results.json[:PREFIXES] RUN2/results.json[:PREFIXES] ...
PREFIXES (comma-separated) keep only the rows whose "case mode implementation" starts with one of them
(`:opm` keeps the Outer Product Mean rows, `:opm-af2-main fwd+bwd` one case's training rows,
`:att-af2-main fwd+bwd Flex` one implementation's). A later run's row replaces an earlier run's row of
the same case, mode and implementation, in its place: a re-measured row needs no exclusion elsewhere.
"""

import json
import sys
from pathlib import Path

from evofuse.bench import write_results

rows, metas = {}, []
for arg in sys.argv[2:]:
    path, _, prefixes = arg.partition(":")
    run = json.loads(Path(path).read_text())
    metas.append(dict(run["meta"], source=arg))
    for r in run["rows"]:
        name = f"{r['case']} {r['mode']} {r['impl']}"
        if name.startswith(tuple(prefixes.split(","))):
            rows[name] = r
print(write_results(list(rows.values()), dict(metas[0], runs=metas), Path(sys.argv[1])))
