"""The sandbox learner code runs in: Linux Landlock for files, network and signals, seccomp for the rest.

``enter(policy)`` is called once, in the grading worker, after it forked and before it loads a notebook.
From then on that process and everything it starts:

* reads only what the policy lists (the Python installation, the course's given code ``coursekit/``, the
  grader's worker-side modules, system libraries) and writes only inside its private scratch folder, so it
  cannot read ``solutions/``, hidden checks, references, thresholds, calibration files, other submissions,
  reports or the gradebook, nor change any of them;
* reaches no network and no other process through a socket (seccomp): it may create only UNIX sockets, which
  the CUDA driver needs at start-up (a GPU run showed ``cuInit`` failing with error 304 without them), and
  ``connect`` is refused outright, as is ``sendto`` with an address, so it cannot reach a local daemon, Ray, or
  a fork server; a UNIX datagram socket, to which ``sendmsg`` could name any address (``/dev/log``, journald),
  cannot be made on CPU (on CUDA it can, until a GPU run shows the driver does without); Landlock's TCP rules
  (ABI 4) and abstract-socket scoping (ABI 6) back this up;
* cannot signal, trace or read the memory of a process outside the sandbox (Landlock scopes signals from
  ABI 6, and ptrace from ABI 1; on older kernels seccomp allows ``kill`` only to the process itself);
* cannot change another process's priority, CPU affinity, resource limits or I/O priority, cannot raise its
  own scheduling class, change file modes, owners, times or extended attributes, mount, load modules, use
  io_uring, BPF or perf events, or set the clock (seccomp; these are the ways a process of the same user
  could slow the grader's own timing or damage files it may read);
* cannot hold memory that no process maps (``memfd_create``) or that outlives it (System V shared memory,
  message queues and semaphores, POSIX message queues: seccomp);
* cannot leave its own process tree: ``clone`` with ``CLONE_PARENT`` (a process that would be the worker's
  sibling, which the judge neither freezes while it times nor ends with the worker) is refused, and the worker
  is a child subreaper, so a double-forked daemon comes back to it.

Why these mechanisms: Landlock and seccomp work unprivileged on any Linux laptop or GPU server, inside the
process that applies them (no setuid helper, no user namespaces, which Ubuntu 24.04 restricts), so a worker
forked from the grader's fork server keeps its imported torch. Bubblewrap would need a Debian package and a
fresh ``exec`` per worker (re-importing torch, about 4 s); namespaces alone do not confine files without
mount tricks. The bindings are ``landlockpy`` and ``seccompy`` (pure Python, maintained, no compiler).

``probe()`` says what this machine offers without applying anything; every report quotes its ``describe()``.
"""

from __future__ import annotations

import errno
import json
import os
import platform
import sys
from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass, field
from pathlib import Path

ENV_OFF = "GRADER_SANDBOX"  # "off" disables it (tests of the unsandboxed path); anything else: use it if possible
MIN_LANDLOCK_ABI = 1  # file rules; network rules need 4 and signal scoping 6, each backed by seccomp below

