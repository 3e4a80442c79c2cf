"""The rank side of ``ncclcheck run``'s control plane: copied as ``sitecustomize.py`` into a directory that run puts
first on the job's PYTHONPATH. Stdlib only; torch is never imported here.

At interpreter start it (a) runs the ``sitecustomize`` the environment would have run without us (found on
sys.path after our directory; it then stands as ``sitecustomize`` in sys.modules), and (b) waits for
``torch.distributed.distributed_c10d`` to be imported, wraps its ``init_process_group``, and once a default
process group exists starts torch's ``_WorkerServer`` on a unix socket named by global rank in
``$NCCLCHECK_CONTROL_DIR`` (a 0700 directory), or in a short private directory under /tmp when that path would
pass the 108-byte limit. A process that never creates a process group (the launcher, data-loader workers)
starts nothing. If ``TORCH_WORKER_SERVER_SOCKET`` is set, the job serves its own: nothing is started and that
socket is recorded. Nothing here raises into the user's program: a failure is a note file in the control dir.

Per rank it writes ``rank<N>.json`` in the control dir: where the socket is, whose it is, the pid, the start time;
and ``groups-rank<N>.json``: its process groups and their members' global ranks, written again each time a group
is made (``new_group``, ``split_group``), so that a watcher reads them without asking the rank.
"""

from __future__ import annotations

# Every python process of the job imports this at start: only os and sys here (loaded already); the rest where it
# is used, once a process group exists. importlib.abc alone would cost ~15 ms a process (it pulls importlib.resources).
import os
import sys

TYPE_CHECKING = False  # typing itself costs ~8 ms at start (re, collections)
if TYPE_CHECKING:
    from collections.abc import Sequence
    from importlib.machinery import ModuleSpec
    from types import ModuleType
    from typing import Any

CONTROL_DIR = "NCCLCHECK_CONTROL_DIR"
THEIR_SOCKET = "TORCH_WORKER_SERVER_SOCKET"
C10D = "torch.distributed.distributed_c10d"
DEBUG = "torch.distributed.debug"  # start_debug_server(): a worker server on a TCP port, published in the store
SUN_PATH_MAX = 107  # sockaddr_un.sun_path is 108 bytes with its NUL
GROUPS = "ncclcheck_pg_config"  # our handler: this rank's process groups and their global ranks, as pg_config
GROUPS_FILE = "groups-rank{}.json"  # the same, written to the control dir each time this rank's groups change
MADE = ("new_group", "split_group")  # the calls that make a process group (new_subgroups, DeviceMesh: through them)

GRACE_S = 0.05  # at exit, after our socket is gone: a question accepted just before is answered in this time
CLOSE_S = 1.0  # ... and answers in progress are waited for at most this long

_servers: list[Any] = []  # the started server lives as long as the process (the job's debug server: unreachable)
_kept: list[Any] = []  # what must outlive the interpreter (the groups handler) and whether we started (a second init)
_sockets: list[str] = []  # our socket's path, removed at exit (``_closing``)
_answering = [0]  # answers of our groups handler in progress
_p2p: list[Any] = []  # the point-to-point record's module: its handler's answers in progress too


def socket_path(control_dir: str, rank: int) -> str:
    """Where rank ``rank`` serves: in the control dir, or a short private dir under /tmp named after it."""
    path = os.path.join(control_dir, f"rank{rank}.sock")
    if len(os.fsencode(path)) <= SUN_PATH_MAX:
        return path
    return os.path.join(short_dir(control_dir), f"rank{rank}.sock")


def short_dir(control_dir: str) -> str:
    """The fallback directory for ``control_dir``: the same on every rank and for run, which removes it at the end."""
    import hashlib

    digest = hashlib.sha1(os.path.abspath(control_dir).encode()).hexdigest()[:12]
    return os.path.join("/tmp", f"ncclcheck-{os.getuid()}-{digest}")


def _private_dir(path: str) -> None:
    """Make ``path`` 0700, or accept it only if it is ours and no one else can enter it."""
    import stat

    os.makedirs(path, mode=0o700, exist_ok=True)
    st = os.lstat(path)
    if not stat.S_ISDIR(st.st_mode) or st.st_uid != os.getuid() or st.st_mode & 0o077:
        raise PermissionError(f"{path} is not a private directory of this user")


def _note(control_dir: str, rank: object, text: str) -> None:
    try:
        with open(os.path.join(control_dir, f"note-{rank}-{os.getpid()}.txt"), "a", encoding="utf-8") as f:
            f.write(text + "\n")
    except OSError:
        pass


