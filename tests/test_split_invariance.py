"""The gradient of a minibatch does not depend on how it is split (chapter 08): for every objective x
aggregation, with every loss term on (policy, value, entropy, KL in the loss), ``update.minibatch_update``
applies the same gradient and logs the same stats in one piece, in k micro-batches of gradient accumulation,
and across two torchrun ranks."""

import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import torch.distributed as dist
from objectives_support import KW, MODES, SETTINGS, Recorder, build_case, loss_fn

from ppo_core.update import minibatch_update

HERE = Path(__file__).parent
STATS = ("policy/loss", "value/loss", "kl/loss", "loss/total", "policy/clipfrac", "policy/entropy", "value/clipfrac")


@pytest.fixture(scope="module")
def case():
    torch.manual_seed(0)
    return build_case()


def _update(actor, mb, fn, k):
    rec = Recorder(actor)
    stats = minibatch_update(actor, rec, mb, loss_fn=fn, **{**KW, "grad_accum_steps": k})
    return rec.grad, stats


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("setting", SETTINGS)
def test_accumulation_applies_the_minibatch_gradient(case, one_thread, setting, mode):
    actor, mb = case
    want, want_stats = _update(actor, mb, loss_fn(setting, mode), 1)
    assert want.abs().sum() > 0 and want_stats["policy/clipfrac"] > 0  # not degenerate: the trust region is active
    for k in (2, 4, 8):
        got, stats = _update(actor, mb, loss_fn(setting, mode), k)
        torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-7, msg=f"grad_accum_steps={k}")
        for key in STATS:
            assert stats[key] == pytest.approx(want_stats[key], rel=1e-5, abs=1e-7), (key, k)


@pytest.mark.parametrize("mode", ["token-mean", "seq-mean-token-mean"])
def test_a_micro_batch_that_divides_by_its_own_count_fails_the_check(case, one_thread, mode):
    """The gradient-accumulation bug: each micro-batch a mean over its own rows, averaged over micro-batches."""
    actor, mb = case

    def own_count(actor, part, *args, **kwargs):
        loss, stats = loss_fn("vanilla", mode)(actor, {k: v for k, v in part.items() if k != "units"}, *args)
        return loss / 2, stats

    want, _ = _update(actor, mb, loss_fn("vanilla", mode), 1)
    got, _ = _update(actor, mb, own_count, 2)
    with pytest.raises(AssertionError):
        torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-7)


@pytest.mark.skipif(not (dist.is_available() and dist.is_gloo_available()), reason="torch.distributed with gloo")
def test_two_ranks_apply_the_single_process_gradient(case, tmp_path, one_thread):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node=2", f"--master_port={port}"]
    cmd += [str(HERE / "objectives_dp_worker.py"), str(tmp_path / "res")]
    path = os.pathsep.join(p for p in (str(HERE.parent), str(HERE), os.environ.get("PYTHONPATH", "")) if p)
    proc = subprocess.run(
        cmd, capture_output=True, text=True, timeout=300, cwd=tmp_path, env={**os.environ, "PYTHONPATH": path}
    )
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-4000:]
    r0, r1 = (torch.load(tmp_path / f"res.rank{r}", weights_only=False) for r in (0, 1))
    actor, mb = case
    assert len(r0) == len(SETTINGS) * len(MODES) * 2
    for (setting, mode, k), got in r0.items():
        want, want_stats = _update(actor, mb, loss_fn(setting, mode), 1)
        torch.testing.assert_close(got["grad"], want, rtol=1e-5, atol=1e-7, msg=f"{setting} {mode} k={k}")
        assert torch.equal(got["grad"], r1[(setting, mode, k)]["grad"])  # every rank applies the same gradient
        for key in STATS:
            assert got["stats"][key] == pytest.approx(want_stats[key], rel=1e-5, abs=1e-7), (setting, mode, k, key)
