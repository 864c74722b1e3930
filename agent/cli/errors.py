"""Errors the command line prints as one paragraph, without a traceback."""

from __future__ import annotations


class ConfigurationError(ValueError):
    """A setting or option that cannot work, explained in one paragraph (printed without a traceback)."""
