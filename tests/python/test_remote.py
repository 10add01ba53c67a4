"""Remote checkpoints in the Python package (issue 17, docs/remote.md): shardload.open, plan and load
take http:// and s3:// URLs, the S3 settings found as the CLI finds them (AWS_* variables, a
profile of the shared credentials file, s3_endpoint=/s3_profile=); the loaded bytes equal the local
load's; a 404 or a refused signature raises the family's exception naming the URL; https with the
CA from CURL_CA_BUNDLE loads the same bytes, and an untrusted certificate raises naming the URL;
verify=True from S3 uses the store's SHA-256 of objects put with ChecksumAlgorithm SHA256.
The servers (tests/http_range_server.py, also with --tls and a CA made by the openssl CLI, moto's
S3 server with its SigV4 checks on) run on loopback, started here."""
from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

import shardload
from sl_fixtures import TESTS, tiny_ckpt, tiny_config  # noqa: F401  (pytest fixtures)


@pytest.fixture(autouse=True)
def _no_proxy(monkeypatch: pytest.MonkeyPatch) -> None:
    """libcurl honours the proxy variables (docs/remote.md): the loopback servers are reached
    directly."""
    for var in ("http_proxy", "https_proxy", "HTTPS_PROXY", "all_proxy", "ALL_PROXY", "no_proxy", "NO_PROXY"):
        monkeypatch.delenv(var, raising=False)


def _wait(path: Path, proc: subprocess.Popen[bytes]) -> None:
    for _ in range(200):
        if path.exists() or proc.poll() is not None:
            break
        time.sleep(0.05)
    assert path.exists(), "server did not start"


def _remote_works() -> bool:
    try:
        shardload.open("http://127.0.0.1:1/x/")
    except shardload.Error as e:
        return "built without it" not in str(e)
    return True


@pytest.fixture(scope="module")
def http(tiny_ckpt: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:  # noqa: F811
    if not _remote_works():
        pytest.skip("built without libcurl")
    root = tmp_path_factory.mktemp("www")
    shutil.copytree(tiny_ckpt, root / "ck")
    shutil.copytree(tiny_ckpt, root / "zero-layers")   # a config the planner refuses
    cfg = json.loads((tiny_ckpt / "config.json").read_text())
    (root / "zero-layers" / "config.json").write_text(json.dumps(dict(cfg, num_hidden_layers=0)))
    port = root / "port"
    p = subprocess.Popen([sys.executable, str(TESTS / "http_range_server.py"), str(root), str(port)])
    _wait(port, p)
    yield f"http://127.0.0.1:{port.read_text()}"
    p.terminate()
    p.wait()


@pytest.fixture(scope="module")
def https(tiny_ckpt: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, Path]]:  # noqa: F811
    if not _remote_works():
        pytest.skip("built without libcurl")
    if not shutil.which("openssl"):
        pytest.skip("no openssl CLI to make a test certificate")
    root = tmp_path_factory.mktemp("wwws")
    shutil.copytree(tiny_ckpt, root / "ck")
    ec = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes"]
    (root / "ext").write_text("subjectAltName=IP:127.0.0.1\nbasicConstraints=CA:FALSE\n")
    for cmd in (["req", "-x509", *ec, "-keyout", "ca.key", "-out", "ca.pem", "-days", "2", "-subj", "/CN=test CA"],
                ["req", *ec, "-keyout", "srv.key", "-out", "srv.csr", "-subj", "/CN=127.0.0.1"],
                ["x509", "-req", "-in", "srv.csr", "-CA", "ca.pem", "-CAkey", "ca.key", "-CAcreateserial",
                 "-days", "2", "-extfile", "ext", "-out", "srv.pem"]):
        subprocess.run(["openssl", *cmd], cwd=root, check=True, capture_output=True)
    port = root / "port"
    p = subprocess.Popen([sys.executable, str(TESTS / "http_range_server.py"), str(root), str(port),
                          "--tls", str(root / "srv.pem"), str(root / "srv.key")])
    _wait(port, p)
    yield f"https://127.0.0.1:{port.read_text()}", root / "ca.pem"
    p.terminate()
    p.wait()


