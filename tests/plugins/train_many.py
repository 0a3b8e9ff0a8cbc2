"""Run the real ``train.py`` entry many times in one process: one ``python train.py <overrides>``
per case, as a user would type it, without paying interpreter and import start-up for each.

Reads ``[[override, ...], ...]`` as JSON on stdin; writes ``[{"code": exit code, "stderr": text}, ...]``
as JSON to the file named by the first argument. Each case runs ``train.py`` through ``runpy`` with its
own ``sys.argv`` and its own ``hydra.run.dir`` under the second argument.
"""

from __future__ import annotations

import contextlib
import io
import json
import runpy
import sys
import traceback
from pathlib import Path

TRAIN = Path(__file__).resolve().parents[2] / "train.py"


def main() -> None:
    out_file, run_root = Path(sys.argv[1]), Path(sys.argv[2])
    cases = json.load(sys.stdin)
    results = []
    for i, overrides in enumerate(cases):
        err, out = io.StringIO(), io.StringIO()
        sys.argv = [str(TRAIN), *overrides, f"hydra.run.dir={run_root / str(i)}"]
        code: object = 0
        with contextlib.redirect_stderr(err), contextlib.redirect_stdout(out):
            try:
                runpy.run_path(str(TRAIN), run_name="__main__")
            except SystemExit as exc:
                code = exc.code
            except BaseException:  # noqa: BLE001 - reported to the test, which fails on it
                code = "exception"
                err.write(traceback.format_exc())
        results.append({"code": code, "stderr": err.getvalue(), "stdout": out.getvalue()})
    out_file.write_text(json.dumps(results))


if __name__ == "__main__":
    main()
