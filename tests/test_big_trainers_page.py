"""book/big_trainers.md maps every ppo_core config key: a key added to run/config.py must appear there."""

from dataclasses import fields, is_dataclass
from pathlib import Path

from ppo_core.run.config import Config

PAGE = Path(__file__).parent.parent / "book" / "big_trainers.md"


def _keys(obj, prefix=""):
    for f in fields(obj):
        value = getattr(obj, f.name)
        yield from _keys(value, f"{prefix}{f.name}.") if is_dataclass(value) else [prefix + f.name]


def test_every_config_key_is_on_the_map():
    text = PAGE.read_text()
    missing = [k for k in _keys(Config()) if f"`{k}`" not in text]
    assert not missing, f"book/big_trainers.md does not map {missing}: add a row for each"


def test_the_map_is_in_the_book_and_linked_from_next():
    toc = (PAGE.parent.parent / "_toc.yml").read_text()
    assert toc.index("book/next") < toc.index("book/big_trainers")
    assert "big_trainers.md" in (PAGE.parent / "next.md").read_text()
