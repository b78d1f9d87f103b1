"""The course's exercises: one row per exercise, read by the checkers and by ``tools/exercises.py``.

The checkers use this table to name the exercise a failure belongs to and to keep ``checks.progress()``;
the learner-copy generator (``python -m tools.exercises build``, an authoring tool outside the package)
imports it to find each chapter's exercise cells. A new exercise adds its row to ``EXERCISES``.
"""

from dataclasses import dataclass

__all__ = ["START", "END", "CHAPTER_TITLES", "EXERCISES", "Exercise", "exercise_by_id", "exercise_for_checker"]

START, END = "# SOLUTION START", "# SOLUTION END"
"""The marker lines around the worked solution in a chapter's exercise cell."""


@dataclass(frozen=True)
class Exercise:
    """One exercise: where it lives, what the learner writes and which checker grades it."""

    id: str  # "3.1"
    chapter: str  # the notebook's file stem, "03_gae"
    title: str  # the heading after "### Exercise 3.1 — "
    function: str  # the function the exercise cell defines
    checker: str  # the ppo_core.checks function that grades it
    hint: str  # the first step, shown in the stub

    @property
    def plain_title(self) -> str:
        return self.title.replace("`", "")


CHAPTER_TITLES = {
    "01_logprobs": "Logprob alignment",
    "02_masking": "Masking",
    "03_gae": "Rewards, KL and GAE",
    "04_losses": "Clipped losses",
    "05_full_loop": "The full loop",
    "06_reward_models": "Reward models",
    "07_beyond_ppo": "Beyond PPO: GRPO, Dr. GRPO, RLOO, REINFORCE++",
    "08_reasoning_objectives": "Objectives for reasoning models: DAPO, GSPO, CISPO",
    "09_sampler_mismatch": "When the sampler is not the learner",
    "10_real_llm": "A real model on a CPU",
}

EXERCISES = (
    Exercise(
        "1.1",
        "01_logprobs",
        "Response logprobs from full logits",
        "gather_response_logprobs",
        "check_gather_response_logprobs",
        "the output that scores response token t sits at position prompt_len - 1 + t",
    ),
    Exercise(
        "1.2",
        "01_logprobs",
        "Entropy from logits",
        "compute_entropy",
        "check_entropy_from_logits",
        "scale first, z = logits.float() / temperature, and use log_softmax, never log(softmax)",
    ),
    Exercise(
        "2.1",
        "02_masking",
        "`masked_whiten`",
        "masked_whiten",
        "check_masked_whiten",
        "the statistics are two scalars for the whole batch: masked_mean(x, mask) and masked_var(x, mask)",
    ),
    Exercise(
        "2.2",
        "02_masking",
        "`response_mask`",
        "response_mask",
        "check_response_mask",
        "count the EOS tokens strictly before each position with torch.cumsum along the row",
    ),
    Exercise(
        "3.1",
        "03_gae",
        "`compute_gae`",
        "my_compute_gae",
        "check_compute_gae",
        "loop for t in reversed(range(T)), carrying the (B,) advantage of the next position",
    ),
    Exercise(
        "3.2",
        "03_gae",
        "`token_rewards`",
        "my_token_rewards",
        "check_token_rewards",
        "start from torch.where(mask, -kl_coef * kl, 0.0); the score goes on each row's last True token",
    ),
    Exercise(
        "3.3",
        "03_gae",
        "`kl_penalty`",
        "my_kl_penalty",
        "check_kl_penalty",
        "log_ratio = logprobs - ref_logprobs (log pi - log pi_ref); k3 uses rho = exp(-log_ratio)",
    ),
    Exercise(
        "4.1",
        "04_losses",
        "the clipped policy loss",
        "policy_loss",
        "check_policy_loss",
        "ratio = torch.exp(logprobs - old_logprobs); the loss takes the larger of the two negated terms",
    ),
    Exercise(
        "4.2",
        "04_losses",
        "the clipped value loss",
        "value_loss",
        "check_value_loss",
        "clip around the old values: old_values + torch.clamp(values - old_values, -clip_eps, clip_eps)",
    ),
    Exercise(
        "4.3",
        "04_losses",
        "the entropy loss",
        "entropy_loss",
        "check_entropy_loss",
        "logp = torch.log_softmax(logits.float() / temperature, dim=-1); mind the sign of the loss",
    ),
    Exercise(
        "5.1",
        "05_full_loop",
        "one PPO minibatch update",
        "minibatch_update",
        "check_minibatch_update",
        "zero the gradients, then per micro-batch one forward actor(ids, attention_mask, position_ids, keep=...)",
    ),
    Exercise(
        "6.1",
        "06_reward_models",
        "the pairwise reward-model loss",
        "pairwise_loss",
        "check_pairwise_loss",
        "read each row at its last real token: last = (torch.arange(L) * mask).argmax(-1); then F.logsigmoid",
    ),
    Exercise(
        "7.1",
        "07_beyond_ppo",
        "the group-relative advantage",
        "my_group_relative_advantages",
        "check_group_relative_advantages",
        "g = scores.view(-1, group_size) puts each prompt's samples in one row; subtract g.mean(dim=1, keepdim=True)",
    ),
    Exercise(
        "8.1",
        "08_reasoning_objectives",
        "clip-higher and the dual clip",
        "dapo_policy_loss",
        "check_dapo_policy_loss",
        "clamp(ratio, 1 - clip_eps_low, 1 + clip_eps_high); then, where A < 0 only, torch.minimum(loss, -A * c)",
    ),
    Exercise(
        "8.2",
        "08_reasoning_objectives",
        "CISPO's clipped, detached weight",
        "cispo_loss",
        "check_cispo_loss",
        "weight = torch.clamp(ratio, 1 - clip_eps_low, 1 + clip_eps_high).detach(); loss = -weight * A * logprobs",
    ),
    Exercise(
        "9.1",
        "09_sampler_mismatch",
        "truncated importance weights",
        "my_truncated_weights",
        "check_truncated_weights",
        "log_rho = torch.where(mask, old_logprobs - behaviour_logprobs, 0.0); a sequence sums it over dim=1",
    ),
    Exercise(
        "9.2",
        "09_sampler_mismatch",
        "IcePop's two-sided mask",
        "my_icepop_weights",
        "check_icepop_weights",
        "rho = exp(old_logprobs - behaviour_logprobs); keep it where mask & (rho >= lower) & (rho <= upper), else 0",
    ),
    Exercise(
        "10.1",
        "10_real_llm",
        "the reference of a LoRA run",
        "my_reference_logprobs",
        "check_reference_logprobs",
        "inside `with peft_model.disable_adapter(), torch.no_grad():` run lm_logits on peft_model.get_base_model()",
    ),
)
"""Every exercise of the course, in reading order. A test checks this table against the chapters."""

_BY_CHECKER = {ex.checker: ex for ex in EXERCISES}
_BY_ID = {ex.id: ex for ex in EXERCISES}


def exercise_for_checker(checker_name: str) -> Exercise | None:
    """The exercise that ``checks.<checker_name>`` grades, or None."""
    return _BY_CHECKER.get(checker_name)


def exercise_by_id(ex_id: str) -> Exercise | None:
    """The exercise labelled ``ex_id`` ("3.1"), or None."""
    return _BY_ID.get(ex_id)