def test_https(https: tuple[str, Path], tiny_ckpt: Path, monkeypatch: pytest.MonkeyPatch) -> None:  # noqa: F811
    url, ca = https
    monkeypatch.delenv("CURL_CA_BUNDLE", raising=False)
    with pytest.raises(shardload.Error, match=f"{url}/ck/model.safetensors.index.json: TLS certificate not trusted"):
        shardload.open(f"{url}/ck/")
    with shardload.open(f"{url}/ck/", ca_bundle=ca) as ck:   # the CLI's --ca-bundle
        assert _sums(shardload.load(ck, tp=2)) == _sums(shardload.load(tiny_ckpt, tp=2))
        assert shardload.plan(ck, tp=2).total_bytes > 0   # ck stays open for the next call
    monkeypatch.setenv("CURL_CA_BUNDLE", str(ca))
    assert _sums(shardload.load(f"{url}/ck/", tp=2)) == _sums(shardload.load(tiny_ckpt, tp=2))


def _sums(m: shardload.Model) -> list[dict[str, int]]:
    return [m.checksums(d) for d in range(len(m.plan.devices))]


def test_http_open_plan_load(http: str, tiny_ckpt: Path) -> None:  # noqa: F811
    ck = shardload.open(f"{http}/ck/")
    assert ck.remote and ck.files[0].startswith(f"{http}/ck/model-")
    assert len(ck.tensors) == len(shardload.open(tiny_ckpt).tensors)
    ck.close()
    assert shardload.plan(f"{http}/ck", tp=2).total_bytes == shardload.plan(tiny_ckpt, tp=2).total_bytes
    m = shardload.load(f"{http}/ck/", tp=4)
    assert _sums(m) == _sums(shardload.load(tiny_ckpt, tp=4))
    # a healthy server: nothing asked for again (the C stats' remote counters, read through)
    assert m.stats["engine"] == "http" and m.stats["remote_retries"] == m.stats["remote_restarts"] == 0
    with shardload.open(f"{http}/ck/") as remote, shardload.open(tiny_ckpt) as local:
        for t in local.tensors[:5]:   # Checkpoint.read over ranged GETs
            assert remote.read(t.name).tobytes() == local.read(t.name).tobytes(), t.name


def test_http_jax_load(http: str, tiny_ckpt: Path, monkeypatch: pytest.MonkeyPatch) -> None:  # noqa: F811
    """shardload.jax.load from a URL, in one C load and in many (groups of 256 KiB, as on
    devices that copy): every array equal to the local load's, the plan's bytes read."""
    jax = pytest.importorskip("jax")
    import numpy as np
    from jax.sharding import Mesh

    import shardload.jax as sj
    import shardload.jax._loader as jl
    mesh = Mesh(np.array(jax.devices()[:1]), ("model",))  # (the vocabulary, 1001, splits no further)
    local = {n: np.asarray(a) for n, a in sj.load(tiny_ckpt, mesh).items()}
    for group in (1 << 30, 256 << 10):
        monkeypatch.setattr(jl, "ADOPTED_GROUP", group)
        st: dict = {}
        got = sj.load(f"{http}/ck/", mesh, stats=st)
        assert set(got) == set(local)
        assert all(np.asarray(a).tobytes() == local[n].tobytes() for n, a in got.items())
        assert st["bytes_read"] >= st["read_bytes"] > 0 and (st["groups"] > 1) == (group < 1 << 30)


def test_http_blocking_gets_from_threads(http: str, tiny_ckpt: Path, tmp_path: Path) -> None:  # noqa: F811
    """One open checkpoint's blocking GETs (config.json, a planner's sl_checkpoint_read) share
    one curl handle; ctypes drops the GIL, so threads call them at once: they must take turns."""
    import ctypes
    from concurrent.futures import ThreadPoolExecutor

    from shardload import _native as N
    want = (tiny_ckpt / "config.json").read_bytes()
    ck = shardload.open(f"{http}/ck/")

    def fetch(i: int) -> bytes:
        dest, err = tmp_path / f"config{i}.json", ctypes.create_string_buffer(512)
        st = N.lib.sl_checkpoint_fetch(ck.handle, b"config.json", os.fsencode(dest), err, len(err))
        assert st == 0, err.value
        return dest.read_bytes()
    with ThreadPoolExecutor(8) as pool:
        got = list(pool.map(fetch, range(64)))
    ck.close()
    assert all(g == want for g in got)


