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
