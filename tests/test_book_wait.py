"""tools.book.wait_for_stamps: under pytest-xdist the book test waits for the chapters another worker runs."""

import threading

from tools import book


def test_waits_until_another_worker_stamps_the_chapter(tmp_path, monkeypatch):
    monkeypatch.setattr(book, "EXECUTED", tmp_path)
    monkeypatch.setenv(book.SESSION_ENV, "this-session")
    book._write_stamp("01_a", "passed", "digest")  # run by this worker already
    monkeypatch.setenv(book.SESSION_ENV, "an-earlier-session")
    book._write_stamp("02_b", "passed", "digest")  # an old stamp must not count
    monkeypatch.setenv(book.SESSION_ENV, "this-session")
    later = threading.Timer(0.3, book._write_stamp, ("02_b", "failed", "digest", "cell 3"))
    later.start()
    assert book.wait_for_stamps(["01_a", "02_b"], "this-session", timeout=10, poll=0.05) == []
    assert book.read_stamp("02_b")["session"] == "this-session"  # it returned only once the other worker wrote
    assert book.read_stamp("02_b")["status"] == "failed"  # a failed chapter ends the wait too: the build reports it
    later.join()


def test_gives_up_after_the_timeout_and_names_what_is_missing(tmp_path, monkeypatch):
    monkeypatch.setattr(book, "EXECUTED", tmp_path)
    monkeypatch.setenv(book.SESSION_ENV, "this-session")
    book._write_stamp("01_a", "passed", "digest")
    assert book.wait_for_stamps(["01_a", "03_c"], "this-session", timeout=0.2, poll=0.05) == ["03_c"]