def test_http_fetch_bytes_and_files(http: str, tiny_ckpt: Path, tmp_path: Path) -> None:  # noqa: F811
    """sl_checkpoint_fetch_bytes hands a file over in memory (what fetch_config uses), a missing
    one is SL_E_NOT_FOUND with no buffer; sl_checkpoint_fetch writes dest through a temporary
    file renamed into place: an earlier dest survives a failed fetch, none is left behind, and the
    file has the mode a new file gets (0666 less the umask)."""
    import ctypes

    from shardload import _native as N
    want = (tiny_ckpt / "config.json").read_bytes()
    err = ctypes.create_string_buffer(512)
    with shardload.open(f"{http}/ck/") as ck:
        buf, n = ctypes.c_void_p(), ctypes.c_size_t()
        assert N.lib.sl_checkpoint_fetch_bytes(ck.handle, b"config.json", ctypes.byref(buf),
                                               ctypes.byref(n), err, len(err)) == 0, err.value
        assert ctypes.string_at(buf, n.value + 1) == want + b"\0"   # NUL-terminated
        N.lib.sl_free(buf)
        st = N.lib.sl_checkpoint_fetch_bytes(ck.handle, b"absent.json", ctypes.byref(buf),
                                             ctypes.byref(n), err, len(err))
        assert N.lib.sl_status_str(st) == b"SL_E_NOT_FOUND" and not buf.value and n.value == 0
        assert b"absent.json" in err.value
        dest = tmp_path / "out.json"
        dest.write_bytes(b"earlier")
        assert N.lib.sl_checkpoint_fetch(ck.handle, b"absent.json", os.fsencode(dest), err, len(err)) != 0
        assert dest.read_bytes() == b"earlier"
        old = os.umask(0o027)
        try:
            assert N.lib.sl_checkpoint_fetch(ck.handle, b"config.json", os.fsencode(dest), err,
                                             len(err)) == 0, err.value
        finally:
            os.umask(old)
        assert dest.read_bytes() == want and dest.stat().st_mode & 0o777 == 0o640
        assert sorted(p.name for p in tmp_path.iterdir()) == ["out.json"]


def test_http_plans_from_threads(http: str, tiny_ckpt: Path) -> None:  # noqa: F811
    """Plans from one open remote checkpoint in several threads: the first fetches config.json,
    the others wait for the whole file (not a half-written one)."""
    from concurrent.futures import ThreadPoolExecutor
    want = shardload.plan(tiny_ckpt, tp=2).total_bytes
    for _ in range(10):
        ck = shardload.open(f"{http}/ck/")
        with ThreadPoolExecutor(8) as pool:
            got = list(pool.map(lambda _: shardload.plan(ck, tp=2).total_bytes, range(8)))
        ck.close()
        assert got == [want] * 8


def test_http_config_held_in_memory(http: str, tiny_ckpt: Path) -> None:  # noqa: F811
    """A remote checkpoint's config.json is fetched once into memory (no temporary folder left
    behind) and planned from there; its messages name it by its URL."""
    before = set(Path(tempfile.gettempdir()).glob("shardload-*"))
    with shardload.open(f"{http}/ck/") as ck:
        assert ck.fetch_config() == (tiny_ckpt / "config.json").read_bytes()
        assert ck._config_name == f"{http}/ck/config.json".encode()
        assert shardload.plan(ck, tp=2).devices == shardload.plan(tiny_ckpt, tp=2).devices
        assert set(Path(tempfile.gettempdir()).glob("shardload-*")) == before
    with pytest.raises(shardload.PlanError) as e:
        shardload.plan(f"{http}/zero-layers/")
    assert e.value.message == (f"{http}/zero-layers/config.json: config 'num_hidden_layers' is 0; "
                               "it must be positive")
    # config= given: the remote config.json is not fetched at all
    assert shardload.plan(f"{http}/zero-layers/", tp=2, config=json.loads(
        (tiny_ckpt / "config.json").read_text())).devices == shardload.plan(tiny_ckpt, tp=2).devices


@pytest.fixture
def hanging(http: str, tmp_path: Path) -> Iterator[str]:
    """tests/fault_proxy.py in front of the http fixture's server: the open's small GETs pass, every
    data range (8 KiB or more) gets no answer at all for 5 s, then a closed connection."""
    port = tmp_path / "proxy.port"
    p = subprocess.Popen([sys.executable, str(TESTS / "fault_proxy.py"), http.rsplit(":", 1)[1], str(port),
                          "--fault", "hang", "--stall", "5"])
    _wait(port, p)
    yield f"http://127.0.0.1:{port.read_text()}"
    p.terminate()
    p.wait()


