"""Credentials never reach a result, a log or an error message: secret-named fields, URL userinfo,
secret query parameters, AWS key ids and the values of credential environment variables are masked."""

from __future__ import annotations

import pytest

from kvbench_core.contracts.redact import REDACTED, environment_secrets, is_secret_key, redact, redact_text


@pytest.mark.parametrize("key", ["password", "redis_password", "secret", "aws_secret_access_key", "access_key",
                                 "api_key", "apiKey", "auth_token",
                                 "token", "session-token", "private_key", "credentials", "SAS_KEY"])
def test_credential_names_are_secret(key: str) -> None:
    assert is_secret_key(key)


@pytest.mark.parametrize("key", ["tokens", "max_tokens", "chunk_tokens", "prefix_tokens", "bytes_per_token",
                                 "chars_per_token", "tokenizer", "token_rate", "password_env", "secret_env",
                                 "key", "cache_key", "keep_files", "path", "endpoint_url", "bucket"])
def test_ordinary_names_are_not(key: str) -> None:
    assert not is_secret_key(key)


def test_secret_fields_are_masked_at_any_depth_and_nothing_else_changes() -> None:
    spec = {"cache": {"tiers": [{"name": "s3", "backend": "s3", "capacity": "1TiB",
                                 "options": {"bucket": "kv", "aws_secret_access_key": "wJalrXUtnFEMI",
                                             "password_env": "REDIS_PASSWORD", "password": "",
                                             "nested": {"auth_token": {"value": "x"}}}}]},
            "workload": {"options": {"prefix_caching": {"prefix_tokens": [1, 2]}}}}
    masked = redact(spec)
    options = masked["cache"]["tiers"][0]["options"]
    assert options == {"bucket": "kv", "aws_secret_access_key": REDACTED, "password_env": "REDIS_PASSWORD",
                       "password": "", "nested": {"auth_token": REDACTED}}
    assert masked["workload"] == spec["workload"]
    assert spec["cache"]["tiers"][0]["options"]["aws_secret_access_key"] == "wJalrXUtnFEMI"  # a copy, not in place


@pytest.mark.parametrize(("text", "expected"), [
    ("redis://:hunter2@10.0.0.5:6379/0", "redis://***@10.0.0.5:6379/0"),
    ("https://bob:pw@example.com/kv", "https://***@example.com/kv"),
    ("s3 at http://minio:9000/bucket", "s3 at http://minio:9000/bucket"),
    ("https://h/o?X-Amz-Signature=abcd1234&X-Amz-Date=20240101", "https://h/o?X-Amz-Signature=***&X-Amz-Date=20240101"),
    ("https://h/o?X-Amz-Security-Token=IQoJb3&part=1", "https://h/o?X-Amz-Security-Token=***&part=1"),
    ("https://h/o?api_key=AIzaSyD-9tS&alt=json", "https://h/o?api_key=***&alt=json"),
    ("https://a.blob.core.windows.net/c?sv=2022-11-02&sig=Zm9vYmFy", "https://a.blob.core.windows.net/c?sv=2022-11-02&sig=***"),
    ("key id AKIAIOSFODNN7EXAMPLE leaked", "key id *** leaked"),
])
def test_secrets_inside_text_are_masked(text: str, expected: str) -> None:
    assert redact_text(text) == expected


def test_known_secret_values_are_masked_wherever_they_appear() -> None:
    error = "AUTH failed for user kv with password s3cr3t-v4lue (server said: s3cr3t-v4lue is wrong)"
    assert redact_text(error, ("s3cr3t-v4lue",)) == (
        "AUTH failed for user kv with password *** (server said: *** is wrong)")
    assert redact({"error": [error]}, ("s3cr3t-v4lue",)) == {"error": [redact_text(error, ("s3cr3t-v4lue",))]}
    assert redact_text("abc", ("abc",)) == "abc"  # too short to mask without destroying ordinary text


def test_credential_environment_variables_are_known_secrets(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KVBENCH_REDIS_PASSWORD", "correct-horse-battery")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "wJalrXUtnFEMI/K7MDENG")
    monkeypatch.setenv("KVBENCH_TOKENS", "not-a-secret-at-all")
    monkeypatch.setenv("SHORT_PASSWORD", "1234")
    secrets = environment_secrets()
    assert {"correct-horse-battery", "wJalrXUtnFEMI/K7MDENG"} <= set(secrets)
    assert "not-a-secret-at-all" not in secrets and "1234" not in secrets
    assert redact({"log": "connect failed: correct-horse-battery"}, secrets) == {"log": "connect failed: ***"}
