"""ppo_core's PPO against TRL's PPOTrainer, side by side in one process: time per update, tokens/s, rewards.

    python3 -m venv .venv-trl && .venv-trl/bin/pip install -q -r requirements.txt -r benchmarks/requirements-trl.txt
    .venv-trl/bin/python benchmarks/vs_trl.py              # like-for-like, as designed, the quick scale grid
    .venv-trl/bin/python benchmarks/vs_trl.py --grid none --save benchmarks/results/performance/vs_trl.json
    .venv-trl/bin/python benchmarks/vs_trl.py --full       # the full grid: batch 8 -> 256, response 16 -> 128
    .venv-trl/bin/python benchmarks/vs_trl.py --device cuda --qwen-0.5b   # GPU report (never measured by the authors)
    .venv-trl/bin/python benchmarks/vs_trl.py --model smollm2 --settings like-for-like --grid none \
        --batch-size 32 --minibatch-size 16 --ppo-epochs 1 --response-length 32 --temperature 0.5 --updates 4 \
        --save benchmarks/results/performance/vs_trl_smollm2.json     # the real model (chapter 10), both sides

TRL lives in a virtual environment of its own (``.venv-trl``): the course's ``.venv`` never installs it.
The peer is TRL's ``PPOTrainer`` from ``trl.experimental.ppo`` (trl 1.12.0, the last release that has
it). What is equal, by construction:

* the model: the course's tiny Llama (``ppo_core.tasks.tiny``, warm-started by ``ppo_core.tasks.warmstart``), or
  with ``--model smollm2`` SmolLM2-135M-Instruct (``ppo_core.tasks.smollm``; fully fine-tuned in float32 on both
  sides, since TRL's PPOTrainer gives its value model a trunk of its own, not LoRA adapters); TRL's
  value (and reward) model is ``AutoModelForSequenceClassification(num_labels=1)`` loaded from the
  same folder, so its trunk starts from the same weights;
* the architecture: both train a value model of their own, a copy of the policy's trunk with a linear
  head (ours: the cpu preset's ``ppo.separate_critic``), over whole rows, in scoring and in every minibatch;
* the tokenizer, the prompts (the synthetic task's; *the same records in every update*: TRL's data
  loader picks a batch, ours is handed the same questions), batch size, minibatches, PPO epochs,
  response length, temperature, learning rate (constant in both), KL coefficient (k1), clip ranges,
  value coefficient, gamma and lambda;
* precision: float32 in both, as in the course's CPU run. TRL defaults to ``bf16=True`` and
  ``gradient_checkpointing=True``; both are turned off (checkpointing would recompute every forward);
* stopping: both stop a response at EOS (TRL's default ``stop_token=None`` never stops; we set
  ``stop_token="eos"``) and both stop generating once every row has finished;
* threads: one ``torch.set_num_threads`` for the process; TRL's rollout chunk
  (``local_rollout_forward_batch_size``) is the whole batch, as our generation is.

The two trainers run interleaved, one update each in turn (ours runs inside a TRL callback, with
its own RNG stream), so both see the same machine load; the first update of each is a warm-up and
the table reports the median of the rest.

What differs by design, and the two settings we report:

* TRL scores with a learned reward model (one more forward); ours uses the task's rule reward.
  ``like-for-like`` gives TRL the same rule reward, wrapped as a zero-cost "reward model" module
  (``RuleRewardModel``), and sets ours to what TRL has (``LIKE_FOR_LIKE``): no entropy bonus, no gradient
  clipping, the critic at the policy's learning rate and lambda (TRL has one optimizer and one ``lam``).
  ``as designed`` runs the cpu preset as it is (the critic at its own ``ppo.value_lr`` and
  ``ppo.lam_value``) against TRL with a reward model (a copy of the trunk with an untrained score head:
  its scores are meaningless, its cost is real).
* Both take the old logprobs from ``generate``'s own forward: TRL from the scores it returns, ours recorded
  while it samples (``fastpaths.SamplerScores``), neither runs the policy again to score its rollout. TRL's
  training forward applies the LM head at every position, ours at the response positions.
* TRL calls ``gc.collect()`` twice per update; the table shows that time, and the ratio without it.

Tokens/s per phase count the tokens that phase processes: generation B*T (sampled tokens, finished
rows included); scoring B*(P+T) (sequence tokens, whatever the number of models); update
epochs*B*(P+T). GFLOP/s of the update: ``tools/flops.py``'s count of its matmuls over the update's
seconds, beside a large float32 matmul's GFLOP/s on the same threads (the better of before and after).
Per trunk (actor, critic), backward = 2 forwards: ``epochs * 3 * (2 N B L + 2 layers B L^2 q + 2 H V B h)``,
with N the trunk's matmul weights, L = P+T, q = attention heads x head_dim, h the LM head's positions per
row (ours T, TRL L, a critic 0).
``--save PATH`` writes every number above, the grid's and ``meta`` (machine, load average) as JSON.
"""

import argparse
import contextlib
import json
import os
import platform
import statistics
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from types import SimpleNamespace

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")  # see ppo_core/run/cli.py: busy-waiting threads stall shared CPUs
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")

import warnings  # noqa: E402

warnings.filterwarnings("ignore", category=FutureWarning)  # transformers' renames (gradient_checkpointing, ...)
warnings.filterwarnings("ignore", message="data.max_prompt_len")  # the grid's T=128 lowers the prompt limit: expected

