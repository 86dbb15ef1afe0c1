"""Merges results.json files of several `evofuse bench` runs on one GPU into one table and chart.

python3 benchmarks/merge_results.py OUT_FOLDER RUN1/results.json RUN2/results.json ...
"""

import json
import sys
from pathlib import Path

from evofuse.bench import write_results

runs = [json.loads(Path(p).read_text()) for p in sys.argv[2:]]
meta = dict(runs[0]["meta"], runs=[r["meta"] for r in runs])
print(write_results([row for r in runs for row in r["rows"]], meta, Path(sys.argv[1])))
