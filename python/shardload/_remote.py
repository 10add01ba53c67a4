"""Remote checkpoints (docs/remote.md): the S3 settings the C core takes as options, found as the
CLI finds them (cli/cli_remote.c): AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY / AWS_SESSION_TOKEN,
AWS_REGION / AWS_DEFAULT_REGION, AWS_ENDPOINT_URL_S3 / AWS_ENDPOINT_URL, else the profile
(AWS_PROFILE or "default") of AWS_SHARED_CREDENTIALS_FILE (~/.aws/credentials) and AWS_CONFIG_FILE
(~/.aws/config). The CA bundle for https: AWS_CA_BUNDLE for s3:// (as aws reads it), else
CURL_CA_BUNDLE (as curl reads it), as the CLI's --ca-bundle defaults. The library itself reads no
environment (libcurl reads its proxy variables, http_proxy and the like: docs/remote.md)."""
from __future__ import annotations

import configparser
import ctypes
import os

from . import _native as N

_SCHEMES = (b"http://", b"https://", b"s3://")


def is_url(raw: bytes) -> bool:
    return raw.lower().startswith(_SCHEMES)


def _env(name: str) -> str | None:
    v = os.environ.get(name)
    return v if v else None


def _ini(var: str, name: str, section: str, key: str) -> str | None:
    path = _env(var) or os.path.join(os.path.expanduser("~"), ".aws", name)
    cp = configparser.RawConfigParser()
    try:
        cp.read(path)
    except (OSError, configparser.Error):
        return None
    if section == "default" and not cp.has_section(section):
        section = "profile default"   # botocore reads the config file's default profile as either
    return cp.get(section, key, fallback=None) or None


def _settings(profile: str | None) -> dict[str, str | None]:
    prof = profile or _env("AWS_PROFILE") or "default"
    section = prof if prof == "default" else f"profile {prof}"
    env_keys = profile is None and _env("AWS_ACCESS_KEY_ID") and _env("AWS_SECRET_ACCESS_KEY")
    s: dict[str, str | None] = {
        "s3_region": _env("AWS_REGION") or _env("AWS_DEFAULT_REGION")
        or _ini("AWS_CONFIG_FILE", "config", section, "region"),
        "s3_endpoint": _env("AWS_ENDPOINT_URL_S3") or _env("AWS_ENDPOINT_URL")
        or _ini("AWS_CONFIG_FILE", "config", section, "endpoint_url")}
    if env_keys:
        s.update(s3_access_key=_env("AWS_ACCESS_KEY_ID"), s3_secret_key=_env("AWS_SECRET_ACCESS_KEY"),
                 s3_session_token=_env("AWS_SESSION_TOKEN"))
    else:
        cred = "AWS_SHARED_CREDENTIALS_FILE"
        s.update(s3_access_key=_ini(cred, "credentials", prof, "aws_access_key_id"),
                 s3_secret_key=_ini(cred, "credentials", prof, "aws_secret_access_key"),
                 s3_session_token=_ini(cred, "credentials", prof, "aws_session_token"))
    return s


def open_opts(raw: bytes, s3_endpoint: str | None = None, s3_profile: str | None = None,
              ca_bundle: str | None = None, s3_region: str | None = None) -> N.LoadOpts:
    """The options for sl_checkpoint_open_opts: the S3 settings for an s3:// URL (s3_endpoint,
    s3_region and s3_profile as the CLI's --s3-endpoint, --s3-region and --s3-profile), defaults otherwise, and the CA
    bundle for https (ca_bundle as the CLI's --ca-bundle, else from the environment). The strings
    are kept on the returned structure (its _keep) for as long as it lives."""
    o = N.LoadOpts()
    N.lib.sl_load_opts_init(ctypes.byref(o))
    keep: list[bytes] = []
    s3 = raw.lower().startswith(b"s3://")
    s: dict[str, str | None] = _settings(s3_profile) if s3 else {}
    if s3 and s3_endpoint:
        s["s3_endpoint"] = s3_endpoint
    if s3 and s3_region:
        s["s3_region"] = s3_region
    s["ca_bundle"] = ca_bundle or (s3 and _env("AWS_CA_BUNDLE")) or _env("CURL_CA_BUNDLE")
    for field, value in s.items():
        if value:
            keep.append(os.fsencode(value))
            setattr(o, field, keep[-1])
    setattr(o, "_keep", keep)   # the strings o points to live as long as o
    return o
