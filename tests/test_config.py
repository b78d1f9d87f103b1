import pytest
from omegaconf import OmegaConf
from omegaconf.errors import ReadonlyConfigError

from ppo_core.run.config import Config, ConfigError, derive, load_config


def test_presets_parse():
    cpu, cuda = load_config("cpu"), load_config("cuda")
    assert OmegaConf.get_type(cpu) is Config and cpu.model.name_or_path == "tiny" and cpu.model.device == "cpu"
    assert cuda.model.dtype == "bfloat16" and cuda.ppo.optimizer == "adamw8bit" and cuda.ppo.grad_accum_steps > 1
    assert cuda.data.task == "gsm8k"


def test_dotted_overrides_are_typed():
    cfg = load_config("cpu", ["ppo.lr=3e-4", "train.steps=7", "ppo.adaptive_kl=true", "data.task=gsm8k"])
    assert cfg.ppo.lr == 3e-4 and cfg.train.steps == 7 and cfg.ppo.adaptive_kl is True and cfg.data.task == "gsm8k"


def test_yaml_file(tmp_path):
    path = tmp_path / "run.yaml"
    path.write_text("ppo:\n  clip_eps: 0.1\ntrain:\n  steps: 3\n")
    cfg = load_config(str(path))
    assert cfg.ppo.clip_eps == 0.1 and cfg.train.steps == 3 and cfg.model.name_or_path == "tiny"


@pytest.mark.parametrize(
    "override, message",
    [
        ("ppo.clip_epz=0.1", "did you mean 'ppo.clip_eps'"),
        ("rollout.temprature=1", "did you mean 'rollout.temperature'"),
        ("ppo.lr=fast", "ppo.lr"),
        ("ppo.clip_eps=-0.2", "clip_eps must be > 0"),
        ("ppo.lam=1.5", "lam must be in [0, 1]"),
        ("ppo.gamma=0", "gamma must be in (0, 1]"),
        ("rollout.temperature=0", "temperature must be > 0"),
        ("ppo.lr=0", "lr must be > 0"),
        ("ppo.minibatch_size=48", "multiple of ppo.minibatch_size"),
        ("ppo.grad_accum_steps=5", "multiple of ppo.grad_accum_steps"),
        ("ppo.kl_estimator=k4", "k1, k2 or k3"),
        ("noequals", "key=value"),
        ("lr=1e-4", "did you mean 'warmstart.lr' or 'ppo.lr'"),  # a key without its section
        ("train.clip_eps=0.1", "did you mean 'ppo.clip_eps'"),  # the wrong section
        ("ppo.learning_rate=1e-4", "did you mean 'ppo.lr'"),  # another code base's name
        ("trian.steps=3", "unknown config key 'trian.steps'"),  # a misspelt section: the whole key is named
        ("trian.steps=3", "did you mean 'train.steps'"),
        ("model.nam=x", "did you mean 'model.name_or_path'"),
        ("ppo=3", "bad value for 'ppo'"),
        ("data.max_prompt_len=0", "data.max_prompt_len must be >= 1"),
        ("train.eval_samples=0", "train.eval_samples must be >= 1"),
        ("ppo.max_grad_norm=-1", "ppo.max_grad_norm must be >= 0"),
        ("train.max_skipped_steps=-1", "train.max_skipped_steps must be >= 0"),
        ("train.keep_last=0", "train.keep_last must be >= 1"),  # 0 would prune nothing (steps[:-0])
    ],
)
def test_bad_config_is_one_clear_line(override, message):
    with pytest.raises(ConfigError) as err:
        load_config("cpu", [override])
    assert message in str(err.value) and "\n" not in str(err.value)


def test_unknown_preset():
    with pytest.raises(ConfigError, match="no preset or file"):
        load_config("nope")


def test_unknown_key_in_a_yaml_file_names_the_file(tmp_path):
    path = tmp_path / "run.yaml"
    path.write_text("ppo:\n  clip_epz: 0.1\n")
    with pytest.raises(ConfigError) as err:
        load_config(str(path))
    assert str(path) in str(err.value) and "did you mean 'ppo.clip_eps'" in str(err.value)


def test_the_config_is_read_only_after_validation():
    """What was checked is what runs: assignment raises; a derived value makes a new config, the old one unchanged."""
    cfg = load_config("cpu")
    for key, value in (("ppo.lr", 1.0), ("train.output_dir", "elsewhere"), ("data.max_prompt_len", 10)):
        section, name = key.split(".")
        with pytest.raises(ReadonlyConfigError):
            setattr(getattr(cfg, section), name, value)
    with pytest.raises(ReadonlyConfigError):
        cfg.train = cfg.train
    derived = derive(cfg, {"data.max_prompt_len": 10})
    assert derived.data.max_prompt_len == 10 and cfg.data.max_prompt_len == 200
    assert OmegaConf.get_type(derived) is Config and OmegaConf.is_readonly(derived)
    with pytest.raises(ReadonlyConfigError):
        derived.data.max_prompt_len = 11
