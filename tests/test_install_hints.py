"""Every hint to install an extra uses one form: ``pip install 'corral[<extra>]'``.

It works wherever corral is installed (from a clone with ``scripts/bootstrap`` or ``pip install -e .``):
pip reads the installed distribution's extras. Installing the clone itself (``scripts/bootstrap``,
``pip install -e ".[dev]"`` on a new machine) is not a hint and is not checked here.
"""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
#: Any ``pip install`` of corral's extras: ``-e ".[x]"``, ``".[x]"``, ``"corral[x]"``, ``corral[x]`` ...
HINT = re.compile(r"""pip install (?:-e )?\\?["']?(?:corral|\.)\[[\w,-]+\]\\?["']?""")
GOOD = re.compile(r"pip install 'corral\[[\w,-]+\]'")
#: Lines that install the clone itself (not a hint to add an extra).
CLONE_INSTALLS = ("scripts/bootstrap", "pins their versions")


def _files() -> list[Path]:
    files = [ROOT / "README.md", ROOT / "mkdocs.yml"]
    for folder, patterns in (("corral", ("*.py", "*.yaml")), ("docs", ("*.md",)), ("tests", ("*.py",)),
                             ("experiments", ("*.py",))):
        for pattern in patterns:
            files += sorted((ROOT / folder).rglob(pattern))
    return [f for f in files if f != Path(__file__).resolve()]


def test_install_hints_use_one_form() -> None:
    wrong = []
    for path in _files():
        for number, line in enumerate(path.read_text(errors="replace").splitlines(), 1):
            if any(marker in line for marker in CLONE_INSTALLS):
                continue
            for hint in HINT.findall(line):
                if not GOOD.fullmatch(hint):
                    wrong.append(f"{path.relative_to(ROOT)}:{number}: {hint}")
    assert not wrong, "install hints not in the form pip install 'corral[<extra>]':\n" + "\n".join(wrong)


def test_the_pattern_catches_the_other_forms() -> None:
    for other in ('pip install -e ".[ray]"', "pip install -e '.[dev]'", 'pip install "corral[mujoco]"',
                  "pip install corral[envpool]", "pip install -e .[bench]", 'pip install -e \\".[mujoco]\\"'):
        found = HINT.findall(other)
        assert found and not GOOD.fullmatch(found[0]), other
    assert GOOD.fullmatch(HINT.findall("needs Ray: pip install 'corral[ray]' (or pip install ray)")[0])
