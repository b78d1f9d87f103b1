"""Data parallel on one node: ``torchrun --nproc_per_node=N -m ppo_core.train ...`` (gloo on CPU, NCCL on GPU).

How a step is shared by N ranks (rank r of N, B sequences per step):

1. sample + score: rank r takes the contiguous slice ``B/N * r .. B/N * (r + 1)`` of the step's prompts
   (with ``rollout.group_size`` G > 1, B/N must be a multiple of G, so each rank holds whole groups)
   and samples and scores them (the reward model too, ``reward.type=model``) from its own stream: torch
   is seeded from ``(train.seed, step, rank)`` before sampling, so the stream is a pure function of the
   step and a resumed run repeats the same samples.
2. the scored rollouts are gathered (padded to a common prompt and response length) so every rank
   holds the whole batch: rewards, GAE, whitening, the KL controller and every logged mean are then
   computed over the global batch by the unchanged single-process code, identically on every rank.
   Gathered in rank order, the rows are the step's prompts in order: a group's G rows stay contiguous.
3. update: the minibatch order comes from the shuffle generator, identical on every rank; rank r
   runs forward/backward on its share ``idx[r::N]`` of each minibatch. Every term of its loss divides by
   the global minibatch's counts (``losses.loss_units``: tokens, responses with a token, responses), so
   the ranks' losses are shares that add up to the single-process loss; each is scaled by N because the
   gradients are averaged over ranks. Every term (each objective, the value loss, the entropy bonus, the
   KL in the loss) then has the single-process gradient, in every ``algo.loss_agg_mode``. The logged
   losses and token statistics (clipfrac, entropy, approx_kl, value/*) are shares too, summed over ranks,
   ``policy/max_abs_log_ratio`` a max: the single-process numbers.

Gradients are averaged by an explicit ``all_reduce`` in a post-accumulate hook on each trainable
parameter, not by wrapping the actor in ``DistributedDataParallel``: the trainer reaches into the
actor (``actor.lm`` for sampling, ``actor.value_head``, the swappable ``logits_fn``), which a DDP
wrapper would hide, and the token reweighting has to happen in the loss anyway. The hook reduces
once per backward; with ``ppo.grad_accum_steps > 1`` that stays exact, because the already averaged
part of the gradient is equal on every rank and the average is linear.

Data parallelism is an object, not a trainer of its own: ``join(cfg)`` joins the process group and returns the
rank's config with a ``DataParallel``, which ``run.runner.build_trainer`` hands to the same ``RunTrainer`` a
single process builds (``PPOTrainer`` calls its ``shard``, ``gather`` and ``update``; the run its ``attach``
and ``check_weights``).

Rank 0 alone writes the run folder and its checkpoints. Rank r > 0 runs the same loop with its logs
in ``output_dir/.rank{r}/`` (no intermediate checkpoints; transformers itself saves model weights
from rank 0 only); it resumes from rank 0's checkpoint. At the end every rank hashes its weights and
rank 0 writes the digests to ``ranks.json``; the run fails if they differ.
"""

import hashlib
import json
import os
from dataclasses import fields
from datetime import timedelta
from pathlib import Path

import torch
import torch.distributed as dist

from ..losses import loss_units
from ..rollout import Rollout
from ..update import ppo_loss
from ..utils import stream_seed
from . import resume
from .config import ConfigError, derive
from .setup import resolve_device

__all__ = [
    "is_distributed",
    "rank",
    "world_size",
    "init",
    "join",
    "check_world",
    "weights_digest",
    "DataParallel",
]


def is_distributed() -> bool:
    return dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1


def rank() -> int:
    return dist.get_rank() if is_distributed() else 0


def world_size() -> int:
    return dist.get_world_size() if is_distributed() else 1


def launched_by_torchrun() -> bool:
    return int(os.environ.get("WORLD_SIZE", "1")) > 1


def init(device: torch.device | None = None) -> None:
    """Join the process group torchrun describes (RANK, WORLD_SIZE, MASTER_ADDR/PORT in the environment)."""
    if is_distributed():
        return
    backend = "nccl" if device is not None and device.type == "cuda" else "gloo"
    if backend == "nccl":
        torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", "0")))
    dist.init_process_group(backend, timeout=timedelta(minutes=30))


