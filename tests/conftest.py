"""Shared fixtures: a tiny, untrained model folder (no warm start, no hub) for fast end-to-end tests."""

import pytest
import torch


@pytest.fixture(scope="session")
def tiny_model_path(tmp_path_factory):
    """A ~0.1 M-parameter Llama with the synthetic task's character tokenizer, saved like a hub model."""
    from ppo_core.synthetic import SYNTHETIC_ALPHABET
    from ppo_core.tiny import build_char_tokenizer, build_tiny_model, save_tiny

    torch.manual_seed(0)
    tok = build_char_tokenizer(SYNTHETIC_ALPHABET)
    model = build_tiny_model(tok, "llama", hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=2)
    return str(save_tiny(model, tok, tmp_path_factory.mktemp("tiny") / "model"))


@pytest.fixture
def tiny_overrides():
    """``tiny_overrides(model_path, out_dir, steps, *extra)``: overrides for a seconds-long CLI run."""
    return _tiny_overrides


def _tiny_overrides(model_path: str, out_dir, steps: int = 2, *extra: str) -> list[str]:
    return [
        f"model.name_or_path={model_path}", f"train.output_dir={out_dir}", f"train.steps={steps}",
        "rollout.batch_size=8", "ppo.minibatch_size=4", "rollout.max_new_tokens=8",
        "data.n_train=64", "data.n_test=16", "train.eval_samples=8", "train.progress=false", *extra,
    ]


@pytest.fixture(scope="module")
def one_thread():
    """Tiny matrices gain nothing from a second thread, and two threads crawl on a busy machine."""
    n = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(n)


@pytest.fixture(scope="module")
def tok():
    """The synthetic task's character tokenizer."""
    from ppo_core.synthetic import SYNTHETIC_ALPHABET
    from ppo_core.tiny import build_char_tokenizer

    return build_char_tokenizer(SYNTHETIC_ALPHABET)
