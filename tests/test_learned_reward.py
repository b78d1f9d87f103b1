"""PPO against a learned reward (reward.type=model): the frozen RM scores prompt + response once per rollout."""

import pytest
import torch

from ppo_core.reward_model import RewardModel
from ppo_core.run.config import ConfigError, load_config
from ppo_core.run.runner import RunTrainer


@pytest.fixture(scope="module")
def rm_path(tiny_model_path, tmp_path_factory):
    torch.manual_seed(3)
    rm = RewardModel.from_lm(tiny_model_path)
    torch.nn.init.normal_(rm.model.score.weight, std=0.5)
    rm.mean, rm.std = 0.3, 2.0
    path = tmp_path_factory.mktemp("rm") / "final"
    rm.save_pretrained(path)
    return str(path)


@pytest.mark.slow
def test_ppo_steps_against_a_learned_reward(tiny_model_path, tiny_overrides, rm_path, tmp_path, one_thread):
    cfg = load_config("cpu", tiny_overrides(tiny_model_path, tmp_path / "run", 2, "reward.type=model",
                                            f"reward.path={rm_path}", "train.tensorboard=false"))  # fmt: skip
    trainer = RunTrainer(cfg)
    rm = trainer.reward_model
    before = [p.clone() for p in rm.parameters()]
    assert not rm.training and not any(p.requires_grad for p in rm.parameters())
    records = trainer.prompt_batch(1)
    completions = ["1+1=2\n#### 2", "x"] * (len(records) // 2)
    want = (RewardModel.from_pretrained(rm_path).eval().raw_scores(
        [p + c for p, c in zip(trainer.prompts(records), completions)]) - 0.3) / 2.0  # fmt: skip
    torch.testing.assert_close(trainer.sequence_scores(records, completions), want)
    for _ in range(2):
        metrics = trainer.step()
        assert {"rollout/gold_reward", "rollout/rule_reward"} <= set(metrics)
        assert all(torch.isfinite(torch.tensor(v)) for v in metrics.values())
    assert all(torch.equal(a, b) for a, b in zip(before, rm.parameters()))  # frozen


@pytest.mark.slow
def test_rule_reward_has_no_model_and_no_extra_metrics(tiny_model_path, tiny_overrides, tmp_path, one_thread):
    trainer = RunTrainer(
        load_config("cpu", tiny_overrides(tiny_model_path, tmp_path / "r", 1, "train.tensorboard=false"))
    )
    assert trainer.reward_model is None and "rollout/gold_reward" not in trainer.step()


@pytest.mark.parametrize(
    "extra, message",
    [
        (["reward.type=model"], "reward.type=model needs reward.path"),
        (["reward.type=model", "reward.path=/no/such/rm"], "'/no/such/rm' holds no config.json"),
        (["reward.type=learned"], "reward.type must be rule or model"),
    ],
)
def test_bad_reward_config_is_one_line(extra, message):
    with pytest.raises(ConfigError, match=message):
        load_config("cpu", extra)


@pytest.mark.slow
def test_cli_exit_2(tmp_path, capsys):
    from ppo_core.train import main

    assert main(["reward.type=model", f"reward.path={tmp_path}", f"train.output_dir={tmp_path / 'out'}"]) == 2
    assert "reward.type=model needs reward.path" in capsys.readouterr().err
    assert not (tmp_path / "out").exists()


@pytest.mark.slow  # seconds, not milliseconds: a proxy-gold curve, many samples or a shipped checkpoint
def test_overoptimisation_curve_records_proxy_gold_and_kl(
    tiny_model_path, tiny_overrides, rm_path, tmp_path, one_thread, monkeypatch
):
    from ppo_core.run.overoptimisation import CURVE_KEYS, ppo_against_reward_model
    from ppo_core.tasks.rewards import gsm8k_reward

    extra = [
        o
        for o in tiny_overrides(tiny_model_path, tmp_path / "unused", 1)
        if not o.startswith(("train.output_dir", "train.steps"))
    ] + ["rollout.max_new_tokens=20", "reward.gold_length_coef=0.2"]  # responses longer than the reference
    trainers, metrics = [], []
    init, step = RunTrainer.__init__, RunTrainer.step
    monkeypatch.setattr(RunTrainer, "__init__", lambda self, *a, **k: (trainers.append(self), init(self, *a, **k))[1])
    monkeypatch.setattr(RunTrainer, "step", lambda self: metrics.append(step(self)) or metrics[-1])
    run = ppo_against_reward_model(rm_path, 0.05, 4, str(tmp_path / "o"), extra, n_samples=3)
    assert [c["step"] for c in run["curve"]] == [1, 2, 3, 4] and set(run["curve"][0]) == set(CURVE_KEYS)
    assert len(run["samples"]) == 3 and {"completion", "proxy", "gold"} <= set(run["samples"][0])
    for point, m in zip(run["curve"], metrics, strict=True):  # sqrt(KL), not KL: the x axis of Gao et al.
        assert point["sqrt_kl"] == pytest.approx(max(m["kl/to_ref"], 0.0) ** 0.5, rel=1e-6)
        assert (point["proxy"], point["gold"]) == (m["rollout/reward_mean"], m["rollout/gold_reward"])
    assert any(0 < m["kl/to_ref"] < 1 for m in metrics)  # where sqrt(KL) and KL differ
    answers = {r["question"]: r["answer"] for r in trainers[0].test_records}
    extra_chars = [len(s["completion"]) - len(answers[s["question"]]) for s in run["samples"]]
    assert any(n > 0 for n in extra_chars)  # the length term is in play
    for s, n in zip(run["samples"], extra_chars):  # the gold reward with the run's length coefficient
        want = gsm8k_reward(s["completion"], answers[s["question"]]) - 0.2 * max(0, n)
        assert s["gold"] == pytest.approx(want)


@pytest.mark.slow
def test_reward_model_metrics_are_means_of_the_rule_and_the_gold_reward(tiny_model_path, tiny_overrides, rm_path,
                                                                        tmp_path):  # fmt: skip
    """Three responses to "2+3" (answer 12 characters long), reward.gold_length_coef=0.2: the rule gives 1.0
    (right), 0.1 (a #### number, wrong) and 0.0 (none), mean 1.1 / 3; the gold reward subtracts 0.2 per
    character beyond the answer's length: 1.0, 0.1 - 0.2 * (28 - 12) = -3.1 and 0.0, mean -0.7."""
    cfg = load_config("cpu", tiny_overrides(tiny_model_path, tmp_path / "run", 1, "reward.type=model",
                                            f"reward.path={rm_path}", "reward.gold_length_coef=0.2"))  # fmt: skip
    trainer = RunTrainer(cfg)
    records = [{"question": "What is 2+3?", "answer": "2+3=5\n#### 5"}] * 3
    completions = ["2+3=5\n#### 5", "I think that 2+3 is 6\n#### 6", "five"]
    m = trainer.reward_model_metrics(records, completions)
    assert m["rollout/rule_reward"] == pytest.approx(1.1 / 3)
    assert m["rollout/gold_reward"] == pytest.approx(-0.7)
