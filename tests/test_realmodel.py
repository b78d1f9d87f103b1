"""The real-model path: a hub-shaped checkpoint's quirks, each one a defect that no metric shows.

Each test here failed on the code before its fix (see the commit history of this file): sampling that
followed the model's own generation_config, bf16 weights that an update at lr 1e-6 could not move, one
EOS id, a double BOS, evaluation reseeding CUDA, attention dropout left on, resume loading a second model,
evaluation ignoring the run's device and dtype.
"""

import math

import pytest
import torch
from ppo_test_support import _tiny_overrides


@pytest.fixture(scope="module")
def hub_path(tmp_path_factory):
    from ppo_core.tasks.hub_model import build_hub_model

    return str(build_hub_model(tmp_path_factory.mktemp("hub")))


@pytest.fixture(scope="module")
def hub(hub_path):
    from ppo_core.tasks.hub_model import load_hub_model

    return load_hub_model(hub_path)


# ---- the hub-shaped model itself ---------------------------------------------------------------
def test_hub_model_has_a_chat_checkpoints_quirks(hub, hub_path):
    from ppo_core.tasks.data import build_prompt
    from ppo_core.tasks.hub_model import build_hub_model

    lm, tok = hub
    gc = lm.generation_config
    assert lm.config.model_type == "qwen2" and lm.config.tie_word_embeddings
    assert tok.bos_token is None and tok.chat_template
    assert sorted(gc.eos_token_id) == sorted(tok.convert_tokens_to_ids(["<|im_end|>", "<|endoftext|>"]))
    assert tok.eos_token == "<|im_end|>" and tok.pad_token_id != tok.eos_token_id
    assert gc.do_sample and gc.top_k == 20 and gc.top_p == 0.8 and gc.temperature == 0.7 and gc.repetition_penalty > 1
    prompt = build_prompt("Ann has 3 apples and gets 4 more. How many now?", tok, "chat")
    assert prompt.startswith("<|im_start|>system\n") and prompt.endswith("<|im_start|>assistant\n")
    assert tok.decode(tok(prompt)["input_ids"]) == prompt  # byte-level BPE round-trips
    assert build_hub_model(str(__import__("pathlib").Path(hub_path).parent)) == __import__("pathlib").Path(hub_path)


# ---- item 1: sampling depends on the run's config only ----------------------------------------
def _sample_ids(lm, tok, prompts, seed, **kw):
    from ppo_core.rollout import sample

    torch.manual_seed(seed)
    return sample(lm, tok, prompts, max_new_tokens=kw.pop("max_new_tokens", 12), temperature=1.0, **kw).response_ids


@pytest.mark.parametrize(
    "field, value",
    [("repetition_penalty", 3.0), ("top_k", 5), ("top_p", 0.3), ("min_p", 0.5), ("no_repeat_ngram_size", 1),
     ("typical_p", 0.2), ("temperature", 0.1), ("suppress_tokens", list(range(3, 200)))],
)  # fmt: skip
def test_sampling_ignores_the_models_generation_config(tiny_model_path, field, value):
    """Issue item 1: the issue measured 64/64 completions changed by repetition_penalty=3.0 on the tiny model."""
    from ppo_core.tasks.tiny import load_tiny

    lm, tok = load_tiny(tiny_model_path)
    prompts = [f"Ann has {i % 10} apples and gets {i // 10} more. How many now?\n" for i in range(64)]
    before = _sample_ids(lm, tok, prompts, seed=1)
    setattr(lm.generation_config, field, value)
    after = _sample_ids(lm, tok, prompts, seed=1)
    changed = int((before != after).any(1).sum()) if before.shape == after.shape else len(prompts)
    assert changed == 0, f"{changed}/64 completions changed when generation_config.{field} = {value!r}"