def _record(control_dir: str, rank: int, facts: dict[str, Any]) -> None:
    import json

    backend = None
    try:  # the default group's backend: a job's abort reads differently on gloo (no NCCL watchdog) than on nccl
        import torch.distributed as dist

        backend = str(dist.get_backend())
    except Exception:
        pass
    tmp = os.path.join(control_dir, f".rank{rank}.json.{os.getpid()}")
    with open(tmp, "w", encoding="utf-8") as f:
        json.dump({"rank": rank, "pid": os.getpid(), "backend": backend, **facts}, f)
    os.replace(tmp, os.path.join(control_dir, f"rank{rank}.json"))


def start_server(control_dir: str) -> None:
    """Once the default process group exists: serve on this rank's socket (or record the job's own). Never raises."""
    rank: object = "?"
    try:
        import stat
        import time

        import torch.distributed as dist

        rank = dist.get_rank()
        assert isinstance(rank, int)
        if _kept or _servers:
            return  # a second init_process_group in this process (after destroy_process_group): ours still serves
        _serve_groups()  # handlers are the process's: the job's own server answers it too
        if getattr(sys.modules.get(DEBUG), "_WORKER_SERVER", None) is not None:
            use_debug_server(control_dir)  # the job started torch's debug server first: that one answers
            return
        theirs = os.environ.get(THEIR_SOCKET)
        if theirs and os.path.exists(theirs):  # worker_main serves before main() creates the group
            _record(control_dir, rank, {"socket": theirs, "owner": "job", "started_s": 0.0})
            return
        from torch._C import _distributed_c10d as c10d

        server_class = getattr(c10d, "_WorkerServer", None)
        if server_class is None:
            _record(control_dir, rank, {"socket": None, "owner": None, "why": "this torch has no _WorkerServer"})
            return
        path = socket_path(control_dir, rank)
        _private_dir(os.path.dirname(path))
        if os.path.exists(path) and stat.S_ISSOCK(os.lstat(path).st_mode):
            os.unlink(path)  # a socket left by an earlier run of this rank (an elastic restart)
        began = time.perf_counter()
        _servers.append(server_class(path))
        _sockets.append(path)
        import atexit

        atexit.register(_closing, os.getpid())
        _record(control_dir, rank, {"socket": path, "owner": "ncclcheck", "started_s": time.perf_counter() - began})
    except Exception as exc:  # the user's program must never see our failure
        _note(control_dir, rank, f"control plane not started: {type(exc).__name__}: {exc}")


def _closing(owner: int) -> None:
    """At exit, before the interpreter finalizes (atexit): our socket is removed, so that nobody can ask again, and
    the answers in progress end first. A handler written in Python (ours, torch's stacks) asked once the interpreter
    finalizes takes the process down: its server thread cannot take the GIL then and glibc aborts it ("FATAL: exception
    not rethrown", SIGABRT), a healthy rank killed at its exit by a watcher's question. The server is not shut down:
    that waits for its threads with the GIL held, which an answer in progress waits for. ``owner``: the rank's pid (a
    child it forks inherits the registration)."""
    import stat
    import time

    if os.getpid() != owner:  # a child forked by the rank that exits through Python: the socket is the rank's
        return
    while _sockets:
        path = _sockets.pop()
        try:
            if stat.S_ISSOCK(os.lstat(path).st_mode):
                os.unlink(path)
        except OSError:
            pass
    end = time.monotonic() + CLOSE_S
    time.sleep(GRACE_S)  # the GIL is free while we sleep: a question accepted before the socket went is answered
    while _busy() and time.monotonic() < end:
        time.sleep(0.005)


def _busy() -> int:
    return _answering[0] + sum(int(getattr(m, "_answering", [0])[0]) for m in _p2p)


def _serve_groups() -> None:
    """Answer ``GROUPS`` with this rank's process groups, each with its members' global ranks, in the layout of the
    Flight Recorder's ``pg_config`` (which gloo leaves empty): who else must join a sub-group's collective is then
    known even of a rank that never issued one on it."""
    from torch._C import _distributed_c10d as c10d

    register = getattr(c10d, "_register_handler", None)
    if register is None:
        return

    def groups(request: Any, response: Any) -> None:
        import json

        _answering[0] += 1
        try:
            response.set_content(json.dumps(groups_config()).encode(), "application/json")
            response.set_status(200)
        finally:
            _answering[0] -= 1

    # torch's handler registry is a C++ static: it drops its reference after the interpreter is gone, and a handler
    # freed then takes the rank down with SIGSEGV at exit (seen on every healthy job). One reference is never let go.
    import ctypes

    ctypes.pythonapi.Py_IncRef(ctypes.py_object(groups))
    _kept.append(groups)
    register(GROUPS, groups)


