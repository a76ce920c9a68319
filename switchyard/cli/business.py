"""The business a command acts on, named one way everywhere: `--business B` (issue 32).
`cutover`, `rollback`, `dualrun start` and `report` took it as a positional argument; that
form still works, hidden from the usage line, with a one-line note on stderr, so the
scripts written for it keep running while they are moved over."""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import click

BUSINESS_HELP = "The business (its biz_code)."


class _DeprecatedPositional(click.Argument):
    """The old positional BUSINESS: parsed, but left out of the usage line and the help."""

    def get_usage_pieces(self, ctx: click.Context) -> list[str]:
        return []


def one_business(*, required: bool = True, help: str = BUSINESS_HELP) -> Callable[[Any], Any]:
    """`--business B` handed to the command as `biz_code` (None when not required and not
    given); the deprecated positional form is read into the same argument."""

    def add(fn: Callable[..., Any]) -> Callable[..., Any]:
        @functools.wraps(fn)
        def resolved(*args: Any, business_positional: str | None, biz_code: str | None, **kwargs: Any) -> Any:
            ctx = click.get_current_context()
            if business_positional is not None:
                if biz_code is not None and biz_code != business_positional:
                    raise click.UsageError(
                        f"the business is named twice: {business_positional!r} and --business {biz_code!r}", ctx
                    )
                click.echo(
                    f"note: `{ctx.command_path} BUSINESS` is deprecated: use "
                    f"`{ctx.command_path} --business {business_positional}`",
                    err=True,
                )
                biz_code = business_positional
            if required and biz_code is None:
                raise click.UsageError("Missing option '--business'.", ctx)
            return fn(*args, biz_code=biz_code, **kwargs)

        out = click.option(
            "--business", "biz_code", default=None, metavar="BUSINESS", help=help + (" Required." if required else "")
        )(resolved)
        return click.argument("business_positional", required=False, cls=_DeprecatedPositional)(out)

    return add


__all__ = ["BUSINESS_HELP", "one_business"]
