"""The switches' registries (ppo_core/registry.py): the config accepts exactly their names, the export and the
widget read them, and an objective registered here, in this file alone, trains end to end."""

import pytest
import torch

from ppo_core.advantages import ADV_ESTIMATORS
from ppo_core.correction import CORRECTION_LEVELS
from ppo_core.export.table import KL_NAMES, ORL_ESTIMATORS
from ppo_core.kl import KL_ESTIMATORS
from ppo_core.losses import aggregate_loss, token_stat
from ppo_core.objectives import POLICY_LOSSES
from ppo_core.registry import Registry
from ppo_core.run.config import ConfigError, load_config, uses_critic
from ppo_core.run.metrics import read_metrics
from ppo_core.train import main
from ppo_core.widgets.clipping import objective_choices


def test_each_family_holds_the_config_names_in_order():
    assert tuple(ADV_ESTIMATORS) == ("gae", "grpo", "rloo", "reinforce_plus_plus")
    assert tuple(POLICY_LOSSES) == ("vanilla", "gspo", "cispo", "sapo")
    assert tuple(KL_ESTIMATORS) == ("k1", "k2", "k3")
    assert tuple(CORRECTION_LEVELS) == ("token", "sequence", "geometric")
    assert CORRECTION_LEVELS.names(truncated=True) == ("token", "sequence")
    assert ADV_ESTIMATORS.names(critic=True) == ("gae",) and ADV_ESTIMATORS.names(groups=True) == ("grpo", "rloo")


def test_the_export_reads_the_engines_names_from_the_registrations():
    assert KL_NAMES == {"k1": "kl", "k2": "mse", "k3": "low_var_kl"}
    assert ORL_ESTIMATORS == {"gae": "gae", "rloo": "rloo", "reinforce_plus_plus": "reinforce"}


def test_a_name_registered_twice_or_unknown_is_a_one_line_error():
    reg = Registry("thing", "a.key")
    reg.register("x")(len)
    with pytest.raises(ValueError, match="registered twice"):
        reg.register("x")(abs)
    with pytest.raises(ValueError, match=r"unknown thing 'y'; choose one of x \(a.key\)"):
        reg.get("y")


@pytest.mark.parametrize(
    "key, registry",
    [("algo.adv_estimator", ADV_ESTIMATORS), ("algo.policy_loss", POLICY_LOSSES), ("ppo.kl_estimator", KL_ESTIMATORS),
     ("algo.kl_loss_type", KL_ESTIMATORS), ("correction.rs_level", CORRECTION_LEVELS)],
)  # fmt: skip
def test_the_config_accepts_a_registered_name_and_rejects_others(key, registry):
    with pytest.raises(ConfigError, match=key.replace(".", r"\.")):
        load_config("cpu", [f"{key}=unregistered"])
    registry.register("unregistered")(lambda *a, **k: None)
    try:
        extra = ["rollout.group_size=2"] if key == "algo.adv_estimator" else []
        load_config("cpu", [f"{key}=unregistered", *extra])
    finally:
        registry.unregister("unregistered")


def _register_toy_objective(calls: list):
    """REINFORCE on the log-probs, no ratio, no clip: one decorated function is all a new objective needs."""

    @POLICY_LOSSES.register("toy_reinforce")
    def toy_reinforce(logprobs, old_logprobs, advantages, mask, s, **agg):
        calls.append(s)
        loss = aggregate_loss(-advantages * logprobs, mask, **agg)
        log_ratio = (logprobs - old_logprobs).detach()
        stats = {
            "clipfrac": 0.0,
            "clipfrac_lower": 0.0,
            "approx_kl": token_stat(log_ratio.exp() - 1 - log_ratio, mask, agg.get("units")),
            "ratio_mean": token_stat(log_ratio.exp(), mask, agg.get("units")),
        }
        return loss, stats


@pytest.mark.slow
def test_an_objective_registered_in_a_test_trains_end_to_end(tiny_model_path, tiny_overrides, tmp_path, one_thread):
    calls = []
    _register_toy_objective(calls)
    try:
        assert "toy_reinforce" in objective_choices()  # the widget offers it
        out = tmp_path / "run"
        assert (
            main(["--config", "cpu", *tiny_overrides(tiny_model_path, out, 2, "algo.policy_loss=toy_reinforce")]) == 0
        )
        steps = [r for r in read_metrics(out) if "rollout/reward_mean" in r]
        assert [r["step"] for r in steps] == [1, 2]
        assert all(torch.isfinite(torch.tensor(r["policy/loss"])) for r in steps)
        assert calls and calls[0].clip_eps == 0.2, "the registered objective was not called with the run's switches"
    finally:
        POLICY_LOSSES.unregister("toy_reinforce")
    with pytest.raises(ConfigError, match="algo.policy_loss"):
        load_config("cpu", ["algo.policy_loss=toy_reinforce"])


def test_whether_a_run_has_a_critic_is_the_estimators_registration():
    assert uses_critic(load_config("cpu")) and not uses_critic(load_config("cpu-grpo"))
    ADV_ESTIMATORS.register("toy_critic", critic=True)(ADV_ESTIMATORS.get("gae"))
    try:
        assert uses_critic(load_config("cpu", ["algo.adv_estimator=toy_critic"]))
    finally:
        ADV_ESTIMATORS.unregister("toy_critic")
