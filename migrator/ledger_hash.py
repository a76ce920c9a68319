"""What the ledger's content hash holds: two halves, so a re-run can skip the mapping.

    content_hash = source digest (32 hex) + mapped hash (32 hex)

The source digest covers everything the mapping of a row depends on: the legacy row's
content columns (`LegacyDefinition.digest`, computed by the reader the same way for a SQL
read and a binlog image), the business record the mapping consults (the callback base URL
of a batch-center task, the live executor addresses of a sharding-broadcast job), the time
zone, the mapping options, and the mapping's version. Equal digest: the row maps to what
the target already has, so it is unchanged without mapping it. A different digest does
not mean a change: the row is mapped and its mapped hash (the second half, what the
target holds) decides, as it always did; when only the digest moved, the ledger row is
refreshed (migrator.apply), so the next run takes the cheap path again.

The mapping's version is MAPPING_VERSION *and* a fingerprint of the source of every
module that decides how a row maps (MAPPING_MODULES): a code change to the mapping
invalidates every stored digest by itself, so no one has to remember to bump a constant
for the targets to be re-derived (a forgotten bump would leave stale targets forever).
The price of an edit there is one full re-mapping run.

One thing the digest cannot see is time: a cron job whose `end_time` passes while nothing
changes maps to a completed trigger; the scheduler completes it itself at its end.
"""

from __future__ import annotations

import hashlib
import importlib.util
from functools import cache

from migrator.mapping import MappingOptions
from readers.digest import DIGEST_CHARS
from readers.records import LegacyBusiness, LegacyDefinition, SourceSystem

MAPPING_VERSION = "2"  # bump for a change the module fingerprint cannot see (e.g. a dependency's)
# the modules whose code decides how a legacy row becomes a target job (or a quarantine)
MAPPING_MODULES = (
    "migrator.mapping",
    "migrator.ledger_hash",
    "readers.digest",
    "readers.images",
    "readers.xxljob.mapping",
    "readers.xxljob.cron_lineage",
    "readers.batchcenter.mapping",
    "readers.legacy_ddl.values",
    "readers.timezones",
    "scheduler_core.cron",
    "scheduler_core.model",
)
HALF = DIGEST_CHARS


@cache
def mapping_version() -> str:
    """MAPPING_VERSION plus a hash of the mapping modules' source (read once per process).
    A module whose source cannot be read (a frozen build) counts by its name only."""
    h = hashlib.sha256(MAPPING_VERSION.encode())
    for name in MAPPING_MODULES:
        h.update(b"\0" + name.encode())
        spec = importlib.util.find_spec(name)
        origin = spec.origin if spec is not None else None
        if origin and origin.endswith(".py"):
            try:
                with open(origin, "rb") as f:
                    h.update(f.read())
            except OSError:
                pass
    return h.hexdigest()[:16]


def source_digest(defn: LegacyDefinition, business: LegacyBusiness | None, options: MappingOptions) -> str:
    """32 hex; "" when the reader gave no row digest (then only the mapped hash decides)."""
    return context_digest(
        defn.digest,
        defn.source.value,
        defn.biz_code,
        defn.time_zone,
        business,
        options,
        broadcast=defn.broadcast,
        cron_dialect=dialect_context(defn.cron_dialect, defn.cron_dialect_fallback),
    )


def dialect_context(dialect: str, fallback: str) -> str:
    """The dialect context of a digest: the dialect, and the fallback when there is one."""
    return f"{dialect},{fallback}" if fallback else dialect


def context_digest(
    digest: str,
    source: str,
    legacy_biz_code: str,
    time_zone: str,
    business: LegacyBusiness | None,
    options: MappingOptions,
    *,
    broadcast: bool = False,
    cron_dialect: str = "2.5",
) -> str:
    """`source_digest` from its parts (a server-computed row digest has no definition).

    Only what the mapping of *this* row reads from the business counts: executor addresses
    for a broadcast job, the callback base URL for a batch-center task. So executors coming
    and going (xxl-job's registry moves all the time) leave every other job's digest alone."""
    if not digest:
        return ""
    biz = options.business_map.get(legacy_biz_code, legacy_biz_code)
    if business is None:
        callback, addresses = "~", "~"
    else:
        callback = (business.callback_base_url or "") if source == SourceSystem.BATCH_CENTER.value else ""
        addresses = ",".join(business.executor_addresses) if broadcast else ""
    context = "\x1f".join(
        (
            # the Quartz dialect beside the zone: both decide when a cron fires ("2.5" adds
            # nothing, so the digests of the default dialect stay what they were)
            mapping_version(),
            source,
            digest,
            legacy_biz_code,
            biz,
            time_zone if cron_dialect == "2.5" else f"{time_zone}\x1equartz {cron_dialect}",
            callback,
            addresses,
            "1" if broadcast else "0",
            "1" if biz in options.api_only_businesses else "0",
            "1" if options.bridge_glue else "0",
        )
    )
    return hashlib.blake2b(context.encode("utf-8", "surrogatepass"), digest_size=HALF // 2).hexdigest()


def combined(source: str, mapped_hash: str) -> str:
    return (source or "-" * HALF) + mapped_hash[:HALF]


def source_half(content_hash: str) -> str:
    return content_hash[:HALF] if len(content_hash) == 2 * HALF else ""


def mapped_half(content_hash: str) -> str:
    return content_hash[HALF:] if len(content_hash) == 2 * HALF else content_hash[:HALF]
