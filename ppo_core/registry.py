"""The switches' registries: one per family, keyed by the names the config accepts (veRL's ``register_adv_est``,
``register_policy_loss``).

    ADV_ESTIMATORS      algo.adv_estimator    fn(rewards, values, mask, opts: AdvantageOptions) -> (advantages, returns)
    POLICY_LOSSES       algo.policy_loss      fn(logprobs, old_logprobs, advantages, mask, s: PolicySwitches, **agg)
                                              -> (loss, stats); agg: losses.aggregate_loss's keywords
    KL_ESTIMATORS       ppo.kl_estimator,     fn(log_ratio) -> per-token KL estimate, log_ratio = log pi - log pi_ref
                        algo.kl_loss_type
    CORRECTION_LEVELS   correction.is_level,  fn(log_ratio, mask) -> the level's log weight, broadcast to (B, T)
                        correction.rs_level

Each entry is registered with a decorator where its function is defined, with its facts as keywords (whether it
needs a critic, its veRL and OpenRLHF names); the config's allowed values, the export table and the widgets read
them from here. A new objective is its function and its decorator: ``@POLICY_LOSSES.register("mine")``.
This module imports nothing of the package, so every layer may use it.
"""

from dataclasses import dataclass

__all__ = [
    "Registry",
    "ADV_ESTIMATORS",
    "POLICY_LOSSES",
    "KL_ESTIMATORS",
    "CORRECTION_LEVELS",
    "AdvantageOptions",
    "PolicySwitches",
]


class Registry:
    """Names -> functions of one family, in registration order; reads like the tuple of its names
    (``name in reg``, ``list(reg)``, ``reg[1:]``), with ``reg.get(name)`` and ``reg.info(name)`` for the entry."""

    def __init__(self, family: str, key: str):
        self.family, self.key = family, key  # e.g. "policy loss", "algo.policy_loss"
        self._fns: dict = {}
        self._info: dict = {}

    def register(self, name: str, **info):
        """Decorator: ``fn`` is the entry ``name``; ``info`` its facts (``critic=True``, ``verl="..."``, ...)."""

        def decorator(fn):
            if name in self._fns and self._fns[name] is not fn:
                raise ValueError(f"{self.family} {name!r} is registered twice ({self.key})")
            self._fns[name], self._info[name] = fn, dict(info)
            return fn

        return decorator

    def unregister(self, name: str) -> None:
        """Remove ``name`` (a test's toy entry)."""
        self._fns.pop(name, None)
        self._info.pop(name, None)

    def get(self, name: str):
        if name not in self._fns:
            raise ValueError(f"unknown {self.family} {name!r}; choose one of {', '.join(self._fns)} ({self.key})")
        return self._fns[name]

    def info(self, name: str, fact: str, default=None):
        """One fact of entry ``name`` (``default`` where it registered none)."""
        self.get(name)
        return self._info[name].get(fact, default)

    def names(self, **facts) -> tuple:
        """The names, in registration order; with ``facts``, those whose facts match."""
        return tuple(n for n in self._fns if all(self._info[n].get(k) == v for k, v in facts.items()))

    def __contains__(self, name) -> bool:
        return name in self._fns

    def __iter__(self):
        return iter(tuple(self._fns))

    def __len__(self) -> int:
        return len(self._fns)

    def __getitem__(self, i):
        return self.names()[i]

    def __repr__(self) -> str:
        return f"Registry({self.family!r}: {', '.join(self._fns)})"


@dataclass(frozen=True)
class AdvantageOptions:
    """What an advantage estimator may read (``ppo.gamma``, ``ppo.lam``, ``ppo.lam_value``, ``rollout.group_size``,
    ``algo.norm_adv_by_std_in_grpo``)."""

    gamma: float = 1.0
    lam: float = 0.95
    lam_value: float | None = None
    group_size: int = 1
    norm_by_std: bool = True


@dataclass(frozen=True)
class PolicySwitches:
    """Chapter 08's switches of the policy objective, veRL's semantics: ``clip_eps_low`` / ``clip_eps_high`` default
    to ``clip_eps``; ``dual_clip_c`` None is off (vanilla only); ``tau_pos`` / ``tau_neg`` (sapo)."""

    clip_eps: float = 0.2
    clip_eps_low: float | None = None
    clip_eps_high: float | None = None
    dual_clip_c: float | None = None
    tau_pos: float = 1.0
    tau_neg: float = 1.05

    @property
    def low(self) -> float:
        return self.clip_eps if self.clip_eps_low is None else self.clip_eps_low

    @property
    def high(self) -> float:
        return self.clip_eps if self.clip_eps_high is None else self.clip_eps_high


ADV_ESTIMATORS = Registry("advantage estimator", "algo.adv_estimator")
POLICY_LOSSES = Registry("policy loss", "algo.policy_loss")
KL_ESTIMATORS = Registry("KL estimator", "ppo.kl_estimator / algo.kl_loss_type")
CORRECTION_LEVELS = Registry("correction level", "correction.is_level / correction.rs_level")
