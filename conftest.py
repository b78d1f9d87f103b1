"""Test-wide settings: offline, quiet, headless. Applies to unit tests and to the notebook kernels nbval starts."""

import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")  # no hub access anywhere in the suite
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
os.environ.setdefault("PYDEVD_DISABLE_FILE_VALIDATION", "1")
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")  # see ppo_core/train.py

import matplotlib  # noqa: E402

matplotlib.use("Agg")  # this process only; notebook kernels keep their inline backend
