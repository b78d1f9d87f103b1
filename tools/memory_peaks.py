"""Peak memory of the token logprobs and the entropy on a real vocabulary, all rows at once against the package's
chunks: each form measured in a process of its own (Linux: /proc/self). Used by tests/test_logprobs.py and by
``benchmarks/memory.py --logprobs`` (here, in tools/, so that no benchmark imports from tests/)."""

import gc
import multiprocessing
from pathlib import Path

import torch

from ppo_core.logprobs import entropy_from_logits, logprobs_from_logits

__all__ = ["row_wise_peaks"]


def row_wise_peaks(what: str, B: int, T: int, V: int = 151936) -> dict:
    """The extra peak memory (bytes) of ``what`` (logprobs or entropy) on bf16 (B, T, V) logits, all rows
    at once (key True) and as the package takes them (False), each measured in a process of its own."""
    ctx = _context()
    peaks = {}
    for all_rows in (True, False):
        q = ctx.Queue()
        p = ctx.Process(target=_row_wise_peak, args=(what, B, T, V, all_rows, q))
        p.start()
        peaks[all_rows] = q.get()
        p.join()
    return peaks


def _context():
    """Fresh processes for the measurements: on Linux forked from a forkserver that has imported torch and this
    module once (started with the first measurement, it serves the later ones), elsewhere spawned. Either way a
    measurement's process holds nothing but its own tensors: the forkserver imports, it never computes."""
    if "forkserver" not in multiprocessing.get_all_start_methods():
        return multiprocessing.get_context("spawn")
    ctx = multiprocessing.get_context("forkserver")
    ctx.set_forkserver_preload([__name__])
    return ctx


def _row_wise_peak(what: str, B: int, T: int, V: int, all_rows: bool, out) -> None:
    """In a fresh process: bf16 (B, T, V) logits, then ``what`` on them (``logprobs``: ``logprobs_from_logits``;
    ``entropy``: ``entropy_from_logits``, as ``update`` logs it; both in chunks of ``CHUNK_BYTES``); sends the
    growth of the process's peak RSS over its RSS just before, in bytes (Linux: /proc/self). ``all_rows``: the
    one-shot (B, T, V) float32 form each used before."""
    torch.manual_seed(0)
    logits = torch.empty(B, T, V, dtype=torch.bfloat16).normal_(0, 3)  # no float32 temporary
    tokens = torch.randint(0, V, (B, T))
    _run(what, all_rows, logits[:1, :1], tokens[:1, :1])  # page in the kernels' code first: RSS counts it once
    gc.collect()
    Path("/proc/self/clear_refs").write_text("5")  # Linux: the peak RSS (VmHWM) restarts from the RSS now
    before = _status_kib("VmRSS")
    _run(what, all_rows, logits, tokens)
    out.put((_status_kib("VmHWM") - before) * 1024)


def _run(what: str, all_rows: bool, logits, tokens) -> None:
    with torch.inference_mode():  # as at scoring time (rollout.score) and for the logged entropy
        if what == "logprobs" and all_rows:
            torch.log_softmax(logits.float(), dim=-1).gather(-1, tokens.unsqueeze(-1))
        elif what == "logprobs":
            logprobs_from_logits(logits, tokens)
        elif what == "entropy" and all_rows:
            z = logits.float()
            p = torch.softmax(z, dim=-1)
            _ = torch.logsumexp(z, dim=-1) - torch.where(p > 0, p * z, 0.0).sum(dim=-1)
        else:
            entropy_from_logits(logits)


def _status_kib(field: str) -> int:
    """A memory field of /proc/self/status (VmRSS: resident now; VmHWM: peak resident), in KiB."""
    line = next(line for line in Path("/proc/self/status").read_text().splitlines() if line.startswith(field + ":"))
    return int(line.split()[1])
