"""book/big_trainers.md is generated from ppo_core.export's table (tools/big_trainers.py) and kept current."""

from pathlib import Path

from tools import big_trainers

PAGE = Path(__file__).parent.parent / "book" / "big_trainers.md"


def test_the_page_is_the_generator_output():
    assert big_trainers.main(["check"]) == 0, "run python -m tools.big_trainers"


def test_the_check_rejects_a_stale_page(monkeypatch, tmp_path, capsys):
    stale = tmp_path / "big_trainers.md"
    stale.write_text(PAGE.read_text().replace("`actor_rollout_ref.actor.clip_ratio`", "`actor.clip_ratio`"))
    monkeypatch.setattr(big_trainers, "PAGE", stale)
    monkeypatch.setattr(big_trainers, "ROOT", tmp_path)
    assert big_trainers.main(["check"]) == 1
    assert "out of date: run python -m tools.big_trainers" in capsys.readouterr().err


def test_every_key_of_the_table_is_on_the_page():
    from ppo_core.export.table import ROWS

    text = PAGE.read_text()
    assert all(f"\n- `{row.key}` = `" in text for row in ROWS)


def test_the_map_is_in_the_book_and_linked_from_next():
    toc = (PAGE.parent.parent / "_toc.yml").read_text()
    assert toc.index("book/next") < toc.index("book/big_trainers")
    assert "big_trainers.md" in (PAGE.parent / "next.md").read_text()
