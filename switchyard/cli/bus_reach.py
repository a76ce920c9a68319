"""A process meant to be reached by another (`scheduler run`, `executor run`) on the
in-process bus reaches nothing and is reached by nothing: a scheduler whose commands no
executor hears, an executor that waits for ever, and neither says so (issue 32). Such a
process takes its bus from --bus, $SWITCHYARD_BUS or the config file's `bus`, and refuses
to start on the in-process one by default: only a bus named 'memory' on purpose (a test,
a trial on one machine) runs on it, with a warning. `serve` and `demo` are one process,
where the in-process bus is the right default.
"""

from __future__ import annotations

import logging

import click
from click.core import ParameterSource

from switchyard import exitcodes
from switchyard.cli.errors import CliFailure
from switchyard.cli.options import BUS_ENV, IN_PROCESS_BUS

log = logging.getLogger(__name__)


def require_shared_bus(bus_url: str, role: str, param: str = "bus_url") -> None:
    """Refuse (exit 2) the in-process bus when nobody chose it; warn when somebody did.
    `role` says what in another process will not be reached ("executors", "the scheduler")."""
    if bus_url != IN_PROCESS_BUS:
        return
    source = click.get_current_context().get_parameter_source(param)
    if source in (None, ParameterSource.DEFAULT):
        raise CliFailure(
            f"no bus given: on the in-process bus this process would reach no {role} in another process "
            f"and none would reach it; give --bus pulsar://HOST:PORT (or ${BUS_ENV}, or bus in the config "
            f"file), or --bus {IN_PROCESS_BUS} to run on it anyway (one process: `switchyard serve`)",
            exitcodes.USAGE,
        )
    log.warning(
        "--bus %s: the in-process bus reaches no %s in another process (chosen on purpose; anything "
        "else needs pulsar://HOST:PORT)",
        IN_PROCESS_BUS,
        role,
    )


__all__ = ["require_shared_bus"]
