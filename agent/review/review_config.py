"""Review settings: ``<home>/config.toml`` ``[review]``, then the environment.

    [review]
    enabled = true            # automatic review after completed turns
    max_steps = 16            # model steps per review
    max_input_tokens = 600000 # input tokens per review; <= 0 disables the budget
    summary = "on"            # off | on | verbose

A config that cannot be read or parsed leaves the defaults (review on) and
logs a warning. ``HERMES_REVIEW=off`` (or ``--no-review``) turns automatic
review off; ``/refine`` still runs one on request.
"""
from __future__ import annotations

import logging
import os
import tomllib
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Mapping

log = logging.getLogger(__name__)

CONFIG_NAME = "config.toml"
SUMMARY_MODES = ("off", "on", "verbose")
_OFF = ("off", "0", "no", "false")


@dataclass(frozen=True)
class ReviewConfig:
    enabled: bool = True
    max_steps: int = 16
    max_input_tokens: int = 600_000
    summary: str = "on"


def _from_table(table: Mapping[str, Any]) -> ReviewConfig:
    config = ReviewConfig()
    checks = {"enabled": bool, "max_steps": int, "max_input_tokens": int, "summary": str}
    values: dict[str, Any] = {}
    for key, kind in checks.items():
        if key not in table:
            continue
        value = table[key]
        if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
            log.warning("config [review] %s must be %s; using %r", key, kind.__name__,
                        getattr(config, key))
            continue
        values[key] = value
    if values.get("summary", "on") not in SUMMARY_MODES:
        log.warning("config [review] summary must be one of %s", ", ".join(SUMMARY_MODES))
        values.pop("summary")
    if values.get("max_steps", 1) < 1:
        log.warning("config [review] max_steps must be at least 1")
        values.pop("max_steps")
    return replace(config, **values)


def load_review_config(home: Path, env: Mapping[str, str] | None = None) -> ReviewConfig:
    """The settings for ``home``; unreadable or invalid config keeps the defaults."""
    env = os.environ if env is None else env
    path = Path(home) / CONFIG_NAME
    config = ReviewConfig()
    try:
        with open(path, "rb") as f:
            table = tomllib.load(f).get("review", {})
        if isinstance(table, dict):
            config = _from_table(table)
        else:
            log.warning("%s: [review] is not a table; review stays on", path)
    except FileNotFoundError:
        pass
    except (OSError, tomllib.TOMLDecodeError) as e:
        log.warning("cannot read %s (%s); review stays on with default settings", path, e)
    if env.get("HERMES_REVIEW", "").strip().lower() in _OFF:
        config = replace(config, enabled=False)
    return config
