"""Why a turn failed, as one type whatever failed: storage or the model.

`TurnResult.explanation` is always a `TurnFailure` (or None for a turn that
did not fail): a stable ``code``, a one-line ``summary`` and the ``actions``
to take, so a caller reads ``result.explanation.actions`` without checking
what kind of failure it was. A storage failure keeps the copy table's
`StorageFailure` in ``storage``.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import anthropic

from sessiondb import StorageFailure

NO_CREDENTIALS = "model_error:no_credentials"


@dataclass(frozen=True)
class TurnFailure:
    """A failed turn explained: ``code`` is stable, ``actions`` are what to do."""

    code: str
    summary: str
    actions: tuple[str, ...] = ()
    storage: StorageFailure | None = None

    @classmethod
    def from_storage(cls, failure: StorageFailure) -> "TurnFailure":
        return cls(failure.code, failure.summary, failure.actions, failure)

    @classmethod
    def from_model_error(cls, code: str, error: BaseException) -> "TurnFailure":
        return cls(code, " ".join(str(error).split()) or type(error).__name__)

    def to_dict(self) -> dict[str, Any]:
        return {"code": self.code, "summary": self.summary, "actions": list(self.actions),
                "storage": self.storage.to_dict() if self.storage else None}


NO_CREDENTIALS_FAILURE = TurnFailure(
    NO_CREDENTIALS, "the anthropic client has no API key, auth token or credentials",
    ("set ANTHROPIC_API_KEY (or pass anthropic.Anthropic(api_key=...))",
     "or try the local scripted model: hermes chat --offline"))


def has_credentials(client: Any) -> bool:
    """Whether an anthropic client can authenticate a request. Without any,
    the SDK raises a bare TypeError at request time; other client objects
    (test doubles) are taken as able to."""
    if not isinstance(client, anthropic.Anthropic):
        return True
    headers = client.default_headers
    return bool(headers.get("X-Api-Key") or headers.get("Authorization")
                or getattr(client, "credentials", None) is not None
                or getattr(client, "custom_auth", None) is not None)
