"""CPU accounting from /proc, shared by the sections that ask what the box's cores did.

A measured window (`CpuWindow`) snapshots, at its start and at its stop, the CPU seconds
(user + system, all threads) of each process of the pipeline under a role name (this
process, the executor children, mariadbd, the Pulsar broker's JVM, an HTTP endpoint, ...)
and the whole machine's jiffies from /proc/stat. From the two snapshots and the number of
items the window moved it gives each role's CPU seconds, CPU ms per item and the cores it
used on average; the machine's busy share (every core, whoever used it) and the CPU of
the processes outside the pipeline (the rest: etcd, other sessions, the kernel); and the
box's ceiling at those costs: items/s if every core did nothing but the pipeline,
cores * 1000 / (total CPU ms per item).

A child that exits before the window stops, or that notices the window's end itself
(an executor host seeing its N-th item), reports its own CPU at that moment
(`time.process_time()`: the same figure as /proc's utime + stime for the whole process);
`fill_missing` puts it in place of the stop's reading.

Linux only; where /proc is missing every figure is None. /proc counts in clock ticks
(10 ms here), so a sub-second window carries a few percent of rounding.
"""

from __future__ import annotations

import os
import time
from typing import Any

MARIADB_COMMS = ("mariadbd", "mysqld")
PULSAR_MARKERS = ("org.apache.pulsar.PulsarStandaloneStarter", "org.apache.pulsar.PulsarBrokerStarter")


def _tick() -> int:
    return os.sysconf("SC_CLK_TCK")


# --- parsers (pure: the unit tests feed them /proc text) ---------------------------------------


def parse_pid_stat(text: str) -> tuple[str, str, int]:
    """(comm, state, utime + stime in clock ticks) from the text of /proc/<pid>/stat. The
    command name sits in parentheses and may itself hold spaces or parentheses, so the
    fields are counted from the last ')'."""
    head, _, tail = text.rpartition(")")
    comm = head.split("(", 1)[1] if "(" in head else ""
    fields = tail.split()  # fields[0] is the state (field 3); utime, stime are fields 14, 15
    return comm, fields[0], int(fields[11]) + int(fields[12])


def parse_machine_stat(text: str) -> tuple[int, int, int, int]:
    """(all, idle, steal, irq) jiffies of every core together, from the text of /proc/stat:
    the 'cpu ' line's user, nice, system, idle, iowait, irq, softirq, steal, guest,
    guest_nice. idle counts idle + iowait, irq counts irq + softirq (interrupt work, e.g.
    loopback TCP, which the kernel may charge to no process); all is the sum of every
    field (as bench/shards.py has always counted it)."""
    for line in text.splitlines():
        if line.startswith("cpu "):
            values = [int(x) for x in line.split()[1:]] + [0] * 10
            return sum(values), values[3] + values[4], values[7], values[5] + values[6]
    raise ValueError("no aggregate 'cpu ' line in /proc/stat")


def busy_share(before: tuple[int, ...], after: tuple[int, ...]) -> float | None:
    """The machine's busy share between two `parse_machine_stat` readings."""
    jiffies = after[0] - before[0]
    return None if jiffies <= 0 else 1.0 - (after[1] - before[1]) / jiffies


# --- readers ------------------------------------------------------------------------------------


def _read(path: str) -> str | None:
    try:
        with open(path) as f:
            return f.read()
    except OSError:
        return None


def pid_cpu_s(pid: int) -> float | None:
    """CPU seconds (user + system, all threads) of a live process since it started; None
    when it is gone (or a zombie: an exited child not yet joined)."""
    if pid == os.getpid():
        return time.process_time()  # the same figure, to the nanosecond
    text = _read(f"/proc/{pid}/stat")
    if text is None:
        return None
    try:
        _, state, ticks = parse_pid_stat(text)
    except (IndexError, ValueError):
        return None
    return None if state in ("Z", "X") else ticks / _tick()


