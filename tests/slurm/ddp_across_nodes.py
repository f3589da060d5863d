"""One rank of the toy DDP check across nodes (tests/slurm/test_slurm_two_nodes.py), started by srun:
every wrapper of tests/distributed/test_ddp.py and PyTorch's DDP train the toy model in the same
ranks (Gloo, ``ranks.run_launched``), and rank 0 prints, as one JSON line, how far each wrapper's
weights end from PyTorch DDP's on every rank, and where the ranks ran."""
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))        # tests/, for the toy runs

import torch  # noqa: E402

from cs336_systems.distributed.ranks import from_environment, leave, run_launched  # noqa: E402
from distributed.test_ddp import FIRST_MIXED, MIXED, TOY_VARIANTS, _schedule, _train_toy_variants  # noqa: E402

if __name__ == "__main__":
    launch = from_environment()
    names = [n for n in TOY_VARIANTS if _schedule(n) is not FIRST_MIXED]
    gathered = run_launched(_train_toy_variants, launch, args=((*names, "torch-ddp", "torch-ddp-same"),),
                            collective_timeout_s=120)
    if launch.rank == 0:
        apart = {}
        for name in names:
            anchor = "torch-ddp" if _schedule(name) is MIXED else "torch-ddp-same"
            apart[name] = [max(float((torch.as_tensor(ranks[name]["state"][k]) -
                                      torch.as_tensor(ranks[anchor]["state"][k])).abs().max())
                               for k in ranks[anchor]["state"]) for ranks in gathered]
        print(json.dumps({"apart": apart, "launch": launch.where()}), flush=True)
    leave(0)
