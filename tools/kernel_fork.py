"""The suite's notebook kernels, forked from a process that has already imported torch and transformers.

Every notebook the suite runs (the chapters under nbval, the learner copies) starts a fresh Jupyter kernel, and its
first code cell imports torch, transformers and matplotlib: about 4 s of one core per notebook, for 20 notebooks.
Here one *zygote* process per pytest worker does those imports once and forks a kernel for each launch. The
notebook still runs in a process of its own, with its own namespace, working directory, environment and random
seeds, as in a freshly started kernel; only the imported modules are already there, unused.

One file, two roles:

- ``python tools/kernel_fork.py serve SOCKET``, the zygote. It listens on the Unix socket first and imports
  afterwards (a launch that comes meanwhile waits in the backlog), then forks one child per request. The child
  takes the launcher's stdin/stdout/stderr, working directory and environment, starts a session of its own (as
  jupyter_client starts a kernel) and runs ``ipykernel`` as ``python -m ipykernel_launcher`` does. The zygote
  relays each child's exit status, kills a child whose launcher is gone (its children die with it), and exits when
  the pytest worker that started it does.
- ``python tools/kernel_fork.py -f CONNECTION_FILE``, the kernel command (``kernel_argv``) that Jupyter's kernel
  manager runs. It asks the zygote for a kernel, forwards SIGINT, SIGTERM, SIGHUP and SIGQUIT to it, and exits
  with its status. It becomes a plain ``python -m ipykernel_launcher`` instead whenever the zygote cannot give
  what a fresh kernel would get: no zygote, another interpreter, or an environment that differs from the zygote's
  in a variable that an import may already have read (``READ_LATER`` lists those that nothing imports early).

``install()`` (the root conftest.py) makes the kernels that nbval and the learner-copy harness start use this
command, on Linux with one thread per process (the suite's default); ``PPO_KERNEL_FORK=0`` turns it off.
``tests/test_kernel_fork.py`` checks that a forked kernel matches a fresh one wherever a notebook could tell them
apart.
"""

import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time

ENV = "PPO_KERNEL_ZYGOTE"
"""The zygote's socket path, set in the pytest worker's environment (and so in its kernels') by ``install``."""

READ_LATER = (ENV, "JPY_", "PPO_NOTEBOOK_", "PYTEST_", "COLUMNS", "LINES")
"""Variables (prefixes) in which a launch's environment may differ from the zygote's: none of the modules the
zygote imports reads them at import time (jupyter_client's ``JPY_*`` are read by ipykernel, which the zygote does
not import; the notebooks' switches; pytest's per-test variables; the terminal's size)."""

INLINE_BACKEND = "module://matplotlib_inline.backend_inline"
"""The backend ``ipykernel`` puts in ``MPLBACKEND`` at kernel start when none is set; matplotlib reads it at import."""

PRELOAD = ("AutoModelForCausalLM", "AutoTokenizer", "GPT2LMHeadModel", "LlamaForCausalLM")
"""transformers imports lazily: these names load the modules the chapters use."""


def kernel_argv() -> list[str]:
    """The kernel command for a kernel spec: this file as the launcher, with Jupyter's connection-file field."""
    return [sys.executable, os.path.abspath(__file__), "-f", "{connection_file}"]


# ---- the launcher -------------------------------------------------------------------------------------------


def _fresh_kernel(argv: list[str], why: str):
    """Become a plain kernel, as the default kernel spec starts one."""
    print(f"[kernel_fork] a fresh kernel: {why}", file=sys.stderr, flush=True)
    os.execv(sys.executable, [sys.executable, "-m", "ipykernel_launcher", *argv])


def _recv_line(conn) -> bytes:
    data = b""
    while not data.endswith(b"\n"):
        chunk = conn.recv(4096)
        if not chunk:
            break
        data += chunk
    return data


def launch(argv: list[str]) -> None:
    path = os.environ.get(ENV)
    if not path:
        _fresh_kernel(argv, f"no {ENV} in the environment")
    conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        conn.connect(path)
        request = {"argv": argv, "cwd": os.getcwd(), "env": dict(os.environ), "python": sys.executable}
        socket.send_fds(conn, [json.dumps(request).encode() + b"\n"], [0, 1, 2])
        reply = _recv_line(conn)  # b"PID\n", or b"no: why\n" when the zygote cannot serve this launch
    except OSError as err:
        reply = f"no zygote at {path} ({err})".encode()
    if not reply[:1].isdigit():
        conn.close()
        _fresh_kernel(argv, reply.decode(errors="replace").strip())
    pid = int(reply)

    def forward(signum, _frame):
        try:
            os.kill(pid, signum)
        except ProcessLookupError:
            pass

    for signum in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGQUIT):
        signal.signal(signum, forward)
    status = _recv_line(conn).strip()  # the kernel's wait status once it exited; nothing if the zygote died
    sys.exit(os.waitstatus_to_exitcode(int(status)) if status else 1)