@pytest.mark.slow  # seconds, not milliseconds: a proxy-gold curve, many samples or a shipped checkpoint
def test_sample_draws_from_softmax_of_logits_over_temperature(hub):
    """At a fixed prefix, `sample`'s next-token frequencies match softmax(logits / T) within 5 sigma per token.

    N draws of a token of probability p give a count with std sqrt(N p (1 - p)); with V = 512 tokens,
    5 sigma keeps a false alarm below 512 * 6e-7 = 3e-4 for a correct sampler. The hub model ships
    top_k=20, top_p=0.8: a sampler that obeyed them would put all mass on <= 20 tokens.
    """
    from ppo_core.model import lm_logits
    from ppo_core.rollout import sample, tokenize_prompts

    lm, tok = hub
    with torch.no_grad():  # sharpen the random-init model so that p spans orders of magnitude
        lm.get_input_embeddings().weight.mul_(3.0)
    prefix, T, N = "Ann has 3 apples and gets", 0.8, 6000
    ids, attn = tokenize_prompts(tok, [prefix], 64, "cpu")
    with torch.no_grad():
        logits, _ = lm_logits(lm, ids, attn, keep=slice(-1, None))
    p = torch.softmax(logits[0, -1].double() / T, -1)  # (V,)
    torch.manual_seed(0)
    ro = sample(lm, tok, [prefix] * N, max_new_tokens=1, temperature=T)
    counts = torch.bincount(ro.response_ids[:, 0], minlength=p.numel()).double()
    z = (counts - N * p) / torch.sqrt(N * p * (1 - p) + 1.0)  # +1: a floor for tokens of tiny p
    assert p.max() < 0.5 and (p > 1e-3).sum() > 25, "the test distribution must be spread over many tokens"
    assert z.abs().max() < 5.0, f"token {int(z.abs().argmax())}: {float(z.abs().max()):.1f} sigma off softmax(logits/T)"


# ---- one EOS id where the model has two --------------------------------------------------------
def test_rollout_stops_at_either_eos_id(hub):
    from ppo_core.rollout import sample

    lm, tok = hub
    endoftext = tok.convert_tokens_to_ids("<|endoftext|>")
    word = tok.encode("a", add_special_tokens=False)[0]

    def force(module, inputs, out):  # rows 0-1 stop at once on <|endoftext|>; rows 2-3 write `word` to the limit
        out = out.clone()
        out[:2, :, endoftext] = 50.0
        out[2:, :, word] = 50.0
        return out

    hook = lm.lm_head.register_forward_hook(force)
    try:
        torch.manual_seed(0)
        ro = sample(lm, tok, ["Ann has 3 apples"] * 4, max_new_tokens=8, temperature=1.0)
    finally:
        hook.remove()
    assert (ro.response_ids[:2, 0] == endoftext).all() and (ro.response_ids[2:] == word).all()
    # the padding generate writes after a stop is not response: a row that stopped counts its stop token only
    assert ro.mask.sum(1).tolist() == [1, 1, 8, 8], "<|endoftext|> ends a Qwen response like <|im_end|>"
    assert ro.completions[:2] == ["", ""]


# ---- double BOS -------------------------------------------------------------------------------
def test_chat_template_that_adds_bos_gets_one_bos(tok):
    from ppo_core.rollout import tokenize_prompts
    from ppo_core.tasks.data import build_prompt

    tok = __import__("copy").deepcopy(tok)
    tok.chat_template = "{{ bos_token }}{% for m in messages %}{{ m['content'] }}\n{% endfor %}"
    prompt = build_prompt("Ann has 3 apples and gets 4 more. How many now?", tok, "chat")
    ids, _ = tokenize_prompts(tok, [prompt, "Bob?\n"], 256, "cpu")
    assert (ids == tok.bos_token_id).sum(1).tolist() == [1, 1]


