"""Data parallel with torchrun (run/distributed.py), on the CPU with 2 gloo processes.

A 2-process test starts ``python -m torch.distributed.run --nproc_per_node=2`` on a free port (about
10-15 s), or reads the ranks' results of ``one_launch``, which runs several cases in one launch; the batch-split
rules are checked in this process.
"""

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import torch.distributed as dist
from ppo_test_support import _tiny_overrides

from ppo_core.losses import loss_units
from ppo_core.model import ActorWithValueHead
from ppo_core.reward_model import RewardModel
from ppo_core.rollout import tokenize_prompts
from ppo_core.run.config import ConfigError, load_config
from ppo_core.run.distributed import check_world, weights_digest
from ppo_core.run.metrics import read_metrics
from ppo_core.run.runner import RunTrainer

pytestmark = pytest.mark.skipif(
    not (dist.is_available() and dist.is_gloo_available()), reason="torch.distributed with gloo is unavailable"
)
HERE = Path(__file__).parent
GRPO = (  # no critic, 4 samples per prompt, the KL (k3) in a sequence-mean loss, a token-mean entropy bonus
    "algo.adv_estimator=grpo",
    "rollout.group_size=4",
    "algo.use_kl_in_reward=false",
    "algo.use_kl_loss=true",
    "algo.kl_loss_coef=0.1",
    "algo.loss_agg_mode=seq-mean-token-mean",
    "ppo.ent_coef=0.01",
    "rollout.batch_size=16",
    "ppo.minibatch_size=8",
    "rollout.max_new_tokens=24",  # long enough that some responses end early: ranks hold unequal token counts
)


@pytest.fixture(scope="module")
def rm_path(tiny_model_path, tmp_path_factory):
    torch.manual_seed(3)
    rm = RewardModel.from_lm(tiny_model_path)
    torch.nn.init.normal_(rm.model.score.weight, std=0.5)
    path = tmp_path_factory.mktemp("rm") / "final"
    rm.save_pretrained(path)
    return str(path)


def _torchrun(args: list[str], tmp_path) -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node=2", f"--master_port={port}", *args]
    # the workers run in tmp_path: put this checkout's ppo_core first (an installed one may be another checkout's)
    path = os.pathsep.join(p for p in (str(HERE.parent), os.environ.get("PYTHONPATH", "")) if p)
    env = {**os.environ, "PYTHONPATH": path}
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=240, cwd=tmp_path, env=env)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-4000:]


def _overrides(model, out, steps, *extra):
    return _tiny_overrides(model, out, steps, "train.num_threads=1", *extra)


LORA = ("ppo.separate_critic=false", "model.lora.r=4", "model.lora.alpha=8", "model.lora.target_modules=all-linear")
CORRECTION = ("sampler.dtype=bfloat16", "correction.is_level=token", "correction.rs_level=token",
              "correction.rs_threshold=1.01", "ppo.grad_accum_steps=2")  # fmt: skip
"""Chapter 09: weights and a kept-token mask from the sampler's logprobs; each rank divides by the global kept count."""


UPDATE_CASES = {
    "shared-critic": ("ppo.separate_critic=false",),
    "separate-critic": ("ppo.separate_critic=true", "ppo.value_epochs=3"),
    "lora": LORA,
    "correction": CORRECTION,
}


@pytest.fixture(scope="module")
def one_launch(tiny_model_path, rm_path, tmp_path_factory):
    """The update cases (saved rollouts, and the single process's result on each) and the GRPO case (the ranks
    collect), run in one torchrun launch: a launch costs more than a case. Returns the folder and the expected
    results of the update cases."""
    root = tmp_path_factory.mktemp("dp")
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        cases, expected = [], {}
        for name, extra in UPDATE_CASES.items():
            if name == "separate-critic":  # scores from a reward model: returns, and the critic's gradient, not 0
                extra = (*extra, "reward.type=model", f"reward.path={rm_path}")
            here = root / name
            here.mkdir()
            cfg = load_config("cpu", _overrides(tiny_model_path, here / "single", 1, "ppo.lr=1e-2", *extra))
            tr = RunTrainer(cfg)
            ro = tr.collect(tr.prompt_batch(1))
            torch.save(ro, here / "ro.pt")
            state0 = {k: v.clone() for k, v in tr.actor.state_dict().items()}
            want = tr.learn(ro)
            tr.logger.close()
            single = tr.actor.state_dict()
            assert any(not torch.equal(v, state0[k]) for k, v in single.items()), name  # the update moved the weights
            expected[name] = (single, want)
            cases.append({"run": str(here / "dp"), "rollout": str(here / "ro.pt"), "result": str(here / "result"),
                          "extra": list(extra)})  # fmt: skip
        grpo = [*GRPO, "reward.type=model", f"reward.path={rm_path}"]
        cases.append({"run": str(root / "grpo"), "rollout": "collect", "result": str(root / "res"), "extra": grpo})
        (root / "cases.json").write_text(json.dumps(cases))
        _torchrun([str(HERE / "dist_worker.py"), tiny_model_path, str(root / "cases.json")], root)
    finally:
        torch.set_num_threads(threads)
    return root, expected


