"""The errors a user's input can cause: each is printed by the CLI as one line, exit 2, no traceback.

Every layer raises a subclass of `UserError` for problems the user can fix (a config key, a record
field, a path, a server that is down); anything else is a bug and keeps its traceback.
"""

from __future__ import annotations


class UserError(Exception):
    """An error caused by the user's input or environment: one line, no traceback."""


class ConfigError(UserError, ValueError):
    """A config file that cannot be used; the message is one line naming file and key."""


class RecordError(UserError, ValueError):
    """A malformed record (JSONL line, results row, scenario) with file and line where known."""
