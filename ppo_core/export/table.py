"""Every ppo_core config key and its counterparts in veRL 0.9 (Hydra keys of ``verl.trainer.main_ppo``),
OpenRLHF 0.11 (flags of ``openrlhf.cli.train_ppo_ray``) and TRL; book/big_trainers.md is generated from it.

Checked against the engines' own schemas by tests/test_export.py; a config key missing here fails that test.
"""

from ..advantages import ADV_ESTIMATORS
from ..kl import KL_ESTIMATORS
from ..objectives import POLICY_LOSSES
from .cells import Gap, Row, Same, custom, gap, key, same

__all__ = ["ROWS", "VERL_FIXED", "OPENRLHF_FIXED", "VERL_VERSION", "OPENRLHF_VERSION"]

VERL_VERSION, OPENRLHF_VERSION = "0.9.1", "0.11.2"
A, M, R = "actor_rollout_ref.actor.", "actor_rollout_ref.model.", "actor_rollout_ref.rollout."
# The engines' names, from each entry's registration (registry.py): veRL's KL estimators, OpenRLHF's others.
KL_NAMES = {n: KL_ESTIMATORS.info(n, "verl") for n in KL_ESTIMATORS if KL_ESTIMATORS.info(n, "verl")}
ORL_ESTIMATORS = {n: ADV_ESTIMATORS.info(n, "openrlhf") for n in ADV_ESTIMATORS if ADV_ESTIMATORS.info(n, "openrlhf")}
ORL_POLICY_LOSSES = {n: POLICY_LOSSES.info(n, "openrlhf") for n in POLICY_LOSSES if POLICY_LOSSES.info(n, "openrlhf")}
COURSE_ONLY = "a course setting with no counterpart"
FAST_PATHS = (
    "speed paths with the same numbers; the engines have their own, and by default run the actor again for the "
    "old log-probs (their sampler is another engine), where ours takes them from its own generate, as TRL does"
)
RATIO_CHECK = COURSE_ONLY + " (the ratio-is-1 check)"
WARMSTART = "the tiny model's in-memory SFT stand-in; the engines start from an SFT checkpoint"

# Written on every export: settings the run implies whose engine default differs (names checked like the rest).
VERL_FIXED = {
    R + "name": "vllm",  # required (no default)
    A + "optim.lr_scheduler_type": "constant",  # ppo_core keeps the learning rate constant
    A + "optim.betas": [0.9, 0.999],  # torch AdamW's, as ppo_core's
}
OPENRLHF_FIXED = {
    "--data.input_key": "input",
    "--data.label_key": "label",
    "--actor.lr_scheduler": "constant",  # default cosine_with_min_lr with 3 % warm-up
    "--actor.lr_warmup_ratio": 0.0,
    "--actor.adam.betas": [0.9, 0.999],  # default (0.9, 0.95)
}
CRITIC_FIXED = {  # with a critic (algo.adv_estimator=gae)
    "verl": {"critic.optim.lr_scheduler_type": "constant"},
    "openrlhf": {
        "--critic.lr_scheduler": "constant",
        "--critic.lr_warmup_ratio": 0.0,
        "--critic.adam.betas": [0.9, 0.999],
    },
}


def _model_path(names_fn):
    def fn(ctx, value):
        if ctx.model_path is None:
            return Gap(f"'{value}' is the course's in-memory model: export with model.name_or_path=PATH or a hub id")
        return names_fn(ctx)

    return fn


def _verl_model(ctx):
    out = {M + "path": ctx.model_path}
    return {**out, "critic.model.path": ctx.model_path} if ctx.critic else out


def _orl_model(ctx):
    out = {"--actor.model_name_or_path": ctx.model_path}
    return {**out, "--critic.model_name_or_path": ctx.model_path} if ctx.critic else out


def _prompts(n, ctx):
    g = ctx.cfg.rollout.group_size
    return n // g if n % g == 0 else Gap(f"{n} sequences is not a whole number of prompts of {g} samples")


def _micro(_, ctx):
    p = ctx.cfg.ppo
    return p.minibatch_size // p.grad_accum_steps


def _verl_dtype(ctx, value):
    if value == "float32":
        return Gap("veRL trains in bf16 or fp16 mixed precision (fsdp_config.dtype)")
    return {R + "dtype": value, A + "fsdp_config.dtype": value}  # mixed precision over fp32 weights (model_dtype)