def test_cancel_while_the_server_sends_nothing(hanging: str) -> None:
    """shardload.cancel() from another thread stops a load whose ranges wait on a silent server
    (the engine's wait) and a Checkpoint.read (a blocking ranged GET) within about a second:
    CancelledError naming the URL and the range. Before, both waited out the timeout's tries (a
    load took 185 s against a server that never answers, then failed with SL_E_IO)."""
    ck = shardload.open(f"{hanging}/ck/")
    big = max(ck.tensors, key=lambda t: t.nbytes)
    calls = {"load": lambda: shardload.load(f"{hanging}/ck/", tp=2), "read": lambda: ck.read(big.name)}
    for what, call in calls.items():
        timer = threading.Timer(0.5, shardload.cancel)
        start = time.monotonic()
        timer.start()
        try:
            with pytest.raises(shardload.CancelledError,
                               match=r"/ck/model-\d+-of-\d+\.safetensors: cancelled while reading bytes \d+-\d+"):
                call()
            took = time.monotonic() - start
        finally:
            timer.cancel()
            timer.join()
            shardload.clear_cancel()
        assert took < 4, f"{what}: stopped {took:.1f} s after its start, the cancel came at 0.5 s"
    ck.close()


def test_http_credentials_not_shown(http: str) -> None:
    """A user, a password and a query (a SAS signature) given in the URL go with the requests but
    not into ck.path nor repr(ck), as the C names, ck.files and the CLI leave them out."""
    creds = http.replace("http://", "http://u:PASSWD@")
    for url, shown in ((f"{creds}/ck/?sig=SECRET", f"{http}/ck/"),
                       (f"{creds}/ck/model-00001-of-00004.safetensors?sig=SECRET",
                        f"{http}/ck/model-00001-of-00004.safetensors")):
        with shardload.open(url) as ck:
            assert ck.path == shown and shown in repr(ck), repr(ck)
            text = repr(ck) + " ".join(ck.files) + str(ck.tensors[:3])
            assert "PASSWD" not in text and "SECRET" not in text and "u:" not in text, text


def test_http_errors(http: str) -> None:
    with pytest.raises(shardload.CheckpointError, match=r"nope/model.safetensors.index.json: not found|nope: no model"):
        shardload.open(f"{http}/nope/")
    with pytest.raises(shardload.Error, match="ck/missing.safetensors: not found \\(HTTP 404\\)"):
        shardload.open(f"{http}/ck/missing.safetensors")


@pytest.fixture(scope="module")
def moto(tiny_ckpt: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, str, str]]:  # noqa: F811
    if not _remote_works():
        pytest.skip("built without libcurl")
    server = Path(sys.executable).parent / "moto_server"
    if not server.exists():
        pytest.skip("no moto_server next to this Python (python/requirements-test.txt)")
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    endpoint = f"http://127.0.0.1:{port}"
    env = dict(os.environ, INITIAL_NO_AUTH_ACTION_COUNT="1000000000")
    p = subprocess.Popen([str(server), "-H", "127.0.0.1", "-p", str(port)], env=env,
                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    for _ in range(300):
        try:
            urllib.request.urlopen(endpoint + "/moto-api/", timeout=1).read()
            break
        except OSError:
            time.sleep(0.1)
    tmp = tmp_path_factory.mktemp("s3")
    setup = [sys.executable, str(TESTS / "s3_setup.py"), endpoint]
    subprocess.run(setup + ["user", str(tmp / "keys")], check=True)
    subprocess.run(setup + ["upload", "models", "tiny", str(tiny_ckpt)], check=True)
    subprocess.run(setup + ["upload-sha256", "models", "tinysha", str(tiny_ckpt)], check=True)
    subprocess.run(setup + ["auth", "0"], check=True)
    key, secret = (tmp / "keys").read_text().split()
    yield endpoint, key, secret
    p.terminate()
    p.wait()


def _s3_env(monkeypatch: pytest.MonkeyPatch, endpoint: str, key: str, secret: str,
            credentials: Path) -> None:
    """Only these S3 settings in the environment: moto's endpoint and keys, no profile, no
    config file, credentials (a profile file the test may write) at the given path."""
    for v in ("AWS_PROFILE", "AWS_SESSION_TOKEN", "AWS_REGION", "AWS_DEFAULT_REGION", "AWS_ENDPOINT_URL_S3"):
        monkeypatch.delenv(v, raising=False)
    monkeypatch.setenv("AWS_CONFIG_FILE", str(credentials.parent / "none"))
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(credentials))
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", key)
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", secret)
    monkeypatch.setenv("AWS_ENDPOINT_URL", endpoint)