def _all_sum(t: torch.Tensor) -> torch.Tensor:
    t = t.clone()
    dist.all_reduce(t, op=dist.ReduceOp.SUM)
    return t


def sync_gradients(actor) -> None:
    """Average each trainable parameter's gradient over ranks after every backward (see the module doc)."""
    n = world_size()

    def hook(p):
        dist.all_reduce(p.grad, op=dist.ReduceOp.SUM)
        p.grad.div_(n)

    for p in actor.parameters():
        if p.requires_grad:
            p.register_post_accumulate_grad_hook(hook)


def broadcast_parameters(actor) -> None:
    """Start every rank from rank 0's weights (a randomly initialised value head differs otherwise)."""
    for t in [*actor.parameters(), *actor.buffers()]:
        dist.broadcast(t.data, src=0)


def _rank_scaled(loss_fn):
    """``loss_fn`` times N: each rank's loss is its share of the minibatch's loss (every term divides by the
    global minibatch's counts, ``mb["units"]``), and the gradient hooks average over the N ranks."""

    def scaled(actor, part, *args):
        loss, stats = loss_fn(actor, part, *args)
        return loss * world_size(), stats

    return scaled


def _distributed_update(minibatch_update, actor, optimizer, mb: dict, **kwargs) -> dict:
    """Run ``minibatch_update`` on this rank's share of ``mb``; return statistics over the global minibatch."""
    r, n = rank(), world_size()
    local = {k: (v[r::n] if torch.is_tensor(v) else v) for k, v in mb.items()}
    local["units"] = loss_units(mb["mask"])  # every rank holds the whole minibatch: its counts are the global ones
    if "policy_mask" in mb:  # chapter 09: the policy loss counts the global minibatch's kept tokens
        local["policy_units"] = loss_units(mb["policy_mask"])
    loss_fn = kwargs.pop("loss_fn", None) or ppo_loss
    stats = minibatch_update(actor, optimizer, local, loss_fn=_rank_scaled(loss_fn), **kwargs)
    whole = ("train/grad_norm", "value/grad_norm", "train/skipped", "policy/max_abs_log_ratio")  # not shares:
    keys = sorted(k for k in stats if k not in whole)  # norms of the averaged gradient, equal on every rank
    sums = _all_sum(torch.tensor([stats[k] for k in keys], dtype=torch.float64))  # shares of the global means
    out = dict(stats)
    out.update({k: sums[i].item() for i, k in enumerate(keys)})
    if "policy/max_abs_log_ratio" in stats:
        m = torch.tensor([stats["policy/max_abs_log_ratio"]], dtype=torch.float64)
        dist.all_reduce(m, op=dist.ReduceOp.MAX)
        out["policy/max_abs_log_ratio"] = m.item()
    return out


def gather_rollout(ro, pad_id: int):
    """Every rank's scored rollout, concatenated in rank order, on every rank."""
    sizes = [None] * world_size()
    dist.all_gather_object(sizes, (ro.prompt_len, ro.response_ids.shape[1], ro.completions))
    P, T = max(s[0] for s in sizes), max(s[1] for s in sizes)
    padded = ro.padded(P, T, pad_id)  # the same padding as Rollout.concat
    full = {}
    for key, t in padded.items():
        if t is None:
            full[key] = None
            continue
        parts = [torch.empty_like(t) for _ in range(world_size())]
        dist.all_gather(parts, t.contiguous())
        full[key] = torch.cat(parts)
    names = {f.name for f in fields(Rollout)}
    completions = [c for s in sizes for c in s[2]]
    return Rollout(**{k: v for k, v in full.items() if k in names}, prompt_len=P, completions=completions)


def check_world(cfg, n: int) -> None:
    """Refuse (ConfigError, one line) a batch that N ranks cannot share in whole groups of rollout.group_size."""
    B, G = cfg.rollout.batch_size, cfg.rollout.group_size
    if cfg.algo.dynamic_sampling and n > 1:  # each rank would refill its own slice: the ranks' batches would differ
        raise ConfigError(f"algo.dynamic_sampling runs in one process only: set it false for {n} ranks")
    if B % (n * G):  # each rank's contiguous slice of B / N rows must hold whole groups of G
        what = f"the {n} ranks" if G == 1 else f"{n} ranks x rollout.group_size={G} (whole groups per rank)"
        raise ConfigError(f"rollout.batch_size={B} must be a multiple of {what}: set it to a multiple of {n * G}")