import torch  # noqa: E402
from results_meta import save_result  # noqa: E402
from torch import nn  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the repository root, for tools/
from tools.flops import matmul_rate, update_flops  # noqa: E402

# ---------------------------------------------------------------------------------------------
# settings


@dataclass
class Setting:
    name: str
    batch_size: int = 128
    minibatch_size: int = 64
    ppo_epochs: int = 2
    response_length: int = 24
    temperature: float = 1.0
    updates: int = 8  # timed updates, after one warm-up update
    trl_reward: str = "rule"  # "rule": our rule reward wrapped as a module; "model": a sequence classifier
    ours_overrides: list = field(default_factory=list)


LIKE_FOR_LIKE = ["ppo.ent_coef=0.0", "ppo.max_grad_norm=0.0", "ppo.value_lr=0.0", "ppo.lam_value=null"]
"""As TRL: no entropy bonus, no gradient clipping, one learning rate (0 = ppo.lr) and one lambda for both models."""


def ours_config(s: Setting, model_path: str, out_dir: str, threads: int, device: str, dtype: str):
    from ppo_core.run.config import load_config

    return load_config(
        "cpu",
        [
            f"model.name_or_path={model_path}",
            f"model.device={device}",
            f"model.dtype={dtype}",
            f"rollout.batch_size={s.batch_size}",
            f"ppo.minibatch_size={s.minibatch_size}",
            f"ppo.ppo_epochs={s.ppo_epochs}",
            f"rollout.max_new_tokens={s.response_length}",
            f"rollout.temperature={s.temperature}",
            f"train.output_dir={out_dir}",
            f"train.num_threads={threads}",
            "train.progress=false",
            "train.tensorboard=false",
            "train.log_every=0",
            "train.save_every=0",
            *s.ours_overrides,
        ],
    )


# ---------------------------------------------------------------------------------------------
# TRL side


class _RuleBackbone(nn.Module):
    """Decodes each prompt + response and puts its rule reward in every position of a (B, L, 1) 'hidden state'."""

    def __init__(self, tokenizer, answers: dict, reward_fn):
        super().__init__()
        self.tokenizer, self.answers, self.reward_fn = tokenizer, answers, reward_fn

    def forward(self, input_ids, **kwargs):
        texts = self.tokenizer.batch_decode(input_ids, skip_special_tokens=True)
        rewards = []
        for text in texts:
            question, completion = text.split("\n", 1)  # prompt = question + "\n" (the plain prompt style)
            rewards.append(self.reward_fn(completion, self.answers[question]))
        r = torch.tensor(rewards, dtype=torch.float32, device=input_ids.device)
        hidden = r[:, None, None].expand(-1, input_ids.shape[1], 1)  # (B, L, 1)
        return SimpleNamespace(hidden_states=(hidden,))


class RuleRewardModel(nn.Module):
    """The task's rule reward in the shape TRL's ``get_reward`` calls: ``getattr(m, m.base_model_prefix)`` then
    ``m.score``."""

    base_model_prefix = "backbone"

    def __init__(self, tokenizer, records: list[dict], reward_fn):
        super().__init__()
        self.backbone = _RuleBackbone(tokenizer, {r["question"]: r["answer"] for r in records}, reward_fn)
        self.score = nn.Identity()


class TrlClock:
    """Timestamps inside TRL's update loop, from wrappers around two of its module-level functions.

    ``batch_generation`` brackets generation; the first ``forward`` with gradients on marks the start
    of the PPO epochs (everything between is scoring: reference, value and reward forwards, GAE).
    """

    def __init__(self, trl_module, tokenizer):
        self.m, self.tokenizer = trl_module, tokenizer
        self.gen0 = self.gen1 = self.upd0 = None
        self.shape = (0, 0, 0)
        self.questions: list[str] = []
        self.gc_seconds = 0.0
        self._orig = (trl_module.batch_generation, trl_module.forward, trl_module.gc)
        trl_module.batch_generation, trl_module.forward = self._batch_generation, self._forward
        trl_module.gc = type("TimedGC", (), {"collect": self._collect})()  # TRL calls gc.collect() twice per update

    def _collect(self, *args):
        t0 = time.perf_counter()
        n = self._orig[2].collect(*args)
        self.gc_seconds += time.perf_counter() - t0
        return n

    def _batch_generation(self, model, queries, *args, **kwargs):
        self.gen0 = time.perf_counter()
        out = self._orig[0](model, queries, *args, **kwargs)
        self.gen1, self.upd0 = time.perf_counter(), None
        B, P = queries.shape
        self.shape = (B, P, out[0].shape[1] - P)  # (B, P, T)
        self.questions = [t[:-1] for t in self.tokenizer.batch_decode(queries, skip_special_tokens=True)]
        return out

    def _forward(self, model, *args, **kwargs):
        if self.upd0 is None and torch.is_grad_enabled():
            self.upd0 = time.perf_counter()
        return self._orig[1](model, *args, **kwargs)

    def restore(self):
        self.m.batch_generation, self.m.forward, self.m.gc = self._orig