def test_s3_env_and_profile(moto: tuple[str, str, str], tiny_ckpt: Path, tmp_path: Path,  # noqa: F811
                            monkeypatch: pytest.MonkeyPatch) -> None:
    endpoint, key, secret = moto
    _s3_env(monkeypatch, endpoint, key, secret, tmp_path / "credentials")
    ref = _sums(shardload.load(tiny_ckpt, tp=2))
    assert _sums(shardload.load("s3://models/tiny/", tp=2)) == ref
    (tmp_path / "credentials").write_text(f"[loader]\naws_access_key_id = {key}\naws_secret_access_key = {secret}\n")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "wrong")
    with pytest.raises(shardload.Error, match="s3://models/tiny/model.safetensors.index.json: access denied "
                                              "\\(HTTP 403, SignatureDoesNotMatch\\)") as e:
        shardload.open("s3://models/tiny/")
    assert "wrong" not in str(e.value) and key not in str(e.value)
    monkeypatch.delenv("AWS_ENDPOINT_URL")
    ck = shardload.open("s3://models/tiny/", s3_endpoint=endpoint, s3_profile="loader")
    assert len(ck.files) == len(shardload.open(tiny_ckpt).files)
    ck.close()
    # the files read as the CLI reads them (cli_s3): keys in any case and "key: value", a line
    # longer than any buffer, a nested block's indented lines are not keys, the config file's
    # default profile as [profile default]
    long = "#" + "0" * 2046
    (tmp_path / "credentials").write_text(
        f"[caps]\nAWS_ACCESS_KEY_ID: {key}\nAws_Secret_Access_Key : {secret}\n"
        f"[long]\n{long}aws_access_key_id = AKIANOTTHEONE0000000\naws_access_key_id = {key}\n"
        f"aws_secret_access_key = {secret}\n"
        f"[nested]\ns3 =\n    aws_access_key_id = AKIANOTTHEONE0000000\naws_access_key_id = {key}\n"
        f"aws_secret_access_key = {secret}\n")
    monkeypatch.delenv("AWS_SECRET_ACCESS_KEY")
    monkeypatch.delenv("AWS_ACCESS_KEY_ID")
    for prof in ("caps", "long", "nested"):
        with shardload.open("s3://models/tiny/", s3_endpoint=endpoint, s3_profile=prof) as ck:
            assert _sums(shardload.load(ck, tp=2)) == ref, prof
    (tmp_path / "config").write_text(f"[profile default]\nendpoint_url = {endpoint}\n")
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "config"))
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", key)
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", secret)
    assert _sums(shardload.load("s3://models/tiny/", tp=2)) == ref


def test_s3_verify_by_the_store(moto: tuple[str, str, str], tiny_ckpt: Path, tmp_path: Path,  # noqa: F811
                                monkeypatch: pytest.MonkeyPatch) -> None:
    """verify=True without a manifest: the store's SHA-256 of objects put with ChecksumAlgorithm
    SHA256; objects put without it have none (a LoadError naming the object)."""
    endpoint, key, secret = moto
    _s3_env(monkeypatch, endpoint, key, secret, tmp_path / "none")
    m = shardload.load("s3://models/tinysha/", tp=2, verify=True)
    assert m.stats["verified_files"] == len(shardload.open(tiny_ckpt).files)
    assert _sums(m) == _sums(shardload.load(tiny_ckpt, tp=2))
    with pytest.raises(shardload.Error, match="s3://models/tiny/model-.*: --verify knows no SHA-256"):
        shardload.load("s3://models/tiny/", tp=2, verify=True)


def _region_server(root: Path, regions: str, *extra: str) -> tuple[str, subprocess.Popen[bytes]]:
    """tests/http_range_server.py answering as S3 does for a bucket in `regions` (docs/remote.md)."""
    port = root / "region.port"
    port.unlink(missing_ok=True)
    p = subprocess.Popen([sys.executable, str(TESTS / "http_range_server.py"), str(root), str(port),
                          "--bucket-region", regions, *extra])
    _wait(port, p)
    return f"http://127.0.0.1:{port.read_text()}", p


