"""The background review: a forked turn that saves memories and skills."""
from .review import Reviewer
from .review_config import ReviewConfig, load_review_config
from .review_fork import ReviewResult
from .review_prompt import REVIEW_OPENING, is_review_request, strip_harness

__all__ = [
    "REVIEW_OPENING",
    "ReviewConfig",
    "ReviewResult",
    "Reviewer",
    "is_review_request",
    "load_review_config",
    "strip_harness",
]