def build_trl(s: Setting, model_path: str, tokenizer, records, reward_fn, out_dir: str, device: str, dtype, callback):
    from datasets import Dataset
    from transformers import AutoModelForCausalLM, AutoModelForSequenceClassification, PrinterCallback
    from trl.experimental.ppo import PPOConfig, PPOTrainer

    from ppo_core.tasks.data import build_prompt

    kw = dict(dtype=dtype)
    policy = AutoModelForCausalLM.from_pretrained(model_path, **kw)
    ref = AutoModelForCausalLM.from_pretrained(model_path, **kw)
    value = AutoModelForSequenceClassification.from_pretrained(model_path, num_labels=1, **kw)
    if s.trl_reward == "rule":
        reward = RuleRewardModel(tokenizer, records, reward_fn)
    else:
        reward = AutoModelForSequenceClassification.from_pretrained(model_path, num_labels=1, **kw)
    for m in (value, reward):
        if hasattr(m, "config"):
            m.config.pad_token_id = tokenizer.pad_token_id
    ids = tokenizer([build_prompt(r["question"]) for r in records], add_special_tokens=True)["input_ids"]
    dataset = Dataset.from_dict({"input_ids": ids})
    p = ours_config(s, model_path, out_dir, 1, "cpu", "float32").ppo  # the hyper-parameters ours uses
    args = PPOConfig(
        output_dir=out_dir,
        per_device_train_batch_size=s.batch_size,
        gradient_accumulation_steps=1,
        num_mini_batches=s.batch_size // s.minibatch_size,
        num_ppo_epochs=s.ppo_epochs,
        response_length=s.response_length,
        temperature=s.temperature,
        stop_token="eos",
        learning_rate=p.lr,
        lr_scheduler_type="constant",
        kl_coef=p.kl_coef,
        kl_estimator=p.kl_estimator,
        cliprange=p.clip_eps,
        cliprange_value=p.vf_clip_eps,
        vf_coef=p.vf_coef,
        gamma=p.gamma,
        lam=p.lam,
        bf16=False,
        fp16=False,
        gradient_checkpointing=False,
        use_cpu=device == "cpu",
        total_episodes=s.batch_size * (s.updates + 1),
        local_rollout_forward_batch_size=s.batch_size,
        num_sample_generations=0,
        report_to="none",
        save_strategy="no",
        logging_steps=1,
        disable_tqdm=True,
        seed=0,
        dataloader_num_workers=0,
    )
    trainer = PPOTrainer(
        args=args,
        processing_class=tokenizer,
        model=policy,
        ref_model=ref,
        reward_model=reward,
        train_dataset=dataset,
        value_model=value,
        callbacks=[callback],
    )
    trainer.remove_callback(PrinterCallback)  # it prints every update's metrics dict
    return trainer


# ---------------------------------------------------------------------------------------------
# one interleaved run


@dataclass
class Update:
    total: float  # wall-clock seconds
    cpu: float  # CPU seconds of this process (all threads): less sensitive to other load on the machine
    gen: float
    score: float
    update: float
    shape: tuple  # (B, P, T)
    reward: float
    gc: float = 0.0  # seconds in gc.collect() (TRL only)


def _phases(u: Update, epochs: int) -> dict:
    B, P, T = u.shape
    return {"gen": B * T / u.gen, "score": B * (P + T) / u.score, "update": epochs * B * (P + T) / u.update}


def run_pair(
    s: Setting, model_path: str, threads: int, device: str = "cpu", dtype: str = "float32", quiet: bool = False
) -> tuple[list[Update], list[Update]]:
    """Train TRL and ours for ``1 + s.updates`` updates, interleaved; returns each side's updates."""
    import trl.experimental.ppo.ppo_trainer as trl_module
    from transformers import TrainerCallback

    import ppo_core.trainer as ours_module
    from ppo_core.precision import DTYPES
    from ppo_core.run.runner import RunTrainer as Ours

    torch.set_num_threads(threads)
    with tempfile.TemporaryDirectory() as tmp:
        ours = Ours(ours_config(s, model_path, f"{tmp}/ours", threads, device, dtype))
        by_question = {r["question"]: r for r in ours.train_records}
        clock = TrlClock(trl_module, ours.tokenizer)
        ours_rng = torch.Generator().manual_seed(1).get_state()  # ours' own sampling stream
        trl_side, ours_side, shapes = [], [], {}
        real_score = ours_module.score

        def score_and_record_shape(actor, ref, ro, *a, **k):
            shapes["ours"] = (ro.input_ids.shape[0], ro.prompt_len, ro.response_ids.shape[1])
            return real_score(actor, ref, ro, *a, **k)

        class Interleave(TrainerCallback):
            """After each TRL update: record its times, then run one update of ours on the same prompts."""

            resume = None
            resume_cpu = None
            last_scores = float("nan")

            def on_log(self, args, state, control, logs=None, **kw):
                if logs and "objective/scores" in logs:
                    self.last_scores = logs["objective/scores"]

            def on_step_end(self, args, state, control, **kw):
                nonlocal ours_rng
                t_end, cpu_end = time.perf_counter(), time.process_time()
                start = self.resume if self.resume is not None else clock.gen0
                cpu = cpu_end - self.resume_cpu if self.resume_cpu is not None else float("nan")
                trl_side.append(
                    Update(
                        t_end - start,
                        cpu,
                        clock.gen1 - clock.gen0,
                        clock.upd0 - clock.gen1,
                        t_end - clock.upd0,
                        clock.shape,
                        self.last_scores,
                        clock.gc_seconds,
                    )
                )
                clock.gc_seconds = 0.0
                records = [by_question[q] for q in clock.questions]
                ours.ppo.prompt_batch = lambda step: records  # the very prompts TRL just used
                with torch.random.fork_rng(devices=[]):
                    torch.set_rng_state(ours_rng)
                    t0, c0 = time.perf_counter(), time.process_time()
                    m = ours.step()
                    total, cpu = time.perf_counter() - t0, time.process_time() - c0
                    ours_rng = torch.get_rng_state()
                ours_side.append(
                    Update(
                        total,
                        cpu,
                        m["time/rollout"],
                        m["time/score"],
                        m["time/update"],
                        shapes.get("ours", (0, 0, 0)),
                        m["rollout/reward_mean"],
                    )
                )
                if not quiet:
                    t, o = trl_side[-1], ours_side[-1]
                    tag = "warm-up" if len(trl_side) == 1 else f"update {len(trl_side) - 1}"
                    print(
                        f"    {tag:>9}: TRL {t.total:6.2f} s, {t.cpu:6.2f} CPU s (gc {t.gc:.2f} s, reward "
                        f"{t.reward:.3f})   "
                        f"ours {o.total:6.2f} s, {o.cpu:6.2f} CPU s (reward {o.reward:.3f})   load {load_average()}",
                        flush=True,
                    )
                self.resume, self.resume_cpu = time.perf_counter(), time.process_time()

        ours_module.score = score_and_record_shape
        try:
            trl = build_trl(
                s,
                ours.init_path,
                ours.tokenizer,
                ours.train_records,
                ours.reward_fn,
                f"{tmp}/trl",
                device,
                DTYPES[dtype],
                Interleave(),
            )
            trl.train()
        finally:
            clock.restore()
            ours_module.score = real_score
            ours.logger.close()
    return trl_side, ours_side