VERL_MICRO = (
    A + "ppo_micro_batch_size_per_gpu",
    R + "log_prob_micro_batch_size_per_gpu",
    "actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu",
    "critic.ppo_micro_batch_size_per_gpu",
)


def _verl_micro(ctx, value):
    """Every micro-batch veRL asks for: the update's, the rollout's and the reference's scoring, the critic's."""
    names = VERL_MICRO if ctx.critic else VERL_MICRO[:3]
    return dict.fromkeys(names, _micro(value, ctx))


def _orl_dtype(value, ctx):
    return {"bfloat16": "bf16", "float16": "fp16"}.get(value) or Gap("OpenRLHF trains in bf16 or fp16 only")


def _verl_optimizer(ctx, value):
    if value == "adamw8bit":
        return {A + "optim.optimizer": "AdamW8bit", A + "optim.optimizer_impl": "bitsandbytes.optim"}
    return {A + "optim.optimizer": "AdamW", A + "optim.optimizer_impl": "torch.optim"}


def _orl_optimizer(ctx, value):
    if value == "adamw8bit":
        return Gap("DeepSpeed's Adam only (--ds.adam_offload moves its state to the CPU instead)")
    return {"--actor.optim": "adam", **({"--critic.optim": "adam"} if ctx.critic else {})}


def _with_critic(actor_key, critic_key, critic_value=None):
    """The actor's setting, and the critic's (its own value when ``critic_value(ctx)`` is given)."""

    def fn(ctx, value):
        out = {actor_key: value}
        if ctx.critic:
            out[critic_key] = critic_value(ctx) if critic_value else value
        return out

    return custom((actor_key, critic_key), fn)


def _value_lr(ctx):
    return ctx.cfg.ppo.value_lr or ctx.cfg.ppo.lr


def _verl_clip(ctx, value):
    p = ctx.cfg.ppo  # chapter 08's asymmetric range: null = clip_eps, as veRL's
    low, high = (value if v is None else v for v in (p.clip_eps_low, p.clip_eps_high))
    return {A + "clip_ratio": value, A + "clip_ratio_low": low, A + "clip_ratio_high": high}


def _orl_clip_pair(ctx, value):
    p = ctx.cfg.ppo
    if p.clip_eps_low is None and p.clip_eps_high is None:
        return Same("one range, --actor.eps_clip")
    return {"--actor.eps_clip_low_high": [p.clip_eps if v is None else v for v in (p.clip_eps_low, p.clip_eps_high)]}


def _dual_clip(name, off):
    def fn(ctx, value):  # veRL applies its dual clip always (c = 3): written huge when ours is off
        if value is None:
            return {name: off} if off is not None else Same("off, as the engine's default")
        return {name: value}

    return fn


def _orl_policy_loss(ctx, value):
    if value not in ORL_POLICY_LOSSES:
        return Gap(f"OpenRLHF's policy losses are {' and '.join(ORL_POLICY_LOSSES.values())}, not {value}")
    return {"--actor.policy_loss_type": ORL_POLICY_LOSSES[value]}


def _sapo_only(engine_key):
    def fn(ctx, value):
        if ctx.cfg.algo.policy_loss != "sapo":
            return Same("read by algo.policy_loss=sapo only")
        return {engine_key: value} if engine_key else Gap("no SAPO policy loss")

    return fn


def _verl_dynamic(ctx, value):
    if not value:
        return Same("off, as veRL's default")
    rounds = ctx.cfg.algo.max_sampling_rounds
    return {"algorithm.filter_groups.enable": True, "algorithm.filter_groups.max_num_gen_batches": rounds}


def _orl_dynamic(ctx, value):  # drops groups whose mean score is at either end of the range: 0/1 scores only
    return {"--algo.dynamic_filtering_enable": True} if value else Same("off, as OpenRLHF's default")


def _orl_overlong(name):
    def fn(ctx, value):
        return {name: value} if ctx.cfg.reward.overlong_buffer_len > 0 else Same("off, as OpenRLHF's default")

    return fn


def _verl_overlong_penalty(ctx, value):
    if ctx.cfg.reward.overlong_buffer_len == 0:
        return Same("off")
    return Gap("the DAPO recipe's reward manager (overlong_buffer.penalty_factor)")


def _if_on(test, out, reason_off="off"):
    return lambda ctx, value: out(ctx, value) if test(ctx, value) else Same(reason_off)


