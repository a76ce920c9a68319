"""Shared bench machinery: the stack's env, fresh databases, timers and deadlines,
result rows, Markdown tables and the JSON file.

Nothing here starts a server by hand: `stack_up` runs `scripts/stack up` (idempotent)
and reads the URLs it writes to `<stack dir>/env`.
"""

from __future__ import annotations

import json
import math
import os
import platform
import resource
import subprocess
import time
import urllib.error
import urllib.parse
import urllib.request
import uuid
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from datetime import datetime, timezone
from importlib import metadata
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
RESULTS_DIR = REPO / "bench" / "results"
STACK_SCRIPT = REPO / "scripts" / "stack"


# --- the stack ---------------------------------------------------------------------------


@dataclass(frozen=True)
class StackEnv:
    mariadb_url: str  # app user, no database name
    pulsar_url: str
    pulsar_admin_url: str | None
    etcd_url: str | None
    values: dict[str, str] = field(default_factory=dict, repr=False)

    def as_environ(self) -> dict[str, str]:
        return dict(self.values)


def stack_dir() -> Path:
    return Path(os.environ.get("SWITCHYARD_STACK_DIR", REPO / ".stack"))


def parse_env_file(text: str) -> dict[str, str]:
    """`export KEY=VALUE` lines (as `scripts/stack up` writes them) into a dict."""
    out: dict[str, str] = {}
    for line in text.splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        if line.startswith("export "):
            line = line[len("export ") :]
        if "=" not in line:
            continue
        key, value = line.split("=", 1)
        out[key.strip()] = value.strip().strip('"').strip("'")
    return out


def stack_up(timeout_s: float = 600) -> StackEnv:
    """`scripts/stack up` (a no-op when everything runs), then the env it wrote."""
    proc = subprocess.run([str(STACK_SCRIPT), "up"], cwd=REPO, capture_output=True, text=True, timeout=timeout_s)
    if proc.returncode != 0:
        raise RuntimeError(f"scripts/stack up failed (exit {proc.returncode}):\n{proc.stderr[-2000:]}")
    env_file = stack_dir() / "env"
    values = parse_env_file(env_file.read_text())
    for k, v in values.items():
        os.environ.setdefault(k, v)
    missing = [k for k in ("SWITCHYARD_MARIADB_URL", "SWITCHYARD_PULSAR_URL") if not values.get(k)]
    if missing:
        raise RuntimeError(f"{env_file} lacks {', '.join(missing)}")
    return StackEnv(
        mariadb_url=values["SWITCHYARD_MARIADB_URL"],
        pulsar_url=values["SWITCHYARD_PULSAR_URL"],
        pulsar_admin_url=values.get("SWITCHYARD_PULSAR_ADMIN_URL"),
        etcd_url=values.get("SWITCHYARD_ETCD_URL"),
        values=values,
    )


# --- databases -----------------------------------------------------------------------------


def database_url(base_url: str, name: str) -> str:
    from sqlalchemy.engine import make_url

    return make_url(base_url).set(database=name).render_as_string(hide_password=False)


@contextmanager
def fresh_database(base_url: str, prefix: str = "bench", keep: bool = False) -> Iterator[str]:
    """A new empty database on the MariaDB of `base_url`; yields its URL, dropped after."""
    from sqlalchemy import create_engine, text

    name = f"{prefix}_{uuid.uuid4().hex[:10]}"
    admin = create_engine(base_url, pool_pre_ping=True)
    try:
        with admin.begin() as conn:
            conn.execute(text(f"CREATE DATABASE `{name}` CHARACTER SET utf8mb4"))
        try:
            yield database_url(base_url, name)
        finally:
            if not keep:
                with admin.begin() as conn:
                    conn.execute(text(f"DROP DATABASE IF EXISTS `{name}`"))
    finally:
        admin.dispose()


def pymysql_connect(url: str, autocommit: bool = False) -> Any:
    """A raw PyMySQL connection for a SQLAlchemy URL (the ceilings use no ORM/Core)."""
    import pymysql
    from sqlalchemy.engine import make_url

    u = make_url(url)
    return pymysql.connect(
        host=u.host or "127.0.0.1",
        port=u.port or 3306,
        user=u.username,
        password=u.password or "",
        database=u.database,
        charset="utf8mb4",
        autocommit=autocommit,
    )


# --- Pulsar --------------------------------------------------------------------------------


def bench_prefix(section: str) -> str:
    """A fresh topic prefix: nothing from another run or section leaks in."""
    return f"bench{section[:6]}{uuid.uuid4().hex[:6]}"


def pulsar_admin_get(admin_url: str | None, path: str, timeout: float = 5.0) -> Any:
    if not admin_url:
        return None
    try:
        with urllib.request.urlopen(admin_url.rstrip("/") + path, timeout=timeout) as r:
            body = r.read().decode()
    except (OSError, urllib.error.URLError):
        return None
    try:
        return json.loads(body)
    except ValueError:
        return body.strip()


