"""The pieces of the mapping table (``table.py``): what one of our keys becomes in one engine.

A cell answers, for a given run, one of three things: the engine settings to write (a dict), a ``Gap``
(no counterpart: the reason is listed in the export's ``unmapped.txt``), or a ``Same`` (nothing to write:
the engine already does what the run does).
"""

from collections.abc import Callable
from dataclasses import dataclass

from ..advantages import ADV_ESTIMATORS
from ..utils import dotted_get

__all__ = ["Ctx", "Gap", "Same", "Cell", "Row", "key", "gap", "same", "custom"]


@dataclass(frozen=True)
class Gap:
    """No counterpart in the engine for this run's value."""

    reason: str


@dataclass(frozen=True)
class Same:
    """Nothing to write: the engine behaves as the run asks (why, in one line)."""

    reason: str


@dataclass
class Ctx:
    """What a cell reads: the run's config, the model path to write and the exported data."""

    cfg: object
    model_path: str | None
    n_train: int
    files: dict

    def get(self, dotted: str):
        return dotted_get(self.cfg, dotted)

    @property
    def critic(self) -> bool:
        return bool(ADV_ESTIMATORS.info(self.cfg.algo.adv_estimator, "critic"))

    @property
    def prompts_per_step(self) -> int:
        return self.cfg.rollout.batch_size // self.cfg.rollout.group_size


@dataclass(frozen=True)
class Cell:
    """``names``: the engine keys shown on the page; ``fn(ctx, value)``: a dict, a Gap or a Same."""

    names: tuple
    fn: Callable

    def __call__(self, ctx: Ctx, value):
        return self.fn(ctx, value)


@dataclass(frozen=True)
class Row:
    """One of our config keys and its counterparts in veRL, OpenRLHF and TRL (TRL is shown, not exported)."""

    key: str
    verl: Cell
    openrlhf: Cell
    trl: str = "—"
    note: str = ""


def key(name: str, conv: Callable | None = None, critic_only: bool = False) -> Cell:
    """The value (converted by ``conv(value, ctx)``) written under one engine key."""

    def fn(ctx, value):
        if critic_only and not ctx.critic:
            return Same(f"no critic with algo.adv_estimator={ctx.cfg.algo.adv_estimator}")
        out = conv(value, ctx) if conv else value
        return out if isinstance(out, (Gap, Same)) else {name: out}

    return Cell((name,), fn)


def gap(reason: str, *names: str) -> Cell:
    """Never a counterpart (``names``: related settings the page may point to)."""
    return Cell(names, lambda ctx, value: Gap(reason))


def same(reason: str) -> Cell:
    return Cell((), lambda ctx, value: Same(reason))


def custom(names: tuple, fn: Callable) -> Cell:
    return Cell(tuple(names), fn)