def test_s3_bucket_in_another_region(tiny_ckpt: Path, tmp_path: Path,  # noqa: F811
                                     monkeypatch: pytest.MonkeyPatch) -> None:
    """S3's 301 PermanentRedirect naming the bucket's region: the open is done again in that region
    (a warning says so) and loads the local bytes; s3_region= asks in it at once; a bucket S3 places
    elsewhere after the retry raises naming the region and s3_region=."""
    if not _remote_works():
        pytest.skip("built without libcurl")
    shutil.copytree(tiny_ckpt, tmp_path / "ck")
    _s3_env(monkeypatch, "http://127.0.0.1:1", "AKIDTEST", "secrettest", tmp_path / "credentials")
    url, p = _region_server(tmp_path, "eu-west-1")
    try:
        with shardload.open("s3://ck/", s3_endpoint=url) as ck:
            assert any("the bucket is in region 'eu-west-1', not 'us-east-1': opened in 'eu-west-1'" in w
                       for w in ck.warnings), ck.warnings
            assert _sums(shardload.load(ck, tp=2)) == _sums(shardload.load(tiny_ckpt, tp=2))
        with shardload.open("s3://ck/", s3_endpoint=url, s3_region="eu-west-1") as ck:
            assert ck.warnings == []
    finally:
        p.terminate()
        p.wait()
    url, p = _region_server(tmp_path, "eu-west-1,ap-south-1")
    try:
        with pytest.raises(shardload.Error, match=r"the bucket is in region 'ap-south-1', not 'eu-west-1' "
                           r"\(HTTP 301, PermanentRedirect, x-amz-bucket-region\): give its region "
                           r"\(--s3-region ap-south-1, Python's s3_region='ap-south-1'"):
            shardload.open("s3://ck/", s3_endpoint=url)
    finally:
        p.terminate()
        p.wait()


@pytest.mark.parametrize("answer, how", [("307", ""), ("400-none", " to a HeadBucket")])
def test_s3_bucket_redirect_or_unnamed_region(tiny_ckpt: Path, tmp_path: Path,  # noqa: F811
                                              monkeypatch: pytest.MonkeyPatch, answer: str, how: str) -> None:
    """A 307 TemporaryRedirect (a new bucket on the global endpoint) and a 400
    IllegalLocationConstraintException, which names no region (then S3 is asked with a HeadBucket),
    are opened once more in the region S3 names, with a warning, as botocore redirects them."""
    if not _remote_works():
        pytest.skip("built without libcurl")
    shutil.copytree(tiny_ckpt, tmp_path / "ck")
    _s3_env(monkeypatch, "http://127.0.0.1:1", "AKIDTEST", "secrettest", tmp_path / "credentials")
    url, p = _region_server(tmp_path, "af-south-1", "--region-answer", answer)
    try:
        with shardload.open("s3://ck/", s3_endpoint=url) as ck:
            want = (f"the bucket is in region 'af-south-1', not 'us-east-1': opened in 'af-south-1', "
                    f"as S3 named it{how} (")
            assert any(want in w for w in ck.warnings), ck.warnings
            assert _sums(shardload.load(ck, tp=2)) == _sums(shardload.load(tiny_ckpt, tp=2))
    finally:
        p.terminate()
        p.wait()


def test_cancel_while_asking_the_bucket_region(tiny_ckpt: Path, tmp_path: Path,  # noqa: F811
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    """shardload.cancel() while the open asks S3 for the bucket's region (a HeadBucket the server
    answers late) raises CancelledError at once; it was swallowed, and the open raised the wrong
    region error after the server's answer."""
    if not _remote_works():
        pytest.skip("built without libcurl")
    shutil.copytree(tiny_ckpt, tmp_path / "ck")
    _s3_env(monkeypatch, "http://127.0.0.1:1", "AKIDTEST", "secrettest", tmp_path / "credentials")
    url, p = _region_server(tmp_path, "af-south-1", "--region-answer", "400-none", "--head-bucket-stall", "8")
    timer = threading.Timer(0.5, shardload.cancel)
    start = time.monotonic()
    timer.start()
    try:
        with pytest.raises(shardload.CancelledError):
            shardload.open("s3://ck/", s3_endpoint=url)
        took = time.monotonic() - start
    finally:
        timer.cancel()
        timer.join()
        shardload.clear_cancel()
        p.terminate()
        p.wait()
    assert took < 4, f"stopped {took:.1f} s after the open began, the cancel came at 0.5 s"
