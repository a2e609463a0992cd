"""Every setting is documented in docs/settings.md with its environment variable."""

from __future__ import annotations

from pathlib import Path

import pytest

from dstp.settings import Settings, describe_settings

DOC = Path(__file__).resolve().parents[1] / "docs" / "settings.md"


def test_every_setting_is_documented() -> None:
    text = DOC.read_text()
    missing = [env for _, env, _, _ in describe_settings() if f"`{env}`" not in text]
    assert missing == [], f"document these in docs/settings.md: {missing}"


def test_environment_overrides_and_bad_values() -> None:
    s = Settings.from_env({"DSTP_PORT": "6000", "DSTP_CORS_ORIGINS": "http://a, http://b"}, host="0.0.0.0")
    assert (s.port, s.host, s.cors_origins) == (6000, "0.0.0.0", ("http://a", "http://b"))
    with pytest.raises(ValueError, match="DSTP_PORT"):
        Settings.from_env({"DSTP_PORT": "sixty"})
