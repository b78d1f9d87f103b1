"""Chapter 08's data side (ppo_core.dapo) and switches end to end: the overlong and missing-EOS scores, the
overlong filter, dynamic sampling's refill, the presets cpu-dapo, cpu-gspo and cpu-cispo through the training
command, and the config's one-line errors."""

import pytest
import torch

from ppo_core import dapo
from ppo_core.rollout import Rollout
from ppo_core.run.config import ConfigError, load_config
from ppo_core.run.metrics import read_metrics
from ppo_core.run.runner import build_trainer
from ppo_core.train import main


def test_overlong_penalty_is_zero_then_linear_to_the_limit():
    # L = 10, buffer 4: free up to 6 tokens, then -1/4 per token, -penalty at 10
    lengths = torch.tensor([3, 6, 7, 8, 10])
    got = dapo.overlong_penalty(lengths, max_len=10, buffer_len=4, penalty=2.0)
    torch.testing.assert_close(got, torch.tensor([0.0, 0.0, -0.5, -1.0, -2.0]))
    assert dapo.overlong_penalty(lengths, 10, 0).abs().sum() == 0  # off


def test_shape_scores_and_the_eos_test():
    ids = torch.tensor([[5, 2, 0], [5, 6, 7], [2, 0, 0]])  # EOS = 2, pad = 0
    mask = torch.tensor([[1, 1, 0], [1, 1, 1], [1, 0, 0]], dtype=torch.bool)
    ended = dapo.ended_with_eos(ids, mask, [2])
    assert ended.tolist() == [True, False, True]
    scores = torch.tensor([1.0, 1.0, 0.0])
    got = dapo.shape_scores(scores, mask.sum(1), ended, max_len=3, buffer_len=1, overlong=0.5, missing_eos=0.25)
    torch.testing.assert_close(got, torch.tensor([1.0, 1.0 - 0.5 - 0.25, 0.0]))


def test_agreeing_groups():
    scores = torch.tensor([1.0, 1.0, 1.0, 0.0, 0.0, 0.0, 0.1, 0.1, 0.1, 1.0, 0.0, 1.0])
    assert dapo.agreeing_groups(scores, 3).tolist() == [True, True, True, False]


def _rollout(B, P, T, seed):
    g = torch.Generator().manual_seed(seed)
    mask = torch.rand(B, T, generator=g) < 0.7
    return Rollout(
        input_ids=torch.randint(3, 9, (B, P + T), generator=g),
        attention_mask=torch.ones(B, P + T, dtype=torch.long),
        prompt_len=P,
        response_ids=torch.randint(3, 9, (B, T), generator=g),
        mask=mask,
        completions=[f"c{seed}-{i}" for i in range(B)],
        scores=torch.rand(B, generator=g),
        logprobs=torch.randn(B, T, generator=g),
        ref_logprobs=torch.randn(B, T, generator=g),
    )


def test_select_and_concat_keep_each_row_whole():
    a, b = _rollout(4, 3, 5, 0), _rollout(2, 5, 2, 1)
    both = dapo.concat_rollouts([a, dapo.select_rows(b, torch.tensor([1]))], pad_id=0)
    assert both.input_ids.shape == (5, 5 + 5) and both.prompt_len == 5 and both.completions[-1] == "c1-1"
    torch.testing.assert_close(both.response_ids[4, :2], b.response_ids[1])  # right-padded response
    assert not both.mask[4, 2:].any() and both.attention_mask[:4, :2].sum() == 0  # a's prompts left-padded by 2
    torch.testing.assert_close(both.input_ids[:4, 2:5], a.input_ids[:, :3])
    torch.testing.assert_close(both.scores, torch.cat([a.scores, b.scores[1:]]))
    torch.testing.assert_close(both.logprobs[:4], a.logprobs)


@pytest.fixture
def dapo_trainer(tiny_model_path, tiny_overrides, tmp_path, one_thread):
    extra = ("rollout.batch_size=16", "ppo.minibatch_size=8", "rollout.group_size=4", "rollout.max_new_tokens=8")
    tr = build_trainer(load_config("cpu-dapo", tiny_overrides(tiny_model_path, tmp_path / "run", 1, *extra)))
    yield tr
    tr.logger.close()