# ---------------------------------------------------------------------------------------------
# reports


def _median(xs):
    return statistics.median(xs) if xs else float("nan")


def summarize(s: Setting, trl_side: list[Update], ours_side: list[Update], model_cfg=None, critic_trunk=True) -> dict:
    """Medians over the timed updates (the warm-up dropped); ``critic_trunk``: ours trains a separate critic."""
    trl_t, ours_t = trl_side[1:], ours_side[1:]
    out = {"setting": s.name, "trl_s": _median([u.total for u in trl_t]), "ours_s": _median([u.total for u in ours_t])}
    out["ratio"] = out["ours_s"] / out["trl_s"]
    out["trl_gc_s"] = _median([u.gc for u in trl_t])
    out["ratio_without_gc"] = out["ours_s"] / _median([u.total - u.gc for u in trl_t])
    out["trl_cpu_s"], out["ours_cpu_s"] = _median([u.cpu for u in trl_t]), _median([u.cpu for u in ours_t])
    out["cpu_ratio"] = out["ours_cpu_s"] / out["trl_cpu_s"]
    for side, ups in (("trl", trl_t), ("ours", ours_t)):
        rates = [_phases(u, s.ppo_epochs) for u in ups]
        for k in ("gen", "score", "update"):
            out[f"{side}_{k}_s"] = _median([getattr(u, k) for u in ups])
            out[f"{side}_{k}_tok_s"] = _median([r[k] for r in rates])
        out[f"{side}_P"], out[f"{side}_T"] = _median([u.shape[1] for u in ups]), _median([u.shape[2] for u in ups])
        out[f"{side}_rewards"] = [u.reward for u in ups]
    out["ratios"] = [o.total / t.total for o, t in zip(ours_t, trl_t)]
    if model_cfg is not None:  # the GFLOP/s the PPO epochs reach (tools/flops.py); TRL's LM head runs on P+T
        for side, ups, critic in (("trl", trl_t, True), ("ours", ours_t, critic_trunk)):
            out[f"{side}_update_gflops"] = _median(
                [_update_gflops(model_cfg, u, s.ppo_epochs, critic, side == "trl") for u in ups]
            )
    return out


def _update_gflops(cfg, u: Update, epochs: int, critic_trunk: bool, head_everywhere: bool) -> float:
    B, P, T = u.shape
    return update_flops(cfg, B, P, T, epochs, critic_trunk, P + T if head_everywhere else T) / u.update / 1e9


def print_summary(r: dict, s: Setting) -> None:
    lo, hi = min(r["ratios"]), max(r["ratios"])
    print(
        f"\n  {r['setting']}: B={s.batch_size}, minibatch {s.minibatch_size}, {s.ppo_epochs} epochs, "
        f"T<={s.response_length}, "
        f"temperature {s.temperature}; median of {len(r['ratios'])} updates"
    )
    print(f"  {'':8} {'s/update':>9} {'generation':>22} {'scoring':>22} {'update':>22}   P, T (median)")
    for side, name in (("trl", "TRL"), ("ours", "ours")):
        cells = [f"{r[f'{side}_{k}_s']:5.2f} s {r[f'{side}_{k}_tok_s']:7.0f} tok/s" for k in ("gen", "score", "update")]
        print(
            f"  {name:8} {r[f'{side}_s']:9.2f} {cells[0]:>22} {cells[1]:>22} {cells[2]:>22}   "
            f"{r[f'{side}_P']:.0f}, {r[f'{side}_T']:.0f}"
        )
    speed = [r[f"ours_{k}_tok_s"] / r[f"trl_{k}_tok_s"] for k in ("gen", "score", "update")]
    print(
        f"  ratio ours/TRL time per update: {r['ratio']:.2f} (per update {lo:.2f}..{hi:.2f}); in CPU seconds "
        f"{r['ours_cpu_s']:.2f}/{r['trl_cpu_s']:.2f} = {r['cpu_ratio']:.2f}"
    )
    print(
        f"  throughput ours/TRL: generation {speed[0]:.2f}x, scoring {speed[1]:.2f}x, update {speed[2]:.2f}x; "
        f"TRL's gc.collect() calls: {r['trl_gc_s']:.2f} s per update (ratio without them: {r['ratio_without_gc']:.2f})"
    )
    if "ours_update_gflops" in r:
        print(
            f"  PPO epochs' arithmetic (tools/flops.py): ours {r['ours_update_gflops']:.1f} GFLOP/s, TRL "
            f"{r['trl_update_gflops']:.1f} GFLOP/s (actor and critic trunks); a large fp32 matmul here: "
            f"{r['matmul_gflops']:.1f} GFLOP/s"
        )