@pytest.mark.slow
def test_two_ranks_update_equals_one_process(one_launch):
    """One update on a saved rollout, on 2 ranks and in 1 process: the same weights and logged statistics
    (the separate critic: its trunk's gradients averaged too, its extra value-only passes on every rank;
    LoRA: only the adapters and the value head train, the frozen base stays the same on every rank).
    The four cases share one torchrun launch with the GRPO case below."""
    root, expected = one_launch
    for name, (single, want) in expected.items():
        r0, r1 = (torch.load(root / name / f"result.rank{r}", weights_only=False) for r in (0, 1))
        for k, v in single.items():
            torch.testing.assert_close(r0["state"][k], v, rtol=1e-4, atol=1e-5, msg=f"{name}: {k}")
            assert torch.equal(r0["state"][k], r1["state"][k]), f"{name}: {k}"  # every rank holds the same weights
        for k, v in want.items():
            if k.startswith("time/"):
                continue
            assert r0["metrics"][k] == pytest.approx(v, rel=1e-4, abs=1e-5, nan_ok=True), f"{name}: {k}"  # nan: V = 0
            assert r1["metrics"][k] == pytest.approx(r0["metrics"][k], rel=0, abs=0, nan_ok=True), f"{name}: {k}"


@pytest.mark.slow
def test_two_rank_run_same_weights_and_resume(tiny_model_path, tmp_path):
    out = tmp_path / "run"
    _torchrun(["-m", "ppo_core.train", *_overrides(tiny_model_path, out, 2, "train.save_every=1")], tmp_path)
    assert (out / "step_1").is_dir() and (out / "final").is_dir()
    assert not list((out / ".rank1").glob("step_*"))  # rank 0 alone writes checkpoints
    _torchrun(["-m", "ppo_core.train", *_overrides(tiny_model_path, out, 3, "train.resume=auto")], tmp_path)
    steps = [r["step"] for r in read_metrics(out) if "kl/to_ref" in r]
    assert steps == [1, 2, 3]

    ranks = json.loads((out / "ranks.json").read_text())  # every rank's sha256 of its final weights
    assert ranks["world_size"] == 2 and len(set(ranks["weights"])) == 1
    assert ranks["weights"][0] == weights_digest(ActorWithValueHead.from_pretrained(str(out / "final")))
    step3 = [r for r in read_metrics(out) if r.get("step") == 3 and "kl/to_ref" in r]
    step3_r1 = [r for r in read_metrics(out / ".rank1") if r.get("step") == 3 and "kl/to_ref" in r]
    drop = lambda r: {k: v for k, v in r.items() if not k.startswith("time/")}  # noqa: E731
    assert [drop(r) for r in step3] == [drop(r) for r in step3_r1]  # the global means, identical on both ranks
    assert json.loads((out / "summary.json").read_text())


@pytest.mark.slow
def test_two_ranks_grpo_groups_and_a_reward_model(tiny_model_path, rm_path, one_launch, tmp_path, one_thread):
    """No critic, rollout.group_size=4 (2 whole groups per rank), the KL in a sequence-mean loss and
    reward.type=model: the ranks' gathered batch is the step's prompts in order with each group's rows
    together, the reward model scored every row, and one update equals the single-process one. The ranks ran
    in ``one_launch``, after the update cases."""
    extra = [*GRPO, "reward.type=model", f"reward.path={rm_path}"]
    root = one_launch[0]
    saved = torch.load(root / "res.rollout", weights_only=False)
    ro, records = saved["rollout"], saved["records"]
    tr = RunTrainer(load_config("cpu", [*_overrides(tiny_model_path, tmp_path / "single", 1, "ppo.lr=1e-2"), *extra]))
    assert tr.actor.value_head is None and ro.values is None
    assert records == tr.prompt_batch(1) and ro.input_ids.shape[0] == len(records) == 16
    ids, attn = tokenize_prompts(tr.tokenizer, tr.prompts(records), 10_000, "cpu")
    P = ro.prompt_len
    for i in range(16):  # row i holds prompt i (rows 4k..4k+3: prompt k of the step, 4 times)
        got = ro.input_ids[i, :P][ro.attention_mask[i, :P].bool()]
        torch.testing.assert_close(got, ids[i][attn[i].bool()], rtol=0, atol=0, msg=f"row {i}")
    assert len({tuple(ro.input_ids[i, :P].tolist()) for i in range(16)}) == 4
    torch.testing.assert_close(ro.scores, tr.sequence_scores(records, ro.completions))  # the RM, row for row

    tr.ppo.times = {"time/rollout": 0.0, "time/score": 0.0}
    state0 = {k: v.clone() for k, v in tr.actor.state_dict().items()}
    want = tr.learn(ro)
    tr.logger.close()
    r0, r1 = (torch.load(root / f"res.rank{r}", weights_only=False) for r in (0, 1))
    assert "kl/loss" in want and not any(k.startswith("value/") for k in r0["metrics"])
    for k, v in want.items():  # the losses, the gradient norm and the token statistics of the global minibatches
        if not k.startswith("time/"):
            assert r0["metrics"][k] == pytest.approx(v, rel=1e-5, abs=1e-7), k
    single = tr.actor.state_dict()
    assert any(not torch.equal(v, state0[k]) for k, v in single.items())
    for k, v in single.items():  # moved ~4e-2 by 2 AdamW steps, whose 1 / sqrt(v) magnifies float rounding
        torch.testing.assert_close(r0["state"][k], v, rtol=1e-4, atol=1e-4, msg=k)
        assert torch.equal(r0["state"][k], r1["state"][k]), k


