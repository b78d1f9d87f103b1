"""Shared fixtures: a tiny, untrained model folder (no warm start, no hub) for fast end-to-end tests."""

import pytest
import torch
from ppo_test_support import _tiny_overrides


@pytest.fixture(scope="session")
def tiny_model_path(tmp_path_factory):
    """A ~0.1 M-parameter Llama with the synthetic task's character tokenizer, saved like a hub model."""
    from ppo_core.tasks.synthetic import SYNTHETIC_ALPHABET
    from ppo_core.tasks.tiny import build_char_tokenizer, build_tiny_model, save_tiny

    torch.manual_seed(0)
    tok = build_char_tokenizer(SYNTHETIC_ALPHABET)
    model = build_tiny_model(
        tok, "llama", hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=2
    )
    return str(save_tiny(model, tok, tmp_path_factory.mktemp("tiny") / "model"))


@pytest.fixture
def tiny_overrides():
    """``tiny_overrides(model_path, out_dir, steps, *extra)``: overrides for a seconds-long CLI run."""
    return _tiny_overrides


@pytest.fixture(scope="module")
def restore_threads():
    """Put torch's thread count back after a module whose in-process runs set ``train.num_threads``."""
    n = torch.get_num_threads()
    yield
    torch.set_num_threads(n)


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
    from ppo_core.tasks.synthetic import SYNTHETIC_ALPHABET
    from ppo_core.tasks.tiny import build_char_tokenizer

    return build_char_tokenizer(SYNTHETIC_ALPHABET)


def pytest_collection_modifyitems(config, items):
    """Tests marked ``cuda`` need a CUDA GPU: without one they are skipped, saying so (``pytest -m cuda`` on a GPU)."""
    if torch.cuda.is_available():
        return
    skip = pytest.mark.skip(reason="needs a CUDA GPU (pytest -m cuda runs these on a machine with one)")
    for item in items:
        if "cuda" in item.keywords:
            item.add_marker(skip)
