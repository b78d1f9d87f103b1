"""Checker for chapter 05: one PPO minibatch update (exercise 5.1).

``check_minibatch_update(fn)`` builds tiny random actors (a GPT-2-shaped one, whose absolute
position embeddings make left-padding mistakes visible, and a Llama-shaped one), small left-padded
minibatches whose old logprobs and values come from a *slightly perturbed copy* of the actor (so the
ratio is not 1 and some tokens clip), and runs the learner's function and the package's
``minibatch_update`` from identical copies of the actor and of an AdamW optimizer, twice in a row.
It compares the returned stats, the gradient that reached ``optimizer.step()`` and the parameters
after the steps. The same comparison runs on deliberately wrong versions of the update (the package's
own ``minibatch_update`` with one mistake injected each: no temperature, the off-by-one slice, ...),
so that a wrong learner function is diagnosed by name, and every fix to the update reaches them.
"""

import contextlib
import copy

import torch

from .. import update
from ..logprobs import logprobs_from_logits, response_slice
from ..losses import entropy_loss
from ..masking import masked_whiten
from ..model import ActorWithValueHead, position_ids_from_mask
from ..tasks.tiny import build_char_tokenizer, build_tiny_model
from ..update import RatioCheckError
from ._common import CheckFailure, NotImplementedYet, call, checker, expect_close

__all__ = ["check_minibatch_update"]

STAT_KEYS = (
    "policy/loss",
    "value/loss",
    "policy/entropy_loss",
    "loss/total",
    "policy/clipfrac",
    "value/clipfrac",
    "policy/approx_kl",
    "policy/ratio_mean",
    "policy/entropy",
    "train/grad_norm",
)
"""The stats every minibatch update must return (the trainer logs them; the dashboard plots some)."""

LR = 1e-2
"""The checker's AdamW learning rate: large enough that a missing or extra step shows in the parameters."""


@contextlib.contextmanager
def _one_thread():
    """Tiny tensors: one thread is several times faster than a thread pool (and polite on a busy machine)."""
    n = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(n)


# ----------------------------------------------------------------------------------------------
# the tiny actor, the minibatches and an optimizer that records what it was asked to apply
# ----------------------------------------------------------------------------------------------


class _RecordingAdamW(torch.optim.AdamW):
    """AdamW that keeps a copy of the gradient (after any clipping) each time ``step`` is called."""

    def __init__(self, params, **kwargs):
        super().__init__(params, **kwargs)
        self.seen: list[torch.Tensor] = []

    @torch.no_grad()
    def step(self, closure=None):
        params = [p for group in self.param_groups for p in group["params"]]
        self.seen.append(torch.cat([(p.grad if p.grad is not None else torch.zeros_like(p)).flatten() for p in params]))
        return super().step(closure)


def _tiny_actor(arch: str, seed: int):
    """(actor, tokenizer): a ~10 k-parameter random LM with a value head whose weights are not zero."""
    tokenizer = build_char_tokenizer("abcdefgh 0123456789=+#")
    if arch == "llama":
        size = dict(hidden_size=16, intermediate_size=32, num_hidden_layers=2, num_attention_heads=2)
    else:
        size = dict(n_embd=16, n_layer=2, n_head=2)
    with torch.random.fork_rng(devices=[]):  # leave the learner's global RNG alone
        torch.manual_seed(seed)
        lm = build_tiny_model(tokenizer, arch, **size)
        actor = ActorWithValueHead(lm, value_head_init_std=0.3)  # std > 0: the value loss reaches the trunk
    return actor.eval(), tokenizer


def _perturbed(actor, scale: float, g: torch.Generator):
    """A copy of ``actor`` with Gaussian noise added to every weight: the 'old policy' of the case."""
    old = copy.deepcopy(actor)
    with torch.no_grad():
        for p in old.parameters():
            p.add_(scale * torch.randn(p.shape, generator=g))
    return old


