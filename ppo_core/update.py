"""Chapter 05 - one PPO minibatch update: forward, the three losses, backward, clip, step.

logits, values = actor(prompt + response)                  one forward for both heads
logprobs = log softmax(logits / temperature)[response]     chapter 01
loss = policy_loss + vf_coef * value_loss + ent_coef * entropy_loss     chapter 04
     (+ kl_loss_coef * KL to the reference, without the value loss for a critic-free method: chapter 07)
     (policy_loss: another objective, algo.policy_loss, chapter 08)
Every term divides by the whole minibatch's counts (``losses.loss_units``), in every micro-batch: the
micro-batches' losses and gradients add up to the minibatch's, however it is split (chapter 08).
"""

import functools
from dataclasses import dataclass

import torch

from .advantages import kl_loss
from .logprobs import logprobs_from_logits
from .losses import entropy_loss, loss_units, value_loss
from .model import position_ids_from_mask
from .objectives import POLICY_LOSSES, PolicySwitches
from .precision import autocast
from .sampler import apply_sampling_mask

__all__ = [
    "ppo_loss",
    "LossSwitches",
    "policy_objective",
    "minibatch_update",
    "value_update",
    "update_kwargs",
    "clip_groups",
    "policy_and_critic",
    "RatioCheckError",
]


class RatioCheckError(RuntimeError):
    """The first update's ratio is not 1: the training forward disagrees with the rollout's."""


@dataclass(frozen=True)
class LossSwitches:
    """Chapters 07-08's switches of ``ppo_loss`` (the config keys in brackets); the defaults are PPO's loss."""

    loss_agg_mode: str = "token-mean"  # how the policy loss averages its tokens (algo.loss_agg_mode)
    loss_norm_len: int | None = None  # T_max of seq-mean-token-sum-norm (rollout.max_new_tokens)
    kl_loss_coef: float = 0.0  # > 0: the KL to the reference in the loss (algo.kl_loss_coef with algo.use_kl_loss)
    kl_loss_type: str = "k3"  # its estimator (algo.kl_loss_type)
    policy_loss: str = "vanilla"  # the objective, an entry of registry.POLICY_LOSSES (algo.policy_loss)
    clip_eps_low: float | None = None  # the objective's switches (ppo.clip_eps_low, ...; registry.PolicySwitches)
    clip_eps_high: float | None = None
    dual_clip_c: float | None = None
    tau_pos: float = 1.0  # (algo.sapo_tau_pos)
    tau_neg: float = 1.05  # (algo.sapo_tau_neg)

    @classmethod
    def from_config(cls, cfg) -> "LossSwitches":
        p, a = cfg.ppo, cfg.algo
        return cls(
            loss_agg_mode=a.loss_agg_mode,
            loss_norm_len=cfg.rollout.max_new_tokens,  # Dr. GRPO's constant: the response limit, not this batch's T
            kl_loss_coef=a.kl_loss_coef if a.use_kl_loss else 0.0,
            kl_loss_type=a.kl_loss_type,
            policy_loss=a.policy_loss,
            clip_eps_low=p.clip_eps_low,
            clip_eps_high=p.clip_eps_high,
            dual_clip_c=p.dual_clip_c,
            tau_pos=a.sapo_tau_pos,
            tau_neg=a.sapo_tau_neg,
        )

    def policy(self, clip_eps: float) -> PolicySwitches:
        return PolicySwitches(clip_eps, self.clip_eps_low, self.clip_eps_high, self.dual_clip_c, self.tau_pos,
                              self.tau_neg)  # fmt: skip


PPO_LOSS = LossSwitches()