def delete_topics(admin_url: str | None, prefix: str, tenant: str = "public", namespace: str = "default") -> int:
    """Best effort: force-delete the topics a section created (keeps the broker lean)."""
    topics = pulsar_admin_get(admin_url, f"/admin/v2/persistent/{tenant}/{namespace}")
    if not isinstance(topics, list) or not admin_url:
        return 0
    gone = 0
    for full in topics:
        local = str(full).rsplit("/", 1)[-1]
        if not local.startswith(prefix):
            continue
        url = f"{admin_url.rstrip('/')}/admin/v2/persistent/{tenant}/{namespace}/{urllib.parse.quote(local, safe='')}?force=true"
        req = urllib.request.Request(url, method="DELETE")
        try:
            with urllib.request.urlopen(req, timeout=10):
                gone += 1
        except (OSError, urllib.error.URLError):
            pass
    return gone


# --- timers, deadlines, statistics ------------------------------------------------------------


class Deadline:
    """Every measurement loop is bounded: `while not dl.expired(): ...`."""

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds
        self.start = time.monotonic()
        self.end = self.start + seconds

    def remaining(self) -> float:
        return max(0.0, self.end - time.monotonic())

    def expired(self) -> bool:
        return time.monotonic() >= self.end

    def elapsed(self) -> float:
        return time.monotonic() - self.start


def wait_until(predicate: Any, deadline: Deadline, poll: float = 0.01) -> bool:
    while not predicate():
        if deadline.expired():
            return bool(predicate())
        time.sleep(poll)
    return True


def percentile(values: Sequence[float], q: float) -> float | None:
    """Nearest-rank percentile (q in 0..100); None for no values."""
    if not values:
        return None
    s = sorted(values)
    k = max(0, min(len(s) - 1, math.ceil(q / 100 * len(s)) - 1))
    return float(s[k])


def median(values: Iterable[float]) -> float | None:
    v = sorted(x for x in values if x is not None)
    if not v:
        return None
    mid = len(v) // 2
    return float(v[mid]) if len(v) % 2 else (v[mid - 1] + v[mid]) / 2


def lag_summary(lags_s: Sequence[float]) -> dict[str, float | int | None]:
    return {
        "count": len(lags_s),
        "min": min(lags_s) if lags_s else None,
        "p50": percentile(lags_s, 50),
        "p90": percentile(lags_s, 90),
        "p99": percentile(lags_s, 99),
        "max": max(lags_s) if lags_s else None,
    }


def _proc_status_mb(field_name: str) -> float | None:
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith(field_name + ":"):
                return int(line.split()[1]) / 1024
    except (OSError, ValueError, IndexError):
        pass
    return None


def peak_rss_mb() -> float:
    """This process's peak RSS so far, in MB: VmHWM, which belongs to the address space
    and so starts afresh at exec. (`ru_maxrss` does not: a spawned child inherits the
    parent's peak, measured before the exec.)"""
    hwm = _proc_status_mb("VmHWM")
    return hwm if hwm is not None else resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def rss_mb() -> float | None:
    return _proc_status_mb("VmRSS")


# --- results ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class Goal:
    """`ratio_min` / `ratio_max`: the row's ratio against target; `value_min` /
    `value_max`: the Switchyard figure itself against target (absolute goals)."""

    kind: str
    target: float
    unit: str = ""

    def text(self) -> str:
        if self.kind == "ratio_min":
            return f">= {self.target:g}x"
        if self.kind == "ratio_max":
            return f"ratio <= {self.target:g}x"
        if self.kind == "value_min":
            return f">= {fmt_value(self.target, self.unit)}"
        if self.kind == "value_max":
            return f"<= {fmt_value(self.target, self.unit)}"
        return self.kind

    def met(self, value: float | None, ratio: float | None) -> bool | None:
        if self.kind == "ratio_min":
            return None if ratio is None else ratio >= self.target
        if self.kind == "ratio_max":
            return None if ratio is None else ratio <= self.target
        if value is None:
            return None
        if self.kind == "value_min":
            return value >= self.target
        if self.kind == "value_max":
            return value <= self.target
        return None


@dataclass
class Row:
    figure: str
    switchyard: float | None
    peer: float | None = None
    unit: str = "/s"
    goal: Goal | None = None
    ratio: float | None = None  # default: switchyard / peer
    note: str = ""

    def __post_init__(self) -> None:
        if self.ratio is None and self.switchyard is not None and self.peer:
            self.ratio = self.switchyard / self.peer

    @property
    def met(self) -> bool | None:
        return None if self.goal is None else self.goal.met(self.switchyard, self.ratio)

    def as_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["goal"] = None if self.goal is None else {**asdict(self.goal), "text": self.goal.text()}
        d["met"] = self.met
        return d