def pids_where(comms: tuple[str, ...] = (), cmdline_has: tuple[str, ...] = ()) -> list[int]:
    """Processes on this machine whose command name is one of `comms`, or whose command line
    holds one of `cmdline_has`."""
    found = []
    try:
        names = os.listdir("/proc")
    except OSError:
        return []
    for name in names:
        if not name.isdigit():
            continue
        comm = (_read(f"/proc/{name}/comm") or "").strip()
        if comm in comms:
            found.append(int(name))
            continue
        if cmdline_has and comm == "java":
            cmdline = (_read(f"/proc/{name}/cmdline") or "").replace("\0", " ")
            if any(m in cmdline for m in cmdline_has):
                found.append(int(name))
    return sorted(found)


def _stack_pid(server: str, comms: tuple[str, ...]) -> int | None:
    """The pid in the stack's pid file (`scripts/stack`), if that process is alive and is
    what it should be."""
    from bench.harness import stack_dir

    text = _read(str(stack_dir() / server / f"{server}.pid"))
    try:
        pid = int((text or "").strip())
    except ValueError:
        return None
    stat = _read(f"/proc/{pid}/stat")
    try:
        return pid if stat is not None and parse_pid_stat(stat)[0] in comms else None
    except (IndexError, ValueError):
        return None


def mariadb_pids() -> list[int]:
    """The stack's MariaDB server (its pid file), else every mariadbd/mysqld here."""
    pid = _stack_pid("mariadb", MARIADB_COMMS)
    return [pid] if pid is not None else pids_where(comms=MARIADB_COMMS)


def pulsar_pids() -> list[int]:
    """The stack's Pulsar broker JVM (standalone: broker, bookie and metadata store in one
    process; its pid file), else every JVM here running a Pulsar broker."""
    pid = _stack_pid("pulsar", ("java",))
    return [pid] if pid is not None else pids_where(cmdline_has=PULSAR_MARKERS)


def server_cpu_s(pids: list[int] | None = None) -> float | None:
    """CPU seconds of the MariaDB server process(es) on this machine; None when there is
    none to read."""
    values = [v for v in (pid_cpu_s(p) for p in (mariadb_pids() if pids is None else pids)) if v is not None]
    return sum(values) if values else None


def every_process() -> dict[int, tuple[str, int]]:
    """pid -> (comm, utime + stime ticks) of every process on the machine now."""
    out: dict[int, tuple[str, int]] = {}
    try:
        names = os.listdir("/proc")
    except OSError:
        return out
    for name in names:
        if name.isdigit():
            text = _read(f"/proc/{name}/stat")
            try:
                if text is not None:
                    comm, _, ticks = parse_pid_stat(text)
                    out[int(name)] = (comm, ticks)
            except (IndexError, ValueError):
                continue
    return out


def others_by_name(
    before: dict[int, tuple[str, int]], after: dict[int, tuple[str, int]], exclude: set[int]
) -> dict[str, int]:
    """Ticks per command name over a window, of the processes alive at both readings and
    not in `exclude`, largest first (a process that started or ended inside the window is
    not seen)."""
    names: dict[str, int] = {}
    for pid, (comm, ticks) in after.items():
        if pid in exclude or pid not in before or before[pid][0] != comm:
            continue
        used = ticks - before[pid][1]
        if used > 0:
            names[comm] = names.get(comm, 0) + used
    return dict(sorted(names.items(), key=lambda kv: -kv[1]))


def machine_jiffies() -> tuple[int, int, int, int]:
    """(all, idle, steal, irq) jiffies of the whole machine since boot."""
    text = _read("/proc/stat")
    if text is None:
        raise OSError("no /proc/stat")
    return parse_machine_stat(text)


def machine_busy() -> tuple[int, int]:
    """(all, idle) jiffies of the whole machine since boot: the busy share of every core
    over a run, whoever used it."""
    return machine_jiffies()[:2]


# --- a measured window --------------------------------------------------------------------------


SCHEDULER = "scheduler (this process)"
EXECUTOR = "executor process"
MARIADB = "mariadbd"
PULSAR = "Pulsar broker (java)"
ENDPOINT = "HTTP endpoint process"