# Syscalls no grading needs and that let a process of the grader's own user reach outside the sandbox.
DENIED = (
    "ptrace",
    "process_vm_readv",
    "process_vm_writev",
    "process_madvise",
    "kcmp",
    "pidfd_getfd",
    "mount",
    "umount2",
    "pivot_root",
    "chroot",
    "move_mount",
    "open_tree",
    "fsopen",
    "fsmount",
    "fsconfig",
    "swapon",
    "swapoff",
    "reboot",
    "kexec_load",
    "kexec_file_load",
    "init_module",
    "finit_module",
    "delete_module",
    "iopl",
    "ioperm",
    "acct",
    "settimeofday",
    "clock_settime",
    "adjtimex",
    "clock_adjtime",
    "sethostname",
    "setdomainname",
    "bpf",
    "perf_event_open",
    "fanotify_init",
    "open_by_handle_at",
    "name_to_handle_at",
    "quotactl",
    "vhangup",
    "userfaultfd",
    "keyctl",
    "add_key",
    "request_key",
    "io_uring_setup",
    "io_uring_enter",
    "io_uring_register",
    "unshare",
    "setns",
    "migrate_pages",
    "move_pages",
    "sched_setscheduler",
    "sched_setparam",
    "sched_setattr",
    # a CPU mask of its own: the judge pins every learner thread to a timed sample's cores from outside, and a
    # process that widened its mask ran beside the timed calls on another core (red team 2, session 33; caught
    # after the fact by grader.speed.check_cores, but not on a busy machine, where the helper got under a
    # quarter of a core); the mask a process inherits, it keeps
    "sched_setaffinity",
    "setpriority",
    "ioprio_set",
    "chmod",
    "fchmod",
    "fchmodat",
    "fchmodat2",
    "chown",
    "fchown",
    "lchown",
    "fchownat",
    "utime",
    "utimes",
    "futimesat",
    "utimensat",
    "setxattr",
    "lsetxattr",
    "fsetxattr",
    "removexattr",
    "lremovexattr",
    "fremovexattr",
    "setxattrat",
    "removexattrat",
    "mknod",
    "mknodat",
    # memory in a file no process maps: the judge's memory poll reads each process's RSS, which such pages are not
    # part of, and RLIMIT_DATA does not count them; a red-team note (session 15) found this way around both
    "memfd_create",
    "memfd_secret",
    # System V and POSIX IPC objects outlive every process (red team, session 33: eight 128 MiB System V segments,
    # written and detached, stayed in memory after the worker, its cgroup and the judge had ended, counted in no
    # RSS); nothing torch or the grader does needs them (its shared memory is files, which Landlock confines)
    "shmget",
    "shmat",
    "shmctl",
    "msgget",
    "msgsnd",
    "msgctl",
    "semget",
    "semop",
    "semtimedop",
    "semctl",
    "ipc",
    "mq_open",
    "mq_timedsend",
    "mq_notify",
    "mq_getsetattr",
)
OWN_ONLY = ("prlimit64",)  # allowed on the calling process (pid 0), refused on any other
NAMESPACE_FLAGS = 0x7E020000  # CLONE_NEWNS | NEWCGROUP | NEWUTS | NEWIPC | NEWUSER | NEWPID | NEWNET
CLONE_PARENT = 0x00008000  # the new process would be the worker's sibling: outside its tree, never frozen or ended
X32_BIT = 0x40000000
AF_UNIX = 1
SOCK_DGRAM, SOCK_TYPE_MASK = 2, 0xF  # the type bits of socket()'s second argument (SOCK_NONBLOCK, SOCK_CLOEXEC above)
PR_SET_CHILD_SUBREAPER = 36


class SandboxError(RuntimeError):
    """The sandbox was required but could not be entered."""


@dataclass
class Policy:
    """What a sandboxed worker may touch."""

    scratch: Path  # read, write, create, delete: the worker's own folder
    read: list[Path] = field(default_factory=list)  # files and folders to read (folders: recursively)
    list_only: list[Path] = field(default_factory=list)  # folders whose entries may be listed, not read
    execute: list[Path] = field(default_factory=list)  # compilers and libraries (read and execute)
    devices: list[Path] = field(default_factory=list)  # read, write and ioctl (GPUs)


@dataclass
class Report:
    """What the sandbox does on this machine, for every report."""

    active: bool
    landlock_abi: int
    seccomp: bool
    files: str
    network: str
    signals: str
    why_not: str = ""

    def describe(self) -> str:
        if not self.active:
            return f"NO SANDBOX: learner code ran with the grader's own rights ({self.why_not})"
        return (
            f"sandboxed (Landlock ABI {self.landlock_abi}{', seccomp' if self.seccomp else ''}): {self.files}; "
            f"{self.network}; {self.signals}"
        )

    def as_dict(self) -> dict:
        return {**asdict(self), "description": self.describe()}


def _landlock_abi() -> int:
    try:
        import landlockpy
    except ImportError:
        return 0
    try:
        return landlockpy.abi_version()
    except OSError:
        return 0


def _seccomp_ok() -> bool:
    try:
        import seccompy
    except ImportError:
        return False
    try:
        return platform.machine() in ("x86_64", "aarch64") and seccompy.supported()
    except OSError:
        return False


def probe(wanted: bool = True) -> Report:
    """What entering the sandbox here would give, without entering it."""
    if not wanted or os.environ.get(ENV_OFF, "").lower() in ("off", "0", "no", "false"):
        return Report(False, 0, False, "", "", "", why_not=f"switched off ({ENV_OFF}=off or --unsandboxed)")
    if sys.platform != "linux":
        return Report(False, 0, False, "", "", "", why_not=f"no sandbox on {sys.platform}: Landlock is Linux-only")
    abi = _landlock_abi()
    seccomp = _seccomp_ok()
    if abi < MIN_LANDLOCK_ABI or not seccomp:
        missing = [n for n, ok in (("Landlock", abi >= MIN_LANDLOCK_ABI), ("seccomp", seccomp)) if not ok]
        return Report(
            False,
            abi,
            seccomp,
            "",
            "",
            "",
            why_not=f"this kernel or Python lacks {' and '.join(missing)} "
            "(Landlock needs Linux 5.13+ with 'landlock' in the LSM list; pip install landlockpy seccompy)",
        )
    network = "no network sockets and no connect (seccomp)" + (", TCP refused by Landlock" if abi >= 4 else "")
    signals = (
        "signals and ptrace only inside the sandbox (Landlock)"
        if abi >= 6
        else "ptrace only inside the sandbox (Landlock); kill only to itself (seccomp)"
    )
    return Report(
        True,
        abi,
        True,
        "reads the Python installation and the course's public code, writes only its scratch folder",
        network,
        signals,
    )