def _one_lambda(ctx, value):
    if not ctx.critic:
        return Same("no critic targets without a critic")
    if value is None or value == ctx.cfg.ppo.lam:
        return Same("one lambda for the advantages and the critic's targets, as here")
    return Gap("one lambda for the advantages and the critic's targets (ppo.lam is exported)")


def _off(default, reason):
    """Same when the value is ``default`` (the feature is off), else a Gap."""
    return lambda ctx, value: Same("off") if value == default else Gap(reason)


RC = "algorithm.rollout_correction."
_ORL_IS = "OpenRLHF 0.11 has no importance-sampling correction flag"


def _orl_is_only(ctx, value):
    k = ctx.cfg.correction
    return Same("no correction") if k.is_level is None and k.rs_level is None else Gap(_ORL_IS)


_VERL_RS_LOWER = (
    "veRL 0.9 rejects outside [1/threshold, threshold]; veRL's token_k1 bounds mu/pi_old where this package bounds "
    "pi_old/mu ([lo, hi] here is [1/hi, 1/lo] there); and with is_level=token, rs_level=token (IcePop) a rejected "
    "token leaves this package's token mean, where IcePop and veRL's IcePop keep it with weight 0"
)


def _verl_rs(ctx, value):
    return {RC + "rollout_rs_threshold": value} if ctx.cfg.correction.rs_level else Same("no rejection")


def _critic_gap(reason):
    return lambda ctx, value: Gap(reason) if ctx.critic else Same("no critic")


def _value_epochs(engine_key):
    def fn(ctx, value):
        if not ctx.critic:
            return Same("no critic")
        epochs = value or ctx.cfg.ppo.ppo_epochs
        if engine_key:
            return {engine_key: epochs}
        if epochs == ctx.cfg.ppo.ppo_epochs:
            return Same("the policy's epochs, as here")
        return Gap("one --train.max_epochs for the policy and the critic")

    return fn


def _orl_kl_coef(ctx, value):
    a = ctx.cfg.algo
    if a.use_kl_in_reward and a.use_kl_loss:
        return Gap("one KL coefficient: the reward's or (--algo.kl.use_loss) the loss's, not both")
    if a.use_kl_in_reward:
        return {"--algo.kl.init_coef": value, "--algo.kl.estimator": ctx.cfg.ppo.kl_estimator}
    return Same("the KL is not in the reward (algo.use_kl_in_reward=false)")


def _orl_kl_loss(ctx, value):
    a = ctx.cfg.algo
    if not a.use_kl_loss:
        return Same("no KL loss (algo.use_kl_loss=false)")
    if a.use_kl_in_reward:
        return Gap("one KL coefficient: the reward's or the loss's, not both")
    return {"--algo.kl.use_loss": True, "--algo.kl.init_coef": value, "--algo.kl.estimator": a.kl_loss_type}


def _orl_no_kl(ctx, value):
    a = ctx.cfg.algo
    if not (a.use_kl_in_reward or a.use_kl_loss):
        return {"--algo.kl.init_coef": 0.0}  # no KL anywhere: OpenRLHF then loads no reference model
    return Same("--algo.kl.init_coef > 0 puts the KL in the reward, or in the loss with --algo.kl.use_loss")


def _kl_target(ctx, value):
    if not ctx.cfg.ppo.adaptive_kl:
        return Same("used by the adaptive controller only (ppo.adaptive_kl=false)")
    return Gap("the engine's target is the mean per-token KL, ours the per-response sum: set it by hand")


def _orl_adaptive(ctx, value):
    if not value:
        return Same("fixed coefficient, as here")
    return Gap("adaptive only with --algo.kl.target, a mean per-token KL (ours is per response): set it by hand")


def _whiten(engine):
    def fn(ctx, value):
        if not ctx.critic:
            return Same("ignored without a critic, here and there")
        return Same(f"{engine} whitens GAE advantages over the batch") if value else Gap(f"{engine} always whitens")

    return fn


def _orl_estimator(ctx, value):
    if value == "grpo":
        return {"--algo.advantage.estimator": "group_norm" if ctx.cfg.algo.norm_adv_by_std_in_grpo else "dr_grpo"}
    if value not in ORL_ESTIMATORS:
        return Gap(f"no OpenRLHF advantage estimator {value}")
    return {"--algo.advantage.estimator": ORL_ESTIMATORS[value]}