def groups_config() -> dict[str, dict[str, Any]]:
    """This rank's process groups, each with its members' global ranks, in the layout of the Flight Recorder's
    ``pg_config`` (read by ``collectors.flight.pg_ranks``)."""
    from torch.distributed import distributed_c10d as dc

    world = dc._world
    config = {}
    for group, ranks in list(world.pg_group_ranks.items()):
        name = world.pg_names.get(group, "")
        if not name:
            continue  # a group this rank is not a member of
        order = sorted(ranks, key=ranks.__getitem__)  # global ranks by group rank: NCCL names p2p peers by it
        config[name] = {"name": name, "desc": getattr(group, "group_desc", ""), "ranks": order}
    return config


def publish_groups(control_dir: str) -> None:
    """Write this rank's process groups to ``groups-rank<N>.json`` in the control dir (replaced whole), after each
    group is made: a watcher reads them from the file, never by asking the rank (a Python handler asked while a
    rank exits aborted it). Never raises."""
    rank: object = "?"
    try:
        import json

        import torch.distributed as dist

        if not dist.is_initialized():
            return
        rank = dist.get_rank()
        tmp = os.path.join(control_dir, f".groups-rank{rank}.json.{os.getpid()}")
        with open(tmp, "w", encoding="utf-8") as f:
            json.dump(groups_config(), f)
        os.replace(tmp, os.path.join(control_dir, GROUPS_FILE.format(rank)))
    except Exception as exc:  # the user's program must never see our failure
        _note(control_dir, rank, f"process groups not written: {type(exc).__name__}: {exc}")


def use_debug_server(control_dir: str) -> None:
    """The job runs torch's debug server (``start_debug_server``): its worker server answers the same handlers on
    a TCP port; the rank's record points there instead, and our socket, if started, is removed."""
    rank: object = os.environ.get("RANK", "?")
    try:
        import stat

        port = getattr(getattr(sys.modules.get(DEBUG), "_WORKER_SERVER", None), "port", None)
        if not isinstance(port, int) or not str(rank).isdigit():
            return
        _record(control_dir, int(str(rank)), {"socket": None, "url": f"http://localhost:{port}", "owner": "job"})
        # ours is left unreachable, not shut down: a shutdown waits for its threads with the GIL held, which an answer
        # in progress waits for (see ``_closing``)
        path = socket_path(control_dir, int(str(rank)))
        if path in _sockets:
            _sockets.remove(path)
        if os.path.exists(path) and stat.S_ISSOCK(os.lstat(path).st_mode):
            os.unlink(path)
    except Exception as exc:  # the user's program must never see our failure
        _note(control_dir, rank, f"the job's debug server not used: {type(exc).__name__}: {exc}")


def _after(module: ModuleType, name: str, then: Any, interruptible: bool = False) -> tuple[Any, Any] | None:
    """Wrap ``module.<name>`` so that ``then(result)`` runs after each call: (the original, the wrapper), or None when
    it is wrapped already. ``interruptible``: ^C ends the process while the call waits (``_interruptible``)."""
    import functools

    original = getattr(module, name)
    if getattr(original, "__ncclcheck__", False):
        return None

    @functools.wraps(original)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        out = _interruptible(lambda: original(*args, **kwargs)) if interruptible else original(*args, **kwargs)
        then(out)
        return out

    wrapper.__ncclcheck__ = True  # type: ignore[attr-defined]
    setattr(module, name, wrapper)
    return original, wrapper


def wrap_debug(module: ModuleType, control_dir: str) -> None:
    """Wrap ``start_debug_server``: once the job's own debug server serves, it is the one asked."""
    _after(module, "start_debug_server", lambda _: use_debug_server(control_dir))


def wrap(module: ModuleType, control_dir: str) -> None:
    """Wrap ``module.init_process_group`` (and torch.distributed's copy, if bound already) to start the server, it
    and the calls that make a group to publish this rank's groups (``publish_groups``), and the point-to-point calls to record what each rank has in flight (``ncclcheck_hook_p2p``)."""
    parent = sys.modules.get("torch.distributed")

    def started(_: Any) -> None:
        start_server(control_dir)
        publish_groups(control_dir)

    def made(group: Any) -> None:  # every rank makes every group: only a rank that is a member has new groups
        if group is not None and group is not getattr(getattr(module, "GroupMember", None), "NON_GROUP_MEMBER", None):
            publish_groups(control_dir)

    calls: list[tuple[str, Any, bool]] = [("init_process_group", started, True)]
    calls += [(name, made, False) for name in MADE if hasattr(module, name)]
    for name, then, interruptible in calls:
        wrapped = _after(module, name, then, interruptible)
        if wrapped is not None and parent is not None and getattr(parent, name, None) is wrapped[0]:
            setattr(parent, name, wrapped[1])
    try:
        try:
            import ncclcheck_hook_p2p as p2p  # type: ignore[import-not-found]  # run's copy, beside this file
        except ImportError:
            from ncclcheck.collectors import control_hook_p2p as p2p
        p2p.install(module)
        _p2p.append(p2p)
    except Exception as exc:  # the user's program must never see our failure
        _note(control_dir, "?", f"point-to-point record not installed: {type(exc).__name__}: {exc}")


