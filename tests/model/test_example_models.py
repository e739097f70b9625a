"""The example's ``--model`` option: which driver each spec builds, and refusing bad specs."""

from __future__ import annotations

import pytest

from scheduler_example.models import make_driver
from sharedos_redis.model import ScriptedDriver
from sharedos_redis.model.anthropic_messages import AnthropicMessagesDriver
from sharedos_redis.model.openai_chat import OpenAIChatDriver


def test_model_specs(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
    monkeypatch.setenv("OPENAI_BASE_URL", "http://127.0.0.1:11434/v1")
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-ant-test")
    assert isinstance(make_driver("scripted"), ScriptedDriver)
    openai = make_driver("openai:qwen2.5:7b")
    assert isinstance(openai, OpenAIChatDriver) and openai.model == "qwen2.5:7b"
    assert isinstance(make_driver("anthropic:claude-test"), AnthropicMessagesDriver)
    for bad in ("openai", "openai:", "gemini:pro", ""):
        with pytest.raises(ValueError, match="--model"):
            make_driver(bad)
