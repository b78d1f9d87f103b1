"""tools/kernel_fork.py: a kernel forked from the zygote is, wherever a notebook can look, a fresh kernel.

Each test starts its own zygote and kernels through jupyter_client, as nbval does, and compares what a cell sees
in a forked kernel with what it sees in a plain ``python -m ipykernel_launcher``.
"""

import json
import os
import signal
import subprocess
import sys
import time

import pytest

from tools import kernel_fork

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(sys.platform != "linux", reason="the zygote forks: Linux only"),
]

LOADED = r"""
import json, os, sys
print(json.dumps(dict(loaded=sorted(m for m in ("torch", "transformers", "matplotlib", "ppo_core") if m in sys.modules),
                      ppid=os.getppid(), env=dict(os.environ))))
"""

PROBE = r"""
import json, os, random, signal, sys
loaded = sorted(m for m in ("torch", "transformers", "matplotlib", "ppo_core") if m in sys.modules)
import matplotlib, numpy, torch
from transformers import AutoModelForCausalLM, GPT2LMHeadModel  # as a chapter's first cell: the same modules loaded
print(json.dumps(dict(
    loaded=loaded, pid=os.getpid(), ppid=os.getppid(), cwd=os.getcwd(), path=sys.path, argv=sys.argv[:2],
    env={k: v for k, v in os.environ.items() if not k.startswith(("JPY_", "PYTEST_"))},
    backend=matplotlib.get_backend(), threads=torch.get_num_threads(), interop=torch.get_num_interop_threads(),
    torch_seed=torch.initial_seed(), torch_draw=torch.rand(3).tolist(), grad=torch.is_grad_enabled(),
    dtype=str(torch.get_default_dtype()), session_leader=os.getsid(0) == os.getpid(),
    sigint=signal.getsignal(signal.SIGINT) is not signal.default_int_handler,
    py_random=random.random(), np_random=float(numpy.random.rand()),
)))
"""


ENV = {**os.environ, "OMP_NUM_THREADS": "1"}
"""One thread per process, as under pytest-xdist with a worker per core: torch then starts no thread pool when
imported, and the zygote can fork (with a pool it refuses, and every launch gets a plain kernel)."""


@pytest.fixture(scope="module")
def zygote(tmp_path_factory):
    path = str(tmp_path_factory.mktemp("zygote") / "zygote.sock")
    process = subprocess.Popen([sys.executable, kernel_fork.__file__, "serve", path], env=ENV)
    for _ in range(500):
        if os.path.exists(path):
            break
        time.sleep(0.01)
    yield {"path": path, "pid": process.pid}
    process.kill()
    process.wait()


class Kernel:
    """A kernel started by jupyter_client from ``argv``, in ``cwd``, with ``env``."""

    def __init__(self, argv, cwd, env):
        import ipykernel.kernelspec
        from jupyter_client.kernelspec import KernelSpec, KernelSpecManager
        from jupyter_client.manager import KernelManager

        class Spec(KernelSpecManager):
            def get_kernel_spec(self, kernel_name):
                return KernelSpec(resource_dir=ipykernel.kernelspec.RESOURCES, language="python", argv=argv)

        self.km = KernelManager(kernel_name="python3", kernel_spec_manager=Spec())
        self.km.start_kernel(cwd=str(cwd), env=env)
        self.kc = self.km.client()
        self.kc.start_channels()
        self.kc.wait_for_ready(timeout=60)

    def run(self, code, timeout=60):
        """(reply status, stdout, error name) of one cell."""
        out = []
        reply = self.kc.execute_interactive(
            code,
            timeout=timeout,
            output_hook=lambda msg: out.append(msg["content"].get("text", "")) if msg["msg_type"] == "stream" else None,
        )
        return reply["content"]["status"], "".join(out), reply["content"].get("ename")

    def probe(self, code=PROBE):
        status, out, error = self.run(code)
        assert status == "ok", error
        return json.loads(out)

    def close(self):
        self.kc.stop_channels()
        if self.km.is_alive():
            self.km.shutdown_kernel(now=True)


def forked(zygote, cwd, **extra_env):
    return Kernel(kernel_fork.kernel_argv(), cwd, {**ENV, kernel_fork.ENV: zygote["path"], **extra_env})