# ---- evaluation and the RNG -------------------------------------------------------------------
def test_evaluation_leaves_every_rng_the_run_continues_with(tiny_model_path, monkeypatch):
    """CPU: the global generator's state is unchanged. CUDA: no CUDA generator is reseeded for a CPU model
    (``torch.manual_seed`` reseeds every GPU, which a ``fork_rng(devices=[])`` does not restore)."""
    from ppo_core.run.config import load_config
    from ppo_core.run.evaluation import accuracy
    from ppo_core.tasks.tiny import load_tiny

    lm, tok = load_tiny(tiny_model_path)
    cfg = load_config("cpu", ["rollout.max_new_tokens=4"])
    reseeded = []
    monkeypatch.setattr(torch.cuda, "manual_seed_all", lambda seed: reseeded.append(seed))
    monkeypatch.setattr(torch.cuda, "manual_seed", lambda seed: reseeded.append(seed))
    torch.manual_seed(7)
    reseeded.clear()
    state = torch.get_rng_state()
    accuracy(lm, tok, [{"question": "Ann has 3 apples and gets 4 more. How many now?", "answer": "#### 7"}] * 3, cfg)
    assert torch.equal(torch.get_rng_state(), state)
    assert reseeded == [], "evaluating a CPU model reseeded the CUDA generators a GPU run continues with"


def test_greedy_accuracy_decodes_greedily_and_sampled_accuracy_at_the_runs_temperature(tiny_model_path, monkeypatch):
    """``accuracy(greedy=True)`` is argmax decoding (no temperature, the same under any seed); without it, sampling
    at ``rollout.temperature``. The trainer logs both, and a swap would pass every run."""
    import inspect

    from ppo_core.rollout import complete
    from ppo_core.run import evaluation
    from ppo_core.run.config import derive, load_config
    from ppo_core.tasks.synthetic import make_synthetic_task
    from ppo_core.tasks.tiny import load_tiny

    lm, tok = load_tiny(tiny_model_path)
    records = make_synthetic_task(0)[1][:12]
    cfg = load_config("cpu", ["rollout.max_new_tokens=12", "rollout.temperature=0.7"])
    temperatures = []

    def recording(*args, **kwargs):
        temperatures.append(inspect.signature(complete).bind(*args, **kwargs).arguments["temperature"])
        return complete(*args, **kwargs)

    monkeypatch.setattr(evaluation, "complete", recording)
    greedy = evaluation.accuracy(lm, tok, records, cfg, greedy=True)
    evaluation.accuracy(lm, tok, records, cfg)
    assert temperatures == [None, 0.7]
    cfg = derive(cfg, {"train.seed": 5})  # another seed: greedy decoding has no randomness to change
    assert evaluation.accuracy(lm, tok, records, cfg, greedy=True) == greedy


# ---- dropout ----------------------------------------------------------------------------------
def test_disable_dropout_reaches_modules_that_copied_the_config(hub_path):
    from transformers import AutoModelForCausalLM

    from ppo_core.model import disable_dropout

    lm = AutoModelForCausalLM.from_pretrained(hub_path, attention_dropout=0.5, attn_implementation="eager")
    disable_dropout(lm).train()
    ids = torch.arange(3, 40).unsqueeze(0)
    with torch.no_grad():
        a, b = lm(ids).logits, lm(ids).logits
    assert torch.equal(a, b), "attention dropout still on in train mode after disable_dropout"


# ---- resume and evaluate_checkpoint -----------------------------------------------------------
@pytest.mark.slow
def test_resume_loads_no_second_model(tiny_model_path, tmp_path, monkeypatch):
    import transformers

    from ppo_core.run.config import load_config
    from ppo_core.run.runner import RunTrainer

    over = _tiny_overrides(tiny_model_path, tmp_path / "run", 1, "train.save_every=1", "train.check_ratio=false")
    tr = RunTrainer(load_config("cpu", over))
    tr.step()
    tr.save_checkpoint("step_1")
    saved = {k: v.clone() for k, v in tr.actor.state_dict().items()}
    tr.logger.close()
    loads = []
    real = transformers.AutoModelForCausalLM.from_pretrained.__func__

    def counting(cls, *a, **k):
        loads.append(a[0] if a else k.get("pretrained_model_name_or_path"))
        return real(cls, *a, **k)

    monkeypatch.setattr(transformers.AutoModelForCausalLM, "from_pretrained", classmethod(counting))
    tr2 = RunTrainer(load_config("cpu", over + ["train.resume=auto"]))
    tr2.logger.close()
    assert tr2.step_count == 1
    assert all(torch.equal(saved[k], v) for k, v in tr2.actor.state_dict().items())
    assert len(loads) == 1, f"resume loaded {len(loads)} full models: {loads}"


