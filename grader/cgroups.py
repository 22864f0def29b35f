"""A cgroup of its own for every grading worker, where the judge may create one.

The process tree (``grader.containment``) finds learner processes, and ``SIGSTOP`` freezes them: that works for any
user on any Linux, but a process can resume itself, and a child can start and end between two looks. Where the
judge may create cgroups (root on a virtual machine or bare metal, a systemd unit with ``Delegate=yes``; not an
ordinary user's session, nor most containers, whose cgroup file system is read-only), each worker is also put in a
cgroup of its own. Learner code cannot leave it (moving a process is a write in the cgroup file system, which
Landlock does not let it make), and the kernel then gives what polling cannot:

* ``cgroup.freeze`` (cgroup v2, Linux 5.2): the whole group stopped at once, processes forking meanwhile included,
  in a way no signal undoes (a timer that sends ``SIGCONT`` resumes a ``SIGSTOP``, not this);
* ``cpu.stat``'s ``usage_usec``: CPU time of every process that ever ran in the group, ended ones included, so a
  child that started and ended inside a freeze still shows;
* ``cgroup.kill`` (Linux 5.14): every process of the group killed at once, however fast it forks;
* ``pids.max`` (from cgroup v1's ``pids`` hierarchy, or v2's where the judge's own cgroup delegates it): a bound the
  kernel keeps on threads and processes, a little above the task cap the judge polls for, so a thread or fork bomb
  is refused by the kernel rather than growing between two polls;
* ``cgroup.procs``: the group's processes, whoever their parent is.

``GRADER_CGROUPS=off`` switches this off. ``describe()`` says what this machine gives; reports quote it.
"""

from __future__ import annotations

import contextlib
import itertools
import os
import re
import signal
import sys
import time
from dataclasses import dataclass
from functools import cache
from pathlib import Path

ENV = "GRADER_CGROUPS"
# a worker's group, beside the judge in its own cgroup: tcip-worker-<judge's pid namespace>-<judge pid>-<n>
PREFIX = "tcip-worker-"
PIDS_MARGIN = 64  # pids.max over the polled task cap: the poll still names a bomb; the kernel stops its growth
FREEZE_WAIT_S = 2.0
UNCONFIRMED: set[Path] = set()  # groups whose freeze the kernel did not confirm in time (``Group.freeze``)

_counter = itertools.count(1)
_why_not = ""  # why the last try to create a group failed (the first failure ends the tries)


def _off() -> bool:
    return os.environ.get(ENV, "").lower() in ("off", "0", "no", "false")


def _mounts() -> list[tuple[Path, str, set[str]]]:
    """``(mount point, type, options)`` of every cgroup file system."""
    found = []
    with contextlib.suppress(OSError):
        for line in Path("/proc/self/mounts").read_text().splitlines():
            parts = line.split()
            if len(parts) >= 4 and parts[2] in ("cgroup", "cgroup2"):
                found.append((Path(parts[1]), parts[2], set(parts[3].split(","))))
    return found


def _memberships(pid: int | str) -> dict[str, str]:
    """A process's cgroup path per hierarchy: ``"2"`` for v2, a v1 controller's name (``"pids"``) for v1."""
    found: dict[str, str] = {}
    with contextlib.suppress(OSError, ValueError):
        for line in Path(f"/proc/{pid}/cgroup").read_text().splitlines():
            number, controllers, path = line.split(":", 2)
            if number == "0" and not controllers:
                found["2"] = path
            for name in filter(None, controllers.split(",")):
                found[name] = path
    return found


@cache
def _v2_mount() -> Path | None:
    return next((point for point, kind, _ in _mounts() if kind == "cgroup2"), None)


@cache
def _v1_mount(controller: str) -> Path | None:
    return next((point for point, kind, opts in _mounts() if kind == "cgroup" and controller in opts), None)


def _inside(mount: Path, path: str) -> Path:
    return mount / path.lstrip("/")


