"""Tests for the chapter 10 checker: it passes two different right answers and names each typical mistake."""

import pytest
import torch

pytest.importorskip("peft")

from ppo_core import checks  # noqa: E402
from ppo_core.checks import CheckFailure  # noqa: E402
from ppo_core.logprobs import logprobs_from_logits  # noqa: E402
from ppo_core.model import lm_logits, position_ids_from_mask  # noqa: E402


def package_way(pm, ids, attn, response, keep, temperature, *, adapters_off=True, late=0):
    pos = position_ids_from_mask(attn)
    keep = slice(keep.start + late, keep.stop + late)
    ctx = pm.disable_adapter() if adapters_off else torch.enable_grad()
    with ctx, torch.no_grad():
        logits, _ = lm_logits(pm.get_base_model(), ids, attn, pos, keep=keep)
    return logprobs_from_logits(logits, response, temperature)


def by_hand(pm, ids, attn, response, keep, temperature):
    """Not the package's way: the peft wrapper's own forward, every position's logits, log_softmax and gather."""
    pos = (attn.cumsum(-1) - 1).clamp(min=0)
    with torch.inference_mode(), pm.disable_adapter():
        logits = pm(input_ids=ids, attention_mask=attn, position_ids=pos).logits
    logp = torch.log_softmax(logits[:, keep].float() / temperature, dim=-1)
    return logp.gather(-1, response.unsqueeze(-1)).squeeze(-1).clone()


def test_right_answers_pass():
    assert checks.check_reference_logprobs(package_way, verbose=False)
    assert checks.check_reference_logprobs(by_hand, verbose=False)


@pytest.mark.parametrize(
    "kwargs, named",
    [
        (dict(adapters_off=False), "left the adapters on"),
        (dict(late=1), "one position late"),
    ],
)
def test_mistakes_are_named(kwargs, named):
    with pytest.raises(CheckFailure, match=named):
        checks.check_reference_logprobs(lambda *a: package_way(*a, **kwargs), verbose=False)


def test_forgotten_temperature_and_kept_graph_and_adapters_left_off_are_named():
    with pytest.raises(CheckFailure, match="forgot the temperature"):
        checks.check_reference_logprobs(lambda pm, i, a, r, k, t: package_way(pm, i, a, r, k, 1.0), verbose=False)

    def with_graph(pm, ids, attn, response, keep, temperature):
        return package_way(pm, ids, attn, response, keep, temperature).requires_grad_()

    with pytest.raises(CheckFailure, match="gradient graph"):
        checks.check_reference_logprobs(with_graph, verbose=False)

    def switched_off(pm, ids, attn, response, keep, temperature):
        pm.base_model.disable_adapter_layers()  # off for good: the policy is gone too
        return package_way(pm, ids, attn, response, keep, temperature)

    with pytest.raises(CheckFailure, match="adapters are off for good"):
        checks.check_reference_logprobs(switched_off, verbose=False)
