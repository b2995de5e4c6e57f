"""Click groups whose help lists commands under section headings."""
from __future__ import annotations

import click


class SectionedGroup(click.Group):
    """A group whose ``--help`` lists commands by section.

    ``sections`` maps a heading to command names, in display order;
    commands registered later by other modules (and not listed) appear
    under "Other commands", so nothing is ever hidden.
    """

    sections: dict[str, tuple[str, ...]] = {}

    def __init__(self, *args: object, sections: dict[str, tuple[str, ...]] | None = None,
                 **kwargs: object) -> None:
        super().__init__(*args, **kwargs)  # type: ignore[arg-type]
        if sections is not None:
            self.sections = sections

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        visible = {}
        for name in self.list_commands(ctx):
            cmd = self.get_command(ctx, name)
            if cmd is not None and not cmd.hidden:
                visible[name] = cmd
        if not visible:
            return
        limit = formatter.width - 6 - max(len(n) for n in visible)
        placed: set[str] = set()
        for heading, names in [*self.sections.items(), ("Other commands", tuple(visible))]:
            rows = [(n, visible[n].get_short_help_str(limit)) for n in names
                    if n in visible and n not in placed]
            placed.update(n for n, _ in rows)
            if rows:
                with formatter.section(heading):
                    formatter.write_dl(rows)


LEAF_KEY = "hermes.leaf_context"


class HermesCommand(click.Command):
    """A command that remembers its context (so a library's bad-input error
    is reported with this command's usage line, not the root's) and, when
    an argument that starts with '-' was taken for an unknown option, says
    how to pass it."""

    def invoke(self, ctx: click.Context) -> object:
        ctx.meta[LEAF_KEY] = ctx  # meta is shared by the whole context tree
        return super().invoke(ctx)

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        given_args = list(args)  # the parser consumes the list it is given
        try:
            return super().parse_args(ctx, args)
        except click.NoSuchOption as e:
            given = next((a for a in given_args if e.option_name and a.startswith(e.option_name)),
                         e.option_name or "")
            # '-foo' may well be text; '--bogus' is a mistyped option.
            if not given.startswith("--") and any(isinstance(p, click.Argument)
                                                  for p in self.params):
                # click types message Final; amended in place to keep the error's type and fields
                e.message += (  # type: ignore[misc]
                    f" To pass an argument that starts with '-', put '--' "
                    f"before it: {ctx.command_path} -- {given}")
            raise


SectionedGroup.command_class = HermesCommand