def _landlock(policy: Policy, abi: int, *, full: Iterable[Path] = (), scope: bool = True, net: bool = True) -> None:
    """The worker's Landlock rules. ``full``, ``scope=False`` and ``net=False`` widen them, for
    ``python -m tools.sandbox_cuda`` only: every right under ``full``, no signal or abstract-socket scoping, TCP
    not handled."""
    from landlockpy import AccessFS, AccessNet, Ruleset, Scope

    file_rights = AccessFS.EXECUTE | AccessFS.WRITE_FILE | AccessFS.READ_FILE | AccessFS.TRUNCATE | AccessFS.IOCTL_DEV
    read = AccessFS.READ_FILE | AccessFS.READ_DIR
    rights = (
        (policy.read, read),
        (policy.list_only, AccessFS.READ_DIR),
        (policy.execute, read | AccessFS.EXECUTE),
        (policy.devices, AccessFS.READ_FILE | AccessFS.WRITE_FILE | AccessFS.IOCTL_DEV),
        ([policy.scratch, *full], AccessFS(sum(AccessFS))),
        # its own /proc entries: the CUDA driver writes there at start-up (a GPU run failed without it; thread
        # names are written to /proc/self/task/<tid>/comm); another process's entries stay read-only
        ([Path(f"/proc/{os.getpid()}")], read | AccessFS.WRITE_FILE | AccessFS.TRUNCATE),
    )
    handled: dict = {}
    if net:
        handled["handled_net"] = AccessNet.BIND_TCP | AccessNet.CONNECT_TCP
    if scope:
        handled["scoped"] = Scope.SIGNAL | Scope.ABSTRACT_UNIX_SOCKET
    with Ruleset(**handled) as rules:
        for paths, access in rights:
            for path in paths:
                if os.path.exists(path):
                    rules.allow_path(path, access if os.path.isdir(path) else access & file_rights)
        rules.restrict()


def _seccomp(abi: int, datagrams: bool = False) -> None:
    """The worker's seccomp filter. ``datagrams`` leaves UNIX datagram sockets allowed (for CUDA workers, until a
    GPU run shows the driver needs none; ``tools/sandbox_cuda.py`` tries the filter without them)."""
    from seccompy import ArgCmp, CmpOp, Filter, syscall_nr

    filt = Filter()  # everything not named here is allowed
    x86 = platform.machine() == "x86_64"

    def refuse(name: str, args: list | None = None, error: int = errno.EPERM) -> None:
        try:
            nr = syscall_nr(name)
        except (KeyError, ValueError):
            return  # not a syscall on this architecture
        for number in (nr, nr | X32_BIT) if x86 else (nr,):  # the x32 ABI's numbers reach the same kernel code
            filt.errno(number, error, args=args)

    for name in DENIED:
        refuse(name)
    refuse("socket", [ArgCmp(0, CmpOp.NE, AF_UNIX)])  # the CUDA driver makes a UNIX socket in cuInit
    refuse("socketcall")  # 32-bit multiplexer: its arguments sit in memory seccomp cannot read
    refuse("connect", error=errno.ENOENT)  # as if nothing listened: no daemon, Ray or fork server is reachable
    refuse("sendto", [ArgCmp(4, CmpOp.NE, 0)])  # a datagram with an address; connected sends stay allowed
    if not datagrams:  # sendmsg's address sits in memory seccomp cannot read, and a UNIX datagram socket, even one
        for name in ("socket", "socketpair"):  # of a connected pair, sends to any address it names (/dev/log...)
            refuse(name, [ArgCmp(1, CmpOp.MASKED_EQ, SOCK_DGRAM, mask=SOCK_TYPE_MASK)])
    for name in OWN_ONLY:
        refuse(name, [ArgCmp(0, CmpOp.NE, 0)])
    refuse("prctl", [ArgCmp(0, CmpOp.EQ, PR_SET_CHILD_SUBREAPER)])  # the worker adopts orphans; keep it so
    for bit in range(32):  # a new namespace of any kind, or a sibling (masked equality tests one flag at a time)
        if (NAMESPACE_FLAGS | CLONE_PARENT) >> bit & 1:
            refuse("clone", [ArgCmp(0, CmpOp.MASKED_EQ, 1 << bit, mask=1 << bit)])
    refuse("clone3", error=errno.ENOSYS)  # its flags sit in a struct seccomp cannot read: libc falls back to clone
    if abi < 6:  # Landlock cannot scope signals on this kernel: a signal may go to this process alone
        me = os.getpid()
        for name in ("kill", "tkill", "tgkill"):
            refuse(name, [ArgCmp(0, CmpOp.NE, 0), ArgCmp(0, CmpOp.NE, me)])
        refuse("pidfd_send_signal")
        refuse("pidfd_open")
    filt.load()


