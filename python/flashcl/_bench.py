"""flashcl.bench: the flashcl-bench program shipped inside the package, driven
with its own options; its JSON is the records (the same fields by
construction, and the same measurement the command line reports)."""
from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import tempfile
from typing import Any, Dict, List, Optional

from ._errors import Error, InvalidArgumentError, UnsupportedError

BENCH = os.path.join(os.path.dirname(__file__), "bin", "flashcl-bench")
_PROGRESS = re.compile(r"^\[(\d+)/(\d+)\]")


class Records(list):
    """flashcl-bench's results: a list of dicts (its JSON "results"), with
    ``devices`` (its JSON "devices") and ``column(name)``."""
    devices: List[Dict[str, Any]]

    def column(self, name: str) -> List[Any]:
        return [r.get(name) for r in self]


def _argv(options: Dict[str, Any]) -> List[str]:
    argv = []
    for key, value in options.items():
        flag = "--" + key.rstrip("_").replace("_", "-")
        if value is None or value is False:
            continue
        if value is True:
            argv.append(flag)
        elif isinstance(value, (list, tuple)):
            argv += [flag, ",".join(str(v) for v in value)]
        else:
            argv += [flag, str(value)]
    return argv


def _bar(done: int, total: int, text: str) -> None:
    width = 30
    fill = width * done // max(total, 1)
    sys.stderr.write(f"\r[{'#' * fill}{'.' * (width - fill)}] {done}/{total} {text[:60]:<60}")
    sys.stderr.flush()


def bench(progress: Optional[bool] = None, **options: Any) -> Records:
    """Runs flashcl-bench with its options as keywords (``seqlen=1024``,
    ``causal=True``, ``dtype=["f32", "bf16"]``, ``pass_="fwdbwd"``,
    ``algo="flash"``, ``sweep=True``, ``check=True``, ``device="all"``; see
    ``flashcl-bench --help``) and returns its results, one dict per run with
    the fields of its JSON (ms_median, bytes_model, gbps, tflops, err_ratio,
    plan, status, ...). ``progress``: a progress bar on stderr (default: when
    stderr is a terminal). A run that fails is a record with its status; a
    bench that cannot run at all raises :class:`flashcl.Error`."""
    for bad in ("json", "csv", "svg", "quiet", "help", "version"):
        if bad in options:
            raise InvalidArgumentError(f"bench writes its own JSON; {bad}= is not an option here")
    if progress is None:
        progress = sys.stderr.isatty()
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "bench.json")
        argv = [BENCH] + _argv(options) + ["--json", out]
        proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                                text=True)
        errors = []
        assert proc.stderr is not None
        for line in proc.stderr:
            m = _PROGRESS.match(line)
            if m and progress:
                _bar(int(m.group(1)), int(m.group(2)), line[m.end():].strip())
            elif not m:
                errors.append(line.rstrip())
        rc = proc.wait()
        if progress:
            sys.stderr.write("\n")
        if rc == 2:
            raise InvalidArgumentError("flashcl-bench refused the options: "
                                       + " ".join(errors[-3:]))
        if not os.path.exists(out):
            raise Error(f"flashcl-bench exited with {rc}: " + " ".join(errors[-3:]))
        with open(out) as f:
            data = json.load(f)
    records = Records(data.get("results", []))
    records.devices = data.get("devices", [])
    if rc == 3 and not records:
        raise UnsupportedError("every run was unsupported on the device")
    return records