def _minibatch(actor, old_actor, tokenizer, g, prompt_lens, resp_lens, T: int, temperature: float) -> dict:
    """A left-padded minibatch in the trainer's format; old logprobs and values from ``old_actor``.

    Rows that stop before ``T`` end with EOS and are padded after it; the others were truncated.
    """
    B, P = len(prompt_lens), max(prompt_lens)
    V, pad, bos, eos = len(tokenizer), tokenizer.pad_token_id, tokenizer.bos_token_id, tokenizer.eos_token_id
    prompts = torch.full((B, P), pad)  # (B, P)
    for b, n in enumerate(prompt_lens):
        prompts[b, P - n :] = torch.randint(4, V, (n,), generator=g)
        prompts[b, P - n] = bos
    response_ids = torch.randint(4, V, (B, T), generator=g)  # (B, T)
    lengths = torch.tensor(resp_lens)
    mask = torch.arange(T)[None, :] < lengths[:, None]  # (B, T)
    for b, n in enumerate(resp_lens):
        if n < T:
            response_ids[b, n - 1] = eos
            response_ids[b, n:] = pad
    input_ids = torch.cat([prompts, response_ids], dim=1)  # (B, P + T)
    attention_mask = torch.cat([(prompts != pad).long(), mask.long()], dim=1)  # (B, P + T)
    keep = response_slice(P, T)
    pos = position_ids_from_mask(attention_mask)
    with torch.no_grad():
        logits, values = old_actor(input_ids, attention_mask, pos, keep=keep)  # (B, T, V), (B, T)
        old_logprobs = logprobs_from_logits(logits, response_ids, temperature)  # (B, T)
        current_values = actor(input_ids, attention_mask, pos, keep=keep)[1]  # (B, T)
    advantages = masked_whiten(torch.randn(B, T, generator=g), mask)  # (B, T)
    # returns near the old values on some tokens and near the current ones on others, so that the
    # value clip is active on some tokens (V moved past V_old +- eps towards R) and not on others
    near_current = torch.rand(B, T, generator=g) < 0.5
    returns = torch.where(near_current, current_values, values) + 0.3 * torch.randn(B, T, generator=g)
    returns = torch.where(mask, returns, 0.0)  # (B, T)
    return {
        "input_ids": input_ids,
        "attention_mask": attention_mask,
        "response_ids": response_ids,
        "mask": mask,
        "old_logprobs": old_logprobs,
        "old_values": values.float(),
        "advantages": advantages,
        "returns": returns,
        "keep": keep,
    }


# ----------------------------------------------------------------------------------------------
# the update with one deliberate mistake
# ----------------------------------------------------------------------------------------------


class _Optimizer:
    """Wraps the optimizer a mistaken update is given: ``keep_grads`` ignores ``zero_grad``; ``norm_at_step``
    records the gradient norm as ``step`` sees it (after clipping)."""

    def __init__(self, optimizer, keep_grads: bool = False):
        self.optimizer, self.keep_grads, self.norm_at_step = optimizer, keep_grads, None

    def zero_grad(self, set_to_none: bool = True) -> None:
        if not self.keep_grads:
            self.optimizer.zero_grad(set_to_none=set_to_none)

    def step(self):
        grads = [p.grad.norm() for group in self.optimizer.param_groups for p in group["params"] if p.grad is not None]
        self.norm_at_step = float(torch.linalg.vector_norm(torch.stack(grads)))
        return self.optimizer.step()


@contextlib.contextmanager
def _replaced(**functions):
    """Replace functions that ``update.ppo_loss`` calls (only while the package's own update runs)."""
    saved = {name: getattr(update, name) for name in functions}
    for name, fn in functions.items():
        setattr(update, name, fn)
    try:
        yield
    finally:
        for name, fn in saved.items():
            setattr(update, name, fn)


_objective = update.policy_objective  # the package's own, for the mistaken versions to call
_REPLACED = {
    "no_temperature_logprobs": dict(
        logprobs_from_logits=lambda logits, tokens, t: logprobs_from_logits(logits, tokens)
    ),
    "no_temperature_entropy": dict(entropy_loss=lambda logits, mask, t, **kw: entropy_loss(logits, mask, 1.0, **kw)),
    "arange_positions": dict(position_ids_from_mask=lambda attn: torch.arange(attn.shape[1]).expand_as(attn)),
    "old_logprobs": dict(policy_objective=lambda name, lp, old, *a, **kw: _objective(name, old, old, *a, **kw)),
    "detached": dict(policy_objective=lambda name, lp, old, *a, **kw: _objective(name, lp.detach(), old, *a, **kw)),
}
"""Mistakes inside the loss: one of the functions ``ppo_loss`` calls, replaced by the mistaken version."""


