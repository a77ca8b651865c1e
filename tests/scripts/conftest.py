"""The lane scripts are run as files (`python scripts/real_model_check.py`): their tests import
them as the scripts import each other, with scripts/ on the path."""

from __future__ import annotations

import importlib
from collections.abc import Callable
from pathlib import Path
from types import ModuleType

import pytest

SCRIPTS = Path(__file__).resolve().parents[2] / "scripts"


@pytest.fixture
def script(monkeypatch: pytest.MonkeyPatch) -> Callable[[str], ModuleType]:
    monkeypatch.syspath_prepend(str(SCRIPTS))
    return importlib.import_module