def ppo_loss(
    actor,
    mb: dict,
    clip_eps: float,
    vf_clip_eps: float,
    vf_coef: float,
    ent_coef: float,
    temperature: float,
    switches: LossSwitches = PPO_LOSS,
) -> tuple[torch.Tensor, dict]:
    """The combined PPO loss on one (micro-)batch. ``mb`` holds the rollout tensors for its rows.

    mb keys: input_ids, attention_mask (B, P+T); response_ids, mask, old_logprobs, old_values,
    advantages, returns (B, T); keep: the slice [P-1 : P+T-1]. Chapter 07's switches (``switches``,
    ``LossSwitches``): an actor without a value head (no value loss; old_values and returns are then not read),
    ``loss_agg_mode`` (with ``loss_norm_len``) for the policy loss, and ``kl_loss_coef`` > 0 adds the KL to the
    reference (``mb["ref_logprobs"]``, estimator ``kl_loss_type``) to the loss. Chapter 08: ``policy_loss``
    names the objective (``registry.POLICY_LOSSES``) with its switches; ``mb["units"]`` (``losses.loss_units``
    of the whole minibatch; absent: these rows' own) is every term's denominator. Chapter 09's corrections:
    ``is_weights`` (B, T) multiply each token's advantage (every objective here scales with A), and the policy
    loss counts ``policy_mask``'s tokens only (``mb["policy_units"]``: the whole minibatch's);
    ``sampling_mask`` (B, T, V) restricts the policy to the sampler's top-k/top-p support.
    """
    s = switches
    pos = position_ids_from_mask(mb["attention_mask"])
    logits, values = actor(mb["input_ids"], mb["attention_mask"], pos, keep=mb["keep"])  # (B, T, V), (B, T)
    if "sampling_mask" in mb:  # chapter 09's Keep Sampling Mask: pi_theta on the sampler's top-k/top-p support
        logits = apply_sampling_mask(logits, mb["sampling_mask"])
    logprobs = logprobs_from_logits(logits, mb["response_ids"], temperature)  # (B, T)
    mask = mb["mask"]
    units = mb.get("units")  # the minibatch's counts: micro-batches add up (chapter 08)
    agg = {"loss_agg_mode": s.loss_agg_mode, "norm_len": s.loss_norm_len, "units": mb.get("policy_units", units)}
    advantages = mb["advantages"] * mb["is_weights"] if "is_weights" in mb else mb["advantages"]  # chapter 09
    pg_loss, pg_stats = policy_objective(
        s.policy_loss, logprobs, mb["old_logprobs"], advantages, mb.get("policy_mask", mask), s.policy(clip_eps), **agg
    )
    loss, extra = pg_loss, {}
    if s.dual_clip_c is not None:
        extra["policy/clipfrac_lower"] = pg_stats["clipfrac_lower"]
    if values is not None:
        vf_loss, vf_stats = value_loss(values.float(), mb["old_values"], mb["returns"], mask, vf_clip_eps, units=units)
        loss = loss + vf_coef * vf_loss
        extra.update({"value/loss": vf_loss.item(), "value/clipfrac": vf_stats["clipfrac"]})
    if s.kl_loss_coef > 0:
        kl_term, _ = kl_loss(
            logprobs, mb["ref_logprobs"], mask, s.kl_loss_type, s.loss_agg_mode, s.loss_norm_len, units
        )
        loss = loss + s.kl_loss_coef * kl_term
        extra["kl/loss"] = kl_term.item()
    if ent_coef != 0:
        ent_loss, ent_stats = entropy_loss(logits, mask, temperature, units=units)
    else:  # only logged: no graph through the (B, T, V) softmax, which is large for a real vocabulary
        with torch.no_grad():
            ent_loss, ent_stats = entropy_loss(logits, mask, temperature, units=units)
    loss = loss + ent_coef * ent_loss
    with torch.no_grad():
        max_log_ratio = (logprobs - mb["old_logprobs"]).abs().masked_fill(~mask, 0).max().item()
    stats = {
        "policy/loss": pg_loss.item(),
        **extra,  # value/loss and value/clipfrac with a critic, kl/loss with the KL in the loss
        "policy/entropy_loss": ent_loss.item(),
        "loss/total": loss.item(),
        "policy/clipfrac": pg_stats["clipfrac"],
        "policy/approx_kl": pg_stats["approx_kl"],
        "policy/ratio_mean": pg_stats["ratio_mean"],
        "policy/entropy": ent_stats["entropy"],
        "policy/max_abs_log_ratio": max_log_ratio,
    }
    return loss, stats