def _variant(bug: str | None):
    """The package's ``minibatch_update`` (the real one) run with one deliberate mistake injected: a different
    coefficient, a loss function that wraps ``ppo_loss``, a replaced piece of ``ppo_loss``, or an optimizer
    that ignores ``zero_grad``. ``_variant(None)`` is the package algorithm."""

    def update_with_mistake(actor, optimizer, mb, **kw):
        k = kw.get("grad_accum_steps", 1)
        kw = {**kw, **_coefficients(bug, kw)}

        def loss_fn(actor, part, clip_eps, vf_clip_eps, vf_coef, ent_coef, temperature):
            if bug == "zero_grad_in_loop":  # only the last micro-batch's gradient reaches the step
                for p in actor.parameters():
                    p.grad = None
            if bug == "slice_off_by_one":
                part = {**part, "keep": slice(part["keep"].start + 1, part["keep"].stop + 1)}
            if bug == "no_temperature":
                temperature = 1.0
            if bug in (
                "own_count",
                "own_count_contiguous",
            ):  # each micro-batch a mean over its own tokens, averaged over micro-batches
                part = {key: v for key, v in part.items() if key != "units"}
            loss, stats = update.ppo_loss(actor, part, clip_eps, vf_clip_eps, vf_coef, ent_coef, temperature)
            if bug in ("own_count", "own_count_contiguous", "accum_divide"):
                loss = loss / k
            if bug in ("own_count", "own_count_contiguous", "accum_divide", "averaged_stats"):
                stats = {key: v / k for key, v in stats.items()}
            return loss, stats

        if bug == "own_count_contiguous":  # rows reordered so that the package's split i::k takes contiguous blocks
            B = mb["input_ids"].shape[0]
            order = torch.tensor([(j % k) * (B // k) + j // k for j in range(B)])
            mb = {key: (v[order] if torch.is_tensor(v) else v) for key, v in mb.items()}
        wrapped = _Optimizer(optimizer, keep_grads=bug == "no_zero_grad")
        with _replaced(**_REPLACED.get(bug, {})):
            stats = update.minibatch_update(actor, wrapped, mb, **kw, loss_fn=loss_fn)
        if bug == "norm_after_clip":
            stats["train/grad_norm"] = wrapped.norm_at_step
        return stats

    return update_with_mistake


def _coefficients(bug, kw: dict) -> dict:
    """The keyword arguments a mistake changes."""
    return {
        "entropy_sign": dict(ent_coef=-kw["ent_coef"]),
        "no_vf_coef": dict(vf_coef=1.0),
        "no_ent_coef": dict(ent_coef=1.0),
        "no_value_loss": dict(vf_coef=0.0),
        "vf_clip_is_clip_eps": dict(vf_clip_eps=kw["clip_eps"]),
        "no_clip": dict(max_grad_norm=0.0),  # 0 = no clipping
    }.get(bug, {})


# Typical mistakes, most specific first: {bug flag: what the learner did}.
MISTAKES = {
    "no_temperature": "forgot the temperature (logprobs and entropy of softmax(logits) instead of softmax(logits "
    "/ temperature))",
    "no_temperature_logprobs": "forgot the temperature in the log-probs (the rollout's old_logprobs were taken "
    "at the sampling temperature, so the ratio is not 1 even before the first step)",
    "no_temperature_entropy": "forgot the temperature in the entropy loss",
    "slice_off_by_one": "took the outputs at [P : P+T] instead of [P-1 : P+T-1] (off by one: the output at "
    "position t predicts token t+1; use mb['keep'])",
    "arange_positions": "passed position ids that count the left padding (e.g. torch.arange, or called the LM "
    "without the mask's positions); use position_ids_from_mask(attention_mask), as generate and the rollout's "
    "scoring do",
    "old_logprobs": "used old_logprobs where the new logprobs belong (the ratio is 1 and the policy loss has no "
    "gradient: the language model moves only through the value and entropy terms)",
    "detached": "detached the new logprobs (or computed them under torch.no_grad()): the policy loss sends no "
    "gradient, so the policy never learns from the advantages",
    "entropy_sign": "flipped the sign of the entropy term (added ent_coef * H, which pushes the entropy down; "
    "entropy_loss already returns -H, so add + ent_coef * entropy_loss)",
    "no_vf_coef": "forgot vf_coef (added the value loss with weight 1)",
    "no_ent_coef": "forgot ent_coef (added the entropy loss with weight 1)",
    "no_value_loss": "left the value loss out of the total loss (the value head never trains)",
    "vf_clip_is_clip_eps": "clipped the values with clip_eps instead of vf_clip_eps",
    "own_count": "divided each micro-batch's loss by its own token count (then by grad_accum_steps): the "
    "gradient-accumulation bug, which weighs the tokens of short micro-batches more; divide every micro-batch "
    "by the whole minibatch's count, units=loss_units(mb['mask']), so the micro-batches add up to the minibatch",
    "own_count_contiguous": "divided each micro-batch's loss by its own token count (then by grad_accum_steps): the "
    "gradient-accumulation bug, which weighs the tokens of short micro-batches more; divide every micro-batch "
    "by the whole minibatch's count, units=loss_units(mb['mask']), so the micro-batches add up to the minibatch",
    "accum_divide": "divided the loss by grad_accum_steps although each micro-batch already divides by the "
    "whole minibatch's count (the accumulated gradient is grad_accum_steps times too small)",
    "averaged_stats": "averaged the stats over the micro-batches; with units=loss_units(mb['mask']) each "
    "micro-batch's stats are shares of the minibatch's, so add them up",
    "zero_grad_in_loop": "zeroed the gradients inside the micro-batch loop (only the last micro-batch's gradient "
    "reached the step)",
    "no_zero_grad": "never zeroed the gradients: .grad accumulates across calls, so every step also re-applies "
    "the previous minibatches' gradients",
    "norm_after_clip": "reported the gradient norm after clipping (report the norm clip_grad_norm_ returns: the "
    "norm before clipping)",
    "no_clip": "did not clip the gradient norm to max_grad_norm",
}


# ----------------------------------------------------------------------------------------------
# running an update function and comparing outcomes
# ----------------------------------------------------------------------------------------------


def _validate_stats(out, call_no: int) -> dict:
    if not isinstance(out, dict):
        raise CheckFailure(f"minibatch_update must return a dict of stats, got {type(out).__name__} (call {call_no}).")
    missing = [k for k in STAT_KEYS if k not in out]
    if missing:
        raise CheckFailure(
            f"the stats dict lacks {missing}; the trainer logs {list(STAT_KEYS)} (same keys as "
            "ppo_core.update.minibatch_update)."
        )
    for k in STAT_KEYS:
        if isinstance(out[k], torch.Tensor) or not isinstance(out[k], (int, float)):
            raise CheckFailure(
                f"stats[{k!r}] must be a plain Python float (use .item() or float()), got {type(out[k]).__name__}."
            )
    return out


def _fresh(mb: dict) -> dict:
    """A copy of a minibatch whose tensors the function under test may modify freely."""
    return {k: (v.clone() if torch.is_tensor(v) else v) for k, v in mb.items()}


def _run(fn, actor, mbs: list[dict], kw: dict, learner: bool) -> dict:
    """Run ``fn`` on a fresh copy of ``actor`` and optimizer, once per minibatch; collect what it did."""
    with _one_thread():
        return _run_calls(fn, copy.deepcopy(actor), mbs, kw, learner)


def _run_calls(fn, actor, mbs: list[dict], kw: dict, learner: bool) -> dict:
    optimizer = _RecordingAdamW([p for p in actor.parameters() if p.requires_grad], lr=LR)
    quantities, steps = {}, []
    for i, mb in enumerate(mbs, start=1):
        n_seen = len(optimizer.seen)
        if learner:
            stats = _validate_stats(call(fn, actor, optimizer, _fresh(mb), **kw), i)
        else:
            stats = fn(actor, optimizer, _fresh(mb), **kw)
        steps.append(len(optimizer.seen) - n_seen)
        for k in STAT_KEYS:
            quantities[f"stats[{k!r}] (call {i})"] = torch.tensor(float(stats[k]), dtype=torch.float64)
        if len(optimizer.seen) > n_seen:
            quantities[f"the gradient that reached optimizer.step() (call {i})"] = optimizer.seen[-1]
    quantities["the parameters after the update"] = torch.cat([p.detach().flatten() for p in actor.parameters()])
    return {"q": quantities, "steps": steps}


def _tolerances(name: str, want: torch.Tensor) -> dict:
    if name.startswith("the gradient"):
        return dict(atol=1e-6 + 1e-4 * float(want.abs().max()), rtol=1e-3)
    if name.startswith("the parameters"):
        return dict(atol=0.05 * LR, rtol=0.0)  # Adam's first steps are ~lr * sign(grad): loose on purpose
    return dict(atol=2e-5, rtol=2e-4)


def _same(a: torch.Tensor, b: torch.Tensor, name: str) -> bool:
    tol = _tolerances(name, b)
    return a.shape == b.shape and bool(torch.allclose(a.double(), b.double(), **tol))


def _full_match(got: dict, other: dict) -> bool:
    return got["steps"] == other["steps"] and all(
        _same(got["q"][n], other["q"][n], n) for n in other["q"] if n in got["q"]
    )


def _compare(got: dict, want: dict, mistake_outcome, case: str, kw: dict) -> None:
    """Raise CheckFailure at the first quantity where ``got`` differs from ``want``, naming a mistake.

    ``mistake_outcome(bug)`` runs (or recalls) the update with that mistake. A mistake whose whole
    outcome matches the learner's is named; failing that, one that matches the first wrong quantity.
    """
    for i, (n_got, n_want) in enumerate(zip(got["steps"], want["steps"]), start=1):
        if n_got != n_want:
            per_micro = n_got == kw["grad_accum_steps"] > 1
            why = (
                " It looks like you stepped once per micro-batch: accumulate the micro-batches' gradients, then "
                "step once."
                if per_micro
                else ""
            )
            raise CheckFailure(
                f"optimizer.step() was called {n_got} time(s) in call {i}; a minibatch update steps the "
                f"optimizer it is given exactly once.{why} Case: {case}"
            )
    if _full_match(got, want):
        return
    pool = next(([bug] for bug in MISTAKES if _full_match(got, mistake_outcome(bug))), list(MISTAKES))
    for name, w in want["q"].items():
        g = got["q"][name]
        if _same(g, w, name):
            continue
        candidates = {
            MISTAKES[bug]: mistake_outcome(bug)["q"][name] for bug in pool if name in mistake_outcome(bug)["q"]
        }
        expect_close(g, w, what=name, mistakes=candidates, case=case, **_tolerances(name, w))
        raise CheckFailure(f"{name} is wrong. Case: {case}")  # (expect_close compares in float64; this is a fallback)


# ----------------------------------------------------------------------------------------------
# the cases
# ----------------------------------------------------------------------------------------------

_CASES = [
    dict(
        arch="gpt2",
        seed=0,
        prompt_lens=(6, 3, 4, 2),
        resp_lens=(5, 2, 4, 1),
        T=5,
        noise=0.08,
        kw=dict(
            clip_eps=0.1,
            vf_clip_eps=0.3,
            vf_coef=0.25,
            ent_coef=0.05,
            temperature=0.7,
            grad_accum_steps=1,
            max_grad_norm=0.05,
        ),
        about="GPT-2-shaped tiny model (absolute positions), B=4 left-padded rows of different lengths, "
        "temperature 0.7, "
        "clip_eps 0.1, vf_clip_eps 0.3, vf_coef 0.25, ent_coef 0.05, max_grad_norm 0.05 (clipping active), two calls",
    ),
    dict(
        arch="llama",
        seed=1,
        prompt_lens=(5, 2, 3, 4),
        resp_lens=(4, 1, 3, 1),  # micro-batches of unequal token counts, however the rows are split
        T=4,
        noise=0.08,
        kw=dict(
            clip_eps=0.2,
            vf_clip_eps=0.1,
            vf_coef=0.5,
            ent_coef=0.01,
            temperature=1.3,
            grad_accum_steps=2,
            max_grad_norm=100.0,
        ),
        about="Llama-shaped tiny model, B=4 left-padded rows of 4, 1, 3, 1 response tokens, grad_accum_steps 2, "
        "temperature 1.3, clip_eps 0.2, "
        "vf_clip_eps 0.1, vf_coef 0.5, ent_coef 0.01, max_grad_norm 100 (no clipping), two calls",
    ),
]


_BUILT: dict = {}
"""Case index -> (actor, tokenizer, minibatches, {bug: outcome}); cases and outcomes are deterministic."""


def _build_case(i: int):
    if i not in _BUILT:
        with _one_thread():
            _BUILT[i] = _make_case(_CASES[i])
    return _BUILT[i]


def _make_case(spec: dict):
    """(actor, tokenizer, two minibatches, an empty outcome cache) for one case description."""
    actor, tokenizer = _tiny_actor(spec["arch"], spec["seed"])
    g = torch.Generator().manual_seed(100 + spec["seed"])
    old = _perturbed(actor, spec["noise"], g)
    T, temperature = spec["T"], spec["kw"]["temperature"]
    mbs = [
        _minibatch(actor, old, tokenizer, g, spec["prompt_lens"], spec["resp_lens"], T, temperature) for _ in range(2)
    ]
    return actor, tokenizer, mbs, {}


def _outcome(i: int, bug) -> dict:
    """What the package's update (``bug`` None) or one of the mistakes does on case ``i`` (cached)."""
    actor, _, mbs, outcomes = _build_case(i)
    if bug not in outcomes:
        fn = update.minibatch_update if bug is None else _variant(bug)
        outcomes[bug] = _run(fn, actor, mbs, _CASES[i]["kw"], learner=False)
    return outcomes[bug]


def _check_ratio_tol(fn, actor, tokenizer, spec) -> None:
    """With ``ratio_tol`` set: raise RatioCheckError when the ratio is off, stay quiet (ratio 1) when it is not."""
    kw = {**spec["kw"], "ratio_tol": 1e-4}
    g = torch.Generator().manual_seed(7)
    same = _minibatch(actor, actor, tokenizer, g, spec["prompt_lens"], spec["resp_lens"], spec["T"], kw["temperature"])
    case = "old_logprobs computed by the actor itself (the first minibatch after a rollout), ratio_tol=1e-4"
    first = copy.deepcopy(actor)
    try:
        stats = _validate_stats(call(fn, first, _RecordingAdamW(first.parameters(), lr=LR), _fresh(same), **kw), 1)
    except RatioCheckError as err:
        raise CheckFailure(
            f"raised RatioCheckError although the ratio is 1 up to float error ({err}). Is the forward the same "
            f"as the rollout's (temperature, slice, position ids)? Case: {case}"
        ) from None
    expect_close(stats["policy/ratio_mean"], 1.0, what="stats['policy/ratio_mean']", case=case, atol=1e-5)
    expect_close(stats["policy/clipfrac"], 0.0, what="stats['policy/clipfrac']", case=case, atol=0)
    expect_close(stats["policy/approx_kl"], 0.0, what="stats['policy/approx_kl']", case=case, atol=1e-6)
    old = _perturbed(actor, 0.08, g)
    moved = _minibatch(actor, old, tokenizer, g, spec["prompt_lens"], spec["resp_lens"], spec["T"], kw["temperature"])
    case = "old_logprobs from a different model, so |log ratio| is far above ratio_tol=1e-4"
    second = copy.deepcopy(actor)
    try:
        call(fn, second, _RecordingAdamW(second.parameters(), lr=LR), _fresh(moved), **kw)
    except RatioCheckError:
        return
    except NotImplementedYet:
        raise
    except Exception as err:  # noqa: BLE001 - any other exception is the wrong kind
        raise CheckFailure(
            f"raised {type(err).__name__} ({err}); raise ppo_core.update.RatioCheckError, which the trainer "
            f"expects. Case: {case}"
        ) from None
    raise CheckFailure(
        "ignored ratio_tol: when it is set and max |logprobs - old_logprobs| over the response tokens exceeds "
        "it, raise "
        f"ppo_core.update.RatioCheckError (the trainer's check that the first update starts at ratio 1). Case: {case}"
    )


@checker
def check_minibatch_update(fn):
    """Check ``fn(actor, optimizer, mb, *, clip_eps, vf_clip_eps, vf_coef, ent_coef, temperature,
    grad_accum_steps, max_grad_norm, ratio_tol) -> stats`` (exercise 5.1) against the package's
    ``minibatch_update``."""
    with _one_thread():
        _check_all_cases(fn)


def _check_all_cases(fn) -> None:
    for i, spec in enumerate(_CASES):
        actor, _, mbs, _ = _build_case(i)
        got = _run(fn, actor, mbs, spec["kw"], learner=True)
        _compare(got, _outcome(i, None), lambda bug, i=i: _outcome(i, bug), spec["about"], spec["kw"])
    actor, tokenizer, _, _ = _build_case(0)
    _check_ratio_tol(fn, actor, tokenizer, _CASES[0])
