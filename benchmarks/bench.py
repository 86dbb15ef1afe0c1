"""`evofuse bench` with the lab's peers (`peers.py`: cuEquivariance, trifast, FlexAttention, the models' own
modules, torch.compile's captured modes), on a CUDA machine, from the repository root; every argument is `evofuse
bench`'s (`python3 -m evofuse bench --help`):

    python3 benchmarks/bench.py --suite tri-384,tri-768 --train --dtype bfloat16 --peers "cuEquivariance bf16"
"""

import sys

from peers import PEERS

from evofuse.cli import main

if __name__ == "__main__":
    sys.exit(main(["bench", *sys.argv[1:]], peers=PEERS))