def policy_objective(name: str, logprobs, old_logprobs, advantages, mask, switches: PolicySwitches, **agg):
    """The objective ``name`` (an entry of ``registry.POLICY_LOSSES``) on these (B, T) tensors: (loss, stats)."""
    return POLICY_LOSSES.get(name)(logprobs, old_logprobs, advantages, mask, switches, **agg)


def minibatch_update(
    actor,
    optimizer,
    mb: dict,
    *,
    clip_eps: float = 0.2,
    vf_clip_eps: float = 0.2,
    vf_coef: float = 0.1,
    ent_coef: float = 0.0,
    temperature: float = 1.0,
    grad_accum_steps: int = 1,
    max_grad_norm: float = 1.0,
    ratio_tol: float | None = None,
    loss_fn=ppo_loss,
) -> dict:
    """One optimizer step on a minibatch, accumulating gradients over ``grad_accum_steps`` micro-batches.

    ``ratio_tol``: if set, raise RatioCheckError when any |log ratio| exceeds it (use it on the first
    minibatch of the first epoch, where the policy has not moved yet and the ratio must be 1).
    Each micro-batch's loss divides by the minibatch's counts (``mb["units"]``, else ``loss_units(mb["mask"])``),
    so the losses, their gradients and their stats (token means too: shares of the minibatch's) add up to the
    minibatch's; ``policy/max_abs_log_ratio`` is the max. With ``train/grad_norm`` (before clipping) and
    ``train/skipped`` (1 if the step was skipped for a non-finite loss or gradient).
    ``loss_fn``: the loss of one micro-batch, ``ppo_loss`` (chapter 05's checker passes mistaken ones).
    """
    n = mb["input_ids"].shape[0]
    micro = [torch.arange(n)[i::grad_accum_steps] for i in range(grad_accum_steps)]
    units = mb.get("units") or loss_units(mb["mask"])  # (a data-parallel rank gets the global minibatch's)
    if "policy_mask" in mb:  # chapter 09: the policy loss counts the minibatch's kept tokens
        mb = {**mb, "policy_units": mb.get("policy_units") or loss_units(mb["policy_mask"])}
    optimizer.zero_grad(set_to_none=True)
    totals: dict = {}
    for idx in micro:
        part = {k: (v[idx] if torch.is_tensor(v) else v) for k, v in mb.items()}
        part["units"] = units
        loss, stats = loss_fn(actor, part, clip_eps, vf_clip_eps, vf_coef, ent_coef, temperature)
        if ratio_tol is not None and stats["policy/max_abs_log_ratio"] > ratio_tol:
            raise RatioCheckError(
                f"before any update the policy/old log-ratio reached {stats['policy/max_abs_log_ratio']:.2e} "
                f"(> {ratio_tol:g}): the training forward does not reproduce the rollout's logprobs "
                "(dropout on? a different temperature, slice or position ids?)"
            )
        loss.backward()  # a share of the minibatch's loss: the gradients add up to the minibatch's
        for k, v in stats.items():  # shares of the minibatch's losses and token means: they add up
            totals[k] = max(totals.get(k, v), v) if k == "policy/max_abs_log_ratio" else totals.get(k, 0.0) + v
    norms = [clip(group, max_grad_norm) for group in clip_groups(actor)]
    grad_norm = torch.stack(norms).norm() if len(norms) > 1 else norms[0]  # of all the gradients, before clipping
    finite = bool(torch.isfinite(grad_norm)) and all(map(lambda v: v == v and abs(v) != float("inf"), totals.values()))
    if finite:
        optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    totals["train/grad_norm"] = float(grad_norm)
    if len(norms) > 1:
        totals["value/grad_norm"] = float(norms[1])
    totals["train/skipped"] = 0.0 if finite else 1.0
    return totals


def policy_and_critic(actor) -> tuple[list, list]:
    """The trainable parameters, split into the policy's and the critic's (``actor.critic_parameters()``: the
    value head, and a separate critic's trunk), each in ``actor.parameters()`` order."""
    params = [p for p in actor.parameters() if p.requires_grad]
    critic = {id(p) for p in actor.critic_parameters()}
    return [p for p in params if id(p) not in critic], [p for p in params if id(p) in critic]


