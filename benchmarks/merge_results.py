"""Merges results.json files of several `evofuse bench` runs on one GPU into one table and chart.

python3 benchmarks/merge_results.py OUT_FOLDER RUN1/results.json[:PREFIXES] RUN2/results.json[:PREFIXES] ...
PREFIXES (comma-separated) keep only the rows whose "case mode implementation" starts with one of them
(`:opm` keeps the Outer Product Mean rows, `:opm-af2-main fwd+bwd` one case's training rows,
`:att-af2-main fwd+bwd Flex` one implementation's).
"""

import json
import sys
from pathlib import Path

from evofuse.bench import write_results

rows, metas = [], []
for arg in sys.argv[2:]:
    path, _, prefixes = arg.partition(":")
    run = json.loads(Path(path).read_text())
    metas.append(dict(run["meta"], source=arg))
    rows += [r for r in run["rows"] if f"{r['case']} {r['mode']} {r['impl']}".startswith(tuple(prefixes.split(",")))]
print(write_results(rows, dict(metas[0], runs=metas), Path(sys.argv[1])))
