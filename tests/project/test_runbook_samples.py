"""The runbook's sample runs are what the current tool prints: each marked
block is made again (tests/helpers/runbook_samples.py) and compared.

Before: the samples were pasted once and went stale (12 checks; doctor
runs 21). Regenerate with `python -m tests.helpers.runbook_samples`.
"""
from __future__ import annotations

import pytest

from tests.helpers.runbook_samples import SAMPLES, documented, generate


def test_every_sample_is_in_the_runbook() -> None:
    assert set(documented()) == set(SAMPLES)


@pytest.mark.parametrize("name", sorted(SAMPLES))
def test_the_runbook_sample_is_current(name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("HERMES_STORE_URL", raising=False)
    assert documented()[name] == generate(name), (
        f"the runbook's sample {name!r} is stale: python -m tests.helpers.runbook_samples")