@dataclass
class Section:
    name: str
    title: str
    rows: list[Row] = field(default_factory=list)
    raw: dict[str, Any] = field(default_factory=dict)
    settings: dict[str, Any] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    skipped: str | None = None
    error: str | None = None
    seconds: float = 0.0

    def as_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "title": self.title,
            "rows": [r.as_dict() for r in self.rows],
            "raw": self.raw,
            "settings": self.settings,
            "notes": self.notes,
            "skipped": self.skipped,
            "error": self.error,
            "seconds": round(self.seconds, 2),
        }


def fmt_value(v: float | None, unit: str = "") -> str:
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return "—"
    if unit in ("s", "ms", "µs", "MB", "x"):
        if abs(v) >= 100:
            s = f"{v:,.0f}"
        elif abs(v) >= 10:
            s = f"{v:,.1f}"
        else:
            s = f"{v:,.3f}" if unit == "s" else f"{v:,.2f}"
        return f"{s} {unit}" if unit != "x" else f"{s}x"
    if abs(v) >= 100:
        s = f"{v:,.0f}"
    elif abs(v) >= 1:
        s = f"{v:,.1f}"
    else:
        s = f"{v:.3g}"
    return f"{s} {unit}".strip()


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def markdown_table(section: Section) -> str:
    head = f"### {section.name}: {section.title}\n\n"
    if section.skipped:
        return head + f"_skipped: {section.skipped}_\n"
    lines = [
        "| figure | Switchyard | peer/ceiling | ratio | goal | met? |",
        "| --- | ---: | ---: | ---: | --- | --- |",
    ]
    for r in section.rows:
        met = {True: "yes", False: "**no**", None: "—"}[r.met]
        ratio = "—" if r.ratio is None else f"{r.ratio:.2f}x"
        fig = r.figure + (f" ({r.note})" if r.note else "")
        lines.append(
            f"| {_cell(fig)} | {fmt_value(r.switchyard, r.unit)} | {fmt_value(r.peer, r.unit)} | {ratio} | "
            f"{r.goal.text() if r.goal else '—'} | {met} |"
        )
    out = head + "\n".join(lines) + "\n"
    if section.error:
        out += f"\n_error: {_cell(section.error)}_\n"
    if section.notes:
        out += "\n" + "\n".join(f"- {' '.join(n.split())}" for n in section.notes) + "\n"
    return out


def _jsonable(o: Any) -> Any:
    if isinstance(o, float) and (math.isnan(o) or math.isinf(o)):
        return None
    if isinstance(o, dict):
        return {str(k): _jsonable(v) for k, v in o.items()}
    if isinstance(o, (list, tuple, set)):
        return [_jsonable(v) for v in o]
    if isinstance(o, (str, int, float, bool)) or o is None:
        return o
    if isinstance(o, datetime):
        return o.isoformat()
    return str(o)


def results_payload(sections: Sequence[Section], meta: dict[str, Any]) -> dict[str, Any]:
    return _jsonable({"meta": meta, "sections": [s.as_dict() for s in sections]})


def write_results(sections: Sequence[Section], meta: dict[str, Any], directory: Path = RESULTS_DIR) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    stamp = datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%SZ")
    path = directory / f"{stamp}.json"
    path.write_text(json.dumps(results_payload(sections, meta), indent=2, sort_keys=False) + "\n")
    return path


# --- versions ----------------------------------------------------------------------------------


def _dist_version(name: str) -> str | None:
    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return None


def versions(env: StackEnv | None) -> dict[str, Any]:
    out: dict[str, Any] = {
        "python": platform.python_version(),
        "SQLAlchemy": _dist_version("SQLAlchemy"),
        "PyMySQL": _dist_version("PyMySQL"),
        "pulsar-client": _dist_version("pulsar-client"),
        "APScheduler": _dist_version("APScheduler"),
        "switchyard": _dist_version("switchyard"),
        "mariadb": None,
        "pulsar_broker": None,
    }
    if env is None:
        return out
    try:
        conn = pymysql_connect(env.mariadb_url, autocommit=True)
        try:
            with conn.cursor() as cur:
                cur.execute("SELECT VERSION()")
                out["mariadb"] = cur.fetchone()[0]
        finally:
            conn.close()
    except Exception as exc:  # noqa: BLE001 - a version is informative, never fatal
        out["mariadb"] = f"unknown ({type(exc).__name__})"
    out["pulsar_broker"] = pulsar_admin_get(env.pulsar_admin_url, "/admin/v2/brokers/version")
    return out


def machine() -> dict[str, Any]:
    info: dict[str, Any] = {"cpu_count": os.cpu_count(), "platform": platform.platform()}
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                info["mem_total_mb"] = int(line.split()[1]) // 1024
    except OSError:
        pass
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                info["cpu_model"] = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return info