def test_dynamic_sampling_refills_the_batch_with_groups_that_disagree(dapo_trainer, monkeypatch):
    tr, seen = dapo_trainer, {}
    calls = []
    real_collect = tr.collect

    def collect(records):  # the first round: scores that agree in groups 0 and 2
        ro = real_collect(records)
        if not calls:
            ro.scores = torch.tensor([1.0] * 4 + [0.0, 1.0, 0.0, 0.0] + [0.0] * 4 + [1.0, 0.0, 0.0, 0.0])
        calls.append(records)
        return ro

    real_learn = tr.learn
    monkeypatch.setattr(tr, "collect", collect)
    monkeypatch.setattr(tr.ppo, "learn", lambda ro: seen.setdefault("ro", ro) and real_learn(ro))
    metrics = tr.step()
    ro = seen["ro"]
    assert ro.input_ids.shape[0] == 16 and len(ro.completions) == 16
    assert len(calls) >= 2 and metrics["rollout/extra_samples"] == 16 * (len(calls) - 1)
    assert metrics["rollout/dropped_groups"] >= 2
    kept = [calls[0][i] for i in (4, 12)]  # the first round's two disagreeing groups come first, whole
    assert kept[0] is calls[0][4] and ro.scores[:8].tolist() == [0.0, 1.0, 0.0, 0.0, 1.0, 0.0, 0.0, 0.0]
    if len(calls) < tr.cfg.algo.max_sampling_rounds:  # filled before the last round: no group agrees
        assert not dapo.agreeing_groups(ro.scores, 4).any()
    # the run logs the batch it trained on (the kept groups), not the last sampling round
    records, trained = tr.ppo.last_batch
    assert trained is ro and records[0] is calls[0][4] and records[4] is calls[0][12]
    correct = [tr.correct_fn(c, r["answer"]) for c, r in zip(ro.completions, records)]
    assert metrics["rollout/correct_rate"] == pytest.approx(sum(correct) / 16)


def test_overlong_filter_masks_truncated_responses(tiny_model_path, tiny_overrides, tmp_path, one_thread):
    over = ("rollout.overlong_filter=true", "rollout.max_new_tokens=4", "reward.missing_eos_penalty=0.5")
    tr = build_trainer(load_config("cpu", tiny_overrides(tiny_model_path, tmp_path / "run", 1, *over)))
    records = tr.prompt_batch(1)
    ro = tr.collect(records)
    raw = torch.tensor([tr.reward_fn(c, r["answer"]) for c, r in zip(ro.completions, records)])
    from ppo_core.rollout import stop_token_ids

    ended = dapo.ended_with_eos(ro.response_ids, ro.mask, stop_token_ids(tr.actor.lm, tr.tokenizer))
    assert (~ended).any()  # 4 tokens: some responses are cut
    assert not ro.mask[~ended].any()  # their tokens left the loss
    torch.testing.assert_close(ro.scores, raw - 0.5 * (~ended).float())
    tr.logger.close()


@pytest.mark.parametrize("preset", ["cpu-dapo", "cpu-gspo", "cpu-cispo"])
def test_each_new_preset_runs_through_the_training_command(
    preset, tiny_model_path, tiny_overrides, tmp_path, one_thread
):
    out = tmp_path / "run"
    assert main(["--config", preset, *tiny_overrides(tiny_model_path, out, 2, "rollout.group_size=4")]) == 0
    steps = [r for r in read_metrics(out) if "rollout/reward_mean" in r]
    assert [r["step"] for r in steps] == [1, 2]
    assert ("rollout/dropped_groups" in steps[0]) == (preset == "cpu-dapo")
    assert all(r["train/skipped"] == 0 for r in steps)


@pytest.mark.parametrize(
    "override, message",
    [
        ("algo.policy_loss=grpo", "algo.policy_loss must be vanilla, gspo, cispo or sapo"),
        ("ppo.dual_clip_c=0.5", "ppo.dual_clip_c must be > 1"),
        ("ppo.clip_eps_high=-0.1", "ppo.clip_eps_high must be > 0"),
        ("algo.dynamic_sampling=true", "set rollout.group_size >= 2"),
        ("reward.overlong_buffer_len=30", "must be below rollout.max_new_tokens"),
    ],
)
def test_bad_switch_is_one_clear_line(override, message):
    with pytest.raises(ConfigError, match=message):
        load_config("cpu", [override])


def test_dynamic_sampling_refuses_several_ranks():
    from ppo_core.run.distributed import check_world

    cfg = load_config("cpu-dapo")
    with pytest.raises(ConfigError, match="one process only"):
        check_world(cfg, 2)
    check_world(cfg, 1)