SETTINGS = {
    "cpu_per_process": "user + system of every thread: /proc/<pid>/stat (this process: time.process_time(); "
    "an executor child: its own process_time() at its end), from the window's start to its stop",
    "machine": "/proc/stat, all cores: busy = 1 - (idle + iowait) / all; the rest = busy CPU outside the "
    "pipeline's processes (etcd, other sessions, the kernel's threads)",
    "ceiling": "cores * 1000 / (the pipeline's total CPU ms per item): items/s if every core did nothing "
    "but the pipeline at the measured costs",
    "cores": os.cpu_count(),
    "clock_tick_s": 1 / _tick(),
}


class CpuWindow:
    """CPU per role over a window. `roles` maps a role name to its process ids; `watch`
    roles are measured and shown but not counted as the pipeline's (e.g. the broker while
    APScheduler runs)."""

    def __init__(self, roles: dict[str, list[int]], watch: dict[str, list[int]] | None = None) -> None:
        self.roles = {k: list(v) for k, v in roles.items()}
        self.watch = {k: list(v) for k, v in (watch or {}).items()}
        self.cores = os.cpu_count() or 1
        self._t0 = self._t1 = 0.0
        self._cpu0: dict[str, float | None] = {}
        self._cpu1: dict[str, float | None] = {}
        self._m0: tuple[int, int, int, int] | None = None
        self._m1: tuple[int, int, int, int] | None = None
        self._every0: dict[int, tuple[str, int]] = {}
        self._every1: dict[int, tuple[str, int]] = {}

    @classmethod
    def pipeline(cls, extra: dict[str, list[int]] | None = None, broker: bool = True) -> CpuWindow:
        """This process, mariadbd and (if `broker`, else watched) the Pulsar broker, plus
        `extra` roles."""
        roles: dict[str, list[int]] = {SCHEDULER: [os.getpid()], **(extra or {}), MARIADB: mariadb_pids()}
        watch: dict[str, list[int]] = {}
        (roles if broker else watch)[PULSAR] = pulsar_pids()
        return cls(roles, watch)

    def _all(self) -> dict[str, list[int]]:
        return {**self.roles, **self.watch}

    @staticmethod
    def _sum(pids: list[int]) -> float | None:
        values = [pid_cpu_s(p) for p in pids]
        if not pids or any(v is None for v in values):
            return None
        return sum(v for v in values if v is not None)

    def _machine(self) -> tuple[int, int, int, int] | None:
        try:
            return machine_jiffies()
        except (OSError, ValueError):
            return None

    def start(self) -> CpuWindow:
        self._every0 = every_process()  # who else used the cores (a few ms, before the clock)
        self._m0 = self._machine()
        self._cpu0 = {role: self._sum(pids) for role, pids in self._all().items()}
        self._t0 = time.monotonic()
        return self

    def stop(self) -> CpuWindow:
        self._t1 = time.monotonic()
        self._cpu1 = {role: self._sum(pids) for role, pids in self._all().items()}
        self._m1 = self._machine()
        self._every1 = every_process()
        return self

    def fill_missing(self, reported: dict[str, float | None], replace: bool = False) -> CpuWindow:
        """A role whose processes had exited by the stop (or, with `replace`, whose own
        reading at the window's end is closer to it than the stop's): the processes' CPU
        since they started, as they read it at their end."""
        for role, value in reported.items():
            if value is not None and (replace or self._cpu1.get(role) is None):
                self._cpu1[role] = value
        return self

    def figures(self, items: int, unit: str = "trigger") -> dict[str, Any]:
        """The raw figures for `items` moved in the window (see the module docstring)."""
        seconds = max(1e-9, self._t1 - self._t0)

        def delta(role: str) -> float | None:
            a, b = self._cpu0.get(role), self._cpu1.get(role)
            return None if a is None or b is None else max(0.0, b - a)

        cpu = {role: delta(role) for role in self._all()}
        per = {role: None if v is None else 1000 * v / max(1, items) for role, v in cpu.items()}
        measured = [cpu[r] for r in self.roles]
        total_s = None if any(v is None for v in measured) else sum(v for v in measured if v is not None)
        total_ms = None if total_s is None else 1000 * total_s / max(1, items)
        busy = steal = busy_s = irq_s = None
        if self._m0 is not None and self._m1 is not None:
            busy = busy_share(self._m0, self._m1)
            jiffies = self._m1[0] - self._m0[0]
            steal = None if jiffies <= 0 else (self._m1[2] - self._m0[2]) / jiffies
            busy_s = (jiffies - (self._m1[1] - self._m0[1])) / _tick() if jiffies > 0 else None
            irq_s = (self._m1[3] - self._m0[3]) / _tick()
        mine = {p for pids in self.roles.values() for p in pids}
        others = others_by_name(self._every0, self._every1, mine)
        return {
            "unit": unit,
            "items": items,
            "seconds": seconds,
            "cores": self.cores,
            "pids": self._all(),
            "pipeline_roles": list(self.roles),
            "cpu_s": cpu,
            "cpu_ms_per_item": per,
            "cores_used": {role: None if v is None else v / seconds for role, v in cpu.items()},
            "total_cpu_ms_per_item": total_ms,
            "pipeline_cores_used": None if total_s is None else total_s / seconds,
            "machine_busy": busy,
            "machine_busy_cpu_s": busy_s,
            "steal_share": steal,
            # CPU the machine spent outside the pipeline's processes (watched roles, etcd,
            # other sessions, the kernel's own threads)
            "rest_cpu_s": None if busy_s is None or total_s is None else max(0.0, busy_s - total_s),
            # the busiest other processes by name (those alive at both readings)
            "rest_by_name_cpu_s": {k: v / _tick() for k, v in list(others.items())[:8]},
            # interrupt work (irq + softirq: loopback TCP among it); with tick accounting
            # (no CONFIG_IRQ_TIME_ACCOUNTING, as here) it is also in the CPU of the process
            # that was running, so it is not added to anything above
            "irq_cpu_s": irq_s,
            "ceiling_per_s": None if not total_ms else self.cores * 1000 / total_ms,
        }


