"""The Dockerfile and the systemd unit say what a long-running install needs (scripts/check-deploy runs them)."""

from __future__ import annotations

import configparser
import re
from pathlib import Path

from bot.core.config import MateConfig

ROOT = Path(__file__).resolve().parents[2]


def test_the_image_runs_as_a_user_keeps_data_in_a_volume_and_checks_health() -> None:
    text = (ROOT / "Dockerfile").read_text(encoding="utf-8")
    assert re.search(r"^FROM python:3\.\d+-slim$", text, re.M)
    users = re.findall(r"^USER (\S+)$", text, re.M)
    assert users and users[-1] != "root"
    assert "VOLUME /srv/matebot/data" in text and "WORKDIR /srv/matebot" in text
    assert "HEALTHCHECK" in text and "/healthz" in text
    assert re.search(r'^CMD \["matebot", "run"', text, re.M)
    for copied in re.findall(r"^COPY (\S+)", text, re.M):
        assert (ROOT / copied).exists(), copied


def test_the_unit_restarts_on_failure_and_waits_out_the_drain() -> None:
    unit = configparser.ConfigParser(strict=False, interpolation=None)
    unit.optionxform = str  # type: ignore[assignment,method-assign]
    unit.read(ROOT / "deploy" / "matebot.service", encoding="utf-8")
    service = unit["Service"]
    assert service["Restart"] == "on-failure" and service["User"] != "root"
    drain = MateConfig().shutdown_drain_seconds
    assert int(service["TimeoutStopSec"]) > drain + 5  # the daemon's own limit: drain plus 5 s
    assert service["ExecStart"].split()[1:3] == ["run", "--config"]
    assert unit["Install"]["WantedBy"] == "multi-user.target"