def print_rewards(r: dict, batch_size: int) -> None:
    print(f"\n  mean task reward per update ({batch_size} episodes each), {r['setting']}:")
    print("  update  episodes    TRL   ours")
    for i, (t, o) in enumerate(zip(r["trl_rewards"], r["ours_rewards"]), 1):
        print(f"  {i:6d} {i * batch_size:9d}  {t:.3f}  {o:.3f}")
    half = len(r["trl_rewards"]) // 2
    t2, o2 = statistics.fmean(r["trl_rewards"][half:]), statistics.fmean(r["ours_rewards"][half:])
    print(f"  mean over the second half: TRL {t2:.3f}, ours {o2:.3f}")


def machine() -> str:
    cpu = platform.processor() or "?"
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    import transformers

    try:  # --qwen-0.5b measures ours alone and runs without TRL
        import trl

        trl_version = trl.__version__
    except ImportError:
        trl_version = "not installed"
    return (
        f"{cpu}, {os.cpu_count()} logical CPUs, torch {torch.__version__} ({torch.get_num_threads()} threads), "
        f"transformers {transformers.__version__}, trl {trl_version}, Python {platform.python_version()}"
    )


def load_average() -> str:
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


# ---------------------------------------------------------------------------------------------
# scale grid


def random_tiny(folder: Path) -> str:
    """A freshly initialised tiny Llama (never emits EOS on purpose, so responses run to the limit)."""
    from ppo_core.tasks.synthetic import SYNTHETIC_ALPHABET
    from ppo_core.tasks.tiny import build_char_tokenizer, build_tiny_model, save_tiny

    torch.manual_seed(0)
    tok = build_char_tokenizer(SYNTHETIC_ALPHABET)
    return str(save_tiny(build_tiny_model(tok), tok, folder))


def warm_started_tiny() -> str:
    """The cpu preset's warm-started tiny model (trained once, about a minute, then cached)."""
    from ppo_core.run.config import load_config
    from ppo_core.tasks.warmstart import warm_start

    cfg = load_config("cpu")
    w = cfg.warmstart
    return str(
        warm_start(
            Path(w.cache_dir).expanduser(),
            seed=cfg.train.seed,
            steps=w.steps,
            batch_size=w.batch_size,
            lr=w.lr,
            answer_noise=w.answer_noise,
            n_train=cfg.data.n_train,
            n_test=cfg.data.n_test,
            progress=False,
        )
    )


