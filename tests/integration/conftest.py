"""Fixtures for the integration tests (helpers live in ansible_helpers.py)."""
from ansible_helpers import server  # noqa: F401  pylint: disable=unused-import
