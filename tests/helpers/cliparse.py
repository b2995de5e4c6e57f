"""Parse a `hermes ...` command line with the real click parser (no invoke)."""
from __future__ import annotations

import shlex

import click

from hstate_cli.main import cli


def parse_hermes(command: str) -> list[click.Context]:
    """Resolve every subcommand of ``command`` and build its context.

    Raises click.UsageError (or a subclass) when the CLI would reject it.
    Callbacks do not run: `make_context` only parses.
    """
    words = shlex.split(command)
    if not words or words[0] != "hermes":
        raise click.UsageError(f"not a hermes command: {command!r}")
    ctx = cli.make_context("hermes", words[1:])
    contexts = [ctx]
    command_obj: click.Command = cli
    while isinstance(command_obj, click.Group):
        rest = [*ctx._protected_args, *ctx.args]
        if not rest:
            raise click.UsageError(f"{command!r} names no subcommand")
        name, sub, rest = command_obj.resolve_command(ctx, rest)
        assert name is not None and sub is not None
        ctx = sub.make_context(name, rest, parent=ctx)
        contexts.append(ctx)
        command_obj = sub
    return contexts