def clip_groups(actor) -> list[list]:
    """The parameter sets whose gradient norms are clipped to ``max_grad_norm`` each: all trainable
    parameters together, or, with a separate critic (``actor.critic_trunk``), the policy's and the critic's
    apart, so that a large value gradient cannot shrink the policy's step (nor the reverse)."""
    if getattr(actor, "critic_trunk", None) is None:
        return [[p for p in actor.parameters() if p.requires_grad]]
    return list(policy_and_critic(actor))


def clip(params: list, max_grad_norm: float) -> torch.Tensor:
    """Clip the gradients of ``params`` to a total norm of ``max_grad_norm`` (<= 0: no clipping); their norm before."""
    return torch.nn.utils.clip_grad_norm_(params, max_grad_norm if max_grad_norm > 0 else float("inf"))


def value_update(actor, optimizer, mb: dict, *, vf_clip_eps: float = 0.2, max_grad_norm: float = 1.0) -> dict:
    """One optimizer step of the critic alone (the value warm-up): the policy cannot move.

    The policy's trunk runs without gradients, so only the critic (the value head, and a separate critic's
    own trunk if ``actor.critic_trunk`` is set) gets a ``.grad``; AdamW (torch or bitsandbytes) skips
    parameters without one, so the same optimizer leaves every policy weight as it was. Loss: the clipped
    value loss of chapter 04 on the (B, T) ``mb`` tensors, as in ``ppo_loss``. The trunks run under autocast
    in ``actor.compute_dtype``, as in ``actor.forward``; the head in float32.
    Returns ``value/loss``, ``value/clipfrac``, ``train/grad_norm`` (the critic's, before clipping) and
    ``train/skipped`` (1 if the step was skipped for a non-finite loss or gradient).
    """
    optimizer.zero_grad(set_to_none=True)
    pos = position_ids_from_mask(mb["attention_mask"])
    if getattr(actor, "critic_trunk", None) is not None:  # a separate critic: its own trunk learns too
        values = actor.critic_values(mb["input_ids"], mb["attention_mask"], pos, mb["keep"])  # (B, T)
    else:
        with torch.no_grad(), autocast(mb["input_ids"].device, actor.compute_dtype):
            _, hidden = actor.logits_fn(actor.lm, mb["input_ids"], mb["attention_mask"], pos, mb["keep"])  # (B, T, H)
        values = actor.head_values(hidden)  # (B, T)
    loss, stats = value_loss(values, mb["old_values"], mb["returns"], mb["mask"], vf_clip_eps)
    loss.backward()
    grad_norm = clip(actor.critic_parameters(), max_grad_norm)
    finite = bool(torch.isfinite(grad_norm)) and bool(torch.isfinite(loss))
    if finite:
        optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    return {
        "value/loss": loss.item(),
        "value/clipfrac": stats["clipfrac"],
        "train/grad_norm": float(grad_norm),
        "train/skipped": 0.0 if finite else 1.0,
    }


def update_kwargs(cfg) -> dict:
    """The keyword arguments of ``minibatch_update`` that come from the config. ``loss_fn`` only when
    chapter 07's or 08's switches change the loss (the KL in it, another averaging, another objective): a learner's own
    ``minibatch_update`` (chapter 05) then needs no new argument."""
    p, a = cfg.ppo, cfg.algo
    kwargs = dict(
        clip_eps=p.clip_eps,
        vf_clip_eps=p.vf_clip_eps,
        vf_coef=p.vf_coef,
        ent_coef=p.ent_coef,
        temperature=cfg.rollout.temperature,
        grad_accum_steps=p.grad_accum_steps,
        max_grad_norm=p.max_grad_norm,
    )
    clips = (p.clip_eps_low, p.clip_eps_high, p.dual_clip_c)  # chapter 08's, where set
    if a.use_kl_loss or a.loss_agg_mode != "token-mean" or a.policy_loss != "vanilla" or clips != (None,) * 3:
        kwargs["loss_fn"] = functools.partial(ppo_loss, switches=LossSwitches.from_config(cfg))
    return kwargs
