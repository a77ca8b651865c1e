"""A one-certificate trust store for the tests, which only ever speak plain HTTP to loopback fakes.

Every model SDK client builds a TLS context when it is made, and loading the whole CA bundle costs
about 35 ms of CPU each time (most of a small test's own cost); through `SSL_CERT_FILE` httpx
loads this file instead."""

from __future__ import annotations

from pathlib import Path

import certifi

_BEGIN = "-----BEGIN CERTIFICATE-----"
_END = "-----END CERTIFICATE-----"


def one_root_certificate(folder: Path) -> Path:
    """A PEM file in `folder` holding the first root certificate of certifi's bundle."""
    bundle = Path(certifi.where()).read_text(encoding="ascii")
    start = bundle.index(_BEGIN)
    end = bundle.index(_END, start) + len(_END)
    path = folder / "one-root.pem"
    path.write_text(bundle[start:end] + "\n", encoding="ascii")
    return path