# ---- the zygote ---------------------------------------------------------------------------------------------


def _effective(env: dict) -> dict:
    """The variables an import could read: all but ``READ_LATER``, with ipykernel's ``MPLBACKEND`` default."""
    return {"MPLBACKEND": INLINE_BACKEND} | {k: v for k, v in env.items() if not k.startswith(READ_LATER)}


def refusal(request: dict, own: dict) -> str | None:
    """Why the zygote cannot give this launch what a fresh kernel would get, or None. ``own``: the zygote's
    environment before its imports."""
    if request["python"] != sys.executable:
        return f"another interpreter ({request['python']})"
    theirs, ours = _effective(request["env"]), _effective(own)
    differ = sorted(k for k in theirs.keys() | ours.keys() if theirs.get(k) != ours.get(k))
    return f"the environment differs in {', '.join(differ[:5])}" if differ else None


def _die_with_parent() -> None:
    """Linux: SIGKILL this process when its parent (the zygote) exits."""
    import ctypes

    PR_SET_PDEATHSIG = 1
    ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGKILL)


def _become_kernel(request: dict, fds: list[int], added: dict) -> None:
    """In the forked child: take the launcher's streams, folder and environment, then run ipykernel. ``added``: the
    variables the zygote's imports set in its environment (torch sets some), as they would in a fresh kernel."""
    import importlib.util
    import random

    import numpy
    import torch

    _die_with_parent()
    for target, fd in enumerate(fds):
        os.dup2(fd, target)
        os.close(fd)
    os.setsid()
    for signum in (signal.SIGTERM, signal.SIGHUP, signal.SIGQUIT, signal.SIGCHLD):
        signal.signal(signum, signal.SIG_DFL)
    signal.signal(signal.SIGINT, signal.default_int_handler)
    os.chdir(request["cwd"])
    os.environ.clear()
    os.environ.update(request["env"])
    for name, value in added.items():
        os.environ.setdefault(name, value)
    del sys.path[0]  # this file's folder; `python -m ipykernel_launcher` starts with '', which the launcher drops
    sys.argv = [importlib.util.find_spec("ipykernel_launcher").origin, *request["argv"]]
    random.seed()  # a fresh process seeds these from the OS
    numpy.random.seed()
    torch.seed()  # as torch's import does
    code = 1
    try:
        from ipykernel import kernelapp

        kernelapp.launch_new_instance()
        code = 0
    except SystemExit as exit:
        code = exit.code if isinstance(exit.code, int) else (0 if exit.code is None else 1)
    except BaseException:
        import traceback

        traceback.print_exc()
    finally:
        import atexit

        atexit._run_exitfuncs()
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except Exception:
                pass
        os._exit(code)


def _accept(listener, own: dict, cuda: bool) -> tuple:
    """One launch: (connection, request, fds, why not) from the launcher's message and its three streams."""
    conn, _ = listener.accept()
    msg, fds, _, _ = socket.recv_fds(conn, 1 << 20, 3)
    while msg and not msg.endswith(b"\n"):
        more = conn.recv(1 << 20)
        if not more:
            break
        msg += more
    try:
        request = json.loads(msg)
    except ValueError:
        return conn, None, fds, "an unreadable request"
    if len(fds) != 3:
        return conn, request, fds, "the launcher's streams did not arrive"
    if cuda:
        return conn, request, fds, "a CUDA or ROCm build of torch (a forked process cannot use the GPU)"
    if len(os.listdir("/proc/self/task")) != 1:
        return conn, request, fds, "the zygote runs threads (fork would copy one of them only)"
    return conn, request, fds, refusal(request, own)