def _interruptible(call: Any) -> Any:
    """``call()`` with ^C ending the process at once, as it ends a program in C: init_process_group waits in C++ (the
    store, gloo's connections), where Python's SIGINT handler never runs, so a rank waiting there for a rank that never
    comes would sit out torchrun's SIGINT until its SIGKILL. Only where SIGINT is Python's own default handler (the
    job installed none) and in the main thread; the handler is back once the call returns."""
    import signal
    import threading

    if threading.current_thread() is not threading.main_thread():
        return call()
    if signal.getsignal(signal.SIGINT) is not signal.default_int_handler:
        return call()
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    try:
        return call()
    finally:
        signal.signal(signal.SIGINT, signal.default_int_handler)


class _AfterImport:
    """A meta path finder that finds nothing itself; when c10d is imported, it stands in as its loader, lets the real
    loader run, then wraps it; gone after that. (Duck-typed: importlib.abc costs more than the whole hook.)"""

    def __init__(self, control_dir: str, fullname: str = C10D, then: Any = None) -> None:
        self.control_dir, self.fullname, self.then = control_dir, fullname, then or wrap
        self.loader: Any = None

    def find_spec(
        self, fullname: str, path: Sequence[str] | None, target: ModuleType | None = None
    ) -> ModuleSpec | None:
        if fullname != self.fullname or self.loader is not None:
            return None
        self._leave()
        spec = next((s for f in sys.meta_path if (s := _spec(f, fullname, path, target)) is not None), None)
        if spec is None or spec.loader is None:
            return None
        self.loader, spec.loader = spec.loader, self  # type: ignore[assignment]
        return spec

    def create_module(self, spec: ModuleSpec) -> ModuleType | None:
        module: ModuleType | None = self.loader.create_module(spec)
        return module

    def exec_module(self, module: ModuleType) -> None:
        self.loader.exec_module(module)
        try:
            module.__spec__.loader = self.loader  # type: ignore[union-attr]
            module.__loader__ = self.loader
            self.then(module, self.control_dir)
        except Exception as exc:
            _note(self.control_dir, "?", f"control plane hook not installed: {type(exc).__name__}: {exc}")

    def _leave(self) -> None:
        if self in sys.meta_path:
            sys.meta_path.remove(self)


def _spec(finder: Any, fullname: str, path: Sequence[str] | None, target: ModuleType | None) -> ModuleSpec | None:
    find = getattr(finder, "find_spec", None)
    spec: ModuleSpec | None = find(fullname, path, target) if find is not None else None
    return spec


def install(control_dir: str) -> None:
    """Arrange for the server to start after init_process_group, and for the job's own debug server to be used once
    it starts; a module already imported is wrapped at once."""
    for fullname, then in ((C10D, wrap), (DEBUG, wrap_debug)):
        loaded = sys.modules.get(fullname)
        if loaded is not None:
            then(loaded, control_dir)
        else:
            sys.meta_path.insert(0, _AfterImport(control_dir, fullname, then))


def run_theirs(here: str) -> None:
    """Run the sitecustomize found after ours on sys.path, as site.py would have; its error is printed, not raised."""
    import importlib.machinery

    later = [p for p in sys.path if os.path.abspath(p or ".") != here]
    spec = importlib.machinery.PathFinder.find_spec("sitecustomize", later)
    if spec is None or spec.loader is None:
        return
    import importlib.util  # ~3 ms (contextlib): only when there is one to run

    module = importlib.util.module_from_spec(spec)
    ours = sys.modules.get("sitecustomize")
    sys.modules["sitecustomize"] = module
    try:
        spec.loader.exec_module(module)
    except Exception as exc:  # as site.py reports a failing sitecustomize
        if ours is not None:
            sys.modules["sitecustomize"] = ours
        print(f"Error in sitecustomize; set PYTHONVERBOSE for traceback:\n{type(exc).__name__}: {exc}", file=sys.stderr)


def main() -> None:
    here = os.path.dirname(os.path.abspath(__file__))
    run_theirs(here)
    control_dir = os.environ.get(CONTROL_DIR)
    if control_dir:
        try:
            install(control_dir)
        except Exception as exc:
            _note(control_dir, "?", f"control plane hook not installed: {type(exc).__name__}: {exc}")


if __name__ == "sitecustomize":
    main()