def test_a_forked_kernel_sees_what_a_fresh_kernel_sees(zygote, tmp_path):
    plain = Kernel([sys.executable, "-m", "ipykernel_launcher", "-f", "{connection_file}"], tmp_path, dict(ENV))
    fresh = plain.probe()
    plain.close()
    one, two = forked(zygote, tmp_path, PPO_NOTEBOOK_SMOKE="1"), forked(zygote, tmp_path)
    try:
        a, b = one.probe(), two.probe()
    finally:
        one.close()
        two.close()
    assert fresh["loaded"] == [] and a["loaded"] == ["matplotlib", "torch", "transformers"]  # ppo_core: not preloaded
    assert a["ppid"] == zygote["pid"] and a["pid"] != b["pid"]
    assert a["env"].pop("PPO_NOTEBOOK_SMOKE") == "1"  # the launch's own environment
    for run in (fresh, a, b):
        run["env"].pop(kernel_fork.ENV, None)
    same = ("cwd", "path", "argv", "env", "backend", "threads", "interop", "grad", "dtype", "session_leader", "sigint")
    assert {k: a[k] for k in same} == {k: fresh[k] for k in same}, {
        k: (a[k], fresh[k]) for k in same if a[k] != fresh[k] and k != "env"
    } or {k: (a["env"].get(k), fresh["env"].get(k)) for k in a["env"].keys() | fresh["env"].keys()
          if a["env"].get(k) != fresh["env"].get(k)}  # fmt: skip
    assert a["argv"][0].endswith("ipykernel_launcher.py")
    for seed in ("py_random", "np_random", "torch_seed", "torch_draw"):  # seeded afresh, as in every new process
        assert a[seed] != b[seed] and a[seed] != fresh[seed], seed


def test_interrupt_exit_status_and_a_killed_launcher(zygote, tmp_path):
    kernel = forked(zygote, tmp_path)
    try:
        sent = kernel.kc.execute("import time; time.sleep(60)")
        time.sleep(0.5)
        start = time.perf_counter()
        kernel.km.interrupt_kernel()
        reply = kernel.kc.get_shell_msg(timeout=20)
        while reply["parent_header"].get("msg_id") != sent:  # the kernel_info reply of wait_for_ready comes first
            reply = kernel.kc.get_shell_msg(timeout=20)
        assert reply["content"].get("ename") == "KeyboardInterrupt", reply["content"]
        assert time.perf_counter() - start < 10
        for _ in range(20):  # and it goes on (ipykernel aborts what reaches it while it still unwinds the error)
            after = kernel.run("print(1 + 1)")
            if after[0] != "aborted":
                break
            time.sleep(0.5)
        assert after[:2] == ("ok", "2\n")

        pid = json.loads(kernel.run("import json, os; print(json.dumps(os.getpid()))")[1])
        kernel.kc.execute("os._exit(3)")
        for _ in range(100):
            if not kernel.km.is_alive():
                break
            time.sleep(0.1)
        assert not kernel.km.is_alive() and kernel.km.provisioner.process.returncode == 3
        assert not _alive(pid)
    finally:
        kernel.close()

    kernel = forked(zygote, tmp_path)
    pid = json.loads(kernel.run("import json, os; print(json.dumps(os.getpid()))")[1])
    kernel.km.provisioner.process.send_signal(signal.SIGKILL)  # the launcher dies; the zygote kills its kernel
    kernel.km.provisioner.process.wait()
    for _ in range(100):
        if not _alive(pid):
            break
        time.sleep(0.1)
    assert not _alive(pid)
    kernel.close()


def test_a_launch_the_zygote_cannot_serve_gets_a_plain_kernel(zygote, tmp_path):
    """A variable an import may read (here a new one) differs from the zygote's: a plain kernel starts instead."""
    kernel = forked(zygote, tmp_path, HF_HUB_OFFLINE="0", SOME_SETTING="1")
    try:
        run = kernel.probe(LOADED)
    finally:
        kernel.close()
    assert run["loaded"] == [] and run["ppid"] != zygote["pid"] and run["env"]["SOME_SETTING"] == "1"

    def refusal(**env):
        return kernel_fork.refusal({"python": sys.executable, "env": {**ENV, **env}}, ENV)

    assert refusal(SOME_SETTING="1") == "the environment differs in SOME_SETTING"
    assert refusal(JPY_PARENT_PID="7", PPO_NOTEBOOK_SMOKE="1") is None  # read after the imports
    assert refusal(MPLBACKEND=kernel_fork.INLINE_BACKEND) is None  # what ipykernel sets anyway
    assert refusal(MPLBACKEND="Agg") == "the environment differs in MPLBACKEND"


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split(")")[-1].split()[0] != "Z"
    except FileNotFoundError:
        return False