def _verl_agg(ctx, value):
    out = {A + "loss_agg_mode": value}
    if value == "seq-mean-token-sum-norm":  # divide by rollout.max_new_tokens, as ours (veRL: the padded length)
        out[A + "loss_scale_factor"] = ctx.cfg.rollout.max_new_tokens
    return out


def _orl_agg(ctx, value):
    if value == "seq-mean-token-sum-norm":
        return Gap("OpenRLHF aggregates by token-mean or seq-mean-token-mean only")
    return {"--actor.loss_agg_mode": value}


def _verl_steps(ctx, value):
    return {"trainer.total_training_steps": value + ctx.cfg.ppo.value_warmup_steps}


def _orl_steps(ctx, value):
    """OpenRLHF counts passes over the prompts: cap the prompts so the run takes ``value`` steps."""
    prompts = (value + ctx.cfg.ppo.value_warmup_steps) * ctx.prompts_per_step
    episodes = -(-prompts // ctx.n_train)
    return {"--train.num_episodes": episodes, "--data.max_samples": prompts if episodes == 1 else ctx.n_train}


def _minus_one_for_zero(value, ctx):
    return value if value > 0 else -1


def _verl_resume(ctx, value):
    if value == "":
        return {"trainer.resume_mode": "disable"}
    if value == "auto":
        return {"trainer.resume_mode": "auto"}
    return Gap("a ppo_core checkpoint: the engines resume only from their own")


def _orl_resume(ctx, value):
    if value == "":
        return Same("a fresh run")
    if value == "auto":
        return {"--ckpt.load_enable": True}
    return Gap("a ppo_core checkpoint: the engines resume only from their own")


def _verl_logger(ctx, value):
    t = ctx.cfg.train
    return {"trainer.logger": ["console"] + ["tensorboard"] * t.tensorboard + ["wandb"] * t.wandb}


def _orl_tb(ctx, value):
    return {"--logger.tensorboard_dir": ctx.cfg.train.output_dir + "/tb"} if value else Same("off")


def _verl_reward(ctx, value):
    if value == "model":
        return Gap("a ppo_core reward model; veRL's reward.reward_model takes a Hugging Face model")
    hook = "reward.custom_reward_function."
    return {hook + "path": ctx.files["reward"], hook + "name": "compute_score"}


def _orl_reward(ctx, value):
    if value == "model":
        return Gap("a ppo_core reward model; --reward.model_name_or_path takes a Hugging Face model")
    return {"--reward.remote_url": ctx.files["reward"]}


def _reward_path(ctx, value):
    return Same("rule reward") if ctx.cfg.reward.type == "rule" else Gap("see reward.type")


def _keep(ctx, value):
    return {"trainer.max_actor_ckpt_to_keep": value, "trainer.max_critic_ckpt_to_keep": value}


def _verl_data(ctx, value):
    return {"data.train_files": ctx.files["train"], "data.val_files": ctx.files["test"]}


def _orl_data(ctx, value):
    return {"--data.prompt_dataset": ctx.files["train"], "--eval.dataset": ctx.files["test"]}


def _verl_prompt(ctx, value):
    if value == "chat":
        return Same("the prompt column holds the chat messages; veRL applies the tokenizer's template")
    return Gap("veRL applies a chat template to every prompt: use a model with one and data.prompt_style=chat")


def _orl_prompt(ctx, value):
    return {"--data.apply_chat_template": True} if value == "chat" else Same("the input column is the plain prompt")


def _separate(ctx, value):
    if not ctx.critic:
        return Same("no critic")
    return (
        Same("the critic is always a model of its own")
        if value
        else Gap("the critic is always a model of its own (a copy of the starting policy), not a head on its trunk")
    )


# fmt: off
ROWS = [
    # model
    Row("model.name_or_path", custom((M + "path", "critic.model.path"), _model_path(_verl_model)),
        custom(("--actor.model_name_or_path", "--critic.model_name_or_path"), _model_path(_orl_model)),
        "sft_model_path"),
    Row("model.dtype", custom((R + "dtype", A + "fsdp_config.dtype"), _verl_dtype), key("--ds.param_dtype", _orl_dtype),
        "bf16"),
    Row("model.device", gap("GPUs placed by Ray", "trainer.n_gpus_per_node"),
        gap("GPUs placed by Ray", "--actor.num_gpus_per_node"), "— (Accelerate)"),
    Row("model.gradient_checkpointing", key(M + "enable_gradient_checkpointing"),
        key("--actor.gradient_checkpointing_enable"), "gradient_checkpointing"),
    Row("model.value_head_init_std", custom((), _critic_gap("the critic is a model of its own, set up by the engine")),
        custom((), _critic_gap("the critic is a model of its own, set up by the engine")), "—"),
    Row("model.lora.r", key(M + "lora_rank"), key("--ds.lora.rank"), "a PEFT config"),
    Row("model.lora.alpha", key(M + "lora_alpha", lambda v, c: int(v) if v == int(v) else Gap("an integer there")),
        key("--ds.lora.alpha", lambda v, c: int(v) if v == int(v) else Gap("an integer there")), "a PEFT config"),
    Row("model.lora.dropout", custom((), _off(0.0, "no LoRA dropout for FSDP (model.lora.* is Megatron's)")),
        key("--ds.lora.dropout"), "a PEFT config"),
    Row("model.lora.target_modules", key(M + "target_modules"),
        key("--ds.lora.target_modules", lambda v, c: v.split(",")), "a PEFT config"),
    # warmstart
    *(Row(f"warmstart.{k}", gap(WARMSTART), gap(WARMSTART), "—")
      for k in ("steps", "batch_size", "lr", "answer_noise", "cache_dir")),
    # data
    Row("data.task", custom(("data.train_files", "data.val_files"), _verl_data),
        custom(("--data.prompt_dataset", "--eval.dataset"), _orl_data), "train_dataset",
        "written as the exported data files"),
    Row("data.source", same("read by the exporter: its records are the exported files"),
        same("read by the exporter: its records are the exported files"), "train_dataset"),
    Row("data.prompt_style", custom((), _verl_prompt), custom(("--data.apply_chat_template",), _orl_prompt),
        "the dataset"),
    Row("data.n_train", same("the exported train file holds them"), same("the exported train file holds them"), "—"),
    Row("data.n_test", same("the exported test file holds them"), same("the exported test file holds them"), "—"),
    Row("data.max_prompt_len", custom(("data.max_prompt_length", "data.truncation"),
                                      lambda c, v: {"data.max_prompt_length": v, "data.truncation": "left"}),
        key("--data.max_len", lambda v, c: v + c.cfg.rollout.max_new_tokens), "—",
        "OpenRLHF's max_len counts prompt and response"),
    # rollout
    Row("rollout.batch_size", key("data.train_batch_size", _prompts), key("--rollout.batch_size", _prompts),
        "per_device_train_batch_size", "the engines count prompts, ppo_core counts sequences"),
    Row("rollout.max_new_tokens", key("data.max_response_length"), key("--rollout.max_new_tokens"), "response_length"),
    Row("rollout.overlong_filter", custom((), _off(False, "no overlong filter in main_ppo")),
        custom((), _off(False, "no overlong filter")), "mask_truncated_completions (GRPO)"),
    Row("rollout.temperature", key(R + "temperature"), key("--rollout.temperature"), "temperature"),
    Row("rollout.generation_batch_size", same("a memory limit of HF generate; vLLM schedules its own batches"),
        same("a memory limit of HF generate; vLLM schedules its own batches"), "local_rollout_forward_batch_size"),
    Row("rollout.group_size", key(R + "n"), key("--rollout.n_samples_per_prompt"), "num_generations (GRPO)"),
    # ppo
    Row("ppo.ppo_epochs", key(A + "ppo_epochs"), key("--train.max_epochs"), "num_ppo_epochs"),
    Row("ppo.minibatch_size", key(A + "ppo_mini_batch_size", _prompts), key("--train.batch_size"),
        "num_mini_batches (a count)", "veRL counts prompts"),
    Row("ppo.grad_accum_steps", custom(VERL_MICRO, _verl_micro), key("--train.micro_batch_size", _micro),
        "gradient_accumulation_steps", "written as the micro-batch, minibatch / steps, also for scoring"),
    Row("ppo.lr", key(A + "optim.lr"), key("--actor.adam.lr"), "learning_rate"),
    Row("ppo.weight_decay", _with_critic(A + "optim.weight_decay", "critic.optim.weight_decay"),
        _with_critic("--actor.adam.weight_decay", "--critic.adam.weight_decay"), "weight_decay"),
    Row("ppo.optimizer", custom((A + "optim.optimizer",), _verl_optimizer),
        custom(("--actor.optim",), _orl_optimizer), "optim"),
    Row("ppo.max_grad_norm", _with_critic(A + "grad_clip", "critic.grad_clip"),
        _with_critic("--actor.max_norm", "--critic.max_norm"), "max_grad_norm"),
    Row("ppo.clip_eps", custom((A + "clip_ratio",), _verl_clip), key("--actor.eps_clip"), "cliprange"),
    Row("ppo.clip_eps_low", same("written with ppo.clip_eps (clip_ratio_low)"),
        custom(("--actor.eps_clip_low_high",), _orl_clip_pair), "epsilon (GRPO)"),
    Row("ppo.clip_eps_high", same("written with ppo.clip_eps (clip_ratio_high)"),
        same("written with ppo.clip_eps_low (--actor.eps_clip_low_high)"), "epsilon_high (GRPO)"),
    Row("ppo.dual_clip_c", custom((A + "clip_ratio_c",), _dual_clip(A + "clip_ratio_c", 1.0e9)),
        custom(("--actor.dual_clip",), _dual_clip("--actor.dual_clip", None)), "delta (GRPO, a related bound)"),
    Row("ppo.vf_clip_eps", key("critic.cliprange_value", critic_only=True),
        key("--critic.value_clip", critic_only=True), "cliprange_value"),
    Row("ppo.vf_coef", custom((), _critic_gap("the critic has its own optimizer: no weight between the losses")),
        custom((), _critic_gap("the critic has its own optimizer: no weight between the losses")), "vf_coef"),
    Row("ppo.ent_coef", key(A + "entropy_coeff"), key("--actor.entropy_coef"), "—"),
    Row("ppo.gamma", key("algorithm.gamma"), key("--algo.advantage.gamma"), "gamma"),
    Row("ppo.lam", key("algorithm.lam"), key("--algo.advantage.lambd"), "lam"),
    Row("ppo.lam_value", custom((), _one_lambda), custom((), _one_lambda), "—"),
    Row("ppo.value_lr", key("critic.optim.lr", lambda v, c: _value_lr(c), critic_only=True),
        key("--critic.adam.lr", lambda v, c: _value_lr(c), critic_only=True), "—", "0 = ppo.lr: written as its value"),
    Row("ppo.separate_critic", custom(("critic.model.path",), _separate),
        custom(("--critic.model_name_or_path",), _separate), "value_model"),
    Row("ppo.value_epochs", custom(("critic.ppo_epochs",), _value_epochs("critic.ppo_epochs")),
        custom((), _value_epochs(None)), "—"),
    Row("ppo.value_warmup_steps", key("trainer.critic_warmup", critic_only=True),
        key("--critic.freezing_steps", _minus_one_for_zero, critic_only=True), "—",
        "the engines count them in the run's steps: the exported steps include them"),
    Row("ppo.kl_coef", key("algorithm.kl_ctrl.kl_coef"),
        custom(("--algo.kl.init_coef", "--algo.kl.estimator"), _orl_kl_coef), "kl_coef"),
    Row("ppo.kl_estimator", key("algorithm.kl_penalty", lambda v, c: KL_NAMES[v]),
        same("one --algo.kl.estimator, written with the coefficient"), "kl_estimator"),
    Row("ppo.adaptive_kl", key("algorithm.kl_ctrl.type", lambda v, c: "adaptive" if v else "fixed"),
        custom(("--algo.kl.target",), _orl_adaptive), "old PPOConfig.adap_kl_ctrl"),
    Row("ppo.kl_target", custom(("algorithm.kl_ctrl.target_kl",), _kl_target),
        custom(("--algo.kl.target",), _kl_target), "old PPOConfig.target"),
    Row("ppo.kl_horizon", key("algorithm.kl_ctrl.horizon"), key("--algo.kl.horizon"), "old PPOConfig.horizon"),
    Row("ppo.whiten_advantages", custom((), _whiten("veRL")), custom((), _whiten("OpenRLHF")),
        "whiten_rewards (rewards)"),
    # algo
    Row("algo.adv_estimator", key("algorithm.adv_estimator"),
        custom(("--algo.advantage.estimator",), _orl_estimator), "the trainer class"),
    Row("algo.norm_adv_by_std_in_grpo", key("algorithm.norm_adv_by_std_in_grpo"),
        same("written as --algo.advantage.estimator (group_norm or dr_grpo)"), "scale_rewards"),
    Row("algo.use_kl_in_reward", key("algorithm.use_kl_in_reward"), custom(("--algo.kl.init_coef",), _orl_no_kl), "—"),
    Row("algo.use_kl_loss", key(A + "use_kl_loss"), same("written with algo.kl_loss_coef (--algo.kl.use_loss)"),
        "beta > 0"),
    Row("algo.kl_loss_coef", key(A + "kl_loss_coef"),
        custom(("--algo.kl.use_loss", "--algo.kl.init_coef", "--algo.kl.estimator"), _orl_kl_loss), "beta"),
    Row("algo.kl_loss_type", key(A + "kl_loss_type", lambda v, c: KL_NAMES[v]),
        same("one --algo.kl.estimator, written with the coefficient"), "—"),
    Row("algo.loss_agg_mode", custom((A + "loss_agg_mode", A + "loss_scale_factor"), _verl_agg),
        custom(("--actor.loss_agg_mode",), _orl_agg), "loss_type (GRPO)"),
    Row("algo.policy_loss", key(A + "policy_loss.loss_mode"), custom(("--actor.policy_loss_type",), _orl_policy_loss),
        "loss_type / importance_sampling_level (GRPO)"),
    Row("algo.sapo_tau_pos", custom((A + "tau_pos",), _sapo_only(A + "tau_pos")), custom((), _sapo_only(None)), "—"),
    Row("algo.sapo_tau_neg", custom((A + "tau_neg",), _sapo_only(A + "tau_neg")), custom((), _sapo_only(None)), "—"),
    Row("algo.dynamic_sampling", custom(("algorithm.filter_groups.enable",), _verl_dynamic),
        custom(("--algo.dynamic_filtering_enable",), _orl_dynamic), "—",
        "OpenRLHF drops groups whose mean score is 0 or 1: the same for 0/1 scores only"),
    Row("algo.max_sampling_rounds", same("written with algo.dynamic_sampling (max_num_gen_batches)"),
        custom((), _if_on(lambda c, v: c.cfg.algo.dynamic_sampling, lambda c, v: Gap("no limit on refill rounds"))),
        "—"),
    # train
    Row("train.steps", custom(("trainer.total_training_steps",), _verl_steps),
        custom(("--train.num_episodes", "--data.max_samples"), _orl_steps), "total_episodes",
        "OpenRLHF counts passes over the prompts: capped to take these steps"),
    Row("train.seed", custom(("data.seed", R + "seed"), lambda c, v: {"data.seed": v, R + "seed": v}),
        key("--train.seed"), "seed"),
    Row("train.output_dir", key("trainer.default_local_dir"),
        custom(("--ckpt.output_dir", "--ckpt.path"), lambda c, v: {"--ckpt.output_dir": v, "--ckpt.path": v + "/ckpt"}),
        "output_dir"),
    Row("train.log_every", same("veRL logs every step"), key("--logger.logging_steps"), "logging_steps"),
    Row("train.save_every", key("trainer.save_freq", _minus_one_for_zero),
        key("--ckpt.save_steps", _minus_one_for_zero), "save_steps", "0, only the final model, is -1 there"),
    Row("train.keep_last", custom(("trainer.max_actor_ckpt_to_keep", "trainer.max_critic_ckpt_to_keep"), _keep),
        key("--ckpt.max_num"), "save_total_limit"),
    Row("train.eval_every", key("trainer.test_freq", _minus_one_for_zero), key("--eval.steps", _minus_one_for_zero),
        "eval_steps"),
    Row("train.eval_samples", same("the exported test file holds that many"),
        same("the exported test file holds that many"), "—"),
    Row("train.resume", custom(("trainer.resume_mode",), _verl_resume), custom(("--ckpt.load_enable",), _orl_resume),
        "resume_from_checkpoint"),
    Row("train.overwrite", gap(COURSE_ONLY + ": checkpoint folders are the engine's"),
        gap(COURSE_ONLY + ": checkpoint folders are the engine's"), "—"),
    Row("train.max_skipped_steps", gap(COURSE_ONLY + " (a guard against repeated non-finite updates)"),
        gap(COURSE_ONLY + " (a guard against repeated non-finite updates)"), "—"),
    Row("train.tensorboard", custom(("trainer.logger",), _verl_logger), custom(("--logger.tensorboard_dir",), _orl_tb),
        "report_to"),
    Row("train.wandb", same("written in trainer.logger"),
        custom((), _off(False, "W&B needs --logger.wandb.key, an API key: not exported")), "report_to"),
    Row("train.wandb_project", key("trainer.project_name"), key("--logger.wandb.project"), "(W&B environment)"),
    Row("train.check_ratio", gap(RATIO_CHECK), gap(RATIO_CHECK)),
    Row("train.ratio_tol", gap(RATIO_CHECK), gap(RATIO_CHECK)),
    Row("train.fast_paths", same(FAST_PATHS), same(FAST_PATHS), "—"),
    Row("train.num_threads", gap("CPU threads of a CPU run"), gap("CPU threads of a CPU run"), "—"),
    Row("train.progress", gap("a progress bar"), gap("a progress bar"), "disable_tqdm"),
    # reward
    Row("reward.type", custom(("reward.custom_reward_function.path",), _verl_reward),
        custom(("--reward.remote_url",), _orl_reward), "reward_funcs (GRPO)",
        "rule: the exported reward_fn.py"),
    Row("reward.path", custom((), _reward_path), custom((), _reward_path), "reward_model_path"),
    Row("reward.gold_length_coef", gap(COURSE_ONLY + " (the logged gold reward of chapter 06)"),
        gap(COURSE_ONLY + " (the logged gold reward of chapter 06)"), "—"),
    Row("reward.overlong_buffer_len", custom((), _off(0, "the DAPO recipe's reward manager (overlong_buffer.len)")),
        custom(("--reward.overlong_buffer_len",), _orl_overlong("--reward.overlong_buffer_len")),
        "trl.rewards.get_soft_overlong_punishment"),
    Row("reward.overlong_penalty", custom((), _verl_overlong_penalty),
        custom(("--reward.overlong_penalty_factor",), _orl_overlong("--reward.overlong_penalty_factor")), "—"),
    Row("reward.missing_eos_penalty", custom((), _off(0.0, "no missing-EOS penalty")),
        custom((), _off(0.0, "no missing-EOS penalty")), "missing_eos_penalty (PPO, RLOO)"),
    # chapter 09: a sampler that is not the learner, and the importance-sampling corrections
    Row("sampler.dtype", custom((), _off("", "the engine's own inference dtype (vLLM's), not a copy made here")),
        custom((), _off("", "the engine's own inference dtype (vLLM's), not a copy made here")), "—"),
    Row("sampler.stale_steps", custom((), _off(0, "asynchronous rollouts are the engines' own recipes")),
        custom(("--train.async_enable",), _off(0, "asynchronous training (--train.async_enable) has its own lag")),
        "async GRPO"),
    Row("sampler.top_k", key(R + "top_k", lambda v, ctx: v or -1), custom((), _off(0, "no top-k flag")), "top_k"),
    Row("sampler.top_p", key(R + "top_p"), custom((), _off(1.0, "no top-p flag")), "top_p"),
    Row("sampler.keep_sampling_mask", custom((), _off(False, "veRL 0.9 scores the full softmax (no sampling mask)")),
        custom((), _off(False, "no sampling-mask flag")), "—"),
    Row("sampler.weight_noise", custom((), _off(0.0, COURSE_ONLY + " (a made mismatch)")),
        custom((), _off(0.0, COURSE_ONLY + " (a made mismatch)")), "—"),
    Row("correction.mode", key(RC + "bypass_mode", lambda v, ctx: v == "bypass"),
        custom((), _off("decoupled", "no bypass mode")), "—"),
    Row("correction.is_level", key(RC + "rollout_is"), custom((), _off(None, _ORL_IS)),
        "vllm_importance_sampling_mode"),
    Row("correction.is_threshold", key(RC + "rollout_is_threshold"), custom((), _orl_is_only),
        "vllm_importance_sampling_cap"),
    Row("correction.rs_level", key(RC + "rollout_rs"), custom((), _off(None, _ORL_IS)),
        "vllm_importance_sampling_mode (token_mask, sequence_mask)"),
    Row("correction.rs_threshold", custom((RC + "rollout_rs_threshold",), _verl_rs), custom((), _orl_is_only), "—"),
    Row("correction.rs_threshold_lower", custom((), _off(None, _VERL_RS_LOWER)),
        custom((), _orl_is_only), "—"),
]
# fmt: on
