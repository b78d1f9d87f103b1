"""The machinery every checker shares: run the learner's function, compare, name the mistake.

A checker is a function decorated with ``@checker``. Inside it, call the learner's function with
``call(fn, ...)`` and compare results with ``expect_close(got, want, what=..., mistakes=...)``, where
``mistakes`` maps a description of a typical mistake ("forgot the mask") to the output that mistake
would produce on the same inputs. When the learner's output matches one of them, the failure message
names that mistake.

Failures raise ``CheckFailure`` (an AssertionError, so pytest and nbval fail on it); an untouched
exercise stub raises ``NotImplementedYet``. In Jupyter both print one friendly message instead of a
traceback (IPython calls ``_render_traceback_``).
"""

import functools
import re
import textwrap

import torch

from ._progress import counts, exercise_label, record
from .catalog import exercise_for_checker

__all__ = ["CheckFailure", "NotImplementedYet", "checker", "call", "expect_close", "RESULTS"]

# name of checker -> "passed" | "failed" | "not implemented", for a progress summary.
RESULTS: dict[str, str] = {}


class CheckFailure(AssertionError):
    """The learner's function gave a wrong answer; the message names the likely mistake."""

    def _render_traceback_(self):
        return [f"\N{CROSS MARK} {self}"]

    def wrapped(self, width: int = 76) -> str:
        """The message with each line wrapped to ``width`` characters, continuations under the line's label
        ("  expected: ..."), for a page whose printed outputs must fit its column."""
        lines = []
        for line in str(self).splitlines():
            indent = len(re.match(r"(\s+\w+:\s+)?", line).group(0)) or 2
            lines.append(textwrap.fill(line, width, subsequent_indent=" " * indent, break_on_hyphens=False))
        return "\n".join(lines)


class NotImplementedYet(Exception):
    """The learner's function still raises NotImplementedError."""

    def _render_traceback_(self):
        return [f"\N{HOURGLASS} {self}"]


def checker(check_fn):
    """Wrap a checker: friendly messages on pass / not implemented. Every outcome goes to RESULTS;
    outcomes for the exercise's own function also go to the progress that ``checks.progress()`` shows."""

    @functools.wraps(check_fn)
    def wrapper(learner_fn, *args, verbose: bool = True, **kwargs):
        name = check_fn.__name__
        label = exercise_label(name)

        def note(status: str, detail: str = "") -> None:
            RESULTS[name] = status
            if counts(name, learner_fn):  # the exercise's own function, not a solution or a demo
                record(name, status, detail)

        try:
            check_fn(learner_fn, *args, **kwargs)
        except NotImplementedYet as e:
            note("not implemented")
            raise NotImplementedYet(f"{label}: {e}" if label else str(e)) from None
        except CheckFailure as e:
            note("failed", str(e))
            raise CheckFailure(f"{name}: {e}") from None
        except Exception as e:  # the learner's function crashed: keep the traceback, note the failure
            note("failed", f"raised {type(e).__name__}: {e}")
            raise
        note("passed")
        if verbose:
            ex = exercise_for_checker(name)
            print(f"\N{WHITE HEAVY CHECK MARK} {name} passed" + (f" (exercise {ex.id})" if ex else ""))
        return True

    return wrapper


def call(fn, *args, **kwargs):
    """Call the learner's function; turn NotImplementedError into a friendly NotImplementedYet."""
    name = getattr(fn, "__name__", repr(fn))
    try:
        return fn(*args, **kwargs)
    except NotImplementedError:
        raise NotImplementedYet(
            f"{name} is not implemented yet: fill in the exercise cell (replace the `raise NotImplementedError`), "
            "run it, then run this check again."
        ) from None


def _fmt(x) -> str:
    if isinstance(x, torch.Tensor):
        x = x.detach().cpu()
        if x.numel() > 24:
            first = x.flatten()[:6].to(torch.float64).numpy().round(4).tolist()
            return f"tensor of shape {tuple(x.shape)} (first entries {first})"
        return str(x.to(torch.float64).numpy().round(4).tolist())
    return repr(x)


def _close(a, b, atol: float, rtol: float) -> bool:
    if not isinstance(a, torch.Tensor):
        try:
            a = torch.as_tensor(a, dtype=torch.float64)
        except (TypeError, ValueError, RuntimeError):
            return False
    b = torch.as_tensor(b)
    if a.shape != b.shape:
        return False
    return torch.allclose(
        a.detach().to(torch.float64).cpu(), b.detach().to(torch.float64).cpu(), atol=atol, rtol=rtol, equal_nan=False
    )


def expect_close(
    got, want, *, what: str, mistakes: dict | None = None, case: str = "", atol: float = 1e-5, rtol: float = 1e-4
):
    """Raise CheckFailure unless ``got`` matches ``want``; name the matching mistake if there is one.

    Args:
        got: the learner's output (tensor or number).
        want: the correct output.
        what: a short name for the quantity ("advantages", "loss").
        mistakes: {"description of a typical mistake": the output that mistake produces}.
        case: a description of the inputs, shown with the expected and actual values.
    """
    if isinstance(got, torch.Tensor) and isinstance(want, torch.Tensor) and got.shape != want.shape:
        raise CheckFailure(
            f"{what} has shape {tuple(got.shape)}, expected {tuple(want.shape)}." + (f" Case: {case}" if case else "")
        )
    if isinstance(got, torch.Tensor) and not torch.isfinite(got).all() and torch.isfinite(torch.as_tensor(want)).all():
        raise CheckFailure(
            f"{what} contains NaN or inf where the right answer is finite: is the computation numerically "
            f"stable? Case: {case}\n  expected: {_fmt(want)}\n  got:      {_fmt(got)}"
        )
    if _close(got, want, atol, rtol):
        return
    diagnosis = next((desc for desc, wrong in (mistakes or {}).items() if _close(got, wrong, atol, rtol)), None)
    lines = [f"{what} is wrong." + (f" It matches what you get if you {diagnosis}." if diagnosis else "")]
    if case:
        lines.append(f"  case:     {case}")
    lines += [f"  expected: {_fmt(want)}", f"  got:      {_fmt(got)}"]
    raise CheckFailure("\n".join(lines))
