"""Tests for the chapter 10 checker: it passes two different right answers and names each typical mistake."""

import pytest
import torch
from ppo_test_support import skip_module_unless_installed

skip_module_unless_installed("peft")

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


def adapters_left_on(pm, ids, attn, response, keep, temperature):
    return package_way(pm, ids, attn, response, keep, temperature, adapters_off=False)


def one_position_late(pm, ids, attn, response, keep, temperature):
    return package_way(pm, ids, attn, response, keep, temperature, late=1)


def no_temperature(pm, ids, attn, response, keep, temperature):
    return package_way(pm, ids, attn, response, keep, 1.0)


def with_graph(pm, ids, attn, response, keep, temperature):
    return package_way(pm, ids, attn, response, keep, temperature).requires_grad_()


def switched_off_for_good(pm, ids, attn, response, keep, temperature):
    pm.base_model.disable_adapter_layers()  # off for good: the policy is gone too
    return package_way(pm, ids, attn, response, keep, temperature)


@pytest.mark.parametrize(
    "wrong, named",
    [
        (adapters_left_on, "left the adapters on"),
        (one_position_late, "one position late"),
        (no_temperature, "forgot the temperature"),
        (with_graph, "gradient graph"),
        (switched_off_for_good, "adapters are off for good"),
    ],
)
def test_reference_logprobs_names_the_mistake(wrong, named):
    with pytest.raises(CheckFailure, match=named):
        checks.check_reference_logprobs(wrong, verbose=False)