def serve(path: str) -> None:
    import selectors

    parent = os.getppid()
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C reaches the worker, whose exit ends this loop
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(path)
    listener.listen(16)
    own = dict(os.environ)
    os.environ.setdefault("MPLBACKEND", INLINE_BACKEND)
    import matplotlib.pyplot  # noqa: F401
    import numpy  # noqa: F401
    import torch
    import transformers

    for name in PRELOAD:
        getattr(transformers, name)
    added = {name: value for name, value in os.environ.items() if name not in own}
    cuda = torch.version.cuda is not None or torch.version.hip is not None

    children: dict[int, socket.socket] = {}  # kernel pid -> its launcher's connection
    selector = selectors.DefaultSelector()
    selector.register(listener, selectors.EVENT_READ)
    while os.getppid() == parent:
        for key, _ in selector.select(timeout=0.2):
            if key.fileobj is listener:
                conn, request, fds, why = _accept(listener, own, cuda)
                if why is not None:
                    conn.sendall(f"no: {why}\n".encode())
                    conn.close()
                    for fd in fds:
                        os.close(fd)
                    continue
                sys.stdout.flush()  # nothing buffered here is written twice
                sys.stderr.flush()
                pid = os.fork()
                if pid == 0:
                    selector.close()
                    listener.close()
                    for other in [conn, *children.values()]:
                        other.close()
                    _become_kernel(request, fds, added)
                for fd in fds:
                    os.close(fd)
                conn.sendall(f"{pid}\n".encode())
                children[pid] = conn
                selector.register(conn, selectors.EVENT_READ, pid)
            else:  # a launcher's connection closed: the launcher is gone, so goes its kernel
                selector.unregister(key.fileobj)
                key.fileobj.close()
                if children.pop(key.data, None) is not None:
                    _kill(key.data)
        while children:  # reap the kernels that exited, and tell their launchers
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                break
            if pid == 0:
                break
            conn = children.pop(pid, None)
            if conn is not None:
                selector.unregister(conn)
                try:
                    conn.sendall(f"{status}\n".encode())
                except OSError:
                    pass
                conn.close()
    for pid in children:
        _kill(pid)


def _kill(pid: int) -> None:
    try:
        os.kill(pid, signal.SIGKILL)
    except ProcessLookupError:
        pass


# ---- the pytest side ----------------------------------------------------------------------------------------

_zygote: dict = {}


def install() -> bool:
    """Make the current-environment kernel spec (nbval's ``--nbval-current-env``, the learner-copy harness) start
    kernels through ``kernel_argv``; the zygote starts with the first kernel. Returns whether it is on: on Linux,
    with one OpenMP thread per process (``OMP_NUM_THREADS=1``, as the root conftest.py sets it under pytest-xdist
    with a worker per core; with more, importing torch starts a thread pool and a fork would leave it behind),
    unless ``PPO_KERNEL_FORK=0``."""
    if (
        sys.platform != "linux"
        or os.environ.get("OMP_NUM_THREADS") != "1"
        or os.environ.get("PPO_KERNEL_FORK", "1") == "0"
    ):
        return False
    import ipykernel.kernelspec

    folder = tempfile.mkdtemp(prefix="ppo-kernels-")
    _zygote.update(folder=folder)
    # in the environment from now on: a harness that copies os.environ before it asks for the kernel spec (the
    # learner copies') hands it to the launcher too
    os.environ[ENV] = os.path.join(folder, "zygote.sock")
    plain = ipykernel.kernelspec.get_kernel_dict

    def get_kernel_dict(extra_arguments=None):
        spec = plain(extra_arguments)
        if extra_arguments:
            return spec
        _start_zygote()
        return spec | {"argv": kernel_argv()}

    get_kernel_dict.plain = plain
    ipykernel.kernelspec.get_kernel_dict = get_kernel_dict
    return True


def _start_zygote() -> None:
    if "process" in _zygote:
        return
    path = os.path.join(_zygote["folder"], "zygote.sock")
    process = subprocess.Popen([sys.executable, os.path.abspath(__file__), "serve", path], stdin=subprocess.DEVNULL)
    _zygote.update(process=process)
    for _ in range(200):  # it listens within milliseconds; a launch before that would get a plain kernel
        if os.path.exists(path) or process.poll() is not None:
            break
        time.sleep(0.01)


def uninstall() -> None:
    """Stop the zygote (its kernels with it) and put the plain kernel spec back."""
    import ipykernel.kernelspec

    plain = getattr(ipykernel.kernelspec.get_kernel_dict, "plain", None)
    if plain is not None:
        ipykernel.kernelspec.get_kernel_dict = plain
    if "process" in _zygote:
        _zygote["process"].kill()
        _zygote["process"].wait()
    if "folder" in _zygote:
        import shutil

        shutil.rmtree(_zygote["folder"], ignore_errors=True)
        os.environ.pop(ENV, None)
    _zygote.clear()


if __name__ == "__main__":
    if sys.argv[1:2] == ["serve"]:
        serve(sys.argv[2])
    else:
        launch(sys.argv[1:])