def run_grid(batch_sizes, lengths, base_T: int, base_B: int, updates: int, threads: int, device: str, on_row) -> list:
    """Like-for-like on a fresh tiny model at each (B, T); ``on_row(row)`` after each point."""
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        path = random_tiny(Path(tmp) / "random-tiny")
        points = [(B, base_T) for B in batch_sizes] + [
            (base_B, T) for T in lengths if (base_B, T) not in [(b, base_T) for b in batch_sizes]
        ]
        for B, T in points:
            s = Setting(
                f"B={B} T={T}",
                batch_size=B,
                minibatch_size=max(1, B // 2),
                response_length=T,
                updates=updates,
                ours_overrides=LIKE_FOR_LIKE,
            )
            trl_side, ours_side = run_pair(s, path, threads, device, quiet=True)
            r = summarize(s, trl_side, ours_side)
            rows.append({"B": B, "T": T, **r})
            on_row(rows[-1])
            print(
                f"  B={B:4d} T={T:4d}: TRL {r['trl_s']:7.2f} s  ours {r['ours_s']:7.2f} s  ratio {r['ratio']:.2f}  "
                f"(generated T {r['trl_T']:.0f} / {r['ours_T']:.0f}; load {load_average()})",
                flush=True,
            )
    return rows


def print_grid(rows: list[dict]) -> None:
    print("\n  scale (like-for-like, a fresh tiny model whose responses run to the limit; median s per update)")
    print("     B     T    TRL s   ours s  ours/TRL   TRL gen/score/update s   ours gen/score/update s")
    for r in rows:
        t = "/".join(f"{r[f'trl_{k}_s']:.2f}" for k in ("gen", "score", "update"))
        o = "/".join(f"{r[f'ours_{k}_s']:.2f}" for k in ("gen", "score", "update"))
        times = f"{r['trl_s']:7.2f}  {r['ours_s']:7.2f}  {r['ratio']:8.2f}"
        print(f"  {r['B']:4d}  {r['T']:4d}  {times}   {t:>22}   {o:>23}")


# ---------------------------------------------------------------------------------------------
# GPU report (--qwen-0.5b): run on an H200 by benchmarks/cuda_report.py (book/measurements/gpu.md).

NOMINAL = {  # (dense bf16 FLOP/s, memory bandwidth B/s), from the vendors' data sheets; first match wins
    "H200": (989e12, 4.8e12),
    "H100 PCIe": (756e12, 2.0e12),
    "H100": (989e12, 3.35e12),
    "A100-SXM4-80GB": (312e12, 2.04e12),
    "A100": (312e12, 1.56e12),
    "L40S": (362e12, 0.86e12),
    "L4": (121e12, 0.3e12),
    "A10": (125e12, 0.6e12),
}


def qwen_shaped(layers: int, vocab: int = 151936):
    """A random-init model shaped like Qwen2.5-0.5B (494 M parameters at 24 layers), in bf16."""
    from transformers import AutoModelForCausalLM, Qwen2Config

    cfg = Qwen2Config(
        vocab_size=vocab,
        hidden_size=896,
        intermediate_size=4864,
        num_hidden_layers=layers,
        num_attention_heads=14,
        num_key_value_heads=2,
        max_position_embeddings=32768,
        rope_theta=1e6,
        rms_norm_eps=1e-6,
        tie_word_embeddings=True,
        pad_token_id=0,
        bos_token_id=1,
        eos_token_id=2,
    )
    return AutoModelForCausalLM.from_config(cfg, dtype=torch.bfloat16).eval(), cfg


def _timed(fn, device):
    if device.type == "cuda":
        torch.cuda.synchronize()
    t0 = time.perf_counter()
    out = fn()
    if device.type == "cuda":
        torch.cuda.synchronize()
    return out, time.perf_counter() - t0


def _copy_bandwidth(device) -> float:
    """Measured device memory bandwidth (B/s) of a large copy: read + write."""
    n = 256 * 2**20 if device.type == "cuda" else 16 * 2**20
    x, y = torch.empty(n, dtype=torch.float32, device=device), torch.empty(n, dtype=torch.float32, device=device)
    y.copy_(x)
    _, t = _timed(lambda: [y.copy_(x) for _ in range(5)], device)
    return 2 * 4 * n * 5 / t


def qwen_report(args) -> None:
    """Generation tokens/s against the memory-bandwidth bound, update MFU, peak memory with AdamW and AdamW8bit."""
    from types import SimpleNamespace

    from ppo_core.model import ActorWithValueHead, make_reference
    from ppo_core.rollout import sample, score
    from ppo_core.run.setup import build_optimizer
    from ppo_core.tasks.synthetic import SYNTHETIC_ALPHABET, make_synthetic_task
    from ppo_core.tasks.tiny import build_char_tokenizer
    from ppo_core.update import minibatch_update

    device = torch.device(args.device)
    print("\n== GPU report on a random-init Qwen2-0.5B-shaped model, bf16 (ours only)")
    report = {}
    torch.manual_seed(0)
    lm, cfg = qwen_shaped(args.qwen_layers, args.qwen_vocab)
    lm.to(device)
    tok = build_char_tokenizer(SYNTHETIC_ALPHABET)  # ids >= 74 decode to nothing: fine for timing
    actor = ActorWithValueHead(lm).to(device)
    ref = make_reference(actor)
    B, T, mb = args.batch_size, args.response_length, args.minibatch_size
    prompts = [r["question"] + "\n" for r in make_synthetic_task(0, n_train=B, n_test=1)[0]]
    n_params = sum(p.numel() for p in lm.parameters())
    name = torch.cuda.get_device_name(device) if device.type == "cuda" else "CPU"
    flops_peak, bw_nominal = next((v for k, v in NOMINAL.items() if k in name), (float("nan"), float("nan")))
    bw = _copy_bandwidth(device)
    report.update(
        device=name,
        parameters=n_params,
        copy_bandwidth_gbs=round(bw / 1e9),
        nominal_bandwidth_gbs=round(bw_nominal / 1e9) if bw_nominal == bw_nominal else None,
        nominal_bf16_tflops=flops_peak / 1e12,
    )
    print(
        f"  device {name}; {n_params / 1e6:.0f} M parameters; measured copy bandwidth {bw / 1e9:.0f} GB/s "
        f"(nominal {bw_nominal / 1e9:.0f} GB/s); nominal dense bf16 {flops_peak / 1e12:.0f} TFLOP/s"
    )
    # generation: prefill + 1 token, then prefill + T tokens; the difference is T - 1 decode steps
    sample(lm, tok, prompts[:2], 2, 1.0)  # warm-up
    ro1, t1 = _timed(lambda: sample(lm, tok, prompts, 1, 1.0), device)
    roT, tT = _timed(lambda: sample(lm, tok, prompts, T, 1.0), device)
    P, T_gen = roT.prompt_len, roT.response_ids.shape[1]
    decode_tps = B * (T_gen - 1) / max(tT - t1, 1e-9)
    head_dim = cfg.hidden_size // cfg.num_attention_heads
    kv_bytes = (
        B * (P + T_gen / 2) * cfg.num_hidden_layers * 2 * cfg.num_key_value_heads * head_dim * 2
    )  # bf16, mean length
    bound = B * bw / (2 * n_params + kv_bytes)  # every decode step reads every weight and the whole KV cache once
    report["generation"] = dict(
        batch=B,
        prompt=P,
        response=T_gen,
        overall_tok_s=B * T_gen / tT,
        decode_tok_s=decode_tps,
        bound_tok_s=bound,
        fraction_of_bound=decode_tps / bound,
    )
    print(
        f"  generation: B={B}, P={P}, T={T_gen}: {B * T_gen / tT:,.0f} tok/s overall; decode {decode_tps:,.0f} tok/s = "
        f"{decode_tps / bound:.0%} of the bandwidth bound {bound:,.0f} tok/s (weights {2 * n_params / 1e9:.2f} GB + "
        f"KV {kv_bytes / 1e9:.2f} GB per step, at the measured bandwidth)"
    )
    score(actor, ref, roT, 1.0, mb)
    L = roT.input_ids.shape[1]
    for opt_name in ("adamw", "adamw8bit"):
        optimizer = build_optimizer(actor, SimpleNamespace(optimizer=opt_name, lr=1e-6, weight_decay=0.0, value_lr=0.0))
        idx = torch.arange(mb, device=device)
        batch = {
            "input_ids": roT.input_ids[idx],
            "attention_mask": roT.attention_mask[idx],
            "response_ids": roT.response_ids[idx],
            "mask": roT.mask[idx],
            "old_logprobs": roT.logprobs[idx],
            "old_values": roT.values[idx],
            "advantages": torch.randn(mb, T_gen, device=device),
            "returns": torch.randn(mb, T_gen, device=device),
            "keep": roT.keep,
        }
        if device.type == "cuda":
            torch.cuda.empty_cache()
            torch.cuda.reset_peak_memory_stats(device)
        minibatch_update(actor, optimizer, batch, temperature=1.0)  # warm-up (creates the optimizer state)
        _, t = _timed(lambda o=optimizer, b=batch: minibatch_update(actor, o, b, temperature=1.0), device)
        flops = update_flops(cfg, mb, P, T_gen, 1, critic_trunk=False, head_positions=T_gen)  # one minibatch
        peak = torch.cuda.max_memory_allocated(device) / 2**30 if device.type == "cuda" else float("nan")
        report[f"update_{opt_name}"] = dict(
            minibatch=mb,
            tokens=mb * L,
            seconds=t,
            tok_s=mb * L / t,
            tflops=flops / t / 1e12,
            mfu=flops / t / flops_peak,
            peak_gib=peak,
        )
        print(
            f"  update ({opt_name:9s}): minibatch {mb} x {L} tokens: {t:.3f} s, {flops / t / 1e12:.1f} TFLOP/s = "
            f"MFU {flops / t / flops_peak:.1%}; peak memory {peak:.1f} GiB (policy + reference + optimizer + "
            "activations)"
        )
        del optimizer
    if args.qwen_json:
        Path(args.qwen_json).write_text(json.dumps(report, indent=1) + "\n")


# ---------------------------------------------------------------------------------------------
# main


def parse_args(argv=None):
    ap = argparse.ArgumentParser(
        description=__doc__.splitlines()[0], formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--updates", type=int, default=10, help="timed updates per setting, after one warm-up (default 10)")
    ap.add_argument(
        "--threads",
        type=int,
        default=max(1, min(os.cpu_count() or 1, 16)),
        help="torch threads (default: all cores, at most 16)",
    )
    ap.add_argument("--batch-size", type=int, default=128)
    ap.add_argument("--minibatch-size", type=int, default=64)
    ap.add_argument("--ppo-epochs", type=int, default=2)
    ap.add_argument("--response-length", type=int, default=24)
    ap.add_argument("--temperature", type=float, default=1.0)
    ap.add_argument(
        "--settings",
        nargs="+",
        default=["like-for-like", "as-designed"],
        choices=["like-for-like", "as-designed", "none"],
        help="the side-by-side runs ('none': the grid only)",
    )
    ap.add_argument("--grid", choices=["quick", "full", "none"], default="quick", help="the scale grid (default quick)")
    ap.add_argument("--full", action="store_true", help="same as --grid full")
    ap.add_argument("--grid-batch-sizes", type=int, nargs="+", help="override the grid's batch sizes")
    ap.add_argument("--grid-lengths", type=int, nargs="+", help="override the grid's response lengths")
    ap.add_argument("--grid-updates", type=int, default=2, help="timed updates per grid point (default 2)")
    ap.add_argument("--device", choices=["cpu", "cuda"], default="cpu")
    ap.add_argument(
        "--model",
        choices=["tiny", "smollm2"],
        default="tiny",
        help="the side-by-side runs' model: the cpu preset's warm-started tiny Llama (default) or SmolLM2-135M",
    )
    ap.add_argument("--save", metavar="PATH", help="write the results as JSON, e.g. benchmarks/results/performance/...")
    ap.add_argument(
        "--qwen-0.5b",
        dest="qwen",
        action="store_true",
        help="CUDA report on a random-init Qwen2-0.5B-shaped model in bf16",
    )
    ap.add_argument("--qwen-json", metavar="PATH", help="with --qwen-0.5b: also write its numbers to PATH as JSON")
    ap.add_argument("--qwen-layers", type=int, default=24, help=argparse.SUPPRESS)  # a smaller model for smoke tests
    ap.add_argument("--qwen-vocab", type=int, default=151936, help=argparse.SUPPRESS)  # likewise
    args = ap.parse_args(argv)
    if args.full:
        args.grid = "full"
    if args.save and args.qwen:
        ap.error("--save records the side-by-side runs; --qwen-0.5b only prints (drop one of them)")
    if args.save:
        try:
            Path(args.save).parent.mkdir(parents=True, exist_ok=True)
        except OSError as e:
            ap.error(f"--save {args.save}: cannot make its folder ({e.strerror}): pass a writable path")
        if Path(args.save).is_dir():
            ap.error(f"--save {args.save} is a folder: pass a file path, e.g. {Path(args.save) / 'vs_trl.json'}")
    return args


def main(argv=None) -> None:
    args = parse_args(argv)
    from transformers import AutoConfig
    from transformers.utils.logging import disable_progress_bar

    from ppo_core.run.config import load_config

    disable_progress_bar()  # "Loading weights" bars
    torch.set_num_threads(args.threads)
    if args.device == "cuda" and not torch.cuda.is_available():
        sys.exit("--device cuda: no CUDA GPU is visible")
    print(f"machine: {machine()}")
    print(f"load average at start: {load_average()} (1, 5, 15 min)", flush=True)
    load_start = [round(x, 2) for x in os.getloadavg()]
    if args.device == "cuda":
        print(
            "note: phase times are taken without device synchronisation; totals per update are synchronised "
            "by .item() calls."
        )
    if args.qwen:
        qwen_report(args)
        return
    base = Setting(
        "",
        batch_size=args.batch_size,
        minibatch_size=args.minibatch_size,
        ppo_epochs=args.ppo_epochs,
        response_length=args.response_length,
        temperature=args.temperature,
        updates=args.updates,
    )
    settings = {
        "like-for-like": replace(base, name="like-for-like", ours_overrides=LIKE_FOR_LIKE),
        "as-designed": replace(base, name="as designed", trl_reward="model", updates=max(2, args.updates // 2)),
    }
    t0 = time.perf_counter()
    if args.model == "smollm2":
        from ppo_core.tasks.smollm import build_smollm

        model_path, what = str(build_smollm()), "SmolLM2-135M-Instruct"
    else:
        model_path, what = warm_started_tiny(), "the warm-started tiny Llama"
    print(f"model: {what} in {model_path} ({time.perf_counter() - t0:.0f} s to build or load)")
    model_cfg = AutoConfig.from_pretrained(model_path)
    results, grid = [], []
    for key in [k for k in args.settings if k != "none"]:
        s = settings[key]
        what = "TRL with the rule reward as a module" if s.trl_reward == "rule" else "TRL with a reward model"
        print(
            f"\n== {s.name} ({what}; ours {' '.join(s.ours_overrides) or 'the cpu preset'}); load {load_average()}",
            flush=True,
        )
        matmul = matmul_rate(args.device)
        trl_side, ours_side = run_pair(s, model_path, args.threads, args.device)
        r = summarize(s, trl_side, ours_side, model_cfg, load_config("cpu", s.ours_overrides).ppo.separate_critic)
        r["matmul_gflops"] = max(matmul, matmul_rate(args.device)) / 1e9  # the better of before and after
        r["model"] = args.model
        results.append((s, r))
        save(args, results, grid, load_start)
    print(f"\n== results (load average {load_average()})")
    for s, r in results:
        print_summary(r, s)
    for s, r in results:
        if s.trl_reward == "rule":
            print_rewards(r, s.batch_size)
    if args.grid != "none":
        full = args.grid == "full"
        bs = args.grid_batch_sizes or ([8, 16, 32, 64, 128, 256] if full else [8, 32, 128])
        ts = args.grid_lengths or ([16, 32, 64, 128] if full else [16, 64, 128])
        updates = max(3, args.grid_updates) if full else args.grid_updates
        print(
            f"\n== scale grid ({args.grid}): batch sizes {bs} at T=32, response lengths {ts} at B=32; "
            f"{updates} timed updates per point after a warm-up",
            flush=True,
        )

        def on_row(row: dict) -> None:
            grid.append(row)
            save(args, results, grid, load_start)

        print_grid(run_grid(bs, ts, 32, 32, updates, args.threads, args.device, on_row))
    print(f"\nload average at the end: {load_average()}")
    for s, r in results:
        print(
            f"RESULT {s.name}: ours {r['ours_s']:.2f} s/update, TRL {r['trl_s']:.2f} s/update, ratio ours/TRL "
            f"{r['ratio']:.2f} "
            f"(CPU seconds {r['cpu_ratio']:.2f})"
        )
    if args.save:
        print(f"saved {args.save}")


def save(args, results: list, grid: list, load_start: list) -> None:
    """Everything measured so far, rewritten after each setting and grid point: a run cut short keeps it."""
    if not args.save:
        return
    import transformers
    import trl

    settings = [{"setting": s.name, **{k: v for k, v in asdict(s).items() if k != "name"}, **r} for s, r in results]
    versions = {"transformers": transformers.__version__, "trl": trl.__version__}
    save_result(
        args.save,
        {"settings": settings, "grid": grid},
        command=" ".join(["python", *sys.argv]),
        versions=versions,
        load_average={"start": load_start, "end": [round(x, 2) for x in os.getloadavg()]},
    )


if __name__ == "__main__":
    main()
