"""The lab's tests share the library tests' fixtures (the tiny model, the ledger kept out of the home cache)."""

from tests.conftest import *  # noqa: F403  (pytest finds fixtures by name in this module)