@pytest.mark.slow
def test_evaluate_checkpoint_uses_the_runs_device_and_dtype(tiny_model_path, tmp_path, monkeypatch):
    from ppo_core.run import evaluation as evaluate
    from ppo_core.run.config import load_config
    from ppo_core.run.runner import RunTrainer

    """The dtype is checked here (the checkpoint holds float32 weights, the run computes in bf16); the device
    goes through the same ``resolve_device`` as training (a machine without a GPU checks the CPU only)."""
    over = _tiny_overrides(tiny_model_path, tmp_path / "run", 1, "train.check_ratio=false", "model.device=cpu")
    tr = RunTrainer(load_config("cpu", over))
    path = tr.save_checkpoint("step_0")
    tr.logger.close()
    seen = []
    monkeypatch.setattr(evaluate, "accuracies", lambda lm, *a, **k: seen.append(next(lm.parameters())) or (0.0, 0.0))
    evaluate.evaluate_checkpoint(str(path), overrides=["model.dtype=bfloat16"])
    assert seen and all(p.dtype == torch.bfloat16 and p.device.type == "cpu" for p in seen)


# ---- item 2: bf16 updates ----------------------------------------------------------------------
@pytest.mark.slow
def test_bf16_run_moves_the_policy_weights_at_lr_1e_6(tiny_model_path, tmp_path):
    """The issue measured 1.95 % of bf16 entries changed after 10 AdamW steps at lr 1e-6, 0 % of the norms."""
    from ppo_core.run.config import load_config
    from ppo_core.run.runner import RunTrainer

    over = _tiny_overrides(tiny_model_path, tmp_path / "run", 1, "model.dtype=bfloat16", "ppo.lr=1e-6",
                           "train.check_ratio=false")  # fmt: skip
    tr = RunTrainer(load_config("cpu", over))
    before = {n: p.detach().float().clone() for n, p in tr.actor.lm.named_parameters()}
    tr.step()
    tr.logger.close()
    moved = [(before[n] != p.detach().float()).float().mean().item() for n, p in tr.actor.lm.named_parameters()]
    norms = [(before[n] != p.detach().float()).float().mean().item() for n, p in tr.actor.lm.named_parameters()
             if "norm" in n]  # fmt: skip
    assert min(moved) > 0.5 and min(norms) > 0.5, (
        f"share of entries moved: min {min(moved):.3f}, norms {min(norms):.3f}"
    )
    assert not math.isnan(sum(moved))


