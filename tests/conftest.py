"""Fixtures shared by every test folder."""

from tests.served import world

__all__ = ["world"]
