"""Checkers for the exercises: call ``check_xxx(your_function)``; it prints a pass or names the mistake.

``progress()`` lists which exercises pass, chapter by chapter (every checker records its last result).

One checker, two callers: learners call these on their own functions in the chapters, and the unit
tests call them on the package's functions (and on typical wrong implementations, which they must reject).
"""

from ._common import RESULTS, CheckFailure, NotImplementedYet  # noqa: F401
from ._progress import progress, progress_path, reset_progress  # noqa: F401
from .ch01_logprobs import *  # noqa: F401,F403
from .ch02_masking import *  # noqa: F401,F403
from .ch03_gae import *  # noqa: F401,F403
from .ch04_losses import *  # noqa: F401,F403
from .ch05_loop import *  # noqa: F401,F403
from .ch06_reward import *  # noqa: F401,F403
from .ch07_algos import *  # noqa: F401,F403
from .ch08_objectives import *  # noqa: F401,F403
from .ch09_mismatch import *  # noqa: F401,F403
from .ch10_real_llm import *  # noqa: F401,F403
