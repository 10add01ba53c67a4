#!/usr/bin/env bash
# Sets up the Python package's test and bench environment: a virtual environment (.venv, or VENV)
# with python/requirements-test.txt's pinned versions, then this tree's package built and
# installed into it (`pip install .`: CMake builds the C core into libshardload.so inside it).
# The requirements are installed again only when the file changes.
set -euo pipefail
cd "$(dirname "$0")/.."
venv=${VENV:-.venv}
py=${PYTHON:-python3}
req=python/requirements-test.txt
stamp=$venv/.sl-requirements
if ! "$py" -c 'import venv, ensurepip' >/dev/null 2>&1; then
  echo "shardload: $py cannot create a virtual environment (Debian: apt-get install python3-venv)" >&2
  exit 1
fi
if [[ ! -x $venv/bin/python ]] || ! cmp -s "$req" "$stamp"; then
  echo "shardload: creating $venv with $req" >&2
  "$py" -m venv "$venv"
  # pip compiles every module it installs to bytecode on one core; compileall does the same on
  # every core. Like pip, it goes on past the files this Python cannot compile (torch ships
  # Python 3.12 syntax in its test helpers), so its status is not an error.
  "$venv/bin/pip" install -q --disable-pip-version-check --no-compile -r "$req"
  site=$("$venv/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
  env -u PYTHONDONTWRITEBYTECODE "$venv/bin/python" -m compileall -q -j 0 "$site" >/dev/null || :
  cp "$req" "$stamp"
fi
# --no-build-isolation: scikit-build-core is in the venv already, and CMake reuses build/py-*.
"$venv/bin/pip" install -q --disable-pip-version-check --no-deps --no-build-isolation --force-reinstall .
