"""One module per command group: each parses, calls the library, formats."""

__all__ = [
]
