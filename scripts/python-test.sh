#!/usr/bin/env bash
# The Python package's tests: a virtual environment under build/ (git-ignored)
# made with Debian's Python, the package installed into it from this tree as a
# user would (pip install .; its CMake build is kept in build/python/ and so
# rebuilt incrementally), pytest and ml_dtypes where missing, then pytest on
# python/tests. Arguments go to pytest.
set -euo pipefail
cd "$(dirname "$0")/.."
venv=build/python-venv
python=/usr/bin/python3
[ -x "$venv/bin/python" ] || "$python" -m venv "$venv"
"$venv/bin/python" -c "import pytest, ml_dtypes" 2>/dev/null ||
  "$venv/bin/pip" install -q "pytest>=7" "ml_dtypes>=0.2"
"$venv/bin/pip" install -q .
cd python/tests
status=0
"../../$venv/bin/python" -m pytest -q "$@" || status=$?
if [ "$status" -eq 5 ]; then
  echo "python-test: pytest collected no tests in python/tests" >&2
fi
exit "$status"