def enter(policy: Policy, report: Report) -> None:
    """Confine this process (and everything it starts) to ``policy``; ``report`` is ``probe()``'s answer."""
    if not report.active:
        return
    try:
        if os.geteuid() == 0:
            _drop_capabilities()
        _landlock(policy, report.landlock_abi)
        gpu = any(p.name.startswith("nvidia") for p in policy.devices)  # a CUDA worker's policy opens the GPUs
        _seccomp(report.landlock_abi, datagrams=gpu)
    except Exception as exc:  # noqa: BLE001 - say which part failed
        raise SandboxError(f"could not enter the sandbox: {type(exc).__name__}: {exc}") from exc


def in_forked_child(body: Callable[[], dict]) -> dict:
    """Run ``body`` in a forked child (which may confine itself: the caller is untouched) and return the dict it
    returns, as JSON through a pipe; ``{}`` if the child died first. For tests and tools probing the sandbox."""
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: never returns to the caller
        try:
            os.close(read)
            os.write(write, json.dumps(body()).encode())
        finally:
            os._exit(0)
    os.close(write)
    data = b""
    while chunk := os.read(read, 65536):
        data += chunk
    os.close(read)
    os.waitpid(pid, 0)
    return json.loads(data or b"{}")


def default_read_paths(extra: Iterable[Path] = ()) -> tuple[list[Path], list[Path]]:
    """(read + execute, read-only) paths a Python worker with torch needs, without the repository itself."""
    execute = {Path(p) for p in ("/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/opt", "/snap")}
    for prefix in {sys.prefix, sys.base_prefix, sys.exec_prefix, os.path.dirname(os.path.realpath(sys.executable))}:
        execute.add(Path(prefix))
    for entry in sys.path:
        if entry and os.path.isdir(entry) and ("site-packages" in entry or "dist-packages" in entry):
            execute.add(Path(entry))
    read = [Path(p) for p in ("/etc", "/proc", "/sys", "/dev/random", "/dev/urandom")]
    read += list(extra)
    return sorted(execute), read


def _drop_capabilities() -> None:
    """As root, give up every capability (and the right to regain them by exec): root's CAP_SYS_PTRACE would
    otherwise let it read other processes' ``/proc/PID/environ`` despite Landlock, and CAP_DAC_OVERRIDE reaches
    files Landlock does not cover. No maintained pure-Python binding does this; it is three prctl calls and a capset."""
    import ctypes

    libc = ctypes.CDLL(None, use_errno=True)
    pr_capbset_drop, pr_set_securebits, pr_cap_ambient, pr_cap_ambient_clear_all = 24, 28, 47, 4
    secbits = 0x01 | 0x02 | 0x04 | 0x08 | 0x10 | 0x20 | 0x40 | 0x80  # NOROOT, NO_SETUID_FIXUP, KEEP_CAPS_LOCKED,
    libc.prctl(pr_cap_ambient, pr_cap_ambient_clear_all, 0, 0, 0)  # NO_CAP_AMBIENT_RAISE, each with its lock
    for cap in range(64):
        libc.prctl(pr_capbset_drop, cap, 0, 0, 0)  # EINVAL past the last capability: harmless
    if libc.prctl(pr_set_securebits, secbits, 0, 0, 0) != 0:
        raise OSError(ctypes.get_errno(), "prctl(PR_SET_SECUREBITS) failed")

    class Header(ctypes.Structure):
        _fields_ = [("version", ctypes.c_uint32), ("pid", ctypes.c_int)]

    class Data(ctypes.Structure):
        _fields_ = [("effective", ctypes.c_uint32), ("permitted", ctypes.c_uint32), ("inheritable", ctypes.c_uint32)]

    header, data = Header(0x20080522, 0), (Data * 2)()  # _LINUX_CAPABILITY_VERSION_3: two 32-bit words, all zero
    capset = {"x86_64": 126, "aarch64": 91}[platform.machine()]
    if libc.syscall(capset, ctypes.byref(header), ctypes.byref(data)) != 0:
        raise OSError(ctypes.get_errno(), "capset failed")