@pytest.mark.slow
def test_bf16_compute_moves_the_weights_like_float32(tiny_model_path, tmp_path):
    """Same start, seed and settings, two PPO steps at lr 1e-6: bf16 compute moves the policy about as far as float32.

    Relative L2 movement ||w_after - w_before|| / ||w_before|| of the LM's weights; with bf16 weights
    updated in place most of the update rounds away (ratio 0.43 at lr 1e-5 before the fix, less at 1e-6).
    The runs sample different tokens (bf16 compute rounds the logits), and bf16's rounding noise lifts
    gradients that are below AdamW's eps in float32 to full-size steps, so bf16 moves somewhat more
    (measured 1.6x here): "similar" means within a factor of 2.
    """
    from ppo_core.run.config import load_config
    from ppo_core.run.runner import RunTrainer

    moved = {}
    for dtype in ("float32", "bfloat16"):
        over = _tiny_overrides(tiny_model_path, tmp_path / dtype, 2, f"model.dtype={dtype}", "ppo.lr=1e-6",
                               "train.check_ratio=false")  # fmt: skip
        tr = RunTrainer(load_config("cpu", over))
        before = [p.detach().double().clone() for p in tr.actor.lm.parameters()]
        tr.step()
        tr.step()
        tr.logger.close()
        after = [p.detach().double() for p in tr.actor.lm.parameters()]
        num = sum(float((a - b).pow(2).sum()) for a, b in zip(after, before))
        moved[dtype] = (num / sum(float(b.pow(2).sum()) for b in before)) ** 0.5
    ratio = moved["bfloat16"] / moved["float32"]
    assert 0.5 < ratio < 2.0, f"relative weight movement: {moved} (bf16 / float32 = {ratio:.3f})"


@pytest.mark.slow
def test_bf16_resume_repeats_the_run(tiny_model_path, tmp_path):
    """Checkpoints hold the float32 master weights, so a bf16-compute run resumed from step_1 repeats steps 2-3."""
    import shutil

    from safetensors.torch import load_file

    from ppo_core.run.metrics import read_metrics
    from ppo_core.train import main

    def run(out, *extra):
        over = _tiny_overrides(tiny_model_path, out, 3, "model.dtype=bfloat16", "train.save_every=1",
                               "train.keep_last=5", "train.tensorboard=false", *extra)  # fmt: skip
        assert main(over) == 0

    ref = tmp_path / "ref"
    run(ref)
    weights = load_file(ref / "step_1" / "model.safetensors")
    assert all(w.dtype == torch.float32 for w in weights.values())
    out = shutil.copytree(ref, tmp_path / "resumed")
    with pytest.warns(UserWarning, match="moved later checkpoints"):
        run(out, f"train.resume={out / 'step_1'}")
    untimed = lambda rows: [{k: v for k, v in r.items() if not k.startswith("time/")} for r in rows]  # noqa: E731
    assert untimed(read_metrics(out)) == untimed(read_metrics(ref))
    a, b = load_file(out / "final" / "model.safetensors"), load_file(ref / "final" / "model.safetensors")
    assert all(torch.equal(a[k], b[k]) for k in a)


def test_sampling_leaves_the_models_own_generation_config_in_place(hub):
    """``sample`` swaps in its neutral config for the call only: afterwards the chat model's own config (two
    stop ids, the sampling defaults) is back, so a checkpoint saved later still carries it."""
    from ppo_core.rollout import sample

    lm, tok = hub
    own = lm.generation_config
    torch.manual_seed(0)
    sample(lm, tok, ["Ann has 3 apples"] * 2, max_new_tokens=4, temperature=1.0)
    assert lm.generation_config is own
    assert lm.generation_config.top_k == 20 and len(lm.generation_config.eos_token_id) == 2


@pytest.mark.slow  # seconds, not milliseconds: a proxy-gold curve, many samples or a shipped checkpoint
def test_build_hub_model_caches_by_every_setting_rebuilds_on_force_and_keeps_the_callers_rng(tmp_path):
    """The folder's key covers tie_word_embeddings (an untied build is another folder, not the tied one
    again); ``force=True`` builds afresh over a cached folder; the seeded init leaves the global RNG as it was."""
    from transformers import AutoConfig

    from ppo_core.tasks.hub_model import build_hub_model

    torch.manual_seed(11)
    state = torch.get_rng_state()
    tied = build_hub_model(tmp_path)
    assert torch.equal(torch.get_rng_state(), state)
    untied = build_hub_model(tmp_path, tie_word_embeddings=False)
    assert untied != tied and not AutoConfig.from_pretrained(untied).tie_word_embeddings
    (tied / "stale.txt").write_text("left by an older build")
    assert build_hub_model(tmp_path, force=True) == tied and not (tied / "stale.txt").exists()