def rank_settings(cfg, r: int, main_resume) -> dict:
    """What rank ``r`` > 0 runs with instead (``config.derive``): logs in a private folder, no checkpoints of its
    own, and rank 0's checkpoint ``main_resume`` (or none) to resume from."""
    return {
        "train.output_dir": str(Path(cfg.train.output_dir) / f".rank{r}"),
        "train.resume": str(main_resume) if main_resume is not None else "",
        "train.overwrite": True,
        "train.save_every": 0,
        "train.tensorboard": False,
        "train.wandb": False,
        "train.log_every": 0,
    }


class DataParallel:
    """One of N ranks' share of each step (the module doc), passed to ``PPOTrainer`` as its ``data_parallel``.

    ``shard``, ``gather`` and ``update`` are the trainer's side (step 1's slice of the records and its
    sampling stream, step 2's gather, step 3's update on the rank's share); ``attach`` and ``check_weights``
    the run's (same starting weights and gradient averaging; bit-identical weights at the end).
    """

    def __init__(self, seed: int):
        self.seed, self.rank, self.world_size = seed, rank(), world_size()

    def shard(self, records: list, step: int) -> list:
        """This rank's contiguous slice of the step's records; seeds torch with its sampling stream."""
        seed = stream_seed(self.seed, "rank_sampling", step, self.rank)
        torch.manual_seed(seed)  # this rank's sampling stream: a pure function of (seed, step, rank)
        b, n, r = len(records), self.world_size, self.rank
        return records[r * b // n : (r + 1) * b // n]

    def gather(self, ro: Rollout, pad_id: int) -> Rollout:
        """Every rank's scored rollout, in rank order, on every rank."""
        return gather_rollout(ro, pad_id)

    def update(self, minibatch_update, actor, optimizer, mb: dict, **kwargs) -> dict:
        """``minibatch_update`` on this rank's share of ``mb``; statistics over the global minibatch."""
        return _distributed_update(minibatch_update, actor, optimizer, mb, **kwargs)

    def attach(self, actor) -> None:
        """Start from rank 0's weights and average every gradient over the ranks (after a resume has loaded them)."""
        broadcast_parameters(actor)
        sync_gradients(actor)

    def check_weights(self, actor, out: Path) -> None:
        """After the run: every rank's weights must be bit-identical; rank 0 writes the digests to ``ranks.json``."""
        digests = [None] * self.world_size
        dist.all_gather_object(digests, weights_digest(actor))
        if self.rank == 0:
            (out / "ranks.json").write_text(json.dumps({"world_size": self.world_size, "weights": digests}))
        if len(set(digests)) > 1:
            raise RuntimeError(f"the ranks' weights diverged (sha256 per rank: {digests})")


def join(cfg):
    """Join torchrun's process group: (this rank's config, its ``DataParallel``). Rank r > 0 gets its own logs
    folder and rank 0's checkpoint to resume from (``rank_settings``); a batch the ranks cannot share is refused."""
    init(_device(cfg))
    r, n = rank(), world_size()
    check_world(cfg, n)
    refused = None
    if r > 0:  # logs in a private folder; resume from rank 0's checkpoint
        try:
            main_resume = resume.resume_path(cfg)
        except ConfigError as err:  # rank 0 refuses the same way in RunTrainer.__init__
            refused = err
        else:
            cfg = derive(cfg, rank_settings(cfg, r, main_resume))
    dist.barrier()  # every rank > 0 has read which checkpoint to resume before rank 0 sets anything aside
    if refused is not None:
        raise refused
    return cfg, DataParallel(cfg.train.seed)


def weights_digest(actor) -> str:
    """sha256 of every parameter's and buffer's bytes, in order: equal digests = bit-identical weights."""
    h = hashlib.sha256()
    for name, t in actor.state_dict().items():
        h.update(name.encode())
        h.update(t.detach().cpu().contiguous().view(torch.uint8).numpy().tobytes())
    return h.hexdigest()


def _device(cfg):
    return resolve_device(cfg.model.device)