@pytest.mark.parametrize(
    "batch, group, ranks, ok",
    [(16, 4, 2, True), (16, 1, 2, True), (8, 4, 2, True), (12, 4, 2, False), (9, 1, 2, False), (16, 4, 8, False)],
)
def test_each_rank_gets_whole_groups(batch, group, ranks, ok):
    cfg = load_config("cpu", [f"rollout.batch_size={batch}", f"rollout.group_size={group}", "ppo.minibatch_size=1"])
    if ok:
        check_world(cfg, ranks)
        return
    with pytest.raises(ConfigError, match=f"rollout.batch_size={batch} must be a multiple of .*{ranks * group}$"):
        check_world(cfg, ranks)


def test_loss_units_follow_the_aggregation():
    mask = torch.tensor([[1, 1, 1], [1, 0, 0], [0, 0, 0]], dtype=torch.bool)
    assert loss_units(mask)["token-mean"] == 4  # tokens
    assert loss_units(mask)["seq-mean-token-mean"] == 2  # responses with a token
    assert loss_units(mask)["seq-mean-token-sum-norm"] == 3  # responses


@pytest.mark.slow
def test_each_rank_samples_from_a_stream_of_seed_step_and_rank(tiny_model_path, tmp_path, monkeypatch, one_thread):
    """``PPOTrainer.collect`` with a ``DataParallel`` in this process as rank 0 or 1 of 2 (the gather left out):
    rank r samples its half of the records from torch seeded by (train.seed, step, rank) alone. Both halves
    hold the same prompt, so the two ranks' responses differ only through their streams."""
    from ppo_core.run.distributed import DataParallel

    tr = RunTrainer(load_config("cpu", _overrides(tiny_model_path, tmp_path / "run", 2)))
    monkeypatch.setattr(DataParallel, "gather", lambda self, ro, pad_id: ro)
    records = tr.prompt_batch(1)[:1] * 8

    def draw(r, step_count, rng_before=0):
        dp = DataParallel(tr.cfg.train.seed)
        dp.rank, dp.world_size = r, 2
        tr.ppo.data_parallel, tr.ppo.step_count = dp, step_count
        torch.manual_seed(rng_before)  # whatever the run drew before does not matter
        ro = tr.collect(records)
        assert ro.input_ids.shape[0] == 4  # this rank's half
        return ro.response_ids

    first = draw(0, 0)
    assert torch.equal(draw(0, 0, rng_before=1), first)  # a pure function of (seed, step, rank): resumes repeat it
    assert not torch.equal(draw(1, 0), first)  # the other rank: another stream on the same prompts
    assert not torch.equal(draw(0, 1), first)  # the next step: another stream
    tr.logger.close()


def test_gathered_rows_are_padded_with_masked_out_positions():
    """A rank's rollout (prompt 2 tokens, response 2) padded to the gather's common 4 + 3: the new prompt
    columns go on the left, the new response column on the right, all of them pad ids that nothing attends
    to and no loss counts."""
    from ppo_core.rollout import Rollout

    ro = Rollout(
        input_ids=torch.tensor([[5, 6, 7, 8]]),
        attention_mask=torch.tensor([[1, 1, 1, 1]]),
        prompt_len=2,
        response_ids=torch.tensor([[7, 8]]),
        mask=torch.tensor([[True, True]]),
        logprobs=torch.tensor([[-0.5, -0.25]]),
        values=torch.tensor([[0.5, 0.75]]),
        ref_logprobs=torch.tensor([[-1.0, -2.0]]),
        scores=torch.tensor([1.0]),
    )
    padded = ro.padded(4, 3, pad_id=0)
    assert padded["input_ids"].tolist() == [[0, 0, 5, 6, 7, 8, 0]]
    assert padded["attention_mask"].tolist() == [[0, 0, 1, 1, 1, 1, 0]]
    assert padded["response_ids"].tolist() == [[7, 8, 0]] and padded["mask"].tolist() == [[True, True, False]]
    assert padded["logprobs"].tolist() == [[-0.5, -0.25, 0.0]]
    assert padded["ref_logprobs"].tolist() == [[-1.0, -2.0, 0.0]]
    assert padded["values"].tolist() == [[0.5, 0.75, 0.0]] and padded["scores"].tolist() == [1.0]
