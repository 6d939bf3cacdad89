"""systemd/compactd.service and compactd.sysusers, checked by systemd's own tools.

`systemd-analyze verify` insists that ExecStart's binary exists; /usr/local/bin/compactd is
only there on an installed machine. So the unit is verified as shipped (where the missing
binary must be the only complaint) and as a copy whose ExecStart points at this venv's
`compactd` script (or `python -m watcher` before the package is installed), which must
verify cleanly. User=/Group= are pointed at the current user in the copy when no `compactd`
user exists, so a systemd that resolves them has nothing to object to either.
"""

from __future__ import annotations

import grp
import os
import platform
import pwd
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[3]
UNIT = REPO / "systemd" / "compactd.service"
PROXY_UNIT = REPO / "systemd" / "compactd-proxy.service"  # the second unit: `compactd proxy`
UNITS = [UNIT, PROXY_UNIT]
SYSUSERS = REPO / "systemd" / "compactd.sysusers"
MAX_EXPOSURE = 2.0

ANALYZE = shutil.which("systemd-analyze")
needs_analyze = pytest.mark.skipif(ANALYZE is None, reason="systemd-analyze is not installed")


def _analyze(*args: str | Path) -> subprocess.CompletedProcess[str]:
    assert ANALYZE is not None
    return subprocess.run(
        [ANALYZE, "--no-pager", *map(str, args)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        env={**os.environ, "SYSTEMD_COLORS": "0", "SYSTEMD_PAGER": "cat"},
    )


def _settings(text: str) -> dict[str, list[str]]:
    """Key -> values in order (a unit may repeat a key), ignoring sections and comments."""
    out: dict[str, list[str]] = {}
    for raw in text.splitlines():
        line = raw.strip()
        if not line or line.startswith(("#", ";", "[")):
            continue
        key, _, value = line.partition("=")
        out.setdefault(key.strip(), []).append(value.strip())
    return out


def _about_our_unit(output: str, unit: Path) -> list[str]:
    """verify also loads the units ours depends on; keep only what is said about ours."""
    return [line for line in output.splitlines() if "compactd" in line or str(unit) in line]


def _exec_start(unit: Path = UNIT) -> str:
    """The unit's ExecStart with this venv's `compactd` (or `python -m watcher`) in front."""
    args = _settings(unit.read_text(encoding="utf-8"))["ExecStart"][0].split(maxsplit=1)[1]
    script = Path(sys.executable).parent / "compactd"
    if script.is_file() and os.access(script, os.X_OK):
        return f"{script} {args}"
    return f"{sys.executable} -m watcher {args}"  # the package is not installed yet


def _account() -> tuple[str, str]:
    try:
        pwd.getpwnam("compactd")
        grp.getgrnam("compactd")
    except KeyError:
        return pwd.getpwuid(os.getuid()).pw_name, grp.getgrgid(os.getgid()).gr_name
    return "compactd", "compactd"


@pytest.fixture(params=UNITS, ids=lambda u: u.name)
def unit(request: pytest.FixtureRequest) -> Path:
    path: Path = request.param
    return path


@pytest.fixture
def runnable_unit(tmp_path: Path, unit: Path) -> Path:
    """The unit with only ExecStart (and, if need be, User/Group) changed."""
    user, group = _account()
    text = unit.read_text(encoding="utf-8")
    text, n = re.subn(r"(?m)^ExecStart=.*$", f"ExecStart={_exec_start(unit)}", text)
    assert n == 1
    text, n = re.subn(r"(?m)^User=.*$", f"User={user}", text)
    assert n == 1
    text, n = re.subn(r"(?m)^Group=.*$", f"Group={group}", text)
    assert n == 1
    out = tmp_path / unit.name  # verify wants the real unit name
    out.write_text(text, encoding="utf-8")
    return out


@needs_analyze
def test_verify_runnable_copy_is_clean(runnable_unit: Path) -> None:
    result = _analyze("verify", runnable_unit)
    complaints = _about_our_unit(result.stdout + result.stderr, runnable_unit)
    assert complaints == [], "\n".join(complaints)
    assert result.returncode == 0, result.stdout + result.stderr


@needs_analyze
def test_verify_as_shipped_only_misses_the_installed_binary(unit: Path) -> None:
    result = _analyze("verify", unit)
    complaints = _about_our_unit(result.stdout + result.stderr, unit)
    if Path("/usr/local/bin/compactd").exists():
        assert complaints == [], "\n".join(complaints)
        return
    assert complaints, "verify should have noticed /usr/local/bin/compactd is missing"
    for line in complaints:
        assert "/usr/local/bin/compactd" in line and "not executable" in line, line


@needs_analyze
def test_security_exposure(unit: Path) -> None:
    result = _analyze("security", "--offline=true", unit)
    output = result.stdout + result.stderr
    match = re.search(r"Overall exposure level for \S+: (\d+(?:\.\d+)?)", output)
    assert match, output
    exposure = float(match.group(1))
    assert exposure <= MAX_EXPOSURE, output


def _exposure(unit: Path) -> float:
    result = _analyze("security", "--offline=true", unit)
    match = re.search(r"Overall exposure level for \S+: (\d+(?:\.\d+)?)", result.stdout + result.stderr)
    assert match, result.stdout + result.stderr
    return float(match.group(1))


@needs_analyze
def test_cache_directory_costs_no_exposure(tmp_path: Path) -> None:
    """CacheDirectory= (a writable /var/cache/compactd for re-encoded weights) scores the same."""
    without = re.sub(r"(?m)^CacheDirectory(Mode)?=.*\n", "", UNIT.read_text(encoding="utf-8"))
    assert "CacheDirectory" not in _settings(without)
    copy = tmp_path / UNIT.name
    copy.write_text(without, encoding="utf-8")
    assert _exposure(UNIT) <= _exposure(copy)


def test_unit_settings() -> None:
    s = _settings(UNIT.read_text(encoding="utf-8"))
    assert s["Type"] in (["notify"], ["notify-reload"])
    if s["Type"] == ["notify"]:
        assert s["ExecReload"] == ["/bin/kill -HUP $MAINPID"]
    assert s["ExecStart"] == ["/usr/local/bin/compactd run"]
    assert s["NotifyAccess"] == ["main"]
    assert s["WatchdogSec"] == ["30"]
    assert s["TimeoutStartSec"] == ["120"]
    assert s["Restart"] == ["on-failure"]
    # A static user: agents join its group to reach the socket.
    assert s["User"] == ["compactd"]
    assert s["Group"] == ["compactd"]
    assert "DynamicUser" not in s
    assert s["RuntimeDirectory"] == ["compactd"]
    assert s["RuntimeDirectoryMode"] == ["0750"]
    assert s["StateDirectory"] == ["compactd"]
    assert s["StateDirectoryMode"] == ["0700"]
    assert s["ConfigurationDirectory"] == ["compactd"]
    # $CACHE_DIRECTORY: re-encoded weights (model.weights, summarizer.weights.default_cache_dir)
    assert s["CacheDirectory"] == ["compactd"]
    assert s["CacheDirectoryMode"] == ["0700"]
    assert s["UMask"] == ["0007"]
    assert s["RestrictAddressFamilies"] == ["AF_UNIX AF_INET AF_INET6"]
    assert s["IPAddressDeny"] == ["any"]
    assert s["IPAddressAllow"] == ["localhost"]
    assert s["MemoryDenyWriteExecute"] == ["yes"]
    assert s["SystemCallErrorNumber"] == ["EPERM"]  # a denied call must not SIGSYS the daemon


def test_proxy_unit_settings() -> None:
    s = _settings(PROXY_UNIT.read_text(encoding="utf-8"))
    assert s["ExecStart"] == [
        "/usr/local/bin/compactd proxy --listen 127.0.0.1:8787 --socket ipc:///run/compactd/agents.sock"
    ]
    assert s["Type"] == ["exec"]
    assert s["Wants"][0] == "compactd.service" and "compactd.service" in s["After"][0]
    # the daemon's group reaches its socket; nothing else of the daemon's is shared
    assert s["User"] == ["compactd"] and s["Group"] == ["compactd"]
    assert "StateDirectory" not in s and "RuntimeDirectory" not in s
    assert s["MemoryDenyWriteExecute"] == ["yes"]
    assert s["SystemCallErrorNumber"] == ["EPERM"]
    assert "sched_setscheduler" in s["SystemCallFilter"]  # libzmq
    daemon = _settings(UNIT.read_text(encoding="utf-8"))
    for key in (
        "ProtectSystem",
        "ProtectHome",
        "PrivateTmp",
        "NoNewPrivileges",
        "CapabilityBoundingSet",
        "PrivateUsers",
        "RestrictNamespaces",
        "SystemCallArchitectures",
        "RestrictAddressFamilies",
    ):
        assert s[key] == daemon[key], key  # hardened like the daemon


SYSUSERS_BIN = shutil.which("systemd-sysusers")


def _colon_table(path: Path) -> dict[str, list[str]]:
    rows = (line.split(":") for line in path.read_text(encoding="utf-8").splitlines() if line)
    return {row[0]: row for row in rows}


@pytest.mark.skipif(SYSUSERS_BIN is None, reason="systemd-sysusers is not installed")
@pytest.mark.skipif(os.geteuid() != 0, reason="systemd-sysusers --root needs root to chown its files")
def test_sysusers_creates_user_and_group(tmp_path: Path) -> None:
    assert SYSUSERS_BIN is not None
    (tmp_path / "etc").mkdir()
    result = subprocess.run(
        [SYSUSERS_BIN, f"--root={tmp_path}", str(SYSUSERS)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    passwd = _colon_table(tmp_path / "etc/passwd")
    group = _colon_table(tmp_path / "etc/group")
    user = passwd["compactd"]
    assert user[3] == group["compactd"][2]  # primary group is "compactd"
    assert user[5] == "/var/lib/compactd"
    assert user[6].endswith("nologin")
    assert int(user[2]) < 1000  # a system user


# --- the system-call sandbox against the libraries compactd loads ---------------------------
#
# systemd cannot be started here, so the child installs, by hand, the parts of the unit's
# seccomp sandbox that third-party code is likely to trip over: the @resources calls the
# unit denies (with SystemCallErrorNumber=EPERM) and MemoryDenyWriteExecute= (mmap W+X and
# mprotect +X refused, as systemd's filter does). Then it opens ZeroMQ sockets (libzmq
# aborts if pthread_setschedparam fails), runs a ctypes callback (libffi closure) and, if
# available, numpy (OpenBLAS mbind()s its buffers) and imports llama_cpp.

# x86_64 numbers of the calls in @resources (and of mmap/mprotect/pkey_mprotect below).
X86_64_SYSCALLS = {
    "ioprio_set": 251,
    "mbind": 237,
    "migrate_pages": 256,
    "move_pages": 279,
    "sched_setaffinity": 203,
    "sched_setattr": 314,
    "sched_setparam": 142,
    "sched_setscheduler": 144,
    "set_mempolicy": 238,
    "set_mempolicy_home_node": 450,
    "setpriority": 141,
    "setrlimit": 160,
}

SANDBOXED_CHILD = r"""
import ctypes, mmap, os, sys, tempfile

DENY = [int(n) for n in sys.argv[1].split(",") if n]

class Insn(ctypes.Structure):
    _fields_ = [("code", ctypes.c_ushort), ("jt", ctypes.c_ubyte), ("jf", ctypes.c_ubyte),
                ("k", ctypes.c_uint)]

class Prog(ctypes.Structure):
    _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.POINTER(Insn))]

LD, JEQ, AND, RET = 0x20, 0x15, 0x54, 0x06
ALLOW, EPERM = 0x7FFF0000, 0x00050000 | 1
PROT_ARG = 32  # offsetof(struct seccomp_data, args[2])
# (code, true-label, false-label, k); labels resolved below
prog = [(LD, None, None, 0)]
prog += [(JEQ, "deny", None, n) for n in DENY]
prog += [(JEQ, "mmap", None, 9), (JEQ, "mprot", None, 10), (JEQ, "mprot", None, 329),
         (RET, None, None, ALLOW)]
labels = {"mmap": len(prog)}
prog += [(LD, None, None, PROT_ARG), (AND, None, None, 6), (JEQ, "deny", "allow", 6)]
labels["mprot"] = len(prog)
prog += [(LD, None, None, PROT_ARG), (AND, None, None, 4), (JEQ, "deny", "allow", 4)]
labels["allow"] = len(prog)
prog += [(RET, None, None, ALLOW)]
labels["deny"] = len(prog)
prog += [(RET, None, None, EPERM)]
insns = [Insn(code, labels[jt] - i - 1 if jt else 0, labels[jf] - i - 1 if jf else 0, k)
         for i, (code, jt, jf, k) in enumerate(prog)]
array = (Insn * len(insns))(*insns)
libc = ctypes.CDLL(None, use_errno=True)
assert libc.prctl(38, 1, 0, 0, 0) == 0  # PR_SET_NO_NEW_PRIVS
assert libc.prctl(22, 2, ctypes.byref(Prog(len(insns), array)), 0, 0) == 0  # SECCOMP_MODE_FILTER

# The filter is in force:
try:
    mmap.mmap(-1, 4096, prot=mmap.PROT_READ | mmap.PROT_WRITE | mmap.PROT_EXEC)
    sys.exit("W+X mmap was allowed")
except PermissionError:
    pass
if 203 in DENY:
    try:
        os.sched_setaffinity(0, os.sched_getaffinity(0))
        sys.exit("sched_setaffinity was allowed")
    except PermissionError:
        pass

if 141 not in DENY:  # the digest worker and the inference thread lower their own priority
    import threading
    tid = threading.get_native_id()
    os.setpriority(os.PRIO_PROCESS, tid, os.getpriority(os.PRIO_PROCESS, tid) + 1)

callback = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_int)(lambda x: x + 1)
assert callback(41) == 42

import zmq
ctx = zmq.Context()
with tempfile.TemporaryDirectory() as d:
    server = ctx.socket(zmq.ROUTER)
    server.bind(f"ipc://{d}/s")
    client = ctx.socket(zmq.DEALER)
    client.connect(f"ipc://{d}/s")
    client.send(b"ping")
    assert server.recv_multipart()[1] == b"ping"
    server.close(linger=0)
    client.close(linger=0)
ctx.term()

try:
    import numpy as np
except ImportError:
    pass
else:
    a = np.ones((256, 256))
    assert (a @ a)[0, 0] == 256

try:
    import llama_cpp  # installs a ctypes log callback into libllama
except ImportError:
    pass
print("sandbox ok")
"""


def _syscall_groups() -> dict[str, list[str]]:
    """`systemd-analyze syscall-filter`: group -> members (calls and nested @groups)."""
    groups: dict[str, list[str]] = {}
    current: list[str] | None = None
    for line in _analyze("syscall-filter").stdout.splitlines():
        if line.startswith("@"):
            current = groups.setdefault(line.split()[0], [])
        elif current is not None and line.startswith(" ") and line.strip():
            member = line.split()[0]
            if not member.startswith("#"):
                current.append(member)
    return groups


def _expand(groups: dict[str, list[str]], name: str) -> set[str]:
    if not name.startswith("@"):
        return {name}
    return set().union(*(_expand(groups, m) for m in groups.get(name, [])))


def _unit_allowed_syscalls() -> set[str]:
    """The unit's SystemCallFilter= lines applied in order, as systemd does for an allow list."""
    groups = _syscall_groups()
    allowed: set[str] = set()
    lines = _settings(UNIT.read_text(encoding="utf-8"))["SystemCallFilter"]
    assert not lines[0].startswith("~"), "the unit's filter should be an allow list"
    for value in lines:
        deny = value.startswith("~")
        names = set().union(*(_expand(groups, n) for n in value.removeprefix("~").split()))
        allowed = allowed - names if deny else allowed | names
    return allowed


@needs_analyze
@pytest.mark.skipif(
    sys.platform != "linux" or platform.machine() != "x86_64",
    reason="the hand-made seccomp filter uses x86_64 system call numbers",
)
def test_libraries_run_under_the_units_syscall_sandbox(tmp_path: Path) -> None:
    pytest.importorskip("zmq")
    allowed = _unit_allowed_syscalls()
    assert "sched_setscheduler" in allowed  # libzmq aborts without it
    assert "sched_setaffinity" not in allowed
    assert "setpriority" in allowed  # the worker's and the inference thread's niceness
    deny = sorted(nr for name, nr in X86_64_SYSCALLS.items() if name not in allowed)
    script = tmp_path / "child.py"
    script.write_text(SANDBOXED_CHILD, encoding="utf-8")
    result = subprocess.run(
        [sys.executable, str(script), ",".join(map(str, deny))],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        cwd=tmp_path,
    )
    output = result.stdout + result.stderr
    assert result.returncode == 0, output
    assert "sandbox ok" in result.stdout, output
