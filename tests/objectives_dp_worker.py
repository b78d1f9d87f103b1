"""Run by tests/test_split_invariance.py under torchrun (2 gloo ranks): for every objective x aggregation x
grad_accum_steps in (1, 2), one data-parallel minibatch update (``run.distributed._distributed_update``) on
the same minibatch; rank r writes the gradient each update would apply and its stats to ``{out}.rank{r}``."""

import sys

import torch
from objectives_support import KW, MODES, SETTINGS, Recorder, build_case, loss_fn

from ppo_core.run.distributed import _distributed_update, init, rank, sync_gradients
from ppo_core.update import minibatch_update

torch.set_num_threads(1)
init()
actor, mb = build_case()
sync_gradients(actor)
out = {}
for setting in SETTINGS:
    for mode in MODES:
        for k in (1, 2):
            rec = Recorder(actor)
            kw = {**KW, "grad_accum_steps": k}
            stats = _distributed_update(minibatch_update, actor, rec, mb, loss_fn=loss_fn(setting, mode), **kw)
            out[(setting, mode, k)] = {"grad": rec.grad, "stats": stats}
torch.save(out, f"{sys.argv[1]}.rank{rank()}")