def _ms(v: float | None) -> str:
    return "-" if v is None else f"{v:.3f}"


def describe(fig: dict[str, Any], peer_rate: float | None = None, peer: str = "") -> str:
    """One line for a row's note: CPU ms per item of each role (and the cores it used on
    average), the machine's busy share, and the box's ceiling at those costs with the
    ratio to the peer it implies."""
    unit = fig["unit"]
    parts = [
        f"{role} {_ms(fig['cpu_ms_per_item'][role])}"
        + ("" if fig["cores_used"][role] is None else f" ({fig['cores_used'][role]:.2f} cores)")
        for role in fig["pipeline_roles"]
    ]
    watched = [r for r in fig["cpu_s"] if r not in fig["pipeline_roles"]]
    text = f"CPU ms per {unit}: " + ", ".join(parts) + f"; total {_ms(fig['total_cpu_ms_per_item'])}"
    if watched:
        text += " (not counted: " + ", ".join(f"{r} {_ms(fig['cpu_ms_per_item'][r])}" for r in watched) + ")"
    busy = fig["machine_busy"]
    text += "; machine busy " + ("-" if busy is None else f"{100 * busy:.0f}%")
    if fig["pipeline_cores_used"] is not None:
        text += f" (pipeline {fig['pipeline_cores_used']:.2f} of {fig['cores']} cores"
        text += "" if fig["rest_cpu_s"] is None else f", the rest {fig['rest_cpu_s'] / fig['seconds']:.2f}"
        named = [(k, v / fig["seconds"]) for k, v in fig.get("rest_by_name_cpu_s", {}).items()]
        named = [(k, c) for k, c in named if c >= 0.05][:3]
        if named:
            text += ": " + ", ".join(f"{k} {c:.2f}" for k, c in named)
        text += ")"
    ceiling = fig["ceiling_per_s"]
    if ceiling:
        text += f"; at these costs the box tops out at {ceiling:,.0f}/s"
        if peer_rate:
            text += f" = {ceiling / peer_rate:.2f}x {peer}"
    return text