@dataclass(frozen=True)
class Group:
    """One worker's cgroup: ``main`` in cgroup v2 (freeze, kill, CPU time, members), ``pids`` where its task bound
    is kept (``main`` itself, a v1 ``pids`` group, or None where neither can be made)."""

    main: Path
    pids: Path | None = None

    def add(self, pid: int) -> Group:
        """Move process ``pid`` (all its threads) into the group (``OSError`` if it could not be moved); the group
        as it now holds ``pid``: without its ``pids`` part where the move into that one failed."""
        (self.main / "cgroup.procs").write_text(str(pid))
        if self.pids is None or self.pids == self.main:
            return self
        try:
            (self.pids / "cgroup.procs").write_text(str(pid))
        except OSError:
            with contextlib.suppress(OSError):
                self.pids.rmdir()
            return Group(self.main)
        return self

    def members(self) -> set[int]:
        """The group's live processes (empty once the group is gone)."""
        try:
            return {int(line) for line in (self.main / "cgroup.procs").read_text().split()}
        except (OSError, ValueError):
            return set()

    def cpu_ns(self) -> int | None:
        """CPU time of everything that ever ran in the group, ended processes included; None if unreadable."""
        try:
            text = (self.main / "cpu.stat").read_text()
        except OSError:
            return None
        found = re.search(r"^usage_usec (\d+)$", text, re.M)
        return int(found.group(1)) * 1000 if found else None

    def _event(self, name: str) -> str | None:
        with contextlib.suppress(OSError):
            for line in (self.main / "cgroup.events").read_text().splitlines():
                key, _, value = line.partition(" ")
                if key == name:
                    return value
        return None

    def freeze(self) -> bool:
        """Freeze the group; True once the kernel says every process in it is frozen (within ``FREEZE_WAIT_S``). A
        group whose freeze was once not confirmed in time is not asked again (the caller stops it with ``SIGSTOP``),
        so one slow freeze costs ``FREEZE_WAIT_S`` once, not at every freeze, and says so on the judge's stderr."""
        if self.main in UNCONFIRMED:
            return False
        try:
            (self.main / "cgroup.freeze").write_text("1")
        except OSError:
            return False
        deadline = time.monotonic() + FREEZE_WAIT_S
        while self._event("frozen") != "1":
            if time.monotonic() > deadline:
                UNCONFIRMED.add(self.main)
                print(
                    f"grader: the kernel did not confirm the freeze of {self.main.name} within {FREEZE_WAIT_S:g} s; "
                    "its processes are stopped with SIGSTOP from now on",
                    file=sys.stderr,
                    flush=True,
                )
                return False
            time.sleep(0.0002)
        return True

    def thaw(self) -> None:
        with contextlib.suppress(OSError):
            (self.main / "cgroup.freeze").write_text("0")

    def kill(self) -> None:
        """SIGKILL every process in the group (at once where the kernel has ``cgroup.kill``), and thaw it, since a
        frozen process dies only once it runs."""
        try:
            (self.main / "cgroup.kill").write_text("1")
        except OSError:
            for pid in self.members():
                with contextlib.suppress(OSError):
                    os.kill(pid, signal.SIGKILL)
        self.thaw()

    def remove(self, wait_s: float = 2.0) -> None:
        """Kill what is left in the group and delete it (once its last process has been reaped)."""
        self.kill()
        deadline = time.monotonic() + wait_s
        while self._event("populated") == "1" and time.monotonic() < deadline:
            time.sleep(0.005)
        for folder in {self.main, self.pids} - {None}:
            with contextlib.suppress(OSError):
                folder.rmdir()


def of(pid: int) -> Group | None:
    """The worker group process ``pid`` is in, or None (it is in none, or is gone)."""
    if _off():
        return None
    mine = _memberships(pid)
    mount = _v2_mount()
    if mount is None or "2" not in mine or not Path(mine["2"]).name.startswith(PREFIX):
        return None
    main = _inside(mount, mine["2"])
    pids = main if (main / "pids.max").exists() else None
    v1 = _v1_mount("pids")
    if pids is None and v1 is not None and Path(mine.get("pids", "")).name.startswith(PREFIX):
        pids = _inside(v1, mine["pids"])
    return Group(main, pids)


def _pid_namespace() -> str:
    """This process's pid namespace (its inode): a judge's pid means something only inside the namespace it was read
    in, and judges in containers that share one cgroup tree see different ones."""
    try:
        return str(os.stat("/proc/self/ns/pid").st_ino)
    except OSError:
        return "0"


def _sweep(folder: Path) -> None:
    """Delete the groups judges that have died left in ``folder`` (killing what still runs in them): only groups
    made in this pid namespace, whose judge's pid it can look up."""
    with contextlib.suppress(OSError):
        for entry in folder.glob(f"{PREFIX}{_pid_namespace()}-*"):
            judge = re.fullmatch(rf"{PREFIX}\d+-(\d+)-\d+", entry.name)
            if judge and not Path(f"/proc/{judge.group(1)}").exists():
                Group(entry).remove(wait_s=0.5)


def _make(folder: Path, name: str) -> Path:
    _sweep(folder)
    group = folder / name
    group.mkdir()
    return group


def create(max_tasks: int) -> Group | None:
    """A new, empty worker group with room for ``max_tasks`` threads and processes (plus ``PIDS_MARGIN``), or None
    where this judge cannot create one (``describe()`` says why)."""
    global _why_not
    mount = _v2_mount()
    if _off() or _why_not or mount is None:
        _why_not = _why_not or ("switched off (GRADER_CGROUPS=off)" if _off() else "no cgroup v2 file system")
        return None
    own, name = _memberships("self"), f"{PREFIX}{_pid_namespace()}-{os.getpid()}-{next(_counter)}"
    try:
        main = _make(_inside(mount, own.get("2", "/")), name)
    except OSError as exc:
        _why_not = f"cannot create one in this judge's cgroup ({exc.strerror or exc})"
        return None
    if not ((main / "cgroup.freeze").exists() and (main / "cpu.stat").exists()):
        Group(main).remove()
        _why_not = "this kernel's cgroup v2 lacks cgroup.freeze or cpu.stat (Linux 5.2+)"
        return None
    pids = main if (main / "pids.max").exists() else None
    v1 = _v1_mount("pids")
    if pids is None and v1 is not None:
        with contextlib.suppress(OSError):
            pids = _make(_inside(v1, own.get("pids", "/")), name)
    if pids is not None:
        try:
            (pids / "pids.max").write_text(str(max_tasks + PIDS_MARGIN))
        except OSError:
            if pids != main:
                with contextlib.suppress(OSError):
                    pids.rmdir()
            pids = None
    return Group(main, pids)


def describe() -> str:
    """What worker cgroups give on this machine, in a phrase for reports."""
    if _off():
        return "no cgroup per worker (switched off: GRADER_CGROUPS=off)"
    if _why_not:
        return f"no cgroup per worker ({_why_not})"
    probe = create(1)
    if probe is None:
        return f"no cgroup per worker ({_why_not})"
    probe.remove()
    bound = "a kernel bound on tasks" if probe.pids is not None else "no kernel bound on tasks"
    return f"a cgroup per worker (freeze, CPU time, kill; {bound})"
